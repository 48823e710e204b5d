//! `Channel::send` against a local callback receiver, and `WebhookChannel::new` validation.

use super::support;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use bub_channel::{Channel, ChatKind, ChatRef, Outbound, RateScope, Secret, SendError};
use bub_webhook::{WebhookChannel, WebhookSettings, verify};
use parking_lot::Mutex;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use support::*;

const CALLBACK_SECRET: &str = "callback-secret";

/// Answers every POST with one scripted response and records what it got.
struct Receiver {
    status: StatusCode,
    headers: Vec<(&'static str, &'static str)>,
    body: String,
    received: Mutex<Vec<(HeaderMap, Bytes)>>,
}

async fn receive(State(receiver): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    receiver.received.lock().push((headers, body));
    let mut response = (receiver.status, receiver.body.clone()).into_response();
    for (name, value) in &receiver.headers {
        response.headers_mut().insert(*name, value.parse().unwrap());
    }
    response
}

async fn receiver(status: u16, headers: Vec<(&'static str, &'static str)>, body: &str) -> (Arc<Receiver>, SocketAddr) {
    let receiver = Arc::new(Receiver {
        status: StatusCode::from_u16(status).unwrap(),
        headers,
        body: body.to_string(),
        received: Mutex::new(Vec::new()),
    });
    let router = axum::Router::new().route("/replies", axum::routing::post(receive)).with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    (receiver, addr)
}

fn channel_for(addr: SocketAddr, callback_secret: Option<&str>) -> WebhookChannel {
    let mut settings = settings();
    settings.callback_url = Some(format!("http://{addr}/replies"));
    settings.callback_secret = callback_secret.map(Secret::from);
    WebhookChannel::new(settings).unwrap()
}

fn outbound() -> Outbound {
    Outbound {
        chat: ChatRef { id: "chat-1".into(), kind: ChatKind::Thread, thread_id: Some("th-1".into()) },
        text: "the answer".into(),
        reply_to: vec!["m-1".into(), "m-2".into()],
        idempotency_key: "idem-1".into(),
        session: "hook:chat-1:th-1".into(),
        mentions: Vec::new(),
    }
}

#[tokio::test]
async fn send_posts_a_signed_reply_and_returns_the_receivers_message_id() {
    let (receiver, addr) = receiver(200, vec![("content-type", "application/json")], r#"{"message_id":"r-9"}"#).await;
    let channel = channel_for(addr, Some(CALLBACK_SECRET));

    let delivered = channel.send(&outbound()).await.unwrap();

    assert_eq!(delivered.message_id, "r-9");
    let received = receiver.received.lock().clone();
    assert_eq!(received.len(), 1, "exactly one POST, no retries");
    let (headers, body) = &received[0];
    let body_json: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(
        body_json,
        json!({
            "idempotency_key": "idem-1", "session": "hook:chat-1:th-1", "chat_id": "chat-1",
            "thread_id": "th-1", "reply_to": ["m-1", "m-2"], "text": "the answer",
        })
    );
    assert_eq!(headers["idempotency-key"], "idem-1");
    assert_eq!(headers["content-type"], "application/json");
    let timestamp = headers["x-bub-timestamp"].to_str().unwrap();
    let signature = headers["x-bub-signature"].to_str().unwrap();
    let now = chrono::Utc::now().timestamp();
    let window = Duration::from_secs(300);
    assert_eq!(verify(&[CALLBACK_SECRET], timestamp, signature, body, now, window), Ok(()));
    assert!(verify(&[SECRET], timestamp, signature, body, now, window).is_err(), "signed with callback_secret");
}

#[tokio::test]
async fn callbacks_are_signed_with_the_first_secret_by_default() {
    let (receiver, addr) = receiver(204, vec![], "").await;
    let channel = channel_for(addr, None);

    let delivered = channel.send(&outbound()).await.unwrap();

    assert_eq!(delivered.message_id, "idem-1", "without a message_id the idempotency key names the delivery");
    let (headers, body) = receiver.received.lock()[0].clone();
    let timestamp = headers["x-bub-timestamp"].to_str().unwrap();
    let signature = headers["x-bub-signature"].to_str().unwrap();
    let now = chrono::Utc::now().timestamp();
    assert_eq!(verify(&[SECRET], timestamp, signature, &body, now, Duration::from_secs(300)), Ok(()));
    let body_json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body_json["thread_id"], "th-1");
}

