//! The log lines on stderr: which ones are written, and how.
//!
//! | variable | values | default |
//! |---|---|---|
//! | `BUB_LOG` | a `tracing` filter: `info`, `bub=debug,warn`, … | `error`: failures only (a filter that does not parse is the default too) |
//! | `BUB_LOG_FORMAT` | `text` or `json` | `text` (anything else: bub does not start) |
//!
//! **text** is `tracing-subscriber`'s line, for a person: time, level, the
//! spans with their fields, target, message and fields (coloured on a
//! terminal). **json** is one JSON object a line, for a log collector:
//!
//! ```text
//! {"timestamp":"2025-01-31T09:12:03.042117Z","level":"INFO","target":"bub::gateway::turn",
//!  "message":"turn answered","session":"tg:1001","turn":"t-…","channel":"tg","tape":"tg:1001",
//!  "run_id":"…","steps":1,"spans":["session_worker","turn","run"]}
//! ```
//! (one line in the output). Its keys, in this order:
//! - `timestamp` (RFC 3339, UTC, microseconds), `level`, `target` (a `log`
//!   record of a dependency has its module's), `message`;
//! - `trace_id` when a trace-id source is set ([`LogSettings::trace_id`])
//!   and the line belongs to a trace;
//! - the fields of the spans the event happened in, flattened to the top
//!   level, an inner span's field winning over an outer one's: `channel`,
//!   `chat`, `session`, `turn`, `run_id`, `tool`, … wherever a span has them;
//! - the event's own fields, which win over the spans';
//! - `spans`: the names of those spans, outermost first.
//!
//! A span or event field named like a fixed key (a second `message`, say)
//! is kept as `fields.<name>`. The layer is filtered by `BUB_LOG` alone
//! (a per-layer filter), so a layer composed beside it (traces) sees the
//! spans its own filter asks for; whatever `BUB_LOG` asks, a dependency's
//! `trace` lines that write out network payloads (a Discord bot's token
//! among them) are never written (tungstenite's frame payloads).

use serde_json::{Map, Value};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::span::Record;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{FilterExt, FilterFn, LevelFilter};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

/// `BUB_LOG` when it is unset, blank or not a filter: failures only.
pub const DEFAULT_FILTER: &str = "error";

/// The current trace's id, for a line's `trace_id` (`None` outside a trace).
pub type TraceIdSource = fn() -> Option<String>;

/// How log lines are written (`BUB_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `tracing-subscriber`'s text line, for a person.
    #[default]
    Text,
    /// One JSON object a line, for a log collector.
    Json,
}

/// `BUB_LOG_FORMAT` is neither `text` nor `json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BUB_LOG_FORMAT={0:?}: must be text or json")]
pub struct UnknownLogFormat(pub String);

impl LogFormat {
    /// `BUB_LOG_FORMAT`'s value: unset or blank is `text`; an unknown value
    /// is an error rather than text, so a collector never receives a format
    /// it was not set up for.
    pub fn parse(value: Option<&str>) -> Result<LogFormat, UnknownLogFormat> {
        match value.map(str::trim) {
            None | Some("" | "text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(UnknownLogFormat(other.to_string())),
        }
    }

    /// A line the command line writes for its user itself (that the gateway
    /// listens, a notice, the error it exits with), in this format: as is in
    /// text; in JSON an object with the keys every log line starts with
    /// (target `bub`), so a collector reading stderr reads one format.
    pub fn user_line(self, level: Level, message: &str) -> String {
        match self {
            LogFormat::Text => message.to_string(),
            LogFormat::Json => {
                let mut line = Map::new();
                line.insert("timestamp".into(), Value::String(timestamp()));
                line.insert("level".into(), Value::String(level.as_str().into()));
                line.insert("target".into(), Value::String("bub".into()));
                line.insert("message".into(), Value::String(message.into()));
                Value::Object(line).to_string()
            }
        }
    }
}

/// Which lines are written and how, from `BUB_LOG` and `BUB_LOG_FORMAT`.
#[derive(Debug, Clone)]
pub struct LogSettings {
    /// A `tracing` filter (`EnvFilter` syntax).
    pub filter: String,
    pub format: LogFormat,
    /// Colours in text lines (when stderr is a terminal).
    pub ansi: bool,
    /// Where JSON lines take their `trace_id`: set by whoever exports traces.
    pub trace_id: Option<TraceIdSource>,
}

impl LogSettings {
    /// Settings from the variables' values (`None` when unset): see the
    /// module's table. Only an unknown format is an error.
    pub fn from_values(log: Option<&str>, format: Option<&str>) -> Result<LogSettings, UnknownLogFormat> {
        let filter = log
            .map(str::trim)
            .filter(|filter| !filter.is_empty() && EnvFilter::try_new(filter).is_ok())
            .unwrap_or(DEFAULT_FILTER);
        Ok(LogSettings { filter: filter.to_string(), format: LogFormat::parse(format)?, ansi: false, trace_id: None })
    }

