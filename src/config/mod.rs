//! The gateway config file: its model, its parsing and checks, its errors,
//! and its reload. `config/` is the file; `policy/` is what the gateway
//! decides from it.
//!
//! - [`file`](mod@file): the whole file ([`GatewayConfig`]): loading, parsing, the
//!   checks across tables, and where each policy layer sits in it.
//! - [`agent`]: `[agent]` ([`AgentConfig`]): the context window and compaction.
//! - [`http`](mod@http): `[http]` ([`HttpConfig`]) and the server's [`ServeLimits`].
//! - [`sandbox`](mod@sandbox): `[sandbox]` ([`SandboxConfig`]): the sandbox's limits.
//! - [`store`](mod@store): `[store]` ([`StoreConfig`]): SQLite or PostgreSQL.
//! - [`telemetry`](mod@telemetry): `[telemetry]` ([`TelemetryConfig`]): OpenTelemetry traces.
//! - [`admin`]: `[admin]` ([`AdminConfig`]): the admin console's tokens and path.
//! - [`mcp`](mod@mcp): `[mcp.NAME]` ([`McpServerConfig`]): the MCP servers whose tools the agent gets.
//! - [`channel`]: `[channels.NAME]` — one settings type per channel kind
//!   ([`WebhookConfig`], [`TelegramConfig`], [`DiscordConfig`]), each kind in
//!   its own file with its keys and checks.
//! - [`layer`]: the `[policy]` tables as written ([`PolicyLayer`] and its
//!   enums), and [`Layer`], the place of a layer in the file.
//! - [`value`], [`rate`], [`pattern`]: values written in the file —
//!   [`Seconds`], [`UserPattern`], [`Operator`], [`Rate`] (`20/min`),
//!   [`ToolPattern`] (`fs.*`, `cap:write`).
//! - [`error`](mod@error): [`ConfigError`], said as `FILE:LINE:COL: message`.
//! - [`live`]: hot reload ([`LiveConfig`]).
//! - [`edit`](mod@edit): the file edited while it runs (the admin console's
//!   policy editor): its version ([`ConfigVersion`]), what is on disk
//!   ([`OnDisk`]), a checked, atomic replacement ([`LiveConfig::replace`]),
//!   and [`unified_diff`].
//!
//! # Why the `[policy]` layer types are here
//! A policy layer is a table of the file: its keys, their types and the
//! checks at load (rates, globs, user names naming a configured channel) are
//! the file's, and every error about them must point into the file. So
//! `config/` owns the shape and `policy/` only reads it: `policy/` merges the
//! layers into one chat's `EffectivePolicy`, enforces it, explains it and
//! warns about wide-open files. Nothing in `config/` decides who may talk or
//! which tool runs.
//!
//! # What `config/` imports
//! Only the adapter contract ([`bub_channel`]: [`Secret`], the shared URL
//! rule), the webhook adapter's rule on its secrets, and two leaf values the
//! file's checks need: [`crate::model::ModelSpec`] (a layer's `model` must
//! parse) and [`crate::tools::capability`] (the `cap:NAME` of a tool
//! pattern; a leaf file of `tools/` that imports nothing of bub). Never
//! `http`, `gateway`, `agent` or `policy`; `http` and `policy` import
//! `config`. Tool names come from the binary as a list
//! ([`GatewayConfig::validate_tools`]).
//!
//! The example file `config/bub.example.toml` documents every key.

pub mod admin;
pub mod agent;
pub mod channel;
pub mod edit;
pub mod error;
pub mod file;
pub mod http;
pub mod layer;
pub mod live;
pub mod mcp;
pub mod pattern;
pub mod rate;
pub mod sandbox;
pub mod store;
pub mod telemetry;
pub mod value;

pub use admin::{AdminConfig, AdminToken};
pub use agent::AgentConfig;
pub use bub_channel::Secret;
pub use channel::{ChannelConfig, ChannelKind, DiscordConfig, TelegramConfig, WebhookConfig};
pub use edit::{ConfigProblem, ConfigText, ConfigVersion, EditError, OnDisk, unified_diff};
pub use error::ConfigError;
pub use file::{ChatConfig, GatewayConfig};
pub use http::{HttpConfig, ServeLimits};
pub use layer::{
    AddressingLayer, BusyRule, DebounceLayer, DmPolicy, EditRule, EnvironmentKind, GroupPolicy, Layer, PolicyLayer,
    RateLayer, SessionScope,
};
pub use live::{LiveConfig, ReloadOutcome, require_channels};
pub use mcp::{McpScope, McpServerConfig, McpTransport, SecretValue};
pub use pattern::ToolPattern;
pub use rate::{Rate, RateError};
pub use sandbox::SandboxConfig;
pub use store::StoreConfig;
pub use telemetry::TelemetryConfig;
pub use value::{Operator, Seconds, UserPattern};
