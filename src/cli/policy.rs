//! `bub policy check [FILE]`: validates a gateway config offline, exactly as
//! the gateway would load it, tool names included.

use crate::config::{GatewayConfig, require_channels};
use crate::home::BubHome;
use crate::setup::Setup;
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum PolicySubcommand {
    /// Check a gateway config file: prints `FILE: ok (N channels)`, or the
    /// first problem as `FILE:LINE:COL: message` and exits with status 1.
    /// A file without channels (an empty one) is a problem too.
    Check {
        /// The file (default: `$BUB_HOME/bub.toml`).
        file: Option<PathBuf>,
    },
}

pub(crate) async fn run_policy(home: &BubHome, command: PolicySubcommand) -> Result<()> {
    match command {
        PolicySubcommand::Check { file } => check(home, file.unwrap_or_else(|| home.config_file())).await,
    }
}

async fn check(home: &BubHome, file: PathBuf) -> Result<()> {
    let known = known_tools(home).await?;
    match GatewayConfig::load_checked(&file, &known).and_then(|config| require_channels(&config).map(|()| config)) {
        Ok(config) => {
            let warnings = config.warnings();
            for warning in &warnings {
                eprintln!("{warning}");
            }
            let count = config.channels.len();
            let opened = match warnings.len() {
                0 => String::new(),
                n => format!(
                    ", {n} warning{} above: access opened wider than the defaults",
                    if n == 1 { "" } else { "s" }
                ),
            };
            println!("{}: ok ({count} channel{}{opened})", file.display(), if count == 1 { "" } else { "s" });
            Ok(())
        }
        Err(error) => bail!("{error}"),
    }
}

/// The tools the gateway's agent has: the binary's agent, plus the gateway's
/// own commands.
async fn known_tools(home: &BubHome) -> Result<Vec<String>> {
    let setup = Setup::open(home, super::env::workspace_or_cwd(None), super::env::vars())
        .await
        .context("cannot list the agent's tools")?;
    let mut names: Vec<String> = setup.agent.tools().iter().map(|tool| tool.name().to_string()).collect();
    names.push(crate::policy::policy_tool().name().to_string());
    names.push(crate::gateway::pairing::command::NAME.to_string());
    setup.shutdown().await;
    Ok(names)
}
