//! The gateway: messages come in from channels, become prompts or comma
//! commands, run on their session's tape and environment under the channel's
//! policy, and the replies go back out.
//!
//! - [`outbound`]: the outbound scheduler (budgets, 429 pauses, coalesced edits).
//! - [`split`]: splitting long replies under a platform's limit.

pub mod outbound;
pub mod split;
