//! The process environment, read in one place: the library below `cli/`
//! never reads `BUB_*` variables, `HOME` or the current directory, so a
//! program embedding bub decides every path and setting itself. What is read
//! here is handed down as values: the variables to [`Setup`](crate::setup::Setup),
//! paths and settings to the [`Gateway`](crate::gateway::Gateway) builder.

use crate::db::Durability;
use crate::home::BubHome;
use crate::telemetry::logs::{LogSettings, UnknownLogFormat};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// `--home`, else `$BUB_HOME` if set and non-empty, else `~/.bub` (or
/// `./.bub` without a home directory).
pub(crate) fn home(given: Option<PathBuf>) -> BubHome {
    if let Some(root) = given {
        return BubHome::at(root);
    }
    match std::env::var_os("BUB_HOME").filter(|value| !value.is_empty()) {
        Some(root) => BubHome::at(root),
        None => BubHome::at(std::env::home_dir().unwrap_or_else(|| PathBuf::from(".")).join(".bub")),
    }
}

/// Every variable, for [`Setup::build`](crate::setup::Setup::build) (which
/// reads the `BUB_*` ones it knows).
pub(crate) fn vars() -> Vec<(String, String)> {
    std::env::vars().collect()
}

/// A variable as MCP servers get it (see `GatewayBuilder::mcp_variables`):
/// as it is, untrimmed.
pub(crate) fn mcp_variable(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A variable's value, trimmed; `None` when unset or blank.
pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|value| value.trim().to_string()).filter(|value| !value.is_empty())
}

/// `BUB_LOG` and `BUB_LOG_FORMAT` (see [`crate::telemetry::logs`]); a
/// variable that is not UTF-8 is read lossily (a format that is not text or
/// json is then refused, a filter falls back to failures only).
pub(crate) fn log_settings() -> Result<LogSettings, UnknownLogFormat> {
    let lossy = |name: &str| std::env::var_os(name).map(|value| value.to_string_lossy().into_owned());
    LogSettings::from_values(lossy("BUB_LOG").as_deref(), lossy("BUB_LOG_FORMAT").as_deref())
}

/// The workspace a command runs in: the given directory or the current one.
pub(crate) fn workspace_or_cwd(workspace: Option<&Path>) -> PathBuf {
    match workspace {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    }
}

/// [`workspace_or_cwd`], absolute and with symlinks resolved: one directory
/// has one path, so it names one tape (see [`crate::tape::TapeName::scoped`]).
/// A directory that does not exist, or is not a directory, is an error.
pub(crate) fn canonical_workspace(workspace: Option<&Path>) -> std::io::Result<PathBuf> {
    let dir = match workspace {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir()?,
    };
    let canonical = std::fs::canonicalize(&dir)?;
    if !canonical.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"));
    }
    Ok(canonical)
}

/// `BUB_SQLITE_SYNC`: `full` (default: every commit reaches the disk before a
/// message is acknowledged) or `normal` (commits survive a crash of the
/// process, not of the machine; faster on slow disks).
pub(crate) fn durability() -> Result<Durability> {
    match std::env::var("BUB_SQLITE_SYNC").ok().as_deref().map(str::trim) {
        None | Some("" | "full") => Ok(Durability::Full),
        Some("normal") => Ok(Durability::Normal),
        Some(other) => anyhow::bail!("BUB_SQLITE_SYNC={other:?}: must be full or normal"),
    }
}

/// `BUB_ADMIN_TOKEN`: admin tokens for the console besides `[admin]
/// token_file`, one per line or separated by `,`, each `NAME TOKEN` or a
/// bare TOKEN (named `admin`). A token too short is an error that names the
/// variable, never its value.
pub(crate) fn admin_tokens() -> anyhow::Result<Vec<crate::config::AdminToken>> {
    let Some(value) = var("BUB_ADMIN_TOKEN") else { return Ok(Vec::new()) };
    let lines = value.split(['\n', ',']).map(str::trim).filter(|line| !line.is_empty());
    lines
        .enumerate()
        .map(|(n, line)| {
            crate::config::AdminToken::parse_line(line)
                .map_err(|why| anyhow::anyhow!("BUB_ADMIN_TOKEN, token {}: {why}", n + 1))
        })
        .collect()
}
