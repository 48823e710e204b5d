//! `POST /webhook/<name>`: authenticate, parse, submit, answer.
//!
//! Checks run in the order size → signature (over the raw bytes) → mode →
//! JSON → fields, and the gateway sees the message only when all pass.
//!
//! With `mode=sse` the response starts only once the gateway has sent its
//! first event, so a gateway that shuts down before saying anything still
//! yields a plain 503. If it goes away mid-stream, the stream ends with
//! `event: error` (the status line has been sent by then).

use crate::WebhookSettings;
use crate::body::{BodyError, BodyReader};
use crate::keys::KeySource;
use crate::signature::{self, SIGNATURE_HEADER, TIMESTAMP_HEADER, VerifyError};
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bub_channel::{
    Addressing, ChatKind, ChatRef, Delivery, Inbound, InboundField, InboundSink, InvalidInbound, Outcome, ReplyEvent,
    ReplyReceiver, ReplySink, SenderRef, SubmitError, Submitted, TraceContext,
};
use futures::stream;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Deltas that may wait for a slow caller before newer ones are dropped.
const REPLY_BUFFER: usize = 64;

/// The state behind one channel's route.
pub(crate) struct Ingress {
    name: String,
    keys: KeySource,
    replay_window: Duration,
    body: BodyReader,
    accepts_async: bool,
    reply_timeout: Duration,
    inbox: RwLock<Option<Arc<dyn InboundSink>>>,
}

