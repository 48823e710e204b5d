//! Session environments as each chat's policy says: in the sandbox
//! (`environment = "sandbox"`, the default on chat platforms) or on the host
//! (`"local"`, confined to the workspace with `confine_fs`).
//!
//! The gateway notes a session's choice before each turn; the environment
//! is created with it on the session's first turn and kept until it is
//! closed for idleness. A turn whose policy asks for another environment
//! than the open one closes it first (what it ran is stopped), so a reload
//! that moves a chat into the sandbox holds from its next turn.
//!
//! Fail closed: the sandboxes a config needs are built (and tried) at start
//! ([`PolicyConfinement::prepare`]); a gateway whose channels need one it
//! cannot build does not start. A session whose policy asks for a sandbox
//! that was not built (a reload switched it on) gets an error, never the
//! host. A session nobody noted (a subagent's tape) gets the strictest
//! environment there is: a sandbox without network when one was built, else
//! the host confined to the workspace.

use crate::config::{EnvironmentKind, GatewayConfig, SandboxConfig};
use crate::environment::sandbox::{SandboxError, SandboxLimits, SandboxProvider, SandboxSettings};
use crate::environment::{Environment, EnvironmentError, EnvironmentProvider, LocalEnvironment};
use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where one session's shell and code run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvironmentChoice {
    /// In a sandbox (else on the host).
    pub sandbox: bool,
    /// The sandbox may reach the network.
    pub network: bool,
    /// On the host: file tools and `cwd` stay inside the workspace.
    pub confined: bool,
}

impl EnvironmentChoice {
    /// What `policy` asks for.
    pub fn of(policy: &crate::policy::EffectivePolicy) -> EnvironmentChoice {
        EnvironmentChoice {
            sandbox: policy.environment.value == EnvironmentKind::Sandbox,
            network: policy.sandbox_network.value,
            confined: policy.confine_fs.value,
        }
    }
}

/// The sandboxes `config`'s policies ask for, as (channel, network), channel
/// defaults and chat layers alike.
pub fn sandbox_needs(config: &GatewayConfig) -> Vec<(String, bool)> {
    let mut needs = Vec::new();
    for (name, channel) in &config.channels {
        let chats = std::iter::once(String::new()).chain(channel.chats.keys().cloned());
        for chat in chats {
            let policy = config.effective(name, &chat);
            if policy.environment.value == EnvironmentKind::Sandbox {
                let need = (name.clone(), policy.sandbox_network.value);
                if !needs.contains(&need) {
                    needs.push(need);
                }
            }
        }
    }
    needs
}

/// What the sandbox hides: the home (`home_root`) and the folders of the
/// config at `config_path`: the one it is named in and, when that name is a
/// symlink, the one it really lies in. The folder, not only the file: what
/// lies beside a config (`bub.env` with the API key, an editor's
/// `bub.toml.bak`) is as secret, and a config under `/etc` would otherwise
/// be beside files the sandbox shows.
pub fn hidden_paths(home_root: &Path, config_path: Option<&Path>) -> Vec<PathBuf> {
    let mut hidden = vec![home_root.to_path_buf()];
    if let Some(path) = config_path {
        let named = std::path::absolute(path).ok();
        let real = path.canonicalize().ok();
        let mut folders: Vec<PathBuf> =
            named.iter().chain(&real).filter_map(|p| Some(p.parent()?.to_path_buf())).collect();
        folders.dedup();
        hidden.extend(folders);
    }
    hidden
}

/// The sandbox's limits: `[sandbox]` over the defaults.
pub fn limits(config: &SandboxConfig) -> SandboxLimits {
    let default = SandboxLimits::default();
    SandboxLimits {
        session_memory_bytes: config.session_memory_bytes.unwrap_or(default.session_memory_bytes),
        session_processes: config.session_processes.unwrap_or(default.session_processes),
        memory_bytes: config.memory_bytes.unwrap_or(default.memory_bytes),
        max_processes: config.max_processes.unwrap_or(default.max_processes),
        cpu_seconds: config.cpu_seconds.unwrap_or(default.cpu_seconds),
        max_file_bytes: config.max_file_bytes.unwrap_or(default.max_file_bytes),
        tmp_bytes: config.tmp_bytes.unwrap_or(default.tmp_bytes),
        open_files: config.open_files.unwrap_or(default.open_files),
        workspace_bytes: config.workspace_bytes.unwrap_or(default.workspace_bytes),
        disk_reserve_bytes: config.disk_reserve_bytes.unwrap_or(default.disk_reserve_bytes),
        ..default
    }
}

