//! bub: a chat-bot gateway for LLM agents, and the agent runtime it runs.
//!
//! # Layout
//! The modules from the bottom up (the order of [Dependencies](#dependencies)):
//! - [`telemetry`]: the process's observability — its log lines
//!   (`BUB_LOG`, `BUB_LOG_FORMAT`: text, or one JSON object a line with the
//!   spans' `channel`, `chat`, `session`, … flattened) and its OpenTelemetry
//!   traces (`telemetry::traces`: the layer the binary installs when an OTLP
//!   endpoint is configured, span helpers that do nothing when none is, the
//!   trace id for log lines). Below everything, so any module records span
//!   attributes with it; it reads no environment.
//! - [`message`]: what a model is sent — request messages (`RequestMessage`,
//!   which shares a tape entry's payload instead of copying it), the note an
//!   anchor becomes, and token counting (`message::tokens`). Below both the
//!   tape, which builds them, and the model clients, which send them.
//! - [`tape`]: append-only session history — entries, the `TapeStore` trait
//!   (and an in-memory store), anchors, forks, context building, spill of
//!   oversized tool results, and **provenance** (where an entry's text came
//!   from, `tape::provenance`). Knows no SQL.
//! - [`db`]: the database layer — SQLite (one file, a writing thread with
//!   group commit, reader threads, embedded migrations) and PostgreSQL
//!   (shared by several gateway replicas: also their leases and claims,
//!   `ReplicaTables`), the SQL of the tape store and the gateway's tables
//!   (`GatewayTables`: inbox, outbox, pairing rows), `HomeStore` over either.
//! - [`model`]: streaming model clients (`ModelClient`; OpenAI-compatible and
//!   Anthropic), retries, context windows, typed model errors.
//! - [`environment`]: per-session environments where processes and files live
//!   (they spawn code mode's child; they know nothing of code mode).
//! - [`command`]: comma-command parsing and argument binding.
//! - [`home`]: the layout of a home directory (database, config, archives, …).
//! - [`tools`]: `Tool`, `ToolRegistry`, a narrow `ToolContext` (with the
//!   `ToolHost` handle, never the agent), `TurnState`, the `EventBus`, the
//!   session-switch events, and the builtin tools (`tools/builtin/*`, one file
//!   per family).
//! - [`config`]: the gateway config file — parsing with `FILE:LINE:COL`
//!   errors, `[http]`, one settings type per channel kind
//!   (`config/channel/<kind>.rs`), the `[policy]` tables as written, hot
//!   reload, and edits of the running file (`config/edit.rs`: versioned,
//!   checked as a reload is, written atomically). It needs only `tools::capability` and `model::ModelSpec`, to
//!   parse tool patterns and model names at load.
//! - [`codemode`]: everything of code mode — the `,code_mode` switch and
//!   `run_code` tools, stubs, the child and its protocol, the seam the agent
//!   loop calls to swap the offered tools.
//! - [`agent`]: the agent loop — `Agent`, runs and their event streams, the
//!   loop's events, system prompt sections, steering, **compaction**
//!   (`agent/compaction/`: a long session summarised before it fills the
//!   model's window), the **tool-schema budget** (`agent/tool_budget.rs`:
//!   past it, tools of MCP servers are offered with one line each and
//!   `tools.describe`); the agent's own tool `subagent`, and the `ToolHost` it
//!   hands tools.
//! - [`skills`]: `SKILL.md` discovery and the `skill` tool.
//! - [`policy`]: what policy decides from the file — per-chat effective
//!   policy, tool enforcement, `,policy explain`, the provenance rule (no
//!   exec, write or network tool while untrusted text is in the context),
//!   warnings.
//! - [`mcp`]: bub as a client of MCP servers — one supervised connection
//!   per `[mcp.NAME]` server (stdio or Streamable HTTP; start and call
//!   timeouts, restarts with backoff, state and metrics), its tools as
//!   `mcp.NAME.TOOL` bub tools, results mapped from MCP content, and the
//!   gateway's set kept in step with the config (`McpServers::apply`);
//!   `,mcp`; and bub as an MCP server (`mcp::serve`, `bub mcp serve`: its
//!   tapes for other agents to list, search and read; read-only).
//! - [`http`]: the HTTP server — `/healthz`, `/readyz`, `/metrics`, the
//!   routes of the parts that serve HTTP (the channels' webhooks) merged as
//!   given, connection limits and graceful shutdown; knows nothing of the gateway.
//! - [`gateway`]: the inbound pipeline — durable inbox, admission,
//!   **pairing** (`gateway/pairing/`: codes for senders and groups the policy
//!   leaves to it), session workers (debounce, busy rule), turns; and
//!   **delivery**: the outbox (`gateway/store.rs`), a reply or file sent
//!   and what became of it recorded (`gateway/outbound/delivery.rs`), and
//!   the outbound scheduler (`gateway/outbound/`: budgets, rate limits,
//!   retries, live edits), which
//!   **splits** a long reply under a platform's limit (`gateway/split.rs`);
//!   several replicas on one database (`gateway/replica/`);
//!   `Gateway::builder`, which starts and stops it in the one safe order
//!   (home lock, database, policy, config, sandboxes, channels, HTTP).
//! - [`admin`]: the admin console at `/admin` (`admin::console`, a part of
//!   the gateway's HTTP server): token login, session cookie and CSRF, the
//!   JSON API under `/admin/api` with its OpenAPI document, the pages; its
//!   data: a tape's pages, anchors, search and export (`admin::tape_view`),
//!   live samples of the `/metrics` numbers (`admin::live`).
//! - [`setup`]: the agent the `bub` binary runs, assembled from the `BUB_*`
//!   variables it is given.
//! - [`cli`]: the `bub` command line (`bub pairing`, `bub tape`, `bub db`, …),
//!   and the only reader of the process environment (`BUB_*`, `HOME`, the
//!   current directory): everything below it is given its paths and settings.
//!
//! Beside `src/`, the workspace's `adapters/` holds one crate per channel
//! kind, and their contract. Platform SDKs (teloxide, serenity) stay inside
//! them: nothing in `src/` names a platform type.
//! - `bub-channel` (`adapters/channel`): the contract — `Inbound`,
//!   `Outbound`, `ChatRef`, the `Channel` trait and its limits, the
//!   `InboundSink` the gateway implements, `Secret`, `Backoff`. It never sees
//!   the agent, the tape or the policy.
//! - `bub-webhook` (`adapters/webhook`): signed HTTP requests, replies in
//!   `sync`, `sse` or `async` (callback) mode.
//! - `bub-telegram` (`adapters/telegram`, feature `telegram`): the Bot API by
//!   long polling or webhook, Markdown rendered as Telegram HTML.
//! - `bub-discord` (`adapters/discord`, feature `discord`): Discord's
//!   gateway and REST API through serenity, shards, catch-up after a resume.
//!
//! # Where a new thing goes
//! - A **tool**: a file in `tools/builtin/` (one per family), registered in
//!   `tools::builtin` or by whoever builds the agent. It sees a
//!   `ToolContext`, never the agent; a tool that must start runs belongs to
//!   `agent/` (like `subagent`). Tools from MCP servers are built in `mcp/tools.rs`.
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
//! Each top-level module and the top-level modules it imports (`crate::…`),
//! from the bottom up: a module imports only modules listed before it, so
//! there is no cycle. `tests/layout.rs` reads this list and the code, and
//! fails on an arrow that is in one and not the other.
//! - `telemetry` → none
//! - `message` → none
//! - `tape` → `message`
//! - `db` → `tape`
//! - `model` → `message`, `telemetry`
//! - `environment` → `tape`
//! - `command` → none
//! - `home` → none
//! - `tools` → `environment`, `message`, `model`, `tape`
//! - `config` → `model`, `tools`
//! - `codemode` → `environment`, `tools`
//! - `agent` → `codemode`, `command`, `environment`, `message`, `model`, `tape`, `telemetry`, `tools`
//! - `skills` → `environment`, `tape`, `tools`
//! - `policy` → `agent`, `command`, `config`, `tape`, `tools`
//! - `mcp` → `agent`, `config`, `environment`, `tape`, `tools`
//! - `http` → `config`
//! - `gateway` → `agent`, `command`, `config`, `db`, `environment`, `home`, `http`, `mcp`, `policy`,
//!   `tape`, `telemetry`, `tools`
//! - `admin` → `agent`, `config`, `db`, `gateway`, `http`, `policy`, `tape`
//! - `setup` → `agent`, `codemode`, `command`, `config`, `db`, `environment`, `home`, `model`,
//!   `skills`, `tape`, `tools`
//! - `cli` → `admin`, `agent`, `command`, `config`, `db`, `environment`, `gateway`, `home`, `mcp`, `model`,
//!   `policy`, `setup`, `tape`, `telemetry`
//!
//! # Words
//! A **command** is a comma command (`,help`): parsed in [`command`], run by
//! the agent, recorded on the tape. What an environment starts is a
//! [`environment::Program`]; what the `bub` binary is asked to do is a
//! subcommand ([`cli::BubSubcommand`]). Two modules speak HTTP: [`http`],
//! the gateway's server, and the model clients' private `transport`.

pub mod admin;
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
pub mod mcp;
pub mod message;
pub mod model;
pub mod policy;
pub mod setup;
pub mod skills;
pub mod tape;
pub mod telemetry;
pub mod tools;
