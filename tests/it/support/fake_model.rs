//! A scripted model server on loopback, speaking both the OpenAI Chat
//! Completions stream (`POST /v1/chat/completions`) and the Anthropic Messages
//! stream (`POST /v1/messages`), so every client and every agent test runs
//! without the internet.
//!
//! `GET /v1/models` lists the models it was asked for so far (at least
//! `gpt-test`), as OpenAI does, for the key [`FakeModel::vars`] gives
//! (`fake-key`, as a bearer token or Anthropic's `x-api-key`): any other key
//! gets 401. [`FakeModel::set_date`] makes it answer with another `Date`
//! header (a server whose clock is off).
//!
//! Script it with [`Reply`]s, consumed one per request in order, whichever
//! endpoint is hit; a request with nothing queued gets the default reply when
//! one is set ([`FakeModel::start_answering`], [`FakeModel::answer_all`]), else
//! a 500 saying so.
//!
//! ```ignore
//! let fake = FakeModel::start().await;
//! fake.push(Reply::rate_limited(0))
//!     .push(Reply::text("hello").with_usage(12, 3));
//! let settings = fake.settings("openai:gpt-test");   // quick retries
//! let client = settings.client("openai:gpt-test")?;
//! // … stream, then look at what the model was sent:
//! assert_eq!(fake.request_count(), 2);
//! assert_eq!(fake.requests()[1]["model"], "gpt-test");
//! ```
//!
//! Streams use real SSE framing (`data: {json}\n\n`, a keep-alive comment,
//! `data: [DONE]`); text comes in 3-character deltas and tool-call arguments in
//! 7-character fragments, parallel calls interleaved, so clients must assemble;
//! [`Reply::paced`] spaces the frames out, as a model writing slowly.
//! On `/v1/messages` the same reply is Anthropic's event stream (`message_start`,
//! thinking/text/`tool_use` blocks, `message_delta`, `message_stop`) and errors
//! use Anthropic's error body. `reply` holds the script types, `render` the
//! wire format of each provider.

mod render;
mod reply;

pub use reply::Reply;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bub::model::{ModelSettings, RetryPolicy};
use parking_lot::{Mutex, MutexGuard};
use render::{Frame, render_anthropic, render_openai};
use reply::{Failure, Script};
use serde_json::Value;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A running fake; the server stops when this is dropped.
pub struct FakeModel {
    addr: SocketAddr,
    state: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `/v1/chat/completions` or `/v1/messages`.
    pub path: String,
    pub headers: HeaderMap,
    /// The JSON body (a JSON string holding the raw text if it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    /// Given to every request once `replies` is empty.
    default: Mutex<Option<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// The `Date` header of `/v1/models` answers, instead of the server's.
    date: Mutex<Option<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}

impl FakeModel {
    /// Binds 127.0.0.1 on a free port and serves in a background task.
    pub async fn start() -> FakeModel {
        let state = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .route("/v1/messages", post(answer))
            .route("/v1/models", get(models))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake model on loopback");
        let addr = listener.local_addr().expect("fake model address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeModel { addr, state, task }
    }

    /// A fake that answers every request with `text` at once, with no script.
    pub async fn start_answering(text: &str) -> FakeModel {
        let fake = FakeModel::start().await;
        fake.answer_all(Reply::text(text));
        fake
    }

    /// Every request that finds no scripted reply gets `reply` (for example a
    /// [`Reply::slow_first_token`] to make each turn take a while).
    pub fn answer_all(&self, reply: Reply) -> &FakeModel {
        *lock(&self.state.default) = Some(reply);
        self
    }

    /// `http://127.0.0.1:PORT/v1`, the API base for either client.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answers `/v1/models` with this `Date` header (an HTTP date such as
    /// `Tue, 01 Jan 2030 00:00:00 GMT`).
    pub fn set_date(&self, date: &str) -> &FakeModel {
        *lock(&self.state.date) = Some(date.to_string());
        self
    }

    /// Queues a reply for a later request; chain calls to script a sequence.
    pub fn push(&self, reply: Reply) -> &FakeModel {
        lock(&self.state.replies).push_back(reply);
        self
    }

    /// The JSON bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.recorded().into_iter().map(|r| r.body).collect()
    }

