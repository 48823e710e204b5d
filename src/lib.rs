//! bub: a chat-bot gateway for LLM agents, and the agent runtime it runs.
//!
//! # Layout
//! - [`tape`]: append-only session history — entries, stores (SQLite, memory),
//!   anchors, forks, context building, spill of oversized tool results.
//! - [`agent`]: the agent loop — `Agent`, runs and their event streams, the
//!   typed event bus, system prompt sections, steering.
//! - [`model`]: streaming model clients (`ModelClient`), typed model errors.
//! - [`tools`]: `Tool`, `ToolRegistry`, and the builtin tools.
//! - [`codemode`]: code mode — model-written Python whose tool calls run on the host.
//! - [`command`]: comma-command parsing and argument binding.
//! - [`environment`]: per-session environments where processes and files live.
//! - [`policy`]: gateway policy — the TOML config, per-chat effective policy,
//!   tool enforcement, `,policy explain`, hot reload.
//! - [`gateway`]: the inbound pipeline — durable inbox, admission, session
//!   workers (debounce, busy rule), turns, outbox and the outbound scheduler.
//! - [`http`]: the HTTP server — `/healthz`, `/readyz`, `/metrics`, channel routes.
//! - [`skills`]: `SKILL.md` discovery and the `skill` tool.
//! - [`setup`]: the agent the `bub` binary runs, assembled from `BUB_*` variables.
//! - [`home`]: where bub keeps its files (`$BUB_HOME`).
//! - [`cli`]: the `bub` command line.

pub mod agent;
pub mod cli;
pub mod codemode;
pub mod command;
pub mod environment;
pub mod gateway;
pub mod home;
pub mod http;
pub mod model;
pub mod policy;
pub mod setup;
pub mod skills;
pub mod tape;
pub mod tools;
