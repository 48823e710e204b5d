//! The live charts' numbers: samples of what `/metrics` exports, read from
//! the same Prometheus text ([`crate::http::metrics_handle`]), and the rates
//! between two samples.
//!
//! A [`Sample`] totals each family over its labels (every channel, status,
//! kind…), so the charts and a Prometheus server scraping `/metrics` agree
//! by construction. Histograms render as summaries (quantiles, `_sum`,
//! `_count`) with the exporter's defaults, or as histograms (`_bucket`,
//! `_sum`, `_count`) when buckets are configured; only `_sum` and `_count`
//! are read, which both have.
//!
//! What each field counts, by family (`src/gateway`, `src/agent/run.rs`):
//! - `turns`: `bub_turns_total` (every channel and status);
//! - `replies`: the count of `bub_reply_seconds`, messages answered (to a
//!   waiting webhook caller or in the chat), whatever their channel: what
//!   people got, a split reply once;
//! - `errors`: `bub_turn_errors_total` (turns that failed) plus
//!   `bub_delivery_errors_total` (replies that could not be delivered);
//! - `inbound_queue`, `outbound_queue`, `sessions_active`: the gauges
//!   `bub_inbound_queue_depth`, `bub_outbound_queue_depth`, `bub_sessions_active`;
//! - `model_calls`, `model_seconds_sum`: `bub_model_call_seconds`' count
//!   and sum (every status);
//! - `tokens_in`, `tokens_out`: `bub_model_tokens_total{kind="input"}` and
//!   `{kind="output"}` (input includes the cached part, also counted as `cached`).

use futures::Stream;
use schemars::JsonSchema;
use serde::Serialize;
use std::time::Duration;

/// The totals of one reading of the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
pub struct Sample {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    pub turns: f64,
    pub replies: f64,
    pub errors: f64,
    pub inbound_queue: f64,
    pub outbound_queue: f64,
    pub model_calls: f64,
    pub model_seconds_sum: f64,
    pub tokens_in: f64,
    pub tokens_out: f64,
    pub sessions_active: f64,
}

impl Sample {
    /// The totals in `text` (the Prometheus text format), taken at `at_ms`.
    /// Lines that are not a sample of a family read here are skipped; a
    /// family absent from the text (nothing recorded yet) is 0.
    pub fn parse(text: &str, at_ms: i64) -> Sample {
        let mut sample = Sample { at_ms, ..Sample::default() };
        for line in text.lines() {
            let Some((name, labels, value)) = parse_line(line) else { continue };
            let label = |key: &str| labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
            let field = match name {
                "bub_turns_total" => &mut sample.turns,
                "bub_reply_seconds_count" => &mut sample.replies,
                "bub_turn_errors_total" | "bub_delivery_errors_total" => &mut sample.errors,
                "bub_inbound_queue_depth" => &mut sample.inbound_queue,
                "bub_outbound_queue_depth" => &mut sample.outbound_queue,
                "bub_model_call_seconds_count" => &mut sample.model_calls,
                "bub_model_call_seconds_sum" => &mut sample.model_seconds_sum,
                "bub_model_tokens_total" if label("kind") == Some("input") => &mut sample.tokens_in,
                "bub_model_tokens_total" if label("kind") == Some("output") => &mut sample.tokens_out,
                "bub_sessions_active" => &mut sample.sessions_active,
                _ => continue,
            };
            if value.is_finite() {
                *field += value;
            }
        }
        sample
    }

    /// The process's metrics now ([`crate::http::metrics_handle`]).
    pub fn now() -> Sample {
        Sample::parse(&crate::http::metrics_handle().render(), chrono::Utc::now().timestamp_millis())
    }
}

/// What happened between two samples, per second; the gauges as they were
/// at the later one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, JsonSchema)]
pub struct Rates {
    /// The later sample's time, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The time between the two samples.
    pub interval_ms: i64,
    pub turns_per_s: f64,
    pub replies_per_s: f64,
    pub errors_per_s: f64,
    pub model_calls_per_s: f64,
    /// The mean model call's duration over the interval (Δsum / Δcount);
    /// none when no call ended in it.
    pub model_latency_s: Option<f64>,
    pub tokens_in_per_s: f64,
    pub tokens_out_per_s: f64,
    pub inbound_queue: f64,
    pub outbound_queue: f64,
    pub sessions_active: f64,
}