#[tokio::test]
async fn a_429_is_a_channel_wide_rate_limit_for_the_retry_after_seconds() {
    let (_, addr) = receiver(429, vec![("retry-after", "7")], "").await;
    let error = channel_for(addr, None).send(&outbound()).await.unwrap_err();
    assert_eq!(error, SendError::RateLimited { retry_after: Duration::from_secs(7), scope: RateScope::Channel });
}

#[tokio::test]
async fn a_429_without_retry_after_header_reads_the_json_or_waits_a_second() {
    let (_, addr) = receiver(429, vec![("content-type", "application/json")], r#"{"retry_after": 4}"#).await;
    let error = channel_for(addr, None).send(&outbound()).await.unwrap_err();
    assert_eq!(error, SendError::RateLimited { retry_after: Duration::from_secs(4), scope: RateScope::Channel });

    let (_, addr) = receiver(429, vec![], "slow down").await;
    let error = channel_for(addr, None).send(&outbound()).await.unwrap_err();
    assert_eq!(error, SendError::RateLimited { retry_after: Duration::from_secs(1), scope: RateScope::Channel });
}

#[tokio::test]
async fn a_500_is_transient() {
    let (receiver, addr) = receiver(500, vec![], "boom").await;
    let error = channel_for(addr, None).send(&outbound()).await.unwrap_err();
    assert!(matches!(error, SendError::Transient(_)), "{error:?}");
    assert_eq!(receiver.received.lock().len(), 1, "the scheduler retries, not send");
}

#[tokio::test]
async fn a_404_is_permanent() {
    let (_, addr) = receiver(404, vec![], "no such hook").await;
    let error = channel_for(addr, None).send(&outbound()).await.unwrap_err();
    assert!(matches!(error, SendError::Permanent(_)), "{error:?}");
}

#[tokio::test]
async fn an_unreachable_receiver_is_transient() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let error = channel_for(addr, None).send(&outbound()).await.unwrap_err();
    assert!(matches!(error, SendError::Transient(_)), "{error:?}");
}

#[tokio::test]
async fn send_without_a_callback_url_is_permanent() {
    let channel = WebhookChannel::new(settings()).unwrap();
    match channel.send(&outbound()).await {
        Err(SendError::Permanent(message)) => assert!(message.contains("no callback_url"), "{message}"),
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

fn new_error(settings: WebhookSettings) -> String {
    match WebhookChannel::new(settings) {
        Ok(_) => panic!("settings should have been refused"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_channel_without_a_secret_is_refused_with_the_setting_to_fix() {
    let expected = "webhook channel ci has no secret; set channels.ci.secrets";
    assert!(new_error(WebhookSettings::new("ci", vec![])).contains(expected));
    assert!(new_error(WebhookSettings::new("ci", vec![String::new()])).contains(expected));
}

#[test]
fn a_callback_url_must_be_http() {
    for url in ["ftp://example.com/x", "not a url", "/relative"] {
        let mut settings = WebhookSettings::new("ci", vec!["s".into()]);
        settings.callback_url = Some(url.into());
        assert!(new_error(settings).contains("callback_url"), "{url}");
    }
}

#[test]
fn limits_allow_long_unedited_undebounced_messages() {
    let limits = WebhookChannel::new(settings()).unwrap().limits();
    assert!(limits.max_message_chars >= 1_000_000);
    assert!(!limits.edits && !limits.debounce);
}