/// Environments whose kind and confinement follow the session's policy.
#[derive(Default)]
pub struct PolicyConfinement {
    sessions: Mutex<HashMap<String, EnvironmentChoice>>,
    /// Built at start: without network, with network.
    sandboxes: Mutex<(Option<SandboxProvider>, Option<SandboxProvider>)>,
}

/// A channel needs a sandbox that cannot be built here.
#[derive(Debug, thiserror::Error)]
#[error(
    "channel {channel} runs the shell and code in the sandbox (environment = \"sandbox\", the default on chat \
     platforms), but {source}\nDo what it says, or set environment = \"local\" in [channels.{channel}.policy] \
     to run them on the host as the gateway's user."
)]
pub struct SandboxUnavailable {
    pub channel: String,
    #[source]
    pub source: SandboxError,
}

impl PolicyConfinement {
    pub fn new() -> Arc<PolicyConfinement> {
        Arc::new(PolicyConfinement::default())
    }

    /// Builds and tries the sandboxes `config` needs, each hiding `hidden`
    /// (`$BUB_HOME`, the config file). Returns the probe's report when a
    /// sandbox was built (for the start-up output).
    pub async fn prepare(
        &self,
        config: &GatewayConfig,
        hidden: Vec<PathBuf>,
    ) -> Result<Option<String>, SandboxUnavailable> {
        let needs = sandbox_needs(config);
        let mut built = (None, None);
        for (channel, network) in &needs {
            let slot = if *network { &mut built.1 } else { &mut built.0 };
            if slot.is_some() {
                continue;
            }
            let settings = SandboxSettings {
                network: *network,
                hidden: hidden.clone(),
                limits: limits(&config.sandbox),
                read_only: config.sandbox.read_only.clone(),
                ..SandboxSettings::default()
            };
            let provider = SandboxProvider::new(settings)
                .await
                .map_err(|source| SandboxUnavailable { channel: channel.clone(), source })?;
            *slot = Some(provider);
        }
        let report = built.0.as_ref().or(built.1.as_ref()).map(|provider| provider.report().to_string());
        *self.sandboxes.lock() = built;
        Ok(report)
    }

    /// Records where `session`'s shell and code run; true when this changes
    /// an earlier choice (the session's open environment was made for
    /// another policy and must be closed, so the new one holds at once).
    pub fn set(&self, session: &str, choice: EnvironmentChoice) -> bool {
        let mut sessions = self.sessions.lock();
        match sessions.insert(session.to_string(), choice) {
            Some(before) => before != choice,
            None => false,
        }
    }

    /// The choice for a session nobody noted: the strictest there is.
    fn strictest(&self) -> EnvironmentChoice {
        let built = self.sandboxes.lock();
        EnvironmentChoice { sandbox: built.0.is_some(), network: false, confined: true }
    }
}

#[async_trait]
impl EnvironmentProvider for PolicyConfinement {
    async fn provide(&self, session: &str, workspace: PathBuf) -> Result<Arc<dyn Environment>, EnvironmentError> {
        let noted = self.sessions.lock().get(session).copied();
        let choice = noted.unwrap_or_else(|| self.strictest());
        if choice.sandbox {
            let provider = {
                let built = self.sandboxes.lock();
                if choice.network { built.1.clone() } else { built.0.clone() }
            };
            let Some(provider) = provider else {
                return Err(EnvironmentError::Spawn {
                    command: format!("the sandbox of session {session}"),
                    source: std::io::Error::other(
                        "this sandbox was not built when the gateway started (a reload asked for it): restart the gateway",
                    ),
                });
            };
            return provider.provide(session, workspace).await;
        }
        let environment = LocalEnvironment::new(&workspace, choice.confined)
            .map_err(|source| EnvironmentError::File { path: workspace, source })?;
        Ok(Arc::new(environment))
    }
}
