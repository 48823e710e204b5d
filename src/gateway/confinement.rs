//! Session environments confined (or not) as each chat's policy says.
//!
//! The gateway notes a session's `confine_fs` before each turn; the
//! environment is created with it on the session's first turn and kept until
//! it is closed for idleness, so a policy change reaches an open session when
//! its environment is next created.

use crate::environment::{Environment, EnvironmentError, EnvironmentProvider, LocalEnvironment};
use async_trait::async_trait;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Local environments whose confinement follows the session's policy.
#[derive(Default)]
pub struct PolicyConfinement {
    sessions: Mutex<HashMap<String, bool>>,
}

impl PolicyConfinement {
    pub fn new() -> Arc<PolicyConfinement> {
        Arc::new(PolicyConfinement::default())
    }

    /// Records whether `session`'s file tools stay inside its workspace.
    pub fn set(&self, session: &str, confined: bool) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if sessions.get(session) != Some(&confined) {
            sessions.insert(session.to_string(), confined);
        }
    }
}

#[async_trait]
impl EnvironmentProvider for PolicyConfinement {
    async fn provide(&self, session: &str, workspace: PathBuf) -> Result<Arc<dyn Environment>, EnvironmentError> {
        // Unknown sessions (a command line run) are confined: the safe side.
        let confined = self.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(session).copied().unwrap_or(true);
        let environment = LocalEnvironment::new(&workspace, confined)
            .map_err(|source| EnvironmentError::File { path: workspace, source })?;
        Ok(Arc::new(environment))
    }
}
