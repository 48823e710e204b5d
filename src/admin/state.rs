//! [`AdminState`]: what the console's handlers share.

use super::limit::FailedAttempts;
use crate::config::{AdminConfig, AdminToken, GatewayConfig, LiveConfig};
use crate::gateway::Gateway;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Shared by the console's handlers (cheap to clone).
#[derive(Clone)]
pub(crate) struct AdminState {
    inner: Arc<Inner>,
}

struct Inner {
    gateway: Gateway,
    /// Tokens from the environment (`BUB_ADMIN_TOKEN`), fixed at start.
    env_tokens: Vec<AdminToken>,
    /// The console's path as the browser sees it: `/admin`, or
    /// `{base_path}/admin` behind a proxy (fixed at start).
    base: String,
    /// Cookies get `Secure` unless the gateway listens on loopback.
    secure_cookies: bool,
    failures: FailedAttempts,
    /// Cookies logged out, until they would have expired.
    revoked: Mutex<HashMap<String, Instant>>,
}

impl AdminState {
    pub(crate) fn new(gateway: Gateway, env_tokens: Vec<AdminToken>, base: String, secure_cookies: bool) -> AdminState {
        let inner = Inner {
            gateway,
            env_tokens,
            base,
            secure_cookies,
            failures: FailedAttempts::default(),
            revoked: Mutex::default(),
        };
        AdminState { inner: Arc::new(inner) }
    }

    pub(crate) fn gateway(&self) -> &Gateway {
        &self.inner.gateway
    }

    /// The config in force and its reload.
    pub(crate) fn live(&self) -> &Arc<LiveConfig> {
        self.inner.gateway.live_config()
    }

    pub(crate) fn config(&self) -> Arc<GatewayConfig> {
        self.live().current()
    }

    /// `[admin]` of the config in force; `None`: the console is off now.
    pub(crate) fn settings(&self) -> Option<AdminConfig> {
        self.config().admin.clone()
    }

    /// Every admin token now: the file's (as the config in force read it),
    /// then the environment's. `None` while the console is off.
    pub(crate) fn tokens(&self) -> Option<Vec<AdminToken>> {
        let settings = self.settings()?;
        Some(settings.tokens.into_iter().chain(self.inner.env_tokens.iter().cloned()).collect())
    }

    /// `/admin` or `{base_path}/admin`, without a trailing slash.
    pub(crate) fn base(&self) -> &str {
        &self.inner.base
    }

    pub(crate) fn secure_cookies(&self) -> bool {
        self.inner.secure_cookies
    }

    pub(crate) fn failures(&self) -> &FailedAttempts {
        &self.inner.failures
    }

    /// Remembers a logged-out cookie for `lasting` (its remaining life).
    pub(crate) fn revoke(&self, cookie: &str, lasting: Duration) {
        let now = Instant::now();
        let mut revoked = self.inner.revoked.lock();
        revoked.retain(|_, until| *until > now);
        revoked.insert(cookie.to_string(), now + lasting);
    }

    pub(crate) fn is_revoked(&self, cookie: &str) -> bool {
        self.inner.revoked.lock().get(cookie).is_some_and(|until| *until > Instant::now())
    }
}
