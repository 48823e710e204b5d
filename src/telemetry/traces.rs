//! OpenTelemetry traces over OTLP/HTTP, opt-in.
//!
//! With an endpoint configured (`[telemetry] endpoint`, or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`;
//! the `bub` binary resolves which, see `cli`), [`layer`] builds a
//! `tracing` layer that turns a few of bub's spans into OpenTelemetry spans
//! and exports them in batches, and the binary adds it to its subscriber.
//! Without one no layer is installed: every helper below returns at its
//! first line (one relaxed atomic load), and the spans cost what they cost
//! before.
//!
//! # The trace of a message
//! One trace per inbound message, continuing the caller's W3C `traceparent`
//! when the channel received one (the webhook's header, carried in
//! `Inbound::trace`); spans, by their `tracing` name:
//! - `admission` (the gateway's `submit`: checks, the inbox): the root, or
//!   the caller's span's child;
//! - `turn`: the turn that answers it, the child of its first message's
//!   `admission` ([`TraceLink`] carries it to the session's worker); a turn
//!   run again after a restart hangs under the caller's context instead;
//! - `run` (`invoke_agent bub`): the agent's run;
//! - `model_call` (`chat {model}`): each model call, with the GenAI
//!   semantic conventions (`gen_ai.operation.name`, `gen_ai.provider.name`,
//!   `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//!   `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`,
//!   `gen_ai.response.finish_reasons`); the span lasts until its stream ends;
//! - `tool_call` (`execute_tool {tool}`): each tool call
//!   (`gen_ai.tool.name`, `gen_ai.tool.call.id`);
//! - `compaction`: each compaction of a session's context;
//! - `outbound`: each platform call that sends a reply's part, a file or an
//!   edit, under the turn (the delivery runs in the turn's span). A reply
//!   sent again after a restart, from the outbox, starts a trace of its own.
//!
//! Every other span (connections, workers, the database threads) and every
//! event (log line) stays out: the layer's filter passes these spans and
//! nothing else. Errors set the span's status (`set_error`).
//!
//! # Content
//! No prompt, reply or tool text reaches a span: the exported spans' fields
//! are ids and names, and events are not exported. With `capture_content`
//! ([`TraceSettings::capture_content`]) the model call records
//! `gen_ai.input.messages` and `gen_ai.output.messages` (bub's request
//! messages, OpenAI-shaped, as JSON), the tool call `gen_ai.tool.call.arguments`
//! and `gen_ai.tool.call.result` ([`capture`]). These attributes go to the
//! OpenTelemetry span only, never to a log line.

mod client;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Status, TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::subscriber::Interest;
use tracing::{Metadata, Span, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::DynFilterFn;
use tracing_subscriber::registry::LookupSpan;

/// The spans exported, by their `tracing` name (targets under `bub`).
pub const EXPORTED_SPANS: &[&str] = &["admission", "turn", "run", "model_call", "tool_call", "compaction", "outbound"];

/// How long one export may take (the OTLP exporters' default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Set once a layer was built: the helpers below do nothing until then.
static EXPORTING: AtomicBool = AtomicBool::new(false);
/// `capture_content` of the layer built.
static CAPTURING: AtomicBool = AtomicBool::new(false);

/// Where and how to export, resolved by the binary from the config and the
/// environment.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Record prompts, replies and tool arguments and results on spans.
    pub capture_content: bool,
    /// Sample this share of new traces (a caller's sampled flag is
    /// followed); `None`: the SDK's default, which reads
    /// `OTEL_TRACES_SAMPLER`, else records every trace.
    pub sample_ratio: Option<f64>,
}

/// Why no layer could be built.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot build the HTTP client of the trace exporter: {0}")]
    Client(#[from] reqwest::Error),
    #[error("cannot export traces to {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The exporting side of an installed layer: [`Traces::shutdown`] sends
/// the spans still queued. Call it after the runtime's work, outside any
/// tokio runtime (the exporter's client blocks).
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Exports what is queued and stops the exporter; an error says what
    /// was lost (for the binary to print).
    pub fn shutdown(self) -> Result<(), String> {
        self.provider.shutdown().map_err(|error| format!("traces not all exported: {error}"))
    }
}

/// The layer that exports bub's spans (see the module doc), and its
/// [`Traces`] to shut down at exit. Also turns the helpers below on.
pub fn layer<S>(settings: &TraceSettings) -> Result<(impl Layer<S> + Send + Sync + use<S>, Traces), TraceError>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client::BlockingClient::new(EXPORT_TIMEOUT)?)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|source| TraceError::Exporter { endpoint: settings.endpoint.clone(), source })?;
    let resource = Resource::builder().with_service_name(settings.service_name.clone()).build();
    let mut provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource);
    if let Some(ratio) = settings.sample_ratio {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio))));
    }
    let provider = provider.build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("bub"))
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(exported_spans_only());
    EXPORTING.store(true, Ordering::Relaxed);
    CAPTURING.store(settings.capture_content, Ordering::Relaxed);
    Ok((layer, Traces { provider }))
}

