//! [`McpServers`]: the gateway's servers (its `[mcp.NAME]` tables of scope
//! `gateway`), each supervised on its own, their tools kept in the agent's
//! registry.
//!
//! [`McpServers::apply`] brings the set in step with a config: it starts
//! the servers added, restarts exactly those whose table changed, stops
//! those removed (their tools leave the registry) and leaves the rest
//! alone. Each server's tools are registered with `Agent::replace_tools`
//! whenever its list loads, so a change lands between turns, never in one.
//! Servers of scope `session` run one instance per session environment
//! ([`SessionServer`]): their tools, learnt from a probe at start, are
//! registered the same way; each session's instance stops when its
//! environment closes (a hook on the agent's `Environments`). An agent
//! without environments cannot run them: they are listed, as
//! [`ServerState::Stopped`] with a line saying why.

use super::connect::EnvLookup;
use super::error::McpError;
use super::server::{McpServer, OnTools, ServerState, ServerStatus, connector};
use super::session::{OnProbeTools, OnUnavailable, SessionServer};
use super::tools::{Caller, bub_tools, source, tools_calling};
use crate::agent::Agent;
use crate::config::mcp::{McpScope, McpServerConfig};
use crate::environment::Environment;
use indexmap::IndexMap;
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// What `status` says of a session-scoped server of an agent without session environments.
pub const SESSION_SCOPED: &str =
    "scope = \"session\": runs in each session's environment, and this agent has no session environments";

enum Entry {
    Running(McpServer),
    /// Scope `session`: one instance per session environment.
    Session(SessionServer),
    /// A table this set does not start (scope `session` without environments).
    NotStarted(Box<McpServerConfig>),
}

struct Inner {
    agent: Agent,
    lookup: EnvLookup,
    http: reqwest::Client,
    entries: Mutex<IndexMap<String, Entry>>,
    /// One `apply` at a time (they stop and start servers across awaits).
    applying: tokio::sync::Mutex<()>,
    /// Told when a session-scoped server cannot run in the sessions' environment.
    unavailable: Mutex<Option<OnUnavailable>>,
}

/// The set of servers. Cheap to clone; clones share the set.
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<Inner>,
}

