//! bub's webhook channel: any system that can POST JSON talks to the agent.
//!
//! A caller POSTs a signed message to `/webhook/<name>` and picks how it gets
//! the reply with `?mode=`:
//!
//! - `sync` (default): the response waits for the outcome, as JSON
//!   `{"message_id", "status", "text", "session"}`.
//! - `sse`: the response is `text/event-stream`; `event: delta` with
//!   `{"text"}` as the agent writes, then one `event: done` with the outcome.
//! - `async`: `202 {"message_id", "status": "accepted"}` at once; the reply is
//!   POSTed later to the channel's `callback_url` (see [`WebhookChannel`]'s
//!   [`Channel::send`]).
//!
//! The gateway deduplicates by `message_id`: asking again with the same id
//! returns the original outcome (`200`), or `409 in_progress` while it is
//! still being handled. So a caller that lost its connection retries safely.
//!
//! # Signing
//!
//! Every request carries `X-Bub-Timestamp` (unix seconds) and
//! `X-Bub-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">`,
//! keyed with one of the channel's `secrets` (several may be configured, to
//! rotate a secret without downtime). Requests more than `replay_window`
//! (default 5 minutes) away from the server's clock are refused. Callback
//! POSTs are signed the same way with `callback_secret`. A channel built
//! with [`WebhookChannel::with_keys`] reads its secrets on every request, so
//! a secret removed from the configuration stops working at once.
//!
//! A request may also carry a W3C `traceparent` (and `tracestate`) header:
//! it is passed on with the message ([`bub_channel::TraceContext`]), and a
//! gateway that exports traces continues the caller's trace. It is not
//! signed: it only says where the message's spans hang.
//!
//! ```sh
//! body='{"message_id":"m1","chat_id":"c1","sender_id":"u1","text":"hello"}'
//! ts=$(date +%s)
//! sig=$(printf '%s' "$ts.$body" | openssl dgst -sha256 -hmac "$SECRET" | sed 's/^.*= //')
//! curl -sS "http://127.0.0.1:8080/webhook/ci?mode=sync" \
//!   -H 'Content-Type: application/json' \
//!   -H "X-Bub-Timestamp: $ts" -H "X-Bub-Signature: sha256=$sig" \
//!   --data-binary "$body"
//! ```
//!
//! In Rust, [`sign`] computes the header value:
//!
//! ```
//! let body = br#"{"message_id":"m1","chat_id":"c1","sender_id":"u1","text":"hello"}"#;
//! let timestamp = chrono::Utc::now().timestamp();
//! let signature = bub_webhook::sign("s3cret", timestamp, body);
//! let now = chrono::Utc::now().timestamp();
//! let window = std::time::Duration::from_secs(300);
//! assert!(bub_webhook::verify(&["s3cret"], &timestamp.to_string(), &signature, body, now, window).is_ok());
//! ```
//!
//! # Request body
//!
//! `{"message_id", "chat_id", "sender_id", "sender_name"?, "text", "group"?,
//! "mentions_bot"?, "thread_id"?, "forwarded"?}`. Ids may be strings or
//! numbers. `group` (default `false`) makes the chat shared, so the gateway
//! answers only when `mentions_bot` is set or its policy says so; with a
//! `thread_id` the thread is its own chat. `forwarded` (default `false`) says
//! the text is someone else's: the gateway treats it as untrusted. Unknown fields are ignored, so callers can send more than
//! this version reads.
//!
//! Ids (`message_id`, `chat_id`, `sender_id`, `thread_id`) are at most 128
//! bytes, without control characters or leading/trailing whitespace;
//! `sender_name` is at most 256 bytes without control characters; `text`
//! is not blank (and within the body limit). These are the limits of every
//! channel ([`bub_channel::check`]); a request over them is refused with 400
//! `invalid_request` naming the field, and nothing is stored.
//!
//! # Errors
//!
//! `{"error": "<kind>", "message": "<what to fix>"}`: 400 (malformed JSON, a
//! missing or empty field, a field over its limits (`invalid_request`), an
//! unknown mode, `async` without a callback URL),
//! 401 (missing or wrong signature, stale timestamp), 408 (body not received
//! within `body_timeout`), 413 (body over `max_body_bytes`), 409 (same message
//! id still in progress), 429 (sender rate limited; `Retry-After` says when to
//! retry), 503 (channel not started, gateway unavailable or shutting down, or
//! too many bodies arriving at once, with `Retry-After`). Checks run in the order size →
//! signature → JSON → fields, and nothing reaches the gateway unless all pass.
//!
//! # Layout
//! - [`signature`]: [`sign`] and [`verify`], shared by both directions.
//! - `ingress`: the axum handler for `POST /webhook/<name>` and its error type.
//! - `callback`: the signed POST behind [`Channel::send`].
//! - [`keys`]: [`WebhookKeys`] and the [`KeySource`] a running channel reads them from.

