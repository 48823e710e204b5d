//! Gateway policy: who may talk to the agent, who may run comma commands,
//! which tools run where, and how fast the bot may speak — per channel and
//! per chat, from one TOML file.
//!
//! - [`config`]: the file's model ([`GatewayConfig`]), loading and validation
//!   with `FILE:LINE:COL` errors.
//! - [`effective`]: one chat's resolved policy ([`EffectivePolicy`]) and the
//!   tool rules (`tool_verdict`, `offered_tools`), each value remembering
//!   which layer set it.
//! - [`enforce`](mod@enforce): [`SessionPolicy`] in a run's turn state and the one
//!   `BeforeToolCall` handler that enforces it ([`enforce()`]).
//! - [`command`]: the `,policy show` / `,policy explain` command ([`policy_tool`]).
//! - [`live`]: hot reload ([`LiveConfig`]).
//! - [`provenance`]: where text came from, and the rule that keeps exec,
//!   write and network tools away from untrusted text.
//! - [`rate`], [`pattern`]: `20/min` rates and `fs.*` tool globs.
//!
//! The example file `config/bub.example.toml` documents every key.

pub mod command;
pub mod config;
pub mod effective;
pub mod enforce;
mod error;
pub mod live;
pub mod pattern;
pub mod provenance;
pub mod rate;

pub use command::policy_tool;
pub use config::{
    BotChannel, BusyRule, ChannelConfig, ChannelKind, ChatConfig, DmPolicy, EnvironmentKind, GatewayConfig,
    GroupPolicy, HttpConfig, Operator, PolicyLayer, Seconds, Secret, SessionScope, UserPattern, WebhookChannel,
};
pub use effective::{
    Admission, Denial, EffectivePolicy, Layer, PairingSubject, READ_ONLY_COMMANDS, SHARED_CHAT_GUARDED, Sourced,
    Verdict,
};
pub use enforce::{SessionPolicy, enforce};
pub use error::ConfigError;
pub use live::{LiveConfig, ReloadOutcome, require_channels};
pub use pattern::ToolPattern;
pub use provenance::Provenance;
pub use rate::{Rate, RateError};
