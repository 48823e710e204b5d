//! bub's integration tests: one binary (`cargo test --test it`), so a change
//! links the library into one test executable rather than one per file. Each
//! module below was a test binary of its own and keeps its name:
//! `cargo test --test it gateway_webhook::` runs what `--test gateway_webhook`
//! ran. The fakes (model, Telegram, Discord), the gateway process and the
//! PostgreSQL cluster the modules share are in [`support`].
//!
//! The modules run in one process: what one sets for the whole process
//! (a signal, an environment variable, the current directory) reaches the
//! others. None sets a variable or changes directory; `policy_reload` sends
//! SIGHUP to the process, which only a `LiveConfig` watching its file hears
//! (`config_edit`'s watchers hear it too, and count on no outcome);
//! `gateway_spans` installs the process's tracing subscriber (the only one
//! that may), keeping only the lines of its own chats.
//!
//! A module that drives a chat platform's adapter is built only with that
//! platform's feature (`--no-default-features` builds the webhook-only bub,
//! which refuses a Telegram or Discord channel).

// Test code: a step that fails is a failed test, and its message says which.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code: a failed step is a failed test")]

mod support;

// Tapes and their stores: appends, forks, spills, the `bub tape` commands,
// and one conformance suite run on every store.
mod tape_bad_input;
mod tape_cli;
mod tape_conformance;
mod tape_context_cache;
mod tape_fork;
mod tape_handle;
mod tape_ids_property;
mod tape_spill;

// The databases: the gateway's tables on SQLite and PostgreSQL, SQLite
// files from older versions.
mod db_gateway;
mod db_sqlite;

// The agent: its loop, events, comma commands, compaction, the model
// clients over HTTP and the agent `Setup` builds.
mod admin_api_schema;
mod admin_browser;
mod admin_console;
mod agent_commands;
mod agent_compaction;
mod agent_events;
mod agent_http;
mod agent_loop;
mod agent_tool_budget;
mod agent_tool_sources;
mod model_clients;
mod setup_agent;

// MCP: servers' tools as bub tools, each server supervised on its own.
mod mcp_client;

// Code mode: the `run_code` tool in a turn, and its Python runner.
mod code_mode;
mod codemode_runner;

// Tools bub did not write (an MCP server's names and schemas) in code mode,
// comma commands and model calls.
mod mcp_foreign_tools;

// MCP servers of scope session: one instance per session environment.
mod mcp_session;

// Tools and where they run: the builtin tools, session environments and the
// sandbox.
mod builtin_tools;
mod environment;
mod sandbox;

// The gateway config: errors, policy enforcement, hot reload, edits of the
// running file.
mod config_edit;
mod policy_config;
mod policy_reload;

// The gateway (the real binary) over the webhook channel: turns, policy,
// compaction, crashes, MCP servers' tools; and the outbound scheduler every channel sends through.
mod gateway_compaction;
mod gateway_crash;
mod gateway_mcp;
mod gateway_policy;
mod gateway_spans;
mod gateway_traces;
mod gateway_turns;
mod gateway_webhook;
mod outbound_scheduler;

// The deployment: the binary run as deploy/Dockerfile's image runs it.
mod deploy_contract;

// Several gateway replicas on one PostgreSQL database.
mod gateway_replicas;
mod gateway_replicas_crash;
#[cfg(feature = "discord")]
mod gateway_replicas_discord;
#[cfg(feature = "telegram")]
mod gateway_replicas_telegram;

// The chat platforms: the real gateway and adapters against the fake
// Telegram Bot API and the fake Discord (REST and gateway).
#[cfg(feature = "discord")]
mod discord_gateway_protocol;
#[cfg(all(feature = "telegram", feature = "discord"))]
mod gateway_attachments;
#[cfg(feature = "discord")]
mod gateway_discord;
#[cfg(feature = "discord")]
mod gateway_discord_commands;
#[cfg(all(feature = "telegram", feature = "discord"))]
mod gateway_edits;
#[cfg(all(feature = "telegram", feature = "discord"))]
mod gateway_files;
#[cfg(all(feature = "telegram", feature = "discord"))]
mod gateway_live;
#[cfg(feature = "telegram")]
mod gateway_telegram;
#[cfg(feature = "telegram")]
mod gateway_telegram_commands;

// Operating the gateway: what its logs hold (never a secret), on every channel.
#[cfg(all(feature = "telegram", feature = "discord"))]
mod log_secrets;

// The command line: `bub run`, `bub chat`, `bub tools` and sessions per
// workspace, `bub doctor`, on the real binary.
mod cli_agent;
mod cli_doctor;
mod cli_mcp;
mod cli_runtime;
mod cli_workspace;

// `bub mcp serve`, driven by the official MCP Python SDK's client.
mod mcp_serve;

// The code's map: src/lib.rs's list of imports is the code's.
mod layout;

// The red-team suite: every route by which a user without rights once
// reached a shell, a tool or another chat.
mod red_team;

// The adapters' own tests, where the adapter crate's public API is enough:
// the webhook channel's ingress and delivery against a fake gateway inbox.
// (The Discord adapter's `fake_handshake` stays in `adapters/discord/tests`:
// it drives serenity itself, which only that crate depends on.)
mod webhook_adapter {
    mod ingress;
    mod send;
    mod support;
}