impl McpServers {
    /// An empty set whose servers' tools go to `agent`; `lookup` reads the
    /// gateway's variables (`PATH`, … and the tables' `{ env = "NAME" }`).
    pub fn new(agent: Agent, lookup: EnvLookup) -> McpServers {
        let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).build().unwrap_or_default();
        let inner = Arc::new(Inner {
            agent,
            lookup,
            http,
            entries: Mutex::new(IndexMap::new()),
            applying: tokio::sync::Mutex::new(()),
            unavailable: Mutex::new(None),
        });
        if let Some(environments) = inner.agent.environments() {
            // Weak: the agent holds the environments, and must not hold the set.
            let set = Arc::downgrade(&inner);
            environments.on_close(Arc::new(move |_session: &str, environment: &Arc<dyn Environment>| {
                let (set, environment) = (set.clone(), environment.clone());
                Box::pin(async move { environment_closed(set, environment).await })
            }));
        }
        McpServers { inner }
    }

    /// Calls `report` when a session-scoped server cannot run in the
    /// sessions' environment (its first failed probe after each start):
    /// the gateway makes it a start-up line.
    pub fn on_unavailable(&self, report: impl Fn(&McpError) + Send + Sync + 'static) {
        *self.inner.unavailable.lock() = Some(Arc::new(report));
    }

    /// Brings the set in step with `configs` (see the module's doc). Returns
    /// once removed and changed servers are stopped; started ones come up
    /// in the background (see [`McpServers::wait_ready`]).
    pub async fn apply(&self, configs: &IndexMap<String, McpServerConfig>) {
        let _one_at_a_time = self.inner.applying.lock().await;
        let mut stopping = Vec::new();
        {
            let mut entries = self.inner.entries.lock();
            entries.retain(|name, entry| {
                let keep = match (&*entry, configs.get(name)) {
                    (Entry::Running(server), Some(config)) => server.config() == config,
                    (Entry::Session(server), Some(config)) => server.config() == config,
                    (Entry::NotStarted(old), Some(config)) => **old == *config,
                    (_, None) => false,
                };
                if !keep {
                    let changed = configs.contains_key(name);
                    match entry {
                        Entry::Running(server) => stopping.push((Stopping::Gateway(server.clone()), changed)),
                        Entry::Session(server) => stopping.push((Stopping::Session(server.clone()), changed)),
                        Entry::NotStarted(_) => {}
                    }
                }
                keep
            });
        }
        for (server, changed) in stopping {
            let name = server.name().to_string();
            tracing::info!(mcp_server = %name, changed, "stopping mcp server");
            server.stop().await;
            // A changed gateway server's tools stay until its new start lists
            // them; a session-scoped one's go at once (they would start
            // instances of the old table), back when its new probe lists them.
            let session = matches!(server, Stopping::Session(_));
            if (!changed || session)
                && let Err(refused) = self.inner.agent.replace_tools(&source(&name), vec![])
            {
                tracing::warn!(mcp_server = %name, %refused, "removing an mcp server's tools was refused");
            }
        }
        let mut entries = self.inner.entries.lock();
        for (name, config) in configs {
            if entries.contains_key(name) {
                continue;
            }
            let entry = match config.scope {
                McpScope::Session => match self.start_session(name, config) {
                    Some(server) => Entry::Session(server),
                    None => Entry::NotStarted(Box::new(config.clone())),
                },
                McpScope::Gateway => Entry::Running(self.start(name, config)),
            };
            entries.insert(name.clone(), entry);
        }
        // The config's order, for `status`.
        entries.sort_by_cached_key(|name, _| configs.get_index_of(name));
    }

    fn start(&self, name: &str, config: &McpServerConfig) -> McpServer {
        tracing::info!(mcp_server = %name, "starting mcp server");
        let agent = self.inner.agent.clone();
        let on_tools: OnTools = Arc::new(move |server: &McpServer, tools| {
            let tools = bub_tools(server, &tools);
            if let Err(refused) = agent.replace_tools(&source(server.name()), tools) {
                tracing::warn!(mcp_server = %server.name(), %refused, "an mcp server's tools were refused");
                server.set_last_error(refused.to_string());
            }
        });
        let connect = connector(name, config, self.inner.lookup.clone(), self.inner.http.clone());
        McpServer::start(name, config.clone(), connect, on_tools)
    }

    /// Session-scoped server `name`, probed in the environment the agent's
    /// sessions get; `None` when the agent has no session environments.
    fn start_session(&self, name: &str, config: &McpServerConfig) -> Option<SessionServer> {
        let provider = self.inner.agent.environments()?.provider();
        tracing::info!(mcp_server = %name, "probing an mcp server of scope session");
        let agent = self.inner.agent.clone();
        let on_tools: OnProbeTools = Arc::new(move |server: &SessionServer, tools| {
            let handler = server.clone();
            let caller: Caller = Arc::new(move |tool, arguments, environment| {
                let server = handler.clone();
                Box::pin(async move { server.call(&tool, arguments, environment).await })
            });
            let tools = tools_calling(server.name(), server.config(), &tools, caller);
            if let Err(refused) = agent.replace_tools(&source(server.name()), tools) {
                tracing::warn!(mcp_server = %server.name(), %refused, "an mcp server's tools were refused");
                server.set_last_error(refused.to_string());
            }
        });
        let unavailable = self.inner.unavailable.lock().clone();
        Some(SessionServer::start(name, config.clone(), self.inner.lookup.clone(), provider, on_tools, unavailable))
    }

    /// The session-scoped server `name`, if this set started it.
    pub fn session_server(&self, name: &str) -> Option<SessionServer> {
        match self.inner.entries.lock().get(name) {
            Some(Entry::Session(server)) => Some(server.clone()),
            _ => None,
        }
    }

    /// The running server `name`, if this set started it.
    pub fn server(&self, name: &str) -> Option<McpServer> {
        match self.inner.entries.lock().get(name) {
            Some(Entry::Running(server)) => Some(server.clone()),
            _ => None,
        }
    }

    /// Every server of the config, in its order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.inner
            .entries
            .lock()
            .iter()
            .map(|(name, entry)| match entry {
                Entry::Running(server) => server.status(),
                Entry::Session(server) => server.status(),
                Entry::NotStarted(config) => ServerStatus {
                    name: name.clone(),
                    state: ServerState::Stopped,
                    scope: config.scope,
                    tools: Vec::new(),
                    calls: 0,
                    errors: 0,
                    last_call_latency: None,
                    last_error: Some(SESSION_SCOPED.to_string()),
                    pid: None,
                    required: config.required,
                    sessions: 0,
                },
            })
            .collect()
    }

    /// Waits, at most `timeout`, until every started server is up or has
    /// failed to start once, and every session-scoped one's probe listed
    /// its tools or failed once (`bub run` starts its turn then).
    pub async fn wait_ready(&self, timeout: Duration) {
        let (servers, sessions) = self.started();
        let gateway = futures::future::join_all(servers.iter().map(|server| server.wait_settled(timeout)));
        let session = futures::future::join_all(sessions.iter().map(|server| server.wait_settled(timeout)));
        futures::future::join(gateway, session).await;
    }

    /// Stops every server (their programs ended, every session's instance
    /// too) and removes their tools.
    pub async fn stop_all(&self) {
        let _one_at_a_time = self.inner.applying.lock().await;
        let (servers, sessions) = self.started();
        self.inner.entries.lock().clear();
        let gateway = futures::future::join_all(servers.iter().map(McpServer::stop));
        let session = futures::future::join_all(sessions.iter().map(SessionServer::stop));
        futures::future::join(gateway, session).await;
        let names = servers.iter().map(McpServer::name).chain(sessions.iter().map(SessionServer::name));
        for name in names {
            let _ = self.inner.agent.replace_tools(&source(name), vec![]);
        }
    }

    fn started(&self) -> (Vec<McpServer>, Vec<SessionServer>) {
        started(&self.inner)
    }
}

fn started(inner: &Inner) -> (Vec<McpServer>, Vec<SessionServer>) {
    let (mut servers, mut sessions) = (Vec::new(), Vec::new());
    for entry in inner.entries.lock().values() {
        match entry {
            Entry::Running(server) => servers.push(server.clone()),
            Entry::Session(server) => sessions.push(server.clone()),
            Entry::NotStarted(_) => {}
        }
    }
    (servers, sessions)
}

/// A session's environment is closing: its instances stop first.
async fn environment_closed(set: Weak<Inner>, environment: Arc<dyn Environment>) {
    let Some(inner) = set.upgrade() else { return };
    let (_, sessions) = started(&inner);
    drop(inner);
    futures::future::join_all(sessions.iter().map(|server| server.environment_closed(&environment))).await;
}

/// A server being stopped by `apply`.
enum Stopping {
    Gateway(McpServer),
    Session(SessionServer),
}

impl Stopping {
    fn name(&self) -> &str {
        match self {
            Stopping::Gateway(server) => server.name(),
            Stopping::Session(server) => server.name(),
        }
    }

    async fn stop(&self) {
        match self {
            Stopping::Gateway(server) => server.stop().await,
            Stopping::Session(server) => server.stop().await,
        }
    }
}
