//! The layout of a bub home directory: which file is where under one root.
//!
//! The library only ever gets a root it was given ([`BubHome::at`]); the
//! `bub` binary picks it (`--home`, else `$BUB_HOME`, else `~/.bub`: see
//! `cli/env.rs`), so an embedding program never writes under `~/.bub`
//! unless it says so.
//!
//! ```text
//! $BUB_HOME/bub.db          tapes (SQLite, WAL)
//! $BUB_HOME/bub.toml        the gateway config (channels and policies)
//! $BUB_HOME/tapes/          JSONL archives written by `tape.reset archive=true`
//! $BUB_HOME/workspaces/     one workspace per session (when none is given)
//! $BUB_HOME/codemode/       typed Python stubs of the tools, for code mode
//! $BUB_HOME/gateway.lock    held by the running gateway (one per home)
//! ```

use std::path::{Path, PathBuf};

/// The bub home directory and the files under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BubHome {
    root: PathBuf,
}

impl BubHome {
    /// The home rooted at `root` (created when something is first written there).
    pub fn at(root: impl Into<PathBuf>) -> BubHome {
        BubHome { root: root.into() }
    }

    /// The directory everything below lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The SQLite database holding every tape.
    pub fn database(&self) -> PathBuf {
        self.root.join("bub.db")
    }

    /// The gateway config file (see `config/bub.example.toml`).
    pub fn config_file(&self) -> PathBuf {
        self.root.join("bub.toml")
    }

    /// Where tape archives go.
    pub fn archive_dir(&self) -> PathBuf {
        self.root.join("tapes")
    }

    /// Where code mode writes its typed tool stubs.
    pub fn codemode_dir(&self) -> PathBuf {
        self.root.join("codemode")
    }

    /// The webhook secret generated on the gateway's first start without a config.
    pub fn webhook_secret_file(&self) -> PathBuf {
        self.root.join("webhook.secret")
    }

    /// Locked by the running gateway, so a second one on this home refuses to start.
    pub fn gateway_lock_file(&self) -> PathBuf {
        self.root.join("gateway.lock")
    }

    /// Where sessions get their workspaces (one folder per session).
    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join("workspaces")
    }
}
