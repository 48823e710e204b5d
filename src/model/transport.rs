//! HTTP plumbing shared by the provider clients: sending a streaming request
//! and turning a refusal into a typed [`ModelError`] that carries the
//! provider's own words, so the user reads "Incorrect API key provided", not
//! "HTTP 401".
//!
//! One status table serves every provider (and in-stream error events, which
//! carry a type or code instead of a status), so a rate limit is a rate limit
//! whichever API reported it.

use super::error::{ModelError, looks_like_context_overflow};
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::time::Duration;

/// The most of a provider's error text shown to the user.
const MAX_MESSAGE_CHARS: usize = 600;

/// Sends a request and returns the response when its status is a success;
/// otherwise reads the body and returns the typed error.
pub(crate) async fn send(provider: &str, request: reqwest::RequestBuilder) -> Result<reqwest::Response, ModelError> {
    let response = request
        .send()
        .await
        .map_err(|error| ModelError::Connection { provider: provider.to_string(), message: describe(&error) })?;
    let status = response.status();
    if status.is_success() && !is_json(response.headers()) {
        return Ok(response);
    }
    if status.is_success() {
        // Asked to stream, the server answered with one JSON document: an error
        // some gateways send with 200, or a server that ignores `stream`.
        let body = response.text().await.unwrap_or_default();
        let payload: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if payload.get("error").is_some_and(|e| !e.is_null()) {
            return Err(stream_error(provider, &payload));
        }
        return Err(ModelError::Protocol {
            provider: provider.to_string(),
            message: format!("expected a streamed answer (text/event-stream), got JSON: {}", truncate(&body)),
        });
    }
    let retry_after = retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    let error = status_error(provider, status.as_u16(), retry_after, &body);
    tracing::debug!(provider, status = status.as_u16(), kind = error.kind(), %error, "model request refused");
    Err(error)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// The typed error for an HTTP status and the body that came with it.
pub(crate) fn status_error(provider: &str, status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let (message, code) = match serde_json::from_str::<Value>(body) {
        Ok(payload) => payload_message(&payload),
        Err(_) => (String::new(), String::new()),
    };
    let message = match message.trim() {
        "" if body.trim().is_empty() => format!("HTTP {status} with an empty body"),
        "" => truncate(body.trim()),
        text => truncate(text),
    };
    classify(provider, status, retry_after, message, &code)
}

/// The typed error for an error object sent inside a stream (`{"error": …}`),
/// which has no HTTP status: one is inferred from its code or type.
pub(crate) fn stream_error(provider: &str, payload: &Value) -> ModelError {
    let (message, code) = payload_message(payload);
    let error = payload.get("error").unwrap_or(payload);
    let status = ["code", "status"]
        .iter()
        .find_map(|key| error.get(key).and_then(Value::as_u64))
        .and_then(|code| u16::try_from(code).ok())
        .filter(|code| (400..600).contains(code))
        .unwrap_or_else(|| status_for_code(&code));
    let message = if message.is_empty() { truncate(&payload.to_string()) } else { truncate(&message) };
    classify(provider, status, None, message, &code)
}

/// A status for an error type or code string (OpenAI `code`/`type`, Anthropic `error.type`).
fn status_for_code(code: &str) -> u16 {
    let code = code.to_lowercase();
    let has = |word: &str| code.contains(word);
    if has("rate_limit") {
        429
    } else if has("overloaded") {
        529
    } else if has("authentication") || has("invalid_api_key") {
        401
    } else if has("permission") {
        403
    } else if has("not_found") {
        404
    } else if has("too_large") {
        413
    } else if has("invalid_request") || has("context_length") {
        400
    } else {
        500
    }
}

fn classify(provider: &str, status: u16, retry_after: Option<Duration>, message: String, code: &str) -> ModelError {
    let provider = provider.to_string();
    match status {
        401 | 403 => ModelError::Auth { provider, status, message },
        // An exhausted quota is also a 429 at OpenAI, but waiting does not help.
        429 if code == "insufficient_quota" => ModelError::BadRequest { provider, status, message },
        429 => ModelError::RateLimited { provider, message, retry_after },
        400..=499 if looks_like_context_overflow(&message) || looks_like_context_overflow(code) => {
            ModelError::ContextOverflow { provider, message }
        }
        400..=499 => ModelError::BadRequest { provider, status, message },
        500..=599 => ModelError::Server { provider, status, message },
        _ => ModelError::Protocol { provider, message: format!("unexpected HTTP status {status}: {message}") },
    }
}

/// The human message and the machine code of an error payload, in the shapes
/// providers use: `{"error": {"message", "code"|"type"}}` (OpenAI, Anthropic,
/// OpenRouter with `metadata.raw`), `{"error": "text"}` (Ollama),
/// `{"message"}` or `{"detail"}` (vLLM and other servers).
fn payload_message(payload: &Value) -> (String, String) {
    let error = payload.get("error").unwrap_or(payload);
    if let Some(text) = error.as_str() {
        return (text.to_string(), String::new());
    }
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
    let mut message = text(error, "message")
        .or_else(|| text(error, "detail"))
        .or_else(|| text(payload, "detail"))
        .unwrap_or_default();
    if let Some(raw) = error.pointer("/metadata/raw").and_then(Value::as_str)
        && !message.contains(raw)
    {
        message = format!("{message} ({raw})");
    }
    let code = text(error, "code").or_else(|| text(error, "type")).unwrap_or_default();
    (message, code)
}

/// The wait a 429 or 503 asks for: `retry-after-ms`, else `Retry-After` in
/// seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1000.0);
    }
    parse_retry_after(header("retry-after")?)
}

