//! [`Environments`]: one environment per session, created on the session's
//! first use, closed when it has been idle too long or at shutdown.
//!
//! What else lives as long as a session's environment (a session's MCP
//! server) registers a hook ([`Environments::on_close`]): each close, by the
//! idle sweep, [`Environments::close_session`] or [`Environments::close_all`],
//! runs every hook and awaits it before the environment kills what it started.

use super::{Environment, EnvironmentError, EnvironmentProvider};
use crate::tape::TapeName;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use tracing::Instrument;

/// Default idle time after which a session's environment is closed.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30 * 60);

struct Open {
    environment: Arc<dyn Environment>,
    last_used: Instant,
}

/// Told of each environment about to close: the session, the environment.
pub type CloseHook = Arc<dyn Fn(&str, &Arc<dyn Environment>) -> BoxFuture<'static, ()> + Send + Sync>;

pub struct Environments {
    provider: Arc<dyn EnvironmentProvider>,
    root: PathBuf,
    idle: Duration,
    open: Mutex<HashMap<String, Open>>,
    hooks: parking_lot::Mutex<Vec<CloseHook>>,
}

impl Environments {
    /// Workspaces go under `root` (`$BUB_HOME/workspaces`) unless a session is
    /// given one explicitly.
    pub fn new(provider: Arc<dyn EnvironmentProvider>, root: impl Into<PathBuf>, idle: Duration) -> Environments {
        Environments {
            provider,
            root: root.into(),
            idle,
            open: Mutex::new(HashMap::new()),
            hooks: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// What makes the sessions' environments.
    pub fn provider(&self) -> Arc<dyn EnvironmentProvider> {
        self.provider.clone()
    }

    /// Runs `hook` (awaited) each time an environment is about to close,
    /// before it kills what it started.
    pub fn on_close(&self, hook: CloseHook) {
        self.hooks.lock().push(hook);
    }

    /// The hooks, then the environment's own close.
    async fn close(&self, session: &str, environment: &Arc<dyn Environment>) {
        let hooks = self.hooks.lock().clone();
        for hook in hooks {
            hook(session, environment).await;
        }
        environment.close().await;
    }

    /// The default workspace of `session`: a file-system-safe, collision-free
    /// form of its id under the root (`telegram:-100/7` → `telegram%3A-100%2F7`;
    /// a long id is shortened, see [`TapeName::file_stem`]).
    pub fn workspace_for(&self, session: &str) -> Result<PathBuf, EnvironmentError> {
        let name = TapeName::new(session).map_err(|e| EnvironmentError::Spawn {
            command: format!("environment for {session:?}"),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(self.root.join(name.file_stem()))
    }

    /// The session's environment, created on first use in `workspace` (or its
    /// default workspace).
    pub async fn get(
        &self,
        session: &str,
        workspace: Option<PathBuf>,
    ) -> Result<Arc<dyn Environment>, EnvironmentError> {
        let mut open = self.open.lock().await;
        if let Some(entry) = open.get_mut(session) {
            entry.last_used = Instant::now();
            return Ok(entry.environment.clone());
        }
        let workspace = match workspace {
            Some(workspace) => workspace,
            None => self.workspace_for(session)?,
        };
        let environment = self.provider.provide(session, workspace).await?;
        tracing::debug!(session, workspace = %environment.workspace().display(), "environment opened");
        open.insert(session.to_string(), Open { environment: environment.clone(), last_used: Instant::now() });
        Ok(environment)
    }

    /// Closes the environments idle for longer than the idle time; returns how many.
    pub async fn close_idle(&self) -> usize {
        let idle: Vec<(String, Arc<dyn Environment>)> = {
            let mut open = self.open.lock().await;
            let expired: Vec<String> =
                open.iter().filter(|(_, e)| e.last_used.elapsed() >= self.idle).map(|(s, _)| s.clone()).collect();
            expired.into_iter().filter_map(|s| open.remove(&s).map(|e| (s, e.environment))).collect()
        };
        for (session, environment) in &idle {
            tracing::debug!(session, "closing an idle environment");
            self.close(session, environment).await;
        }
        idle.len()
    }

    /// Closes idle environments every `every` until the returned task is
    /// aborted (or the registry is dropped).
    pub fn sweep_idle(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let registry = Arc::downgrade(self);
        let sweeping = async move {
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(registry) = registry.upgrade() else { return };
                registry.close_idle().await;
            }
        };
        tokio::spawn(sweeping.instrument(tracing::info_span!("environments.sweep")))
    }

    /// Closes `session`'s environment, if open (everything it started is
    /// killed); its next use creates a new one. True when one was open.
    pub async fn close_session(&self, session: &str) -> bool {
        let Some(open) = self.open.lock().await.remove(session) else { return false };
        self.close(session, &open.environment).await;
        true
    }

    /// Closes every environment (at shutdown).
    pub async fn close_all(&self) {
        let all: Vec<(String, Arc<dyn Environment>)> =
            self.open.lock().await.drain().map(|(session, e)| (session, e.environment)).collect();
        for (session, environment) in &all {
            self.close(session, environment).await;
        }
    }

    /// How many sessions have an open environment.
    pub async fn len(&self) -> usize {
        self.open.lock().await.len()
    }

    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }
}