impl Ingress {
    pub(crate) fn new(settings: &WebhookSettings, keys: KeySource, accepts_async: bool) -> Ingress {
        Ingress {
            name: settings.name.clone(),
            keys,
            replay_window: settings.replay_window,
            body: BodyReader::new(settings.max_body_bytes, settings.body_timeout),
            accepts_async,
            reply_timeout: settings.reply_timeout,
            inbox: RwLock::new(None),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The keys in force now.
    pub(crate) fn keys(&self) -> crate::WebhookKeys {
        (self.keys)()
    }

    pub(crate) fn attach(&self, inbox: Arc<dyn InboundSink>) {
        *self.inbox.write() = Some(inbox);
    }

    pub(crate) fn detach(&self) {
        *self.inbox.write() = None;
    }

    fn inbox(&self) -> Result<Arc<dyn InboundSink>, WebhookError> {
        let inbox = self.inbox.read();
        inbox.clone().ok_or(WebhookError::NotRunning)
    }

    fn authenticate(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), WebhookError> {
        let timestamp = header_str(headers, TIMESTAMP_HEADER)?;
        let signature = header_str(headers, SIGNATURE_HEADER)?;
        let now = chrono::Utc::now().timestamp();
        // The keys in force now: a secret removed by a reload no longer verifies.
        let keys = (self.keys)();
        signature::verify(&keys.verifying(), timestamp, signature, body, now, self.replay_window)
            .map_err(WebhookError::Unauthorized)
    }
}

pub(crate) fn router(ingress: Arc<Ingress>) -> Router {
    let path = format!("/webhook/{}", ingress.name);
    Router::new().route(&path, post(receive)).with_state(ingress)
}

/// How the caller wants its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Sync,
    Sse,
    Async,
}

/// The query string's fields (others are ignored).
#[derive(Deserialize)]
struct ModeQuery {
    mode: Option<String>,
}

impl Mode {
    /// The `mode` of a query string, percent-decoded. Read after the
    /// signature check (hence not axum's `Query` extractor, which would
    /// answer an unsigned request first).
    pub(crate) fn from_query(query: Option<&str>) -> Result<Mode, WebhookError> {
        let fields: ModeQuery = serde_urlencoded::from_str(query.unwrap_or_default())
            .map_err(|error| WebhookError::BadMode(format!("{} ({error})", query.unwrap_or_default())))?;
        match fields.mode.as_deref() {
            None | Some("sync") => Ok(Mode::Sync),
            Some("sse") => Ok(Mode::Sse),
            Some("async") => Ok(Mode::Async),
            Some(other) => Err(WebhookError::BadMode(other.to_owned())),
        }
    }
}

async fn receive(
    State(ingress): State<Arc<Ingress>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, WebhookError> {
    let inbox = ingress.inbox()?;
    let body = ingress.body.read(&headers, body).await?;
    ingress.authenticate(&headers, &body.bytes)?;
    let mode = Mode::from_query(query.as_deref())?;
    if mode == Mode::Async && !ingress.accepts_async {
        return Err(WebhookError::AsyncWithoutCallback);
    }
    let mut inbound = read_message(&ingress.name, &body.bytes, mode)?;
    inbound.trace = trace_context(&headers);
    let message_id = inbound.message_id.clone();
    tracing::debug!(channel = %ingress.name, %message_id, ?mode, "webhook message received");

    let (sink, replies) = match mode {
        Mode::Async => (None, None),
        Mode::Sync | Mode::Sse => {
            let (sink, replies) = ReplySink::channel(REPLY_BUFFER);
            (Some(sink), Some(replies))
        }
    };
    match inbox.submit(inbound, sink).await? {
        Submitted::Duplicate(Some(outcome)) => Ok(finished(mode, &message_id, &outcome)),
        Submitted::Duplicate(None) => Err(WebhookError::InProgress),
        Submitted::Accepted => match (mode, replies) {
            (Mode::Sse, Some(replies)) => stream_reply(message_id, replies, ingress.reply_timeout).await,
            (_, Some(replies)) => {
                // The turn goes on without the caller: its outcome comes back
                // to a later request with the same message_id.
                let outcome = tokio::time::timeout(ingress.reply_timeout, wait_for_outcome(replies))
                    .await
                    .map_err(|_| WebhookError::ReplyTimeout(ingress.reply_timeout))??;
                Ok(Json(OutcomeBody::new(&message_id, &outcome)).into_response())
            }
            (_, None) => {
                let accepted = json!({ "message_id": message_id, "status": "accepted" });
                Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
            }
        },
    }
}

/// The answer for a message whose outcome is already known (a duplicate).
fn finished(mode: Mode, message_id: &str, outcome: &Outcome) -> Response {
    let body = OutcomeBody::new(message_id, outcome);
    match mode {
        Mode::Sse => Sse::new(stream::iter([done_event(&body)])).into_response(),
        Mode::Sync | Mode::Async => Json(body).into_response(),
    }
}

async fn wait_for_outcome(mut replies: ReplyReceiver) -> Result<Outcome, WebhookError> {
    while let Some(event) = replies.recv().await {
        if let ReplyEvent::Done(outcome) = event {
            return Ok(outcome);
        }
    }
    Err(WebhookError::ReplyClosed)
}

/// Streams the reply as it comes, within `timeout` of the request like a
/// sync reply: a first event later than that is a 504; a stream still going
/// then ends with an `error` event of kind `timeout`. Either way the turn goes
/// on, and its outcome comes back to a later request with the same message_id.
async fn stream_reply(
    message_id: String,
    mut replies: ReplyReceiver,
    timeout: Duration,
) -> Result<Response, WebhookError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let first = tokio::time::timeout_at(deadline, replies.recv())
        .await
        .map_err(|_| WebhookError::ReplyTimeout(timeout))?
        .ok_or(WebhookError::ReplyClosed)?;
    let events = stream::unfold(Some((Some(first), replies)), move |state| {
        let message_id = message_id.clone();
        async move {
            let (pending, mut replies) = state?;
            let event = match pending {
                Some(event) => Ok(Some(event)),
                None => tokio::time::timeout_at(deadline, replies.recv()).await,
            };
            Some(match event {
                Ok(Some(ReplyEvent::Delta(text))) => (delta_event(&text), Some((None, replies))),
                Ok(Some(ReplyEvent::Restart { text, reason })) => {
                    (restart_event(&text, &reason), Some((None, replies)))
                }
                Ok(Some(ReplyEvent::Done(outcome))) => (done_event(&OutcomeBody::new(&message_id, &outcome)), None),
                Ok(None) => (error_event(&WebhookError::ReplyClosed), None),
                Err(_) => (error_event(&WebhookError::ReplyTimeout(timeout)), None),
            })
        }
    });
    // Comments between events keep proxies from closing a quiet stream (a long tool call).
    Ok(Sse::new(events).keep_alive(axum::response::sse::KeepAlive::default()).into_response())
}

type SseItem = Result<Event, axum::Error>;

fn delta_event(text: &str) -> SseItem {
    Event::default().event("delta").json_data(json!({ "text": text }))
}

/// The reply so far is `text`; the deltas after it were a cut-off answer, asked again.
fn restart_event(text: &str, reason: &str) -> SseItem {
    Event::default().event("restart").json_data(json!({ "text": text, "reason": reason }))
}

fn done_event(body: &OutcomeBody<'_>) -> SseItem {
    Event::default().event("done").json_data(body)
}

fn error_event(error: &WebhookError) -> SseItem {
    Event::default().event("error").json_data(json!({ "error": error.kind(), "message": error.to_string() }))
}

/// An outcome as callers see it.
#[derive(Serialize)]
struct OutcomeBody<'a> {
    message_id: &'a str,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

impl<'a> OutcomeBody<'a> {
    fn new(message_id: &'a str, outcome: &'a Outcome) -> OutcomeBody<'a> {
        OutcomeBody { message_id, outcome }
    }
}