/// `Retry-After` as seconds (`"2"`, `"1.5"`) or an HTTP date.
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.signed_duration_since(chrono::Utc::now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

fn seconds(secs: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(secs.max(0.0)).ok()
}

/// An error and its causes on one line (reqwest's own text names only the URL).
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
        source = source.and_then(std::error::Error::source);
    }
    text
}

/// At most [`MAX_MESSAGE_CHARS`] characters, marked when cut.
pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_map_to_typed_errors_with_the_provider_message() {
        let body = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#;
        let error = status_error("openai", 401, None, body);
        assert_eq!(error.kind(), "auth");
        assert!(error.to_string().contains("Incorrect API key provided"));
        assert_eq!(status_error("x", 503, None, "upstream down").kind(), "server");
        assert_eq!(status_error("x", 529, None, "").kind(), "server");
        assert_eq!(status_error("x", 422, None, "{}").kind(), "bad_request");
        let quota = r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#;
        assert_eq!(status_error("openai", 429, None, quota).kind(), "bad_request");
    }

    #[test]
    fn context_complaints_are_recognised_by_message_or_code() {
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 200001 tokens > 200000 maximum"}}"#;
        assert_eq!(status_error("anthropic", 400, None, anthropic).kind(), "context_overflow");
        let coded = r#"{"error":{"message":"too many","code":"context_length_exceeded"}}"#;
        assert_eq!(status_error("openai", 400, None, coded).kind(), "context_overflow");
    }

    #[test]
    fn other_error_shapes_still_show_their_text() {
        let ollama = status_error("ollama", 404, None, r#"{"error":"model \"x\" not found"}"#);
        assert!(ollama.to_string().contains("model \"x\" not found"));
        let plain = status_error("vllm", 400, None, "bad things");
        assert!(plain.to_string().contains("bad things"));
        let long = status_error("x", 500, None, &"y".repeat(5000));
        assert!(long.to_string().len() < 1000);
    }

    #[test]
    fn stream_errors_infer_a_status_from_code_or_type() {
        let overloaded = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        assert_eq!(stream_error("anthropic", &overloaded).kind(), "server");
        let limited = json!({"error": {"code": 429, "message": "slow down"}});
        assert_eq!(stream_error("openrouter", &limited).kind(), "rate_limited");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        let soon = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        let wait = parse_retry_after(&soon.replace("+0000", "GMT")).unwrap();
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
    }
}
