//! [`SessionServer`]: a server of scope `session`, one instance per session
//! environment — for servers that must see the session's workspace (a
//! filesystem server).
//!
//! - **Its tools** must be known before a run starts (a run keeps the
//!   registry's snapshot). So at start ([`SessionServer::start`]) one
//!   instance is tried — the *probe* — in an empty scratch workspace (in the
//!   system's temp dir, removed after; never a session's workspace), in an
//!   environment made by the sessions' own provider for a session nobody
//!   noted: in the gateway, the strictest one its policies use (the sandbox
//!   without network when one is built). It lists its tools and is stopped.
//!   A probe that fails (the program missing inside the sandbox, `npx -y`
//!   without network, the sandbox's limits) is reported — the callback, the
//!   state and last error in `,mcp` and `/readyz` — and tried again with the
//!   supervisors' backoff; its tools are offered once a probe lists them.
//! - **A call** runs in the instance of the call's session: the one started
//!   in [`ToolContext::environment`](crate::tools::ToolContext) — keyed by
//!   that environment object (a session's environment closed and opened
//!   again is a new one, so is its instance), started on the session's
//!   first call through the environment's `spawn` (inside its sandbox when
//!   it has one; working directory the workspace unless the table's `cwd`
//!   says, resolved inside; variables: the table's `env` over the
//!   environment's own few, never the gateway's), and supervised as an
//!   [`McpServer`] (call timeout, restart with backoff). A call without an
//!   environment is a tool error.
//! - **It stops with the environment**: [`SessionServer::environment_closed`]
//!   (from the `Environments` close hook `McpServers` registers) stops the
//!   instance before the environment kills what it started, so no instance
//!   outlives its environment or is restarted into a closed one; an
//!   instance whose environment is gone is never started again.

use super::connect::{Connection, EnvLookup};
use super::error::{McpError, McpErrorKind};
use super::server::{Connector, Counters, McpServer, OnTools, ServerState, ServerStatus, backoff};
use crate::config::mcp::{McpServerConfig, McpTransport};
use crate::environment::{Environment, EnvironmentProvider, Program, SpawnOptions};
use parking_lot::Mutex;
use rmcp::model::{CallToolResult, JsonObject};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Told the probe's tools when it listed them.
pub type OnProbeTools = Arc<dyn Fn(&SessionServer, Vec<rmcp::model::Tool>) + Send + Sync>;

/// Told why a server cannot run in the sessions' environment, once per
/// start (its first failed probe).
pub type OnUnavailable = Arc<dyn Fn(&McpError) + Send + Sync>;

/// How long past its `start_timeout` a call waits for its session's
/// instance to start (the supervisor gives a start a little more).
const START_GRACE: Duration = Duration::from_secs(5);

/// What starting an instance needs, shared with the connectors (which hold
/// nothing of the server itself).
struct Launch {
    name: String,
    config: McpServerConfig,
    lookup: EnvLookup,
}

struct Instance {
    /// Its session's environment: not kept alive by the instance, and while
    /// held its address cannot be another environment's.
    environment: Weak<dyn Environment>,
    server: McpServer,
}

struct Shared {
    launch: Arc<Launch>,
    provider: Arc<dyn EnvironmentProvider>,
    /// The probe's state: `Ready` once it listed the tools.
    state: watch::Sender<ServerState>,
    counters: Mutex<Counters>,
    instances: Mutex<HashMap<usize, Instance>>,
    stop: CancellationToken,
    probe_ended: watch::Sender<bool>,
}

/// A session-scoped server. Cheap to clone; every clone is the same server.
#[derive(Clone)]
pub struct SessionServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SessionServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionServer")
            .field("name", &self.shared.launch.name)
            .field("state", &*self.shared.state.borrow())
            .field("sessions", &self.shared.instances.lock().len())
            .finish()
    }
}

/// The key of an environment: the address of the object (see [`Instance::environment`]).
fn key(environment: &Arc<dyn Environment>) -> usize {
    Arc::as_ptr(environment).cast::<()>() as usize
}

impl SessionServer {
    /// Starts probing server `name` in an environment of `provider` (see
    /// the module's doc); `on_tools` gets its tools, `on_unavailable` why
    /// it cannot run.
    pub fn start(
        name: &str,
        config: McpServerConfig,
        lookup: EnvLookup,
        provider: Arc<dyn EnvironmentProvider>,
        on_tools: OnProbeTools,
        on_unavailable: Option<OnUnavailable>,
    ) -> SessionServer {
        let shared = Arc::new(Shared {
            launch: Arc::new(Launch { name: name.to_string(), config, lookup }),
            provider,
            state: watch::channel(ServerState::Starting).0,
            counters: Mutex::new(Counters::default()),
            instances: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
            probe_ended: watch::channel(false).0,
        });
        let server = SessionServer { shared };
        tokio::spawn(probe(server.clone(), on_tools, on_unavailable));
        server
    }

    pub fn name(&self) -> &str {
        &self.shared.launch.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.shared.launch.config
    }