/// The caller's W3C trace context (`traceparent`, `tracestate`), copied for
/// the gateway to continue; a value that is not text is left out.
fn trace_context(headers: &HeaderMap) -> Option<TraceContext> {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    TraceContext::new(text("traceparent"), text("tracestate"))
}

fn header_str<'h>(headers: &'h HeaderMap, name: &'static str) -> Result<&'h str, WebhookError> {
    match headers.get(name) {
        None => Err(WebhookError::MissingHeader(name)),
        Some(value) => value.to_str().map_err(|_| WebhookError::Unauthorized(header_error(name))),
    }
}

fn header_error(name: &str) -> VerifyError {
    if name == TIMESTAMP_HEADER { VerifyError::BadTimestamp } else { VerifyError::MalformedSignature }
}

/// The message a request body carries (see the crate docs), every field checked.
pub(crate) fn read_message(channel: &str, body: &[u8], mode: Mode) -> Result<Inbound, WebhookError> {
    let message: WireMessage =
        serde_json::from_slice(body).map_err(|err| WebhookError::InvalidJson(err.to_string()))?;
    let inbound = message.into_inbound(channel, mode)?;
    inbound.check().map_err(WebhookError::Invalid)?;
    Ok(inbound)
}

/// The request body as sent; every field is optional here so that a missing
/// one is reported by name.
#[derive(Deserialize)]
struct WireMessage {
    message_id: Option<WireId>,
    chat_id: Option<WireId>,
    sender_id: Option<WireId>,
    sender_name: Option<String>,
    text: Option<String>,
    group: Option<bool>,
    mentions_bot: Option<bool>,
    /// The text forwards someone else's message (untrusted whoever sends it).
    #[serde(default)]
    forwarded: Option<bool>,
    thread_id: Option<WireId>,
}

/// Ids arrive as strings or numbers; both become text.
#[derive(Deserialize)]
#[serde(untagged)]
enum WireId {
    Text(String),
    Number(serde_json::Number),
}

impl WireId {
    fn into_string(self) -> String {
        match self {
            WireId::Text(text) => text,
            WireId::Number(number) => number.to_string(),
        }
    }
}

impl WireMessage {
    fn into_inbound(self, channel: &str, mode: Mode) -> Result<Inbound, WebhookError> {
        let message_id = required_id("message_id", self.message_id)?;
        let chat_id = required_id("chat_id", self.chat_id)?;
        let sender_id = required_id("sender_id", self.sender_id)?;
        let text = match self.text {
            Some(text) if !text.trim().is_empty() => text,
            Some(_) => return Err(WebhookError::EmptyField("text")),
            None => return Err(WebhookError::MissingField("text")),
        };
        let thread_id = self.thread_id.map(WireId::into_string).filter(|id| !id.is_empty());
        let kind = match (self.group.unwrap_or(false), &thread_id) {
            (false, _) => ChatKind::Direct,
            (true, Some(_)) => ChatKind::Thread,
            (true, None) => ChatKind::Group,
        };
        let display = self.sender_name.filter(|name| !name.trim().is_empty());
        Ok(Inbound {
            channel: channel.to_owned(),
            chat: ChatRef { id: chat_id, kind, thread_id },
            sender: SenderRef { id: sender_id, display, is_bot: false },
            message_id,
            text,
            attachments: Vec::new(),
            addressing: Addressing { mention: self.mentions_bot.unwrap_or(false), reply_to_bot: false },
            from_self: false,
            forwarded: self.forwarded.unwrap_or(false),
            delivery: match mode {
                Mode::Async => Delivery::Channel,
                Mode::Sync | Mode::Sse => Delivery::Caller,
            },
            received_at: chrono::Utc::now(),
            edit: None,
            trace: None,
        })
    }
}

