//! Replies to `async` requests: one signed POST to the callback URL per
//! [`Outbound`], classified for the gateway's scheduler (which retries; this
//! module never does).
//!
//! The body is `{"idempotency_key", "session", "chat_id", "thread_id"?,
//! "reply_to", "text"}`, signed like inbound requests, with the key also in
//! `Idempotency-Key` so a receiver can drop a retried delivery.

use crate::IDEMPOTENCY_KEY_HEADER;
use crate::keys::KeySource;
use crate::signature::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use bub_channel::rules::UrlError;
use bub_channel::{Delivered, Outbound, RateScope, SendError};
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Serialize;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// When a 429 does not say how long to wait.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

pub(crate) struct Callback {
    client: reqwest::Client,
    url: Url,
    keys: KeySource,
}

#[derive(Serialize)]
struct CallbackBody<'a> {
    idempotency_key: &'a str,
    session: &'a str,
    chat_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread_id: Option<&'a str>,
    reply_to: &'a [String],
    text: &'a str,
}

impl Callback {
    /// Errors say what is wrong with `url`, for the caller to prefix with the setting's name.
    pub(crate) fn new(url: &str, keys: KeySource) -> Result<Callback, String> {
        let url = bub_channel::rules::http_url(url).map_err(|err| match err {
            UrlError::NotAUrl(err) => format!("not a URL ({err})"),
            UrlError::NotHttp => "must be an http:// or https:// URL with a host".to_owned(),
        })?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|err| format!("cannot build an HTTP client: {err}"))?;
        Ok(Callback { client, url, keys })
    }

    pub(crate) async fn post(&self, outbound: &Outbound) -> Result<Delivered, SendError> {
        let body = CallbackBody {
            idempotency_key: &outbound.idempotency_key,
            session: &outbound.session,
            chat_id: &outbound.chat.id,
            thread_id: outbound.chat.thread_id.as_deref(),
            reply_to: &outbound.reply_to,
            text: &outbound.text,
        };
        let body =
            serde_json::to_vec(&body).map_err(|err| SendError::Permanent(format!("cannot encode reply: {err}")))?;
        // The key in force now, as the channel's configuration says.
        let keys = (self.keys)();
        let secret = keys.callback_secret().ok_or_else(|| {
            SendError::Permanent("the webhook channel has no secret to sign the callback with".to_owned())
        })?;
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign(secret, timestamp, &body);
        let response = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, signature)
            .header(IDEMPOTENCY_KEY_HEADER, &outbound.idempotency_key)
            .body(body)
            .send()
            .await
            .map_err(|err| SendError::Transient(format!("callback POST to {} failed: {err}", self.redacted_url())))?;

        let status = response.status();
        let headers = response.headers().clone();
        // The body is informative only; a receiver that accepted the reply
        // but answered with garbage still has it.
        let answer: Option<serde_json::Value> = response.json().await.ok();
        let answered = |key: &str| answer.as_ref().and_then(|value| value.get(key));
        if status.is_success() {
            let message_id = match answered("message_id") {
                Some(serde_json::Value::String(id)) if !id.is_empty() => id.clone(),
                Some(serde_json::Value::Number(id)) => id.to_string(),
                _ => outbound.idempotency_key.clone(),
            };
            return Ok(Delivered { message_id });
        }
        let detail = answered("error")
            .or_else(|| answered("message"))
            .and_then(|value| value.as_str())
            .map(|text| format!(": {text}"))
            .unwrap_or_default();
        let what = format!("callback {} answered {status}{detail}", self.redacted_url());
        if status == StatusCode::TOO_MANY_REQUESTS {
            let retry_after = retry_after_header(&headers)
                .or_else(|| answered("retry_after").and_then(|value| value.as_f64()).and_then(seconds))
                .unwrap_or(DEFAULT_RETRY_AFTER);
            tracing::debug!(%status, retry_after_ms = retry_after.as_millis() as u64, "webhook callback rate limited");
            return Err(SendError::RateLimited { retry_after, scope: RateScope::Channel });
        }
        if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
            Err(SendError::Transient(what))
        } else {
            Err(SendError::Permanent(what))
        }
    }

    /// The URL without credentials or query, for error messages and logs.
    fn redacted_url(&self) -> String {
        let port = self.url.port().map(|port| format!(":{port}")).unwrap_or_default();
        format!("{}://{}{port}{}", self.url.scheme(), self.url.host_str().unwrap_or_default(), self.url.path())
    }
}

/// `Retry-After` in seconds (HTTP dates are not worth supporting for a callback).
fn retry_after_header(headers: &HeaderMap) -> Option<Duration> {
    headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse::<f64>().ok().and_then(seconds)
}

fn seconds(value: f64) -> Option<Duration> {
    (value.is_finite() && value >= 0.0).then(|| Duration::from_secs_f64(value.min(86_400.0)))
}