#![forbid(unsafe_code)]

mod body;
mod callback;
#[doc(hidden)]
pub mod fuzzing;
mod ingress;
pub mod keys;
pub mod signature;

pub use keys::{KeySource, WebhookKeys};
pub use signature::{SIGNATURE_HEADER, TIMESTAMP_HEADER, VerifyError, sign, verify};

use async_trait::async_trait;
use bub_channel::{
    Channel, ChannelError, CredentialProblem, Delivered, InboundSink, LengthUnit, Limits, Outbound, Secret, SendError,
};
use std::sync::Arc;
use std::time::Duration;

/// Header carrying [`Outbound::idempotency_key`] on callback POSTs.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// Default [`WebhookSettings::replay_window`].
pub const DEFAULT_REPLAY_WINDOW: Duration = Duration::from_secs(5 * 60);
/// Default [`WebhookSettings::max_body_bytes`] (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default [`WebhookSettings::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a `sync` request waits for its reply by default.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// One webhook endpoint's configuration (`[channels.<name>]`). Its keys are
/// [`Secret`]s: `Debug` never shows them.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// The channel instance's name; the endpoint is `POST /webhook/<name>`.
    pub name: String,
    /// Secrets that may sign inbound requests; any one of them is accepted.
    /// With [`WebhookChannel::with_keys`] these are checked at start and the
    /// source's keys are used from then on.
    pub secrets: Vec<Secret>,
    /// Where replies to `async` requests are POSTed; without it `async` is refused.
    pub callback_url: Option<String>,
    /// Signs callback POSTs; the first of `secrets` when unset.
    pub callback_secret: Option<Secret>,
    /// How far a request's timestamp may be from the server's clock.
    pub replay_window: Duration,
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: usize,
    /// A request body that has not fully arrived by then is refused with 408
    /// (a client trickling bytes must not hold a connection and a buffer forever).
    pub body_timeout: Duration,
    /// How long a `sync` request waits for its reply before a 504 (the turn
    /// goes on; the same message_id later gets the outcome).
    pub reply_timeout: Duration,
}

impl WebhookSettings {
    /// Settings with the documented defaults and no callback URL.
    pub fn new(name: impl Into<String>, secrets: Vec<String>) -> WebhookSettings {
        WebhookSettings {
            name: name.into(),
            secrets: secrets.into_iter().map(Secret::from).collect(),
            callback_url: None,
            callback_secret: None,
            replay_window: DEFAULT_REPLAY_WINDOW,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
        }
    }
}

/// A webhook endpoint as a bub channel.
///
/// [`Channel::routes`] serves `POST /webhook/<name>`; until [`Channel::start`]
/// hands it the gateway's inbox it answers 503. [`Channel::send`] makes one
/// signed POST to the callback URL and classifies the answer; retries are the
/// gateway scheduler's job.
pub struct WebhookChannel {
    ingress: Arc<ingress::Ingress>,
    callback: Option<callback::Callback>,
}

