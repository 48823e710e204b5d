//! bub: a chat-bot gateway for LLM agents, and the agent runtime it runs.
//!
//! # Layout
//! - [`tape`]: append-only session history — entries, the `TapeStore` trait
//!   (and an in-memory store), anchors, forks, context building, spill of
//!   oversized tool results. Knows no SQL.
//! - [`db`]: the database layer — SQLite (one file, a writing thread with
//!   group commit, reader threads, embedded migrations) and PostgreSQL
//!   (shared by several gateway replicas: also their leases and claims,
//!   `ReplicaTables`), the SQL of the tape store and the gateway's tables
//!   (`GatewayTables`), `HomeStore` over either. Imports `tape`, nothing
//!   above it.
//! - [`agent`]: the agent loop — `Agent`, runs and their event streams, the
//!   loop's events, system prompt sections, steering; the agent's own tool
//!   `subagent`, and the `ToolHost` it hands tools.
//! - [`model`]: streaming model clients (`ModelClient`), typed model errors.
//! - [`tools`]: `Tool`, `ToolRegistry`, a narrow `ToolContext` (with the
//!   `ToolHost` handle, never the agent), `TurnState`, the `EventBus`, the
//!   session-switch events, and the builtin tools (`tools/builtin/*`, one file
//!   per family). Imports nothing from `agent` or `codemode`.
//! - [`codemode`]: everything of code mode — the `,code_mode` switch and
//!   `run_code` tools, stubs, the child and its protocol, the seam the agent
//!   loop calls to swap the offered tools.
//! - [`command`]: comma-command parsing and argument binding.
//! - [`environment`]: per-session environments where processes and files live
//!   (they spawn code mode's child; they know nothing of code mode).
//! - [`config`]: the gateway config file — parsing with `FILE:LINE:COL`
//!   errors, `[http]`, one settings type per channel kind
//!   (`config/channel/<kind>.rs`), the `[policy]` tables as written, hot reload.
//! - [`policy`]: what policy decides from the file — per-chat effective
//!   policy, tool enforcement, `,policy explain`, provenance, warnings.
//! - [`gateway`]: the inbound pipeline — durable inbox, admission, session
//!   workers (debounce, busy rule), turns, outbox and the outbound scheduler;
//!   `Gateway::builder`, which starts and stops it in the one safe order
//!   (home lock, database, policy, config, sandboxes, channels, HTTP).
//! - [`http`]: the HTTP server — `/healthz`, `/readyz`, `/metrics`, channel
//!   routes, connection limits and graceful shutdown; knows nothing of the gateway.
//! - [`skills`]: `SKILL.md` discovery and the `skill` tool.
//! - [`setup`]: the agent the `bub` binary runs, assembled from the `BUB_*`
//!   variables it is given.
//! - [`home`]: the layout of a home directory (database, config, archives, …).
//! - [`cli`]: the `bub` command line, and the only reader of the process
//!   environment (`BUB_*`, `HOME`, the current directory): everything below
//!   it is given its paths and settings.
//!
//! # Where a new thing goes
//! - A **tool**: a file in `tools/builtin/` (one per family), registered in
//!   `tools::builtin` or by whoever builds the agent. It sees a
//!   `ToolContext`, never the agent; a tool that must start runs belongs to
//!   `agent/` (like `subagent`). MCP tools go beside `tools/builtin/`.
//! - A **channel kind**: its settings in `config/channel/<kind>.rs` (listed
//!   in `config/channel/mod.rs`), its adapter crate in `adapters/<kind>`, and
//!   one line of registration in `gateway/channels.rs` behind a Cargo feature.
//! - A **store backend**: `db/<backend>/`, implementing `tape::TapeStore` and
//!   `db::GatewayTables`, and chosen in `db::open` (every caller names the
//!   store `db::HomeStore`); the tape and gateway logic do not change.
//! - A **config key**: the file of its table in `config/` (`layer.rs` for
//!   `[policy]`, `http.rs`, `channel/<kind>.rs`), documented in
//!   `config/bub.example.toml`; what it decides goes in `policy/` or the
//!   module that uses it.
//! - A **process setting** (`BUB_*`): read in `cli/env.rs` and passed down
//!   as a value; nothing below `cli` reads the environment.
//!
//! # Dependencies
//! No two top-level modules import each other. From the bottom: `tape`;
//! `db` → `tape`; `model` → `tape`; `environment` → `tape`; `tools` →
//! `environment`, `model`, `tape` (and `config` needs only
//! `tools::capability` and `model::ModelSpec`, to parse tool patterns and
//! model names at load); `codemode` → `tools`, `environment`; `agent` →
//! the runtime below it; `skills`; `policy` → `agent`, `config`;
//! `http` → `config`; `gateway` → all of the runtime, `policy`, `http`;
//! `setup` and `cli` on top.
//!
//! # Words
//! A **command** is a comma command (`,help`): parsed in [`command`], run by
//! the agent, recorded on the tape. What an environment starts is a
//! [`environment::Program`]; what the `bub` binary is asked to do is a
//! subcommand ([`cli::BubSubcommand`]). Two modules speak HTTP: [`http`],
//! the gateway's server, and the model clients' private `transport`.

pub mod agent;
pub mod cli;
pub mod codemode;
pub mod command;
pub mod config;
pub mod db;
pub mod environment;
pub mod gateway;
pub mod home;
pub mod http;
pub mod message;
pub mod model;
pub mod policy;
pub mod setup;
pub mod skills;
pub mod tape;
pub mod tools;