    /// The probe's state: `Ready` once the tools are known.
    pub fn state(&self) -> ServerState {
        self.shared.state.borrow().clone()
    }

    /// How many sessions run an instance now.
    pub fn sessions(&self) -> usize {
        self.shared.instances.lock().values().filter(|instance| instance.environment.strong_count() > 0).count()
    }

    /// Records why the server is not what it should be (a refused tool set).
    pub fn set_last_error(&self, error: impl Into<String>) {
        self.shared.counters.lock().last_error = Some(error.into());
    }

    /// A snapshot: the probe's state, the tools, the calls of every session.
    pub fn status(&self) -> ServerStatus {
        let sessions = self.sessions();
        let launch = &self.shared.launch;
        self.shared.counters.lock().status(&launch.name, self.state(), &launch.config, sessions)
    }

    /// Waits, at most `timeout`, until the probe listed the tools or failed
    /// once (or the server was stopped); returns the state then.
    pub async fn wait_settled(&self, timeout: Duration) -> ServerState {
        let mut state = self.shared.state.subscribe();
        let _ = tokio::time::timeout(timeout, state.wait_for(|state| *state != ServerState::Starting)).await;
        self.state()
    }

    /// Calls `tool` in the instance of the session whose environment is
    /// `environment`, starting it on the session's first call.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        environment: Option<Arc<dyn Environment>>,
    ) -> Result<CallToolResult, McpError> {
        let name = &self.shared.launch.name;
        let Some(environment) = environment else {
            return Err(McpError::new(
                name,
                McpErrorKind::Down,
                "runs one instance per session (scope = \"session\"), and this call has no session environment \
                 (call it in a chat or from `bub run`)",
            ));
        };
        let started = Instant::now();
        let result = match self.instance(&environment) {
            Ok(server) => {
                if server.state() == ServerState::Starting {
                    server.wait_settled(self.shared.launch.config.start_timeout + START_GRACE).await;
                }
                server.call(tool, arguments).await
            }
            Err(error) => Err(error),
        };
        let mut counters = self.shared.counters.lock();
        counters.calls += 1;
        counters.last_call_latency = Some(started.elapsed());
        match &result {
            Ok(answer) if answer.is_error == Some(true) => counters.errors += 1,
            Ok(_) => {}
            Err(error) => {
                counters.errors += 1;
                counters.last_error =
                    Some(format!("in the session at {}: {}", environment.workspace().display(), error.message));
            }
        }
        result
    }

    /// The instance of `environment`'s session, started if it has none.
    fn instance(&self, environment: &Arc<dyn Environment>) -> Result<McpServer, McpError> {
        let launch = &self.shared.launch;
        let mut instances = self.shared.instances.lock();
        if self.shared.stop.is_cancelled() {
            return Err(McpError::new(
                &launch.name,
                McpErrorKind::Down,
                "is stopped (its table changed or was removed); the next turn has its new tools",
            ));
        }
        // Instances whose environment went without a close (nothing holds it) go too.
        let orphans: Vec<usize> = instances
            .iter()
            .filter(|(_, instance)| instance.environment.strong_count() == 0)
            .map(|(key, _)| *key)
            .collect();
        for orphan in orphans {
            if let Some(instance) = instances.remove(&orphan) {
                tokio::spawn(async move { instance.server.stop().await });
            }
        }
        if let Some(instance) = instances.get(&key(environment)) {
            return Ok(instance.server.clone());
        }
        let weak = Arc::downgrade(environment);
        let connecting = (launch.clone(), weak.clone());
        let connector: Connector = Arc::new(move || {
            let (launch, weak) = connecting.clone();
            Box::pin(async move {
                let Some(environment) = weak.upgrade() else {
                    return Err(McpError::new(&launch.name, McpErrorKind::Down, "its session's environment is closed"));
                };
                connect_in(&launch, &environment).await
            })
        });
        // The tools are the probe's: a session's listing changes nothing.
        let on_tools: OnTools = Arc::new(|_: &McpServer, _| {});
        tracing::info!(
            mcp_server = %launch.name,
            workspace = %environment.workspace().display(),
            "starting an mcp server in a session's environment"
        );
        let server = McpServer::start(&launch.name, launch.config.clone(), connector, on_tools);
        instances.insert(key(environment), Instance { environment: weak, server: server.clone() });
        Ok(server)
    }

    /// Stops the instance of the session whose environment is closing.
    pub async fn environment_closed(&self, environment: &Arc<dyn Environment>) {
        let instance = self.shared.instances.lock().remove(&key(environment));
        if let Some(instance) = instance {
            tracing::info!(
                mcp_server = %self.shared.launch.name,
                workspace = %environment.workspace().display(),
                "stopping a session's mcp server with its environment"
            );
            instance.server.stop().await;
        }
    }

    /// Stops the probe and every session's instance. Idempotent.
    pub async fn stop(&self) {
        self.shared.stop.cancel();
        let mut ended = self.shared.probe_ended.subscribe();
        let _ = ended.wait_for(|ended| *ended).await;
        let instances: Vec<McpServer> =
            self.shared.instances.lock().drain().map(|(_, instance)| instance.server).collect();
        futures::future::join_all(instances.iter().map(McpServer::stop)).await;
        self.shared.state.send_replace(ServerState::Stopped);
    }
}