    /// The layer that writes the lines to `writer`, filtered by
    /// [`LogSettings::filter`] alone: compose it on a registry beside any
    /// other, `tracing_subscriber::registry().with(settings.layer(std::io::stderr))`.
    pub fn layer<S, W>(&self, writer: W) -> Box<dyn Layer<S> + Send + Sync + 'static>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
        W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
    {
        let filter = EnvFilter::try_new(&self.filter)
            .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
            .and(FilterFn::new(not_a_payload_trace).with_max_level_hint(LevelFilter::TRACE));
        let lines = tracing_subscriber::fmt::layer().with_writer(writer);
        match self.format {
            LogFormat::Text => lines.with_ansi(self.ansi).with_filter(filter).boxed(),
            LogFormat::Json => lines
                .with_ansi(false)
                .fmt_fields(SpanFieldsAsJson)
                .event_format(JsonLines { trace_id: self.trace_id })
                .with_filter(filter)
                .boxed(),
        }
    }
}

/// Targets whose `trace` lines write out what is sent or received whole,
/// secrets included: `tungstenite` (Discord's gateway connection) traces
/// each WebSocket frame's payload, in hex and as a list of bytes, and the
/// first frame a bot sends (IDENTIFY) holds its token. Their lines are
/// written up to `debug`, whatever `BUB_LOG` asks.
const PAYLOAD_TRACES: [&str; 1] = ["tungstenite::protocol"];

/// False for a `trace` line of a [`PAYLOAD_TRACES`] target (a `log` record's
/// target is its module's here, as the filter sees it).
fn not_a_payload_trace(metadata: &Metadata<'_>) -> bool {
    *metadata.level() != Level::TRACE || !PAYLOAD_TRACES.iter().any(|target| metadata.target().starts_with(target))
}

/// Now, as a JSON line's `timestamp`.
fn timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The keys every JSON line starts with (and `spans`, which ends it): a field
/// with one of these names is kept as `fields.<name>`.
const FIXED_KEYS: [&str; 6] = ["timestamp", "level", "target", "message", "trace_id", "spans"];

/// The JSON line of an event (see the module's doc).
struct JsonLines {
    trace_id: Option<TraceIdSource>,
}

impl<S> FormatEvent<S, SpanFieldsAsJson> for JsonLines
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, SpanFieldsAsJson>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut own = EventFields::default();
        event.record(&mut JsonVisitor(|name, value| own.put(name, value)));
        let mut line = Map::new();
        line.insert("timestamp".into(), Value::String(timestamp()));
        line.insert("level".into(), Value::String(metadata.level().as_str().into()));
        let target = own.log_target.take().unwrap_or_else(|| metadata.target().to_string());
        line.insert("target".into(), Value::String(target));
        line.insert("message".into(), Value::String(own.message.take().unwrap_or_default()));
        if let Some(trace_id) = self.trace_id.and_then(|current| current()) {
            line.insert("trace_id".into(), Value::String(trace_id));
        }
        let mut spans = Vec::new();
        for span in context.event_scope().into_iter().flat_map(|scope| scope.from_root()) {
            spans.push(Value::String(span.name().into()));
            let extensions = span.extensions();
            let Some(fields) = extensions.get::<FormattedFields<SpanFieldsAsJson>>() else { continue };
            if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&fields.fields) {
                // Outermost first: an inner span's field replaces an outer one's, in its place.
                fields.into_iter().for_each(|(name, value)| put_field(&mut line, name, value));
            }
        }
        own.fields.into_iter().for_each(|(name, value)| put_field(&mut line, name, value));
        if !spans.is_empty() {
            line.insert("spans".into(), Value::Array(spans));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

fn put_field(line: &mut Map<String, Value>, name: String, value: Value) {
    match FIXED_KEYS.contains(&name.as_str()) {
        true => line.insert(format!("fields.{name}"), value),
        false => line.insert(name, value),
    };
}

/// An event's fields: its message (the first `message` field), the target
/// of a `log` record, and the others.
#[derive(Default)]
struct EventFields {
    message: Option<String>,
    log_target: Option<String>,
    fields: Map<String, Value>,
}

impl EventFields {
    fn put(&mut self, name: &'static str, value: Value) {
        match name {
            "message" if self.message.is_none() => self.message = Some(plain(value)),
            // What `tracing-log` adds to a `log` record: its target is the line's; where it was written is not kept.
            "log.target" => self.log_target = Some(plain(value)),
            "log.module_path" | "log.file" | "log.line" => {}
            _ => {
                self.fields.insert(name.to_string(), value);
            }
        }
    }
}

/// A string value's text, any other value's JSON.
fn plain(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

/// Field values as JSON values: numbers and booleans as such, strings,
/// errors (their `Display`) and anything else (its `Debug`) as strings.
struct JsonVisitor<F>(F);

impl<F: FnMut(&'static str, Value)> Visit for JsonVisitor<F> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let number =
            serde_json::Number::from_f64(value).map_or_else(|| Value::String(value.to_string()), Value::Number);
        (self.0)(field.name(), number);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        (self.0)(field.name(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        (self.0)(field.name(), Value::from(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let value = i64::try_from(value).map_or_else(|_| Value::String(value.to_string()), Value::from);
        (self.0)(field.name(), value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let value = u64::try_from(value).map_or_else(|_| Value::String(value.to_string()), Value::from);
        (self.0)(field.name(), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        (self.0)(field.name(), Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        (self.0)(field.name(), Value::String(value.to_string()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        (self.0)(field.name(), Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        (self.0)(field.name(), Value::String(format!("{value:?}")));
    }
}

/// A span's fields kept as the text of one JSON object (what the span's
/// extensions hold), fields recorded later merged in.
struct SpanFieldsAsJson;

impl SpanFieldsAsJson {
    fn record(object: &mut Map<String, Value>, fields: impl RecordFields) {
        fields.record(&mut JsonVisitor(|name: &'static str, value| {
            object.insert(name.to_string(), value);
        }));
    }
}

impl<'writer> FormatFields<'writer> for SpanFieldsAsJson {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut object = Map::new();
        SpanFieldsAsJson::record(&mut object, fields);
        write!(writer, "{}", Value::Object(object))
    }

    fn add_fields(&self, current: &'writer mut FormattedFields<Self>, fields: &Record<'_>) -> fmt::Result {
        let mut object = match serde_json::from_str::<Value>(&current.fields) {
            Ok(Value::Object(object)) => object,
            _ => Map::new(),
        };
        SpanFieldsAsJson::record(&mut object, fields);
        current.fields = Value::Object(object).to_string();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;
    use tracing_subscriber::layer::SubscriberExt;

    /// What a layer wrote.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Written {
        fn lines(&self) -> Vec<String> {
            String::from_utf8_lossy(&self.0.lock()).lines().map(str::to_string).collect()
        }
    }

    /// The lines `settings` writes while `emit` runs.
    fn lines_of(settings: &LogSettings, emit: impl FnOnce()) -> Vec<String> {
        let written = Written::default();
        let writer = written.clone();
        let subscriber = tracing_subscriber::registry().with(settings.layer(move || writer.clone()));
        tracing::subscriber::with_default(subscriber, emit);
        written.lines()
    }

    fn json(filter: &str) -> LogSettings {
        LogSettings::from_values(Some(filter), Some("json")).unwrap()
    }

    fn parse(line: &str) -> Map<String, Value> {
        match serde_json::from_str(line) {
            Ok(Value::Object(object)) => object,
            _ => panic!("not a JSON object: {line}"),
        }
    }

    #[test]
    fn the_format_is_text_json_or_an_error_naming_the_variable() {
        assert_eq!(LogFormat::parse(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some(" ")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("text")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("json")), Ok(LogFormat::Json));
        let error = LogSettings::from_values(None, Some("JSONL")).unwrap_err();
        assert_eq!(error.to_string(), "BUB_LOG_FORMAT=\"JSONL\": must be text or json");
    }

    #[test]
    fn an_unset_blank_or_unparsable_filter_is_failures_only() {
        for log in [None, Some(""), Some("bub=loud")] {
            assert_eq!(LogSettings::from_values(log, None).unwrap().filter, DEFAULT_FILTER, "{log:?}");
        }
        assert_eq!(LogSettings::from_values(Some(" bub=debug,warn "), None).unwrap().filter, "bub=debug,warn");
    }

    #[test]
    fn a_json_line_has_the_fixed_keys_then_the_spans_fields_innermost_winning_then_the_events() {
        let lines = lines_of(&json("trace"), || {
            let turn = tracing::info_span!("turn", session = "tg:1", turn = tracing::field::Empty, channel = "tg");
            let _turn = turn.enter();
            turn.record("turn", "t-1");
            let outbound = tracing::info_span!("outbound", channel = "tg-2", chat = "c1", part = 2_u64);
            let _outbound = outbound.enter();
            tracing::warn!(tool = "bash", steps = 3, ok = true, ratio = 0.5, "sent\n\"twice\"");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = parse(&lines[0]);
        let keys: Vec<&str> = line.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "timestamp",
                "level",
                "target",
                "message",
                "session",
                "channel",
                "turn",
                "chat",
                "part",
                "tool",
                "steps",
                "ok",
                "ratio",
                "spans"
            ]
        );
        let timestamp = line["timestamp"].as_str().unwrap();
        assert!(timestamp.ends_with('Z'), "UTC: {timestamp}");
        assert!(chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(), "RFC 3339: {timestamp}");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["target"], module_path!());
        assert_eq!(line["message"], "sent\n\"twice\"");
        assert_eq!(line["session"], "tg:1");
        assert_eq!(line["turn"], "t-1", "a field recorded after the span began (it comes after the others)");
        assert_eq!(line["channel"], "tg-2", "the inner span's");
        assert_eq!(line["chat"], "c1");
        assert_eq!(line["part"], 2);
        assert_eq!(line["tool"], "bash");
        assert_eq!(line["steps"], 3);
        assert_eq!(line["ok"], true);
        assert_eq!(line["ratio"], 0.5);
        assert_eq!(line["spans"], serde_json::json!(["turn", "outbound"]));
    }

    #[test]
    fn an_events_field_wins_over_a_spans_and_a_fixed_name_is_kept_aside() {
        let lines = lines_of(&json("info"), || {
            let _span = tracing::info_span!("session_worker", session = "a", level = "outer").entered();
            tracing::info!(session = "b", message = "m-42", "taken");
            tracing::info!("outside any field");
        });
        let line = parse(&lines[0]);
        assert_eq!(line["session"], "b");
        assert_eq!(line["message"], "taken");
        assert_eq!(line["fields.message"], "m-42");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["fields.level"], "outer");
        let plain = parse(&lines[1]);
        assert_eq!(plain["message"], "outside any field");
        assert_eq!(plain["spans"], serde_json::json!(["session_worker"]));
    }

    #[test]
    fn the_filter_decides_which_lines_are_written() {
        let lines = lines_of(&json("warn"), || {
            let _span = tracing::info_span!("turn", session = "s").entered();
            tracing::info!("not written");
            tracing::error!("written");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = parse(&lines[0]);
        assert_eq!(line["message"], "written");
        assert!(!line.contains_key("session") && !line.contains_key("spans"), "a span below the filter: {line:?}");
    }

    #[test]
    fn a_websocket_frames_payload_is_never_traced_whatever_the_filter() {
        let lines = lines_of(&json("trace,tungstenite=trace"), || {
            tracing::trace!(target: "tungstenite::protocol", "Sending frame: Frame {{ payload: [123, 34] }}");
            tracing::trace!(target: "tungstenite::protocol::frame", "writing frame 0x7b22");
            tracing::debug!(target: "tungstenite::protocol", "Received close frame");
            tracing::trace!(target: "tungstenite::handshake", "handshake");
        });
        let messages: Vec<Value> = lines.iter().map(|line| parse(line)["message"].clone()).collect();
        assert_eq!(messages, ["Received close frame", "handshake"]);
    }

    #[test]
    fn a_trace_id_source_puts_the_current_trace_on_each_line() {
        let settings =
            LogSettings { trace_id: Some(|| Some("4bf92f3577b34da6a3ce929d0e0e4736".into())), ..json("info") };
        let lines = lines_of(&settings, || tracing::info!("in a trace"));
        let line = parse(&lines[0]);
        assert_eq!(line["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        let keys: Vec<&str> = line.keys().map(String::as_str).collect();
        assert_eq!(keys, ["timestamp", "level", "target", "message", "trace_id"]);
        let none = LogSettings { trace_id: Some(|| None), ..json("info") };
        let line = parse(&lines_of(&none, || tracing::info!("outside a trace"))[0]);
        assert!(!line.contains_key("trace_id"), "{line:?}");
    }

    #[test]
    fn text_lines_are_tracing_subscribers() {
        let settings = LogSettings::from_values(Some("info"), None).unwrap();
        let lines = lines_of(&settings, || {
            let _span = tracing::info_span!("turn", session = "tg:1").entered();
            tracing::info!(steps = 2, "turn answered");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains(" INFO turn{session=\"tg:1\"}: "), "{}", lines[0]);
        assert!(lines[0].ends_with("turn answered steps=2"), "{}", lines[0]);
    }

    #[test]
    fn a_user_line_is_as_is_in_text_and_a_log_lines_object_in_json() {
        assert_eq!(LogFormat::Text.user_line(Level::INFO, "bub gateway listening"), "bub gateway listening");
        let line = parse(&LogFormat::Json.user_line(Level::ERROR, "error: no\nmodel"));
        let keys: Vec<&str> = line.keys().map(String::as_str).collect();
        assert_eq!(keys, ["timestamp", "level", "target", "message"]);
        assert_eq!(
            (&line["level"], &line["target"], &line["message"]),
            (&"ERROR".into(), &"bub".into(), &"error: no\nmodel".into())
        );
    }
}