impl Rates {
    /// The rates from `a` to the later `b`. A counter that went down was
    /// reset (the process restarted): its rise is its new value, as
    /// Prometheus' `rate` counts it. No time between them gives no rates.
    pub fn between(a: &Sample, b: &Sample) -> Rates {
        let interval_ms = b.at_ms - a.at_ms;
        let seconds = interval_ms as f64 / 1000.0;
        let rise = |before: f64, after: f64| if after >= before { after - before } else { after };
        let rate = |before: f64, after: f64| if seconds > 0.0 { rise(before, after) / seconds } else { 0.0 };
        let calls = rise(a.model_calls, b.model_calls);
        let model_latency_s = if calls > 0.0 {
            let spent = if b.model_calls >= a.model_calls {
                rise(a.model_seconds_sum, b.model_seconds_sum)
            } else {
                b.model_seconds_sum
            };
            Some(spent / calls)
        } else {
            None
        };
        Rates {
            at_ms: b.at_ms,
            interval_ms,
            turns_per_s: rate(a.turns, b.turns),
            replies_per_s: rate(a.replies, b.replies),
            errors_per_s: rate(a.errors, b.errors),
            model_calls_per_s: rate(a.model_calls, b.model_calls),
            model_latency_s,
            tokens_in_per_s: rate(a.tokens_in, b.tokens_in),
            tokens_out_per_s: rate(a.tokens_out, b.tokens_out),
            inbound_queue: b.inbound_queue,
            outbound_queue: b.outbound_queue,
            sessions_active: b.sessions_active,
        }
    }
}

/// Takes samples and hands out the rates since the one before: what an SSE
/// handler polls on its own clock.
pub struct Sampler {
    take: Box<dyn FnMut() -> Sample + Send>,
    last: Option<Sample>,
}

impl Sampler {
    /// Samples of the process's metrics ([`Sample::now`]).
    pub fn new() -> Sampler {
        Sampler::from_fn(Sample::now)
    }

    /// Samples from `take` (a test's recorder, a fixed text).
    pub fn from_fn(take: impl FnMut() -> Sample + Send + 'static) -> Sampler {
        Sampler { take: Box::new(take), last: None }
    }

    /// Takes a sample; the rates since the previous one (none the first time).
    pub fn poll(&mut self) -> Option<Rates> {
        let sample = (self.take)();
        let rates = self.last.as_ref().map(|last| Rates::between(last, &sample));
        self.last = Some(sample);
        rates
    }

    /// The rates every `interval` (the first after one interval), for as
    /// long as the stream is polled. A slow consumer gets the next rates
    /// late, over the longer interval, never a burst of stale ones.
    pub fn every(self, interval: Duration) -> impl Stream<Item = Rates> + Send + 'static {
        let interval = interval.max(Duration::from_millis(10));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        futures::stream::unfold((ticks, self.poll_first()), |(mut ticks, mut sampler)| async move {
            loop {
                ticks.tick().await;
                if let Some(rates) = sampler.poll() {
                    return Some((rates, (ticks, sampler)));
                }
            }
        })
    }

    fn poll_first(mut self) -> Sampler {
        if self.last.is_none() {
            self.poll();
        }
        self
    }
}

impl Default for Sampler {
    fn default() -> Sampler {
        Sampler::new()
    }
}

/// A sample line's labels, as (name, value).
type Labels = Vec<(String, String)>;

/// One sample line: `name{label="value",…} value [timestamp]`; `None` for
/// comments, blank lines and anything malformed.
fn parse_line(line: &str) -> Option<(&str, Labels, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let (name, mut rest) = line.split_at(name_end);
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some((name, labels, value))
}

