//! Typed model errors, carried all the way to the user: a failed call is never
//! an empty reply.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// No model, key or base configured; names the variable to set.
    #[error("{0}")]
    NotConfigured(String),

    #[error("{provider} rate limit: {message}{}", retry_hint(.retry_after))]
    RateLimited { provider: String, message: String, retry_after: Option<Duration> },

    #[error("{provider} refused the credentials (HTTP {status}): {message}")]
    Auth { provider: String, status: u16, message: String },

    #[error("{provider}: the conversation is longer than the model's context window: {message}")]
    ContextOverflow { provider: String, message: String },

    #[error("{provider} rejected the request (HTTP {status}): {message}")]
    BadRequest { provider: String, status: u16, message: String },

    #[error("{provider} server error (HTTP {status}): {message}")]
    Server { provider: String, status: u16, message: String },

    #[error("{provider} did not answer within {}s", .after.as_secs_f64())]
    Timeout { provider: String, after: Duration },

    #[error("cannot reach {provider}: {message}")]
    Connection { provider: String, message: String },

    /// The answer stopped before it was complete: the connection dropped
    /// mid-stream, or the stream ended without its end marker. What streamed
    /// before is a fragment, not an answer.
    #[error("{provider} stopped mid-answer: {message}")]
    Cut { provider: String, message: String },

    /// The provider answered with something that is not its protocol.
    #[error("{provider} sent a malformed answer: {message}")]
    Protocol { provider: String, message: String },
}

fn retry_hint(retry_after: &Option<Duration>) -> String {
    retry_after.map(|d| format!(" (retry after {}s)", d.as_secs())).unwrap_or_default()
}

impl ModelError {
    /// Whether trying again may help: rate limits, server errors, timeouts,
    /// lost connections and cut streams. The client never retries once a token
    /// has been streamed; the agent loop asks a cut answer again itself.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ModelError::RateLimited { .. }
                | ModelError::Server { .. }
                | ModelError::Timeout { .. }
                | ModelError::Connection { .. }
                | ModelError::Cut { .. }
        )
    }

    /// The wait the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A short kind name for records and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::NotConfigured(_) => "not_configured",
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Auth { .. } => "auth",
            ModelError::ContextOverflow { .. } => "context_overflow",
            ModelError::BadRequest { .. } => "bad_request",
            ModelError::Server { .. } => "server",
            ModelError::Timeout { .. } => "timeout",
            ModelError::Connection { .. } => "connection",
            ModelError::Cut { .. } => "cut",
            ModelError::Protocol { .. } => "protocol",
        }
    }
}

/// Recognises a context-length complaint in a provider's error text (status 400
/// bodies differ by provider), so clients can map it to [`ModelError::ContextOverflow`].
pub fn looks_like_context_overflow(message: &str) -> bool {
    let text = message.to_lowercase();
    let has = |words: &[&str]| words.iter().all(|w| text.contains(w));
    has(&["context", "length"])
        || has(&["context", "window"])
        || has(&["maximum", "context"])
        || has(&["token", "limit"])
        || has(&["prompt", "too long"])
        || has(&["tokens", "maximum"])
        || text.contains("context_length_exceeded")
}
