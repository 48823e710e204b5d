//! [`Environments`]: one environment per session, created on the session's
//! first use, closed when it has been idle too long or at shutdown.

use super::{Environment, EnvironmentError, EnvironmentProvider};
use crate::tape::TapeName;
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

pub struct Environments {
    provider: Arc<dyn EnvironmentProvider>,
    root: PathBuf,
    idle: Duration,
    open: Mutex<HashMap<String, Open>>,
}

impl Environments {
    /// Workspaces go under `root` (`$BUB_HOME/workspaces`) unless a session is
    /// given one explicitly.
    pub fn new(provider: Arc<dyn EnvironmentProvider>, root: impl Into<PathBuf>, idle: Duration) -> Environments {
        Environments { provider, root: root.into(), idle, open: Mutex::new(HashMap::new()) }
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
            environment.close().await;
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
        open.environment.close().await;
        true
    }

    /// Closes every environment (at shutdown).
    pub async fn close_all(&self) {
        let all: Vec<Arc<dyn Environment>> = self.open.lock().await.drain().map(|(_, e)| e.environment).collect();
        for environment in all {
            environment.close().await;
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
