//! Receiving by webhook instead of polling: at start the bot asks Telegram
//! (`setWebhook`) to POST every update to the configured `webhook_url`, which
//! must reach `POST /telegram/<name>` on bub's HTTP server (Telegram calls
//! only HTTPS URLs: put bub behind a TLS-terminating proxy). Several gateway
//! replicas behind one load balancer can share a bot this way; polling allows
//! one process per token.
//!
//! - A request must carry `X-Telegram-Bot-Api-Secret-Token` equal to the
//!   configured `webhook_secret`, checked before the body is read: 401 if not.
//! - 200 only once the gateway stored the message; 503 while it cannot, so
//!   Telegram sends the update again later (it retries any other answer). An
//!   update that is not a text message is acknowledged and ignored.
//! - Bodies over 1 MiB get 413, ones that do not arrive within 30 s get 408,
//!   and a body that is not an update gets 400 (JSON `{"error", "message"}`).

use crate::inbound::update_to_inbound;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bub_channel::{InboundSink, Secret};
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Duration;
use teloxide_core::types::{Me, Update};

/// The header Telegram puts the secret token in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
/// Telegram's updates are small; anything bigger is not one.
const MAX_BODY_BYTES: usize = 1024 * 1024;
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The state behind `POST /telegram/<name>`.
pub(crate) struct WebhookIngress {
    channel: String,
    secret: Secret,
    /// Set while the channel runs.
    target: RwLock<Option<(Me, Arc<dyn InboundSink>)>>,
}

impl WebhookIngress {
    pub(crate) fn new(channel: String, secret: Secret) -> WebhookIngress {
        WebhookIngress { channel, secret, target: RwLock::new(None) }
    }

    pub(crate) fn routes(self: &Arc<Self>) -> Router {
        Router::new().route(&format!("/telegram/{}", self.channel), post(receive)).with_state(self.clone())
    }

    pub(crate) fn secret(&self) -> &str {
        self.secret.expose()
    }

    pub(crate) fn attach(&self, me: Me, inbox: Arc<dyn InboundSink>) {
        *self.target.write() = Some((me, inbox));
    }

    pub(crate) fn detach(&self) {
        *self.target.write() = None;
    }

    fn target(&self) -> Option<(Me, Arc<dyn InboundSink>)> {
        self.target.read().clone()
    }
}

fn refuse(status: StatusCode, error: &str, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": error, "message": message.into() });
    (status, axum::Json(body)).into_response()
}

async fn receive(State(ingress): State<Arc<WebhookIngress>>, headers: HeaderMap, body: Body) -> Response {
    let Some((me, inbox)) = ingress.target() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_running",
            "the Telegram channel is not running; retry later",
        );
    };
    let given = headers.get(SECRET_HEADER).map(|value| value.as_bytes()).unwrap_or_default();
    if !same_secret(given, ingress.secret.expose().as_bytes()) {
        return refuse(StatusCode::UNAUTHORIZED, "bad_secret", format!("{SECRET_HEADER} is missing or wrong"));
    }
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return refuse(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "an update is never over 1 MiB");
        }
        Err(_) => return refuse(StatusCode::REQUEST_TIMEOUT, "body_timeout", "the body did not arrive within 30 s"),
    };
    let update: Update = match serde_json::from_slice(&bytes) {
        Ok(update) => update,
        Err(error) => {
            return refuse(StatusCode::BAD_REQUEST, "invalid_update", format!("not a Telegram update: {error}"));
        }
    };
    let Some(inbound) = update_to_inbound(&ingress.channel, &me, &update) else {
        return StatusCode::OK.into_response();
    };
    match inbox.submit(inbound, None).await {
        Err(error) if error.try_again_later() => {
            tracing::warn!(channel = %ingress.channel, %error, "cannot store a Telegram update; Telegram will send it again");
            refuse(StatusCode::SERVICE_UNAVAILABLE, "unavailable", error.to_string())
        }
        _ => StatusCode::OK.into_response(),
    }
}

/// Compares without stopping at the first difference, so timing tells nothing about the secret.
fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
}
