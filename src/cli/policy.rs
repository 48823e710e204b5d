//! `bub policy check [FILE]`: validates a gateway config offline, exactly as
//! the gateway would load it, tool names included.

use crate::config::{ConfigError, GatewayConfig, require_channels};
use crate::home::BubHome;
use anyhow::{Result, bail};
use clap::Subcommand;
use std::path::{Path, PathBuf};

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
        PolicySubcommand::Check { file } => check(file.unwrap_or_else(|| home.config_file())).await,
    }
}

async fn check(file: PathBuf) -> Result<()> {
    match load(&file) {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                eprintln!("{warning}");
            }
            println!("{}: ok ({})", file.display(), loaded.summary());
            Ok(())
        }
        Err(error) => bail!("{error}"),
    }
}

/// A config file as the gateway would load it, and what it opens wider
/// than the defaults.
pub(crate) struct Loaded {
    pub config: GatewayConfig,
    /// `FILE:LINE:COL: warning: …`, one per finding.
    pub warnings: Vec<String>,
}

impl Loaded {
    /// "2 channels", ", 1 warning above: …" after it when there are warnings.
    pub fn summary(&self) -> String {
        let count = self.config.channels.len();
        let opened = match self.warnings.len() {
            0 => String::new(),
            n => format!(", {n} warning{} above: access opened wider than the defaults", if n == 1 { "" } else { "s" }),
        };
        format!("{count} channel{}{opened}", if count == 1 { "" } else { "s" })
    }
}

/// Loads and checks `file` exactly as the gateway does, tool names included,
/// without opening the store (the tools do not depend on it): `bub policy
/// check` and `bub doctor` run this one check. A file without channels is
/// an error too.
pub(crate) fn load(file: &Path) -> Result<Loaded, ConfigError> {
    let config = GatewayConfig::load_checked(file, &known_tools())?;
    require_channels(&config)?;
    let warnings = config.warnings();
    Ok(Loaded { config, warnings })
}

/// The tools the gateway's agent has: the binary's agent, plus the gateway's
/// own commands.
fn known_tools() -> Vec<String> {
    let mut names = crate::setup::tool_names();
    names.push(crate::policy::policy_tool().name().to_string());
    names.push(crate::gateway::pairing::command::NAME.to_string());
    names
}