    /// Everything received so far: paths, headers and bodies.
    pub fn recorded(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    pub fn request_count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// The tool results the model was sent in request `index`, one per line.
    pub fn tool_results(&self, index: usize) -> String {
        let requests = self.requests();
        let messages = requests[index]["messages"].as_array().cloned().unwrap_or_default();
        messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Variables that point `spec`'s provider at this fake: `BUB_MODEL`,
    /// `BUB_<PROVIDER>_API_BASE` and a dummy `BUB_<PROVIDER>_API_KEY`.
    pub fn vars(&self, spec: &str) -> Vec<(String, String)> {
        let provider = spec.split(':').next().unwrap_or(spec);
        let prefix: String = provider
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() {
                true => c.to_ascii_uppercase(),
                false => '_',
            })
            .collect();
        vec![
            ("BUB_MODEL".into(), spec.into()),
            (format!("BUB_{prefix}_API_BASE"), self.base_url()),
            (format!("BUB_{prefix}_API_KEY"), "fake-key".into()),
        ]
    }

    /// Settings from [`FakeModel::vars`] with [`quick_retry`], for tests.
    pub fn settings(&self, spec: &str) -> ModelSettings {
        let mut settings = ModelSettings::from_vars(self.vars(spec)).expect("fake settings");
        settings.retry = quick_retry();
        settings
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A retry policy for tests: 4 attempts, millisecond waits, 5 s timeouts.
pub fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        budget: Duration::from_secs(5),
        timeout: Duration::from_secs(5),
    }
}

async fn answer(
    State(state): State<Arc<Shared>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let body: Value =
        serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let model = body.get("model").and_then(Value::as_str).unwrap_or("fake").to_string();
    lock(&state.requests).push(RecordedRequest { path: path.clone(), headers, body });
    let scripted = lock(&state.replies).pop_front();
    let Some(reply) = scripted.or_else(|| lock(&state.default).clone()) else {
        let body = r#"{"error":{"message":"fake model: no scripted reply left"}}"#;
        return (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    };
    let anthropic = path.ends_with("/messages");
    let frames = match &reply.script {
        Script::Fail(failure) => {
            if let Some(delay) = reply.delay {
                tokio::time::sleep(delay).await;
            }
            return failure_response(failure, anthropic);
        }
        Script::Answer(answer) | Script::Cut(answer) => {
            let cut = matches!(reply.script, Script::Cut(_));
            match anthropic {
                true => render_anthropic(&model, answer, cut),
                false => render_openai(&model, answer, cut),
            }
        }
    };
    let mut frames = frames;
    if let Some(pace) = reply.pace {
        frames = frames.into_iter().enumerate().flat_map(|(i, frame)| paced(i, pace, frame)).collect();
    }
    if let Some(silence) = reply.stall {
        let cut = frames.len().saturating_sub(1);
        frames.insert(cut, Frame::Wait(silence));
    }
    let frames = reply.delay.map(Frame::Wait).into_iter().chain(frames);
    let stream = futures::stream::unfold(frames, |mut frames| async move {
        loop {
            match frames.next()? {
                Frame::Wait(delay) => tokio::time::sleep(delay).await,
                Frame::Send(text) => return Some((Ok(text), frames)),
                Frame::Cut => {
                    let cut = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "fake cut");
                    return Some((Err(cut), frames));
                }
            }
        }
    });
    let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
    (headers, Body::from_stream(stream)).into_response()
}

/// The model list, for the key [`FakeModel::vars`] gives only.
async fn models(State(state): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    const KEY: &str = "fake-key";
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let mut response = if header("authorization") == format!("Bearer {KEY}") || header("x-api-key") == KEY {
        let mut ids = vec!["gpt-test".to_string()];
        for request in lock(&state.requests).iter() {
            if let Some(model) = request.body.get("model").and_then(Value::as_str)
                && !ids.iter().any(|id| id == model)
            {
                ids.push(model.to_string());
            }
        }
        let data: Vec<Value> = ids.into_iter().map(|id| serde_json::json!({"id": id, "object": "model"})).collect();
        axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
    } else {
        let body = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        (StatusCode::UNAUTHORIZED, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    if let Some(date) = lock(&state.date).clone()
        && let Ok(value) = date.parse()
    {
        response.headers_mut().insert(header::DATE, value);
    }
    response
}

/// Frame `index` of a paced stream: after a wait of `pace`, except the first.
fn paced(index: usize, pace: Duration, frame: Frame) -> Vec<Frame> {
    if index == 0 { vec![frame] } else { vec![Frame::Wait(pace), frame] }
}

fn failure_response(failure: &Failure, anthropic: bool) -> Response {
    let status = StatusCode::from_u16(failure.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match anthropic {
        true => render::anthropic_error(failure),
        false => render::openai_error(failure),
    };
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if let Some(secs) = failure.retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    response
}
