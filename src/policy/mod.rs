//! Gateway policy: who may talk to the agent, who may run comma commands,
//! which tools run where, and how fast the bot may speak — per channel and
//! per chat, from one TOML file.
//!
//! - [`effective`]: one chat's resolved policy ([`EffectivePolicy`]) and the
//!   tool rules (`tool_verdict`, `offered_tools`), each value remembering
//!   which layer set it.
//! - [`enforce`](mod@enforce): [`SessionPolicy`] in a run's turn state and the one
//!   `BeforeToolCall` handler that enforces it ([`enforce()`]).
//! - [`diff`]: who gains or loses what when a new config replaces the
//!   running one ([`access_diff`]), for the admin console's preview.
//! - [`command`]: the `,policy show` / `,policy explain` command ([`policy_tool`]).
//! - [`menu`]: the commands a user may run in a chat, as a platform's
//!   command menu and `/help` list them (`EffectivePolicy::command_menu`).
//! - [`privacy`]: the warning when a platform hides the unaddressed group
//!   messages a group policy keeps as context (Telegram's privacy mode).
//! - [`provenance`]: the rule that keeps exec, write and network tools away
//!   from untrusted text (where text came from is the tape's
//!   [`Provenance`](crate::tape::Provenance)).
//! - [`carried`]: text a tool's result brings back (a tape search's hits, a
//!   sender's saved file) keeps its origin.
//! - [`warnings`]: where a valid file opens access wider than the closed
//!   defaults (`GatewayConfig::warnings`).
//!
//! The file itself — its keys, parsing, errors and reload — is
//! [`crate::config`]; policy reads it and decides.

pub mod carried;
pub mod command;
pub mod diff;
pub mod effective;
pub mod enforce;
pub mod menu;
pub mod privacy;
pub mod provenance;
pub mod warnings;

pub use command::{Explanation, policy_tool};
pub use diff::{AccessChange, AccessDiff, Subject, access_diff};
pub use effective::{
    Admission, Denial, EffectivePolicy, PairingSubject, READ_ONLY_COMMANDS, SHARED_CHAT_GUARDED, Sourced, Verdict,
};
pub use enforce::{SessionPolicy, enforce};
