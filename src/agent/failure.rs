//! Why a run failed: [`FailureKind`], the one list of what can go wrong,
//! carried by [`StreamEvent::Error`](super::StreamEvent::Error) and
//! [`RunOutcome::error`](super::RunOutcome::error). Callers decide by it
//! (the gateway's chat text, `bub run`'s exit status), so a new kind is a
//! compile error in each of them rather than a string nobody matches.

use crate::model::ModelError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What kind of failure ended a run. Its [`as_str`](FailureKind::as_str)
/// names (`rate_limited`, `max_steps`, …) are stable: the tape, the metrics
/// and the webhook's texts use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The prompt or the run's options cannot be used: an empty prompt, a
    /// tape name out of limits, an allowed tool that does not exist.
    InvalidInput,
    /// No model (or key, or base URL) is configured; the message names the variable to set.
    NotConfigured,
    /// The provider's rate limit.
    RateLimited,
    /// The provider refused the credentials.
    Auth,
    /// The conversation does not fit the model's context window, even after the automatic handoff.
    ContextOverflow,
    /// The provider rejected the request.
    BadRequest,
    /// The provider failed (5xx).
    Server,
    /// The model did not answer, or went silent, within the timeout.
    Timeout,
    /// The provider could not be reached.
    Connection,
    /// The answer was cut off mid-stream, and again when asked once more.
    Cut,
    /// The provider answered with something that is not its protocol.
    Protocol,
    /// The run made `max_steps` model calls without finishing.
    MaxSteps,
    /// A comma command failed; its output, already streamed, says how.
    Command,
    /// The session's environment (its workspace, its sandbox) could not be opened.
    Environment,
    /// The tape could not be read or written.
    Tape,
    /// Code mode could not be prepared (its stub could not be written).
    CodeMode,
    /// An event handler failed (a policy that cannot decide, a hook's error).
    Handler,
}

impl FailureKind {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::InvalidInput => "invalid_input",
            FailureKind::NotConfigured => "not_configured",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::Auth => "auth",
            FailureKind::ContextOverflow => "context_overflow",
            FailureKind::BadRequest => "bad_request",
            FailureKind::Server => "server",
            FailureKind::Timeout => "timeout",
            FailureKind::Connection => "connection",
            FailureKind::Cut => "cut",
            FailureKind::Protocol => "protocol",
            FailureKind::MaxSteps => "max_steps",
            FailureKind::Command => "command",
            FailureKind::Environment => "environment",
            FailureKind::Tape => "tape",
            FailureKind::CodeMode => "code_mode",
            FailureKind::Handler => "handler",
        }
    }
}

impl From<&ModelError> for FailureKind {
    fn from(error: &ModelError) -> FailureKind {
        match error {
            ModelError::NotConfigured(_) => FailureKind::NotConfigured,
            ModelError::RateLimited { .. } => FailureKind::RateLimited,
            ModelError::Auth { .. } => FailureKind::Auth,
            ModelError::ContextOverflow { .. } => FailureKind::ContextOverflow,
            ModelError::BadRequest { .. } => FailureKind::BadRequest,
            ModelError::Server { .. } => FailureKind::Server,
            ModelError::Timeout { .. } => FailureKind::Timeout,
            ModelError::Connection { .. } => FailureKind::Connection,
            ModelError::Cut { .. } => FailureKind::Cut,
            ModelError::Protocol { .. } => FailureKind::Protocol,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the stable name, so `kind == "max_steps"` reads as it did.
impl PartialEq<&str> for FailureKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Why a run stopped early (inside the agent, on its way to a `StreamEvent::Error`).
pub(crate) struct RunFailure {
    pub kind: FailureKind,
    pub message: String,
}

impl RunFailure {
    pub(crate) fn new(kind: FailureKind, message: impl Into<String>) -> RunFailure {
        RunFailure { kind, message: message.into() }
    }
}

impl From<crate::tools::bus::HandlerError> for RunFailure {
    fn from(error: crate::tools::bus::HandlerError) -> RunFailure {
        RunFailure::new(FailureKind::Handler, error.to_string())
    }
}

impl From<crate::tape::TapeError> for RunFailure {
    fn from(error: crate::tape::TapeError) -> RunFailure {
        RunFailure::new(FailureKind::Tape, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_failures_keep_the_model_errors_names() {
        let errors = [
            ModelError::NotConfigured("x".into()),
            ModelError::Timeout { provider: "p".into(), after: std::time::Duration::from_secs(1) },
            ModelError::Cut { provider: "p".into(), message: "m".into() },
            ModelError::Auth { provider: "p".into(), status: 401, message: "m".into() },
        ];
        for error in &errors {
            assert_eq!(FailureKind::from(error).as_str(), error.kind());
        }
        assert_eq!(serde_json::to_string(&FailureKind::MaxSteps).unwrap(), "\"max_steps\"");
    }
}
