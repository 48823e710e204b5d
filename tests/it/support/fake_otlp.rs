//! An OTLP/HTTP trace receiver on loopback: `POST /v1/traces` with a
//! protobuf `ExportTraceServiceRequest` (decoded with the protocol's own
//! types, `opentelemetry-proto`), answered 200 with an empty
//! `ExportTraceServiceResponse`. It keeps every span it was sent.
//!
//! ```ignore
//! let otlp = FakeOtlp::start().await;
//! // … a gateway with OTEL_EXPORTER_OTLP_ENDPOINT = otlp.base_url() …
//! let spans = otlp.wait_for(Duration::from_secs(30), |spans| spans.len() >= 5).await;
//! ```

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use parking_lot::Mutex;
use prost::Message;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// One exported span, with its resource's `service.name`.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub span: Span,
}

impl ReceivedSpan {
    pub fn name(&self) -> &str {
        &self.span.name
    }

    /// Hex, as in a `traceparent`.
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    /// Empty for a root span.
    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// An attribute's value as text (numbers and lists written out).
    pub fn attribute(&self, key: &str) -> Option<String> {
        self.span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.as_ref()).map(text)
    }

    /// Every attribute's and event's text, to search for content that must not be there.
    pub fn all_text(&self) -> String {
        let attributes = self.span.attributes.iter().filter_map(|kv| kv.value.as_ref()?.value.as_ref()).map(text);
        let events = self.span.events.iter().flat_map(|event| {
            std::iter::once(event.name.clone())
                .chain(event.attributes.iter().filter_map(|kv| kv.value.as_ref()?.value.as_ref()).map(text))
        });
        attributes.chain(events).collect::<Vec<_>>().join("\n")
    }

    /// 2 is `STATUS_CODE_ERROR`.
    pub fn failed(&self) -> bool {
        self.span.status.as_ref().is_some_and(|status| status.code == 2)
    }
}

fn text(value: &AnyValue) -> String {
    match value {
        AnyValue::StringValue(text) => text.clone(),
        AnyValue::IntValue(number) => number.to_string(),
        AnyValue::DoubleValue(number) => number.to_string(),
        AnyValue::BoolValue(flag) => flag.to_string(),
        AnyValue::ArrayValue(array) => {
            array.values.iter().filter_map(|v| v.value.as_ref()).map(text).collect::<Vec<_>>().join(",")
        }
        other => format!("{other:?}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The running receiver; it stops when dropped.
pub struct FakeOtlp {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeOtlp {
    pub async fn start() -> FakeOtlp {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().route("/v1/traces", post(receive)).with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("OTLP receiver address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeOtlp { addr, spans, task }
    }

    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().clone()
    }

    /// The spans once `done` holds of them, or those there are after `timeout`.
    pub async fn wait_for(&self, timeout: Duration, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for FakeOtlp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>, body: Bytes) -> Response {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, "not an ExportTraceServiceRequest").into_response();
    };
    let mut received = spans.lock();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
            .map(text)
            .unwrap_or_default();
        for scope in resource.scope_spans {
            received.extend(scope.spans.into_iter().map(|span| ReceivedSpan { service: service.clone(), span }));
        }
    }
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    ([(header::CONTENT_TYPE, "application/x-protobuf")], answer).into_response()
}