/// The layer's filter: the spans of [`EXPORTED_SPANS`], decided once per
/// callsite; no event (a log line's text may quote a message).
fn exported_spans_only<S>() -> DynFilterFn<S, impl Fn(&Metadata<'_>, &tracing_subscriber::layer::Context<'_, S>) -> bool>
{
    DynFilterFn::new(|metadata: &Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>| exported(metadata))
        .with_callsite_filter(|metadata| match exported(metadata) {
            true => Interest::always(),
            false => Interest::never(),
        })
}

fn exported(metadata: &Metadata<'_>) -> bool {
    metadata.is_span()
        && (metadata.target() == "bub" || metadata.target().starts_with("bub::"))
        && EXPORTED_SPANS.contains(&metadata.name())
}

/// Whether a layer exports spans (the helpers below check it first).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Whether spans may carry content (prompts, replies, tool text).
pub fn capturing() -> bool {
    exporting() && CAPTURING.load(Ordering::Relaxed)
}

/// A place in a trace, carried where a span cannot be (into another task, a
/// queue): the next span hangs under it with [`TraceLink::adopt`]. Empty
/// when nothing is exported.
#[derive(Debug, Clone, Default)]
pub struct TraceLink(Option<opentelemetry::Context>);

impl TraceLink {
    /// Where `span` is.
    pub fn of(span: &Span) -> TraceLink {
        match exporting() {
            true => TraceLink(Some(span.context())),
            false => TraceLink(None),
        }
    }

    /// A caller's W3C Trace Context (`traceparent`, `tracestate`); empty
    /// when it does not parse (the next span starts a trace).
    pub fn from_w3c(traceparent: &str, tracestate: Option<&str>) -> TraceLink {
        if !exporting() {
            return TraceLink(None);
        }
        let mut headers = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
        if let Some(state) = tracestate {
            headers.insert("tracestate".to_string(), state.to_string());
        }
        let context = TraceContextPropagator::new().extract(&headers);
        TraceLink(context.span().span_context().is_valid().then_some(context))
    }

    /// Makes this place the parent of `span`, which must not have started
    /// (call it right after creating the span).
    pub fn adopt(&self, span: &Span) {
        if let Some(context) = &self.0 {
            // An error only says there is no otel layer or the span is off.
            let _ = span.set_parent(context.clone());
        }
    }
}

/// The OpenTelemetry name of `span` (`chat gpt-4o`, `execute_tool fs.read`),
/// which its `tracing` name (`model_call`) is not: the semantic conventions
/// name spans by operation and target. Not a field, so log lines keep
/// their span names.
pub fn set_name(span: &Span, name: impl FnOnce() -> String) {
    if exporting() {
        span.context().span().update_name(name());
    }
}

/// Sets an attribute on `span`'s OpenTelemetry span only (log lines do
/// not show it). Integers, floats, booleans and strings convert.
pub fn set_attribute(span: &Span, key: &'static str, value: impl Into<opentelemetry::Value>) {
    if exporting() {
        span.set_attribute(key, value);
    }
}

/// Sets a list-of-strings attribute (`gen_ai.response.finish_reasons`).
pub fn set_strings(span: &Span, key: &'static str, values: impl IntoIterator<Item = String>) {
    if exporting() {
        let values: Vec<opentelemetry::StringValue> = values.into_iter().map(Into::into).collect();
        span.set_attribute(key, opentelemetry::Value::Array(values.into()));
    }
}

/// Marks `span` as failed, with a short description (an error's kind, not
/// text a user or a tool wrote).
pub fn set_error(span: &Span, description: impl Into<Cow<'static, str>>) {
    if exporting() {
        span.set_status(Status::error(description));
    }
}

/// Records content (a prompt, a reply, a tool's arguments or result) on
/// `span`, only with `capture_content`; `value` is not computed otherwise.
pub fn capture(span: &Span, key: &'static str, value: impl FnOnce() -> String) {
    if capturing() {
        span.set_attribute(key, value());
    }
}

/// The trace id of the span in force on this thread (32 hex digits), for
/// log lines; `None` when nothing is exported or no exported span is entered.
pub fn current_trace_id() -> Option<String> {
    if !exporting() {
        return None;
    }
    opentelemetry::Context::map_current(|context| {
        let span = context.span();
        let ids = span.span_context();
        ids.is_valid().then(|| ids.trace_id().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_do_nothing_without_a_layer() {
        // No layer is built in unit tests: nothing is recorded, no link made.
        assert!(!exporting());
        assert!(current_trace_id().is_none());
        let link = TraceLink::from_w3c("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None);
        assert!(link.0.is_none());
    }
}