/// The labels after `{`, and the text after the closing `}`. Values are
/// quoted, with `\"`, `\\` and `\n` escaped.
fn parse_labels(mut text: &str) -> Option<(Labels, &str)> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([',', ' ']);
        if let Some(after) = text.strip_prefix('}') {
            return Some((labels, after));
        }
        let (key, rest) = text.split_once('=')?;
        let rest = rest.strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        text = &rest[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::PrometheusBuilder;

    /// What the gateway records in a few turns, under its real names and labels.
    fn record_some_traffic() {
        metrics::counter!("bub_turns_total", "channel" => "tg", "status" => "replied").increment(3);
        metrics::counter!("bub_turns_total", "channel" => "dc", "status" => "failed").increment(1);
        metrics::counter!("bub_turn_errors_total", "kind" => "model").increment(1);
        metrics::counter!("bub_delivery_errors_total", "channel" => "tg").increment(1);
        metrics::counter!("bub_outbound_messages_total", "channel" => "tg", "kind" => "send").increment(6);
        for to in ["chat", "chat", "chat", "caller"] {
            metrics::histogram!("bub_reply_seconds", "channel" => "tg", "to" => to).record(1.0);
        }
        metrics::counter!("bub_outbound_messages_total", "channel" => "tg", "kind" => "edit").increment(9);
        metrics::counter!("bub_outbound_errors_total", "channel" => "tg", "kind" => "transient").increment(2);
        metrics::gauge!("bub_inbound_queue_depth").set(5.0);
        metrics::gauge!("bub_outbound_queue_depth", "channel" => "tg").set(2.0);
        metrics::gauge!("bub_outbound_queue_depth", "channel" => "dc").set(1.0);
        metrics::gauge!("bub_sessions_active").set(7.0);
        metrics::histogram!("bub_model_call_seconds", "status" => "ok").record(1.5);
        metrics::histogram!("bub_model_call_seconds", "status" => "ok").record(0.5);
        metrics::histogram!("bub_model_call_seconds", "status" => "error").record(1.0);
        metrics::counter!("bub_model_tokens_total", "kind" => "input").increment(1000);
        metrics::counter!("bub_model_tokens_total", "kind" => "cached").increment(400);
        metrics::counter!("bub_model_tokens_total", "kind" => "output").increment(200);
    }

    fn expected_totals(sample: &Sample) {
        assert_eq!((sample.turns, sample.replies, sample.errors), (4.0, 4.0, 2.0));
        assert_eq!((sample.inbound_queue, sample.outbound_queue, sample.sessions_active), (5.0, 3.0, 7.0));
        assert_eq!((sample.model_calls, sample.model_seconds_sum), (3.0, 3.0));
        assert_eq!((sample.tokens_in, sample.tokens_out), (1000.0, 200.0));
    }

    #[test]
    fn a_sample_totals_each_family_over_its_labels_from_the_summary_rendering() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, record_some_traffic);
        let text = handle.render();
        assert!(text.contains("bub_model_call_seconds{status=\"ok\",quantile="), "a summary by default:\n{text}");
        expected_totals(&Sample::parse(&text, 0));
    }

    #[test]
    fn histograms_with_buckets_read_the_same() {
        let recorder = PrometheusBuilder::new().set_buckets(&[0.1, 1.0, 10.0]).unwrap().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, record_some_traffic);
        let text = handle.render();
        assert!(text.contains("bub_model_call_seconds_bucket{"), "{text}");
        expected_totals(&Sample::parse(&text, 0));
    }

    #[test]
    fn labels_with_escapes_and_odd_lines_do_not_derail_the_parser() {
        let text = "# HELP x y\n# TYPE bub_turns_total counter\n\
                    bub_turns_total{channel=\"a\\\"}b,c=\\\\\",status=\"ok\"} 2 1700000000000\n\
                    bub_turns_total 1\nbub_turns_total{broken 5\n\nbub_sessions_active NaN\n";
        let sample = Sample::parse(text, 0);
        assert_eq!((sample.turns, sample.sessions_active), (3.0, 0.0));
        let (_, labels, _) = parse_line("m{channel=\"a\\\"}b\\nc\"} 1").unwrap();
        assert_eq!(labels, vec![("channel".to_string(), "a\"}b\nc".to_string())]);
    }

    #[test]
    fn rates_are_per_second_and_latency_is_the_mean_over_the_interval() {
        let a = Sample { at_ms: 10_000, turns: 10.0, model_calls: 4.0, model_seconds_sum: 8.0, ..Sample::default() };
        let b = Sample {
            at_ms: 12_000,
            turns: 16.0,
            model_calls: 8.0,
            model_seconds_sum: 10.0,
            inbound_queue: 3.0,
            ..Sample::default()
        };
        let rates = Rates::between(&a, &b);
        assert_eq!((rates.interval_ms, rates.turns_per_s, rates.model_calls_per_s), (2000, 3.0, 2.0));
        assert_eq!(rates.model_latency_s, Some(0.5));
        assert_eq!(rates.inbound_queue, 3.0);
        assert_eq!(Rates::between(&b, &b).model_latency_s, None, "no call ended");
        let restarted = Sample { at_ms: 13_000, turns: 2.0, ..Sample::default() };
        assert_eq!(Rates::between(&b, &restarted).turns_per_s, 2.0, "a reset counter rose by its value");
    }

    #[tokio::test(start_paused = true)]
    async fn the_sampler_streams_the_rates_between_its_samples() {
        use futures::StreamExt;
        let mut turns = 0.0;
        let mut at_ms = 0;
        let sampler = Sampler::from_fn(move || {
            turns += 5.0;
            at_ms += 1000;
            Sample { at_ms, turns, ..Sample::default() }
        });
        let rates: Vec<Rates> = sampler.every(Duration::from_secs(1)).take(3).collect().await;
        assert_eq!(rates.iter().map(|r| r.turns_per_s).collect::<Vec<_>>(), vec![5.0, 5.0, 5.0]);
        let schema = serde_json::to_value(schemars::schema_for!(Rates)).unwrap();
        assert!(schema.pointer("/properties/model_latency_s").is_some());
    }
}
