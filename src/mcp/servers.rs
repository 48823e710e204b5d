//! [`McpServers`]: the gateway's servers (its `[mcp.NAME]` tables of scope
//! `gateway`), each supervised on its own, their tools kept in the agent's
//! registry.
//!
//! [`McpServers::apply`] brings the set in step with a config: it starts
//! the servers added, restarts exactly those whose table changed, stops
//! those removed (their tools leave the registry) and leaves the rest
//! alone. Each server's tools are registered with `Agent::replace_tools`
//! whenever its list loads, so a change lands between turns, never in one.
//! Servers of scope `session` are not started here: they are listed, as
//! [`ServerState::Stopped`] with a line saying why.

use super::connect::EnvLookup;
use super::server::{McpServer, OnTools, ServerState, ServerStatus, connector};
use super::tools::{bub_tools, source};
use crate::agent::Agent;
use crate::config::mcp::{McpScope, McpServerConfig};
use indexmap::IndexMap;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// What `status` says of a session-scoped server.
pub const SESSION_SCOPED: &str = "scope = \"session\": started in each session's environment, not with the gateway";

enum Entry {
    Running(McpServer),
    /// A table this set does not start (scope `session`).
    NotStarted(Box<McpServerConfig>),
}

struct Inner {
    agent: Agent,
    lookup: EnvLookup,
    http: reqwest::Client,
    entries: Mutex<IndexMap<String, Entry>>,
    /// One `apply` at a time (they stop and start servers across awaits).
    applying: tokio::sync::Mutex<()>,
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
        McpServers {
            inner: Arc::new(Inner {
                agent,
                lookup,
                http,
                entries: Mutex::new(IndexMap::new()),
                applying: tokio::sync::Mutex::new(()),
            }),
        }
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
                    (Entry::NotStarted(old), Some(config)) => **old == *config,
                    (_, None) => false,
                };
                if !keep && let Entry::Running(server) = entry {
                    stopping.push((server.clone(), configs.contains_key(name)));
                }
                keep
            });
        }
        for (server, changed) in stopping {
            tracing::info!(mcp_server = %server.name(), changed, "stopping mcp server");
            server.stop().await;
            if !changed && let Err(refused) = self.inner.agent.replace_tools(&source(server.name()), vec![]) {
                tracing::warn!(mcp_server = %server.name(), %refused, "removing an mcp server's tools was refused");
            }
        }
        let mut entries = self.inner.entries.lock();
        for (name, config) in configs {
            if entries.contains_key(name) {
                continue;
            }
            let entry = match config.scope {
                McpScope::Session => Entry::NotStarted(Box::new(config.clone())),
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
                },
            })
            .collect()
    }

    /// Waits, at most `timeout`, until every started server is up or has
    /// failed to start once (`bub run` starts its turn then).
    pub async fn wait_ready(&self, timeout: Duration) {
        let servers: Vec<McpServer> = self.running();
        futures::future::join_all(servers.iter().map(|server| server.wait_settled(timeout))).await;
    }

    /// Stops every server (their programs ended) and removes their tools.
    pub async fn stop_all(&self) {
        let _one_at_a_time = self.inner.applying.lock().await;
        let servers = self.running();
        self.inner.entries.lock().clear();
        futures::future::join_all(servers.iter().map(McpServer::stop)).await;
        for server in servers {
            let _ = self.inner.agent.replace_tools(&source(server.name()), vec![]);
        }
    }

    fn running(&self) -> Vec<McpServer> {
        self.inner
            .entries
            .lock()
            .values()
            .filter_map(|entry| match entry {
                Entry::Running(server) => Some(server.clone()),
                Entry::NotStarted(_) => None,
            })
            .collect()
    }
}