/// Starts the table's program in `environment` and initializes.
async fn connect_in(launch: &Launch, environment: &Arc<dyn Environment>) -> Result<Connection, McpError> {
    let name = &launch.name;
    let McpTransport::Stdio { command, args, env, cwd } = &launch.config.transport else {
        return Err(McpError::new(name, McpErrorKind::Config, "scope = \"session\" needs a `command` server"));
    };
    let mut variables = Vec::with_capacity(env.len());
    for (variable, value) in env {
        let secret = value
            .resolve(|wanted| (launch.lookup)(wanted))
            .map_err(|why| McpError::new(name, McpErrorKind::Config, format!("`{variable}`: {why}")))?;
        variables.push((variable.clone(), secret.expose().to_string()));
    }
    let options =
        SpawnOptions { cwd: cwd.as_ref().map(|cwd| cwd.display().to_string()), env: variables, clean_env: true };
    let argv = std::iter::once(command).chain(args).cloned().collect();
    let process = environment
        .spawn(Program::Argv(argv), options)
        .await
        .map_err(|error| McpError::new(name, McpErrorKind::Start, error.to_string()))?;
    Connection::over_process(name, process, launch.config.start_timeout).await
}

/// Tries the server in a scratch workspace until it lists its tools (see
/// the module's doc), then hands them over.
async fn probe(server: SessionServer, on_tools: OnProbeTools, on_unavailable: Option<OnUnavailable>) {
    let shared = server.shared.clone();
    let name = shared.launch.name.clone();
    let mut attempt = 0u32;
    loop {
        let start_timeout = shared.launch.config.start_timeout;
        let tried = tokio::select! {
            _ = shared.stop.cancelled() => break,
            tried = tokio::time::timeout(start_timeout, probe_once(&shared)) => tried,
        };
        let error = match tried {
            Ok(Ok(tools)) => {
                tracing::info!(mcp_server = %name, tools = tools.len(), "mcp server of scope session listed its tools");
                {
                    let mut counters = shared.counters.lock();
                    counters.tools = tools.iter().map(|tool| tool.name.to_string()).collect();
                    counters.last_error = None;
                }
                on_tools(&server, tools);
                shared.state.send_replace(ServerState::Ready);
                break;
            }
            Ok(Err(error)) => error,
            Err(_) => McpError::new(
                &name,
                McpErrorKind::Start,
                format!("did not start and list its tools within {}s", start_timeout.as_secs_f64()),
            ),
        };
        attempt += 1;
        let retry_in = backoff(attempt);
        let error = McpError::new(
            &name,
            error.kind,
            format!(
                "cannot run in the sessions' environment (tried in an empty workspace, as a session would start \
                 it): {}",
                error.message
            ),
        );
        tracing::warn!(mcp_server = %name, %error, attempt, "mcp server of scope session did not start");
        shared.counters.lock().last_error = Some(error.message.clone());
        // Reported before the state says so: whoever waits for it finds the report made.
        if attempt == 1
            && let Some(report) = &on_unavailable
        {
            report(&error);
        }
        shared.state.send_replace(ServerState::Failed { attempt, retry_in });
        tokio::select! {
            _ = shared.stop.cancelled() => break,
            _ = tokio::time::sleep(retry_in) => {}
        }
    }
    shared.probe_ended.send_replace(true);
}

/// One probe: an environment around a fresh scratch workspace, the program
/// started in it, its tools listed, everything stopped and removed.
async fn probe_once(shared: &Shared) -> Result<Vec<rmcp::model::Tool>, McpError> {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let name = &shared.launch.name;
    // The system's temp dir (`TMPDIR`), as the sandbox's own trial at start:
    // part of trying a spawn, not a bub setting.
    let scratch: PathBuf = std::env::temp_dir().join(format!(
        "bub-mcp-probe-{}-{name}-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    ));
    let listed = async {
        let environment =
            shared.provider.provide(&format!("mcp-probe:{name}"), scratch.clone()).await.map_err(|error| {
                McpError::new(name, McpErrorKind::Start, format!("cannot make an environment to start it in: {error}"))
            })?;
        let connection = connect_in(&shared.launch, &environment).await;
        let listed = match connection {
            Ok(connection) => {
                let tools = connection.peer().list_all_tools().await;
                connection.close().await;
                tools.map_err(|error| McpError::new(name, McpErrorKind::Start, format!("tools/list failed: {error}")))
            }
            Err(error) => Err(error),
        };
        environment.close().await;
        listed
    };
    // Dropped at the timeout: the connection's drop ends the program, this the scratch.
    let _remove = RemoveDir(scratch.clone());
    listed.await
}

/// Removes the scratch workspace however the probe ends (a few entries at most).
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
