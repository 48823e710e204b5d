//! How `bub` exits, for scripts and CI jobs that call it (the README's
//! "Exit status" table is this module).
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done: the agent answered, or the command succeeded |
//! | 1 | the run failed: a model error, an answer cut off and not recovered, `max_steps`, a tool or tape failure, a comma command that failed; any other command that failed |
//! | 2 | the command line is wrong: an unknown flag, a missing or empty message |
//! | 3 | bub is not configured to run it: no model, a bad `BUB_*` variable, an unreadable config |
//! | 130 | stopped by SIGINT (Ctrl-C); the run was stopped and recorded as interrupted |
//! | 143 | stopped by SIGTERM; likewise |

use crate::agent::FailureKind;

/// Done.
pub const OK: u8 = 0;
/// The run (or the command) failed.
pub const FAILED: u8 = 1;
/// The command line is wrong (clap exits with 2 too).
pub const USAGE: u8 = 2;
/// Not configured to run it.
pub const NOT_CONFIGURED: u8 = 3;
/// Stopped by SIGINT (128 + 2).
pub const INTERRUPTED: u8 = 130;
/// Stopped by SIGTERM (128 + 15).
pub const TERMINATED: u8 = 143;

/// A failure with the status `bub` exits with; `main` prints the message
/// (when there is one) as `error: …`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    pub code: u8,
    pub message: String,
}

impl Exit {
    pub fn new(code: u8, message: impl Into<String>) -> Exit {
        Exit { code, message: message.into() }
    }

    /// Exits with `code` and prints nothing more: the output said it.
    pub fn quiet(code: u8) -> Exit {
        Exit { code, message: String::new() }
    }
}

/// The status for a run that failed with an error of `kind`.
pub fn for_run_error(kind: FailureKind) -> u8 {
    match kind {
        FailureKind::InvalidInput => USAGE,
        FailureKind::NotConfigured => NOT_CONFIGURED,
        _ => FAILED,
    }
}

/// The status for any error a command returned.
pub fn status_of(error: &anyhow::Error) -> u8 {
    error.downcast_ref::<Exit>().map_or(FAILED, |exit| exit.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_errors_map_to_documented_statuses() {
        assert_eq!(for_run_error(FailureKind::InvalidInput), USAGE);
        assert_eq!(for_run_error(FailureKind::NotConfigured), NOT_CONFIGURED);
        use FailureKind::*;
        for kind in [Timeout, Connection, Cut, MaxSteps, Command, Tape, Handler] {
            assert_eq!(for_run_error(kind), FAILED, "{kind}");
        }
        assert_eq!(status_of(&Exit::new(INTERRUPTED, "x").into()), INTERRUPTED);
        assert_eq!(status_of(&anyhow::anyhow!("plain")), FAILED);
    }
}
