//! The `bub` command line.
//!
//! - `bub run MESSAGE`: one turn, the reply streamed to stdout (`agent`).
//! - `bub chat`: an interactive session (`agent`).
//! - `bub tools`: the tools the agent has (`agent`).
//! - `bub tape …`: inspect tapes (`tape`).
//! - `bub mcp serve`: the tapes, read-only, for other agents over MCP (`mcp`).
//! - `bub gateway`: run the gateway (`gateway`).
//! - `bub policy check [FILE]`: validate a gateway config (`policy`).
//! - `bub pairing list|approve|revoke`: who the chat bots answer beyond the config (`pairing`).
//! - `bub db migrate`: create or upgrade the store's tables (`db`).
//! - `bub doctor`: check a setup (config, database, channels' credentials,
//!   model, sandbox, data directory, clock) and say what to fix (`doctor`).

mod agent;
mod db;
mod doctor;
mod env;
pub mod exit;
mod gateway;
mod mcp;
mod pairing;
mod policy;
mod tape;
mod traces;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

pub use exit::Exit;
pub use tape::summarize;
pub use traces::trace_settings;

#[derive(Debug, Parser)]
#[command(name = "bub", version, about = "A chat-bot gateway for LLM agents")]
pub struct Cli {
    /// Where bub keeps its database and archives.
    #[arg(long, global = true, env = "BUB_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub subcommand: BubSubcommand,
}

#[derive(Debug, Subcommand)]
pub enum BubSubcommand {
    /// Run the gateway: channels, HTTP server (/healthz, /readyz, /metrics, webhooks).
    Gateway {
        /// The config file (default: $BUB_HOME/bub.toml if it exists, else one webhook channel).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Listen here instead of the config's `[http] listen` (port 0 picks a free port).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// Send one message to the agent and stream its reply to stdout.
    Run {
        /// The message (a comma command such as `,help` works too).
        message: String,
        #[command(flatten)]
        session: agent::SessionArgs,
    },
    /// Talk to the agent interactively (Ctrl-C cancels a turn, Ctrl-D or `,quit` leaves).
    Chat {
        #[command(flatten)]
        session: agent::SessionArgs,
    },
    /// List the agent's tools: model names and flags.
    Tools {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// The config whose MCP servers' tools are listed too (default:
        /// $BUB_HOME/bub.toml when it exists).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Inspect the tapes (per-session histories) in the database.
    #[command(subcommand)]
    Tape(tape::TapeSubcommand),
    /// The Model Context Protocol: `bub mcp serve` gives other agents the tapes, read-only.
    #[command(subcommand)]
    Mcp(mcp::McpSubcommand),
    /// Gateway policy: check a config file.
    #[command(subcommand)]
    Policy(policy::PolicySubcommand),
    /// Pairing: approve, list or revoke the users and groups a chat bot answers beyond its config.
    #[command(subcommand)]
    Pairing(pairing::PairingSubcommand),
    /// The store (SQLite in BUB_HOME, or PostgreSQL from `[store] url` / BUB_DATABASE_URL).
    #[command(subcommand)]
    Db(db::DbSubcommand),
    /// Check a setup as the gateway would use it and say what to fix; exits 1 when a check fails.
    Doctor {
        /// The config file (default: $BUB_HOME/bub.toml if it exists, else the built-in default).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// One JSON array of {check, status, detail, fix} on stdout, for scripts.
        #[arg(long)]
        json: bool,
    },
}

/// How the process logs, from `BUB_LOG` and `BUB_LOG_FORMAT`: read before
/// the command line is parsed, so that everything after is logged as asked.
pub fn log_settings() -> Result<crate::telemetry::logs::LogSettings, crate::telemetry::logs::UnknownLogFormat> {
    env::log_settings()
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<()> {
    let home = env::home(cli.home);
    match cli.subcommand {
        BubSubcommand::Run { message, session } => agent::run_once(&home, &message, session).await,
        BubSubcommand::Chat { session } => agent::chat(&home, session).await,
        BubSubcommand::Gateway { config, listen } => gateway::run_gateway(&home, config, listen).await,
        BubSubcommand::Tools { json, config } => agent::list_tools(&home, json, config).await,
        BubSubcommand::Tape(command) => tape::run_tape(&home, command).await,
        BubSubcommand::Mcp(command) => mcp::run_mcp(&home, command).await,
        BubSubcommand::Policy(command) => policy::run_policy(&home, command).await,
        BubSubcommand::Pairing(command) => pairing::run_pairing(&home, command).await,
        BubSubcommand::Db(command) => db::run_db(&home, command).await,
        BubSubcommand::Doctor { config, json } => doctor::run_doctor(&home, config, json).await,
    }
}