fn required_id(field: &'static str, id: Option<WireId>) -> Result<String, WebhookError> {
    match id.map(WireId::into_string) {
        Some(id) if !id.trim().is_empty() => Ok(id),
        Some(_) => Err(WebhookError::EmptyField(field)),
        None => Err(WebhookError::MissingField(field)),
    }
}

/// Everything a webhook request can fail with; each maps to one status and
/// a JSON body `{"error": kind, "message": display}`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WebhookError {
    #[error("the webhook channel is not running (not started yet, or stopped); retry shortly")]
    NotRunning,
    #[error("{0}")]
    Body(#[from] BodyError),
    #[error("missing header {0}; sign the request (see the bub-webhook docs)")]
    MissingHeader(&'static str),
    #[error("{0}")]
    Unauthorized(VerifyError),
    #[error("unknown mode {0:?}; use mode=sync, mode=sse or mode=async")]
    BadMode(String),
    #[error("mode=async needs a callback_url, and this channel has none; use mode=sync or mode=sse")]
    AsyncWithoutCallback,
    #[error("request body is not a valid message: {0}")]
    InvalidJson(String),
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    #[error("field `{0}` must not be empty")]
    EmptyField(&'static str),
    /// A field over the limits every channel's messages are held to.
    #[error("field `{}` {}", wire_name(.0.field), .0.problem)]
    Invalid(InvalidInbound),
    #[error("a message with this message_id is still being handled; retry later for its outcome")]
    InProgress,
    #[error("{}", submit_message(.0))]
    Submit(#[from] SubmitError),
    #[error("the gateway stopped before the reply was finished; retry with the same message_id")]
    ReplyClosed,
    #[error(
        "no reply after {0:?}; the message is still being handled — send it again with the same message_id for its outcome"
    )]
    ReplyTimeout(Duration),
}

impl WebhookError {
    fn kind(&self) -> &'static str {
        match self {
            WebhookError::NotRunning => "not_running",
            WebhookError::Body(BodyError::TooLarge { .. }) => "body_too_large",
            WebhookError::Body(BodyError::Timeout(_)) => "body_timeout",
            WebhookError::Body(BodyError::Busy) => "busy",
            WebhookError::Body(BodyError::Read(_)) => "bad_body",
            WebhookError::MissingHeader(_) => "missing_signature",
            WebhookError::Unauthorized(VerifyError::Stale { .. }) => "stale_timestamp",
            WebhookError::Unauthorized(_) => "bad_signature",
            WebhookError::BadMode(_) => "bad_mode",
            WebhookError::AsyncWithoutCallback => "async_unavailable",
            WebhookError::InvalidJson(_) => "invalid_json",
            WebhookError::MissingField(_) => "missing_field",
            WebhookError::EmptyField(_) => "empty_field",
            WebhookError::InProgress => "in_progress",
            WebhookError::Submit(SubmitError::RateLimited { .. }) => "rate_limited",
            WebhookError::Submit(SubmitError::Unavailable(_)) | WebhookError::ReplyClosed => "unavailable",
            WebhookError::Invalid(_) | WebhookError::Submit(SubmitError::Invalid(_)) => "invalid_request",
            WebhookError::ReplyTimeout(_) => "timeout",
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            WebhookError::NotRunning | WebhookError::ReplyClosed => StatusCode::SERVICE_UNAVAILABLE,
            WebhookError::Submit(SubmitError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            WebhookError::Body(BodyError::Busy) => StatusCode::SERVICE_UNAVAILABLE,
            WebhookError::Body(BodyError::TooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            WebhookError::Body(BodyError::Timeout(_)) => StatusCode::REQUEST_TIMEOUT,
            WebhookError::MissingHeader(_) | WebhookError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            WebhookError::InProgress => StatusCode::CONFLICT,
            WebhookError::ReplyTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            WebhookError::Submit(SubmitError::RateLimited { .. }) => StatusCode::TOO_MANY_REQUESTS,
            WebhookError::Body(BodyError::Read(_))
            | WebhookError::BadMode(_)
            | WebhookError::AsyncWithoutCallback
            | WebhookError::InvalidJson(_)
            | WebhookError::MissingField(_)
            | WebhookError::EmptyField(_)
            | WebhookError::Invalid(_)
            | WebhookError::Submit(SubmitError::Invalid(_)) => StatusCode::BAD_REQUEST,
        }
    }
}

/// The request body's name for a field of [`Inbound`].
fn wire_name(field: InboundField) -> &'static str {
    match field {
        InboundField::Channel => "channel",
        InboundField::ChatId => "chat_id",
        InboundField::ThreadId => "thread_id",
        InboundField::SenderId => "sender_id",
        InboundField::SenderDisplay => "sender_name",
        InboundField::MessageId => "message_id",
        // webhook callers send no edits
        InboundField::EditVersion => "edit_version",
        InboundField::Text => "text",
        // The webhook takes no files (its body has no field for them).
        other => other.name(),
    }
}

/// A refused submit in the caller's terms (fields by their names in the body).
fn submit_message(error: &SubmitError) -> String {
    match error {
        SubmitError::Invalid(invalid) => WebhookError::Invalid(invalid.clone()).to_string(),
        other => other.to_string(),
    }
}

impl IntoResponse for WebhookError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(error = %self, "webhook request not handled");
        } else {
            tracing::debug!(error = %self, "webhook request refused");
        }
        let body = json!({ "error": self.kind(), "message": self.to_string() });
        let mut response = (status, Json(body)).into_response();
        let retry_after = match &self {
            WebhookError::Submit(SubmitError::RateLimited { retry_after }) => Some(*retry_after),
            WebhookError::Body(BodyError::Busy) => Some(Duration::from_secs(1)),
            _ => None,
        };
        if let Some(retry_after) = retry_after {
            let seconds = bub_channel::retry_after_seconds(retry_after);
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_defaults_to_sync_and_rejects_unknown_values() {
        assert_eq!(Mode::from_query(None).ok(), Some(Mode::Sync));
        assert_eq!(Mode::from_query(Some("x=1&mode=sse")).ok(), Some(Mode::Sse));
        assert_eq!(Mode::from_query(Some("mode=async")).ok(), Some(Mode::Async));
        assert!(matches!(Mode::from_query(Some("mode=push")), Err(WebhookError::BadMode(_))));
        assert_eq!(Mode::from_query(Some("mode=%73se")).ok(), Some(Mode::Sse), "percent-decoded");
        assert_eq!(Mode::from_query(Some("mode=async&x=%20")).ok(), Some(Mode::Async));
        assert!(matches!(Mode::from_query(Some("mode=sse&mode=sync")), Err(WebhookError::BadMode(_))), "ambiguous");
    }

    #[test]
    fn numeric_ids_become_text_and_group_threads_are_threads() {
        let message: WireMessage = match serde_json::from_str(
            r#"{"message_id": 7, "chat_id": -100, "sender_id": "u", "text": "hi", "group": true, "thread_id": 3}"#,
        ) {
            Ok(message) => message,
            Err(err) => panic!("valid message rejected: {err}"),
        };
        let inbound = match message.into_inbound("hook", Mode::Sync) {
            Ok(inbound) => inbound,
            Err(err) => panic!("valid message rejected: {err}"),
        };
        assert_eq!(inbound.message_id, "7");
        assert_eq!(inbound.chat, ChatRef { id: "-100".into(), kind: ChatKind::Thread, thread_id: Some("3".into()) });
        assert_eq!(inbound.delivery, Delivery::Caller);
    }

    #[test]
    fn ids_over_the_channel_limits_are_refused_in_the_callers_terms() {
        let body =
            format!(r#"{{"message_id": "m", "chat_id": "{}", "sender_id": "u", "text": "hi"}}"#, "c".repeat(129));
        let message: WireMessage = serde_json::from_str(&body).unwrap();
        let invalid = message.into_inbound("hook", Mode::Sync).unwrap().check().unwrap_err();
        let error = WebhookError::Invalid(invalid.clone());
        assert_eq!((error.status(), error.kind()), (StatusCode::BAD_REQUEST, "invalid_request"));
        assert_eq!(
            error.to_string(),
            "field `chat_id` is 129 bytes long, over the limit of 128 bytes; use a shorter value"
        );
        // The gateway's own check reads the same.
        let submitted = WebhookError::Submit(SubmitError::Invalid(invalid));
        assert_eq!((submitted.status(), submitted.kind()), (StatusCode::BAD_REQUEST, "invalid_request"));
        assert_eq!(submitted.to_string(), error.to_string());
    }
}