impl WebhookChannel {
    /// Validates `settings`: a name usable as a path segment, at least one
    /// non-empty secret, and an `http(s)` callback URL if one is set. The
    /// channel keeps these secrets for as long as it runs.
    pub fn new(settings: WebhookSettings) -> Result<WebhookChannel, ChannelError> {
        let keys = WebhookKeys { secrets: settings.secrets.clone(), callback_secret: settings.callback_secret.clone() };
        WebhookChannel::with_keys(settings, keys::fixed(keys))
    }

    /// Like [`WebhookChannel::new`] (whose checks `settings` must pass), but
    /// the channel reads its secrets from `keys` on every request and every
    /// callback, so it follows a configuration that changes while it runs: a
    /// secret removed there stops verifying with the next request, a new one
    /// verifies at once.
    pub fn with_keys(settings: WebhookSettings, keys: KeySource) -> Result<WebhookChannel, ChannelError> {
        let name = &settings.name;
        let invalid = |message: String| ChannelError::new(name.clone(), message);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            return Err(invalid(format!(
                "webhook channel name {name:?} must be non-empty and use only letters, digits, '-', '_' and '.'"
            )));
        }
        if !keys::secrets_are_usable(&settings.secrets) {
            return Err(invalid(format!("webhook channel {name} has no secret; set channels.{name}.secrets")));
        }
        if settings.callback_secret.as_ref().is_some_and(Secret::is_empty) {
            return Err(invalid(format!(
                "webhook channel {name} has an empty callback_secret; set channels.{name}.callback_secret or remove it"
            )));
        }
        let callback = match &settings.callback_url {
            Some(url) => Some(
                callback::Callback::new(url, keys.clone())
                    .map_err(|message| invalid(format!("channels.{name}.callback_url {url:?}: {message}")))?,
            ),
            None => None,
        };
        let ingress = ingress::Ingress::new(&settings, keys, callback.is_some());
        Ok(WebhookChannel { ingress: Arc::new(ingress), callback })
    }
}

#[async_trait]
impl Channel for WebhookChannel {
    fn name(&self) -> &str {
        self.ingress.name()
    }

    fn limits(&self) -> Limits {
        Limits {
            max_message_chars: 1_000_000,
            length_unit: LengthUnit::Utf16,
            edits: false,
            debounce: false,
            typing: false,
        }
    }

    async fn start(&self, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        self.ingress.attach(inbox);
        tracing::info!(channel = self.name(), "webhook channel accepting requests");
        Ok(())
    }

    fn routes(&self) -> Option<axum::Router> {
        Some(ingress::router(self.ingress.clone()))
    }

    /// No platform to ask: judges the secrets requests and callbacks are
    /// signed with ([`bub_channel::rules::secret_weakness`]).
    async fn check_credentials(&self) -> Result<String, CredentialProblem> {
        let name = self.name();
        let keys = self.ingress.keys();
        let secrets = keys.secrets.iter().enumerate().map(|(i, secret)| (format!("secret {}", i + 1), secret));
        let callback = keys.callback_secret.iter().map(|secret| ("callback_secret".to_string(), secret));
        for (which, secret) in secrets.chain(callback) {
            if let Some(weakness) = bub_channel::rules::secret_weakness(secret.expose()) {
                let key = if which == "callback_secret" { "callback_secret" } else { "secrets" };
                return Err(CredentialProblem::new(
                    format!("{which} of {} is weak: {weakness}", keys.secrets.len()),
                    format!(
                        "put a new random secret in channels.{name}.{key} (`openssl rand -hex 32`); give it to the \
                         callers, then remove the old one"
                    ),
                ));
            }
        }
        Ok(format!("{} secret{} strong enough", keys.secrets.len(), if keys.secrets.len() == 1 { "" } else { "s" }))
    }

    async fn send(&self, outbound: &Outbound) -> Result<Delivered, SendError> {
        match &self.callback {
            Some(callback) => callback.post(outbound).await,
            None => Err(SendError::Permanent(format!(
                "webhook channel {} has no callback_url; set channels.{}.callback_url to deliver replies",
                self.name(),
                self.name()
            ))),
        }
    }

    async fn stop(&self) {
        self.ingress.detach();
    }
}
