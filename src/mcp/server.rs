//! [`McpServer`]: one server, supervised by a task of its own.
//!
//! The task starts the server (initialize and `tools/list` within
//! `start_timeout`), hands its tools to a callback, re-lists them on
//! `notifications/tools/list_changed`, and when the server exits, crashes
//! or its connection breaks: marks it down (calls in flight fail with an
//! error naming it), keeps why as `last_error`, and starts it again after
//! an exponential backoff ([`BACKOFF_START`] doubling to [`BACKOFF_CAP`],
//! back to the start once it stayed up [`BACKOFF_RESET`]).
//!
//! Isolation: each server has its own task and its own state; a call holds
//! no lock while it waits, so one server's fault reaches no other's.
//!
//! Metrics: `bub_mcp_calls_total{server,status}` (`ok`, `tool_error`,
//! `timeout`, `down`, `protocol_error`), `bub_mcp_call_seconds{server}`,
//! `bub_mcp_server_up{server}` (1 or 0), `bub_mcp_restarts_total{server}`.

use super::connect::{Connection, EnvLookup, StdioCommand};
use super::error::{McpError, McpErrorKind};
use crate::config::mcp::{McpScope, McpServerConfig, McpTransport};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{Peer, RoleClient, ServiceError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The first wait before a restart.
pub const BACKOFF_START: Duration = Duration::from_millis(500);
/// The longest wait between restarts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// What a start may take past `start_timeout` before it is given up on.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// A server up this long starts its backoff over after its next crash.
pub const BACKOFF_RESET: Duration = Duration::from_secs(120);

/// Makes a new connection to the server (a program started, a URL reached).
pub type Connector = Arc<dyn Fn() -> BoxFuture<'static, Result<Connection, McpError>> + Send + Sync>;

/// Told the server's tools each time they are listed (at each start, after
/// each `list_changed`).
pub type OnTools = Arc<dyn Fn(&McpServer, Vec<rmcp::model::Tool>) + Send + Sync>;

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Starting for the first time.
    Starting,
    /// Up: calls go through.
    Ready,
    /// Was up, went down; the next start is `retry_in` after it went down.
    Restarting { attempt: u32, retry_in: Duration },
    /// Never came up yet; still tried again after `retry_in`.
    Failed { attempt: u32, retry_in: Duration },
    /// Stopped by [`McpServer::stop`] (or never started by this set: see `McpServers`).
    Stopped,
}

impl ServerState {
    /// One word, for `,mcp` and `/readyz`.
    pub fn label(&self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Restarting { .. } => "restarting",
            ServerState::Failed { .. } => "failed",
            ServerState::Stopped => "stopped",
        }
    }
}

/// A snapshot of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    /// The server's own names of its tools, as last listed.
    pub tools: Vec<String>,
    pub calls: u64,
    /// Calls that failed (a tool's `isError` answer included).
    pub errors: u64,
    pub last_call_latency: Option<Duration>,
    pub last_error: Option<String>,
    /// The program's process id, while bub runs it.
    pub pid: Option<u32>,
    /// `required = true` in its table: `/readyz` waits for it.
    pub required: bool,
    pub scope: McpScope,
    /// Scope `session`: how many sessions run an instance of it now.
    pub sessions: usize,
}

/// A server's numbers for [`ServerStatus`] (a session-scoped one's too).
#[derive(Default)]
pub(super) struct Counters {
    pub tools: Vec<String>,
    pub calls: u64,
    pub errors: u64,
    pub last_call_latency: Option<Duration>,
    pub last_error: Option<String>,
    pub pid: Option<u32>,
}

impl Counters {
    /// The snapshot of a server named `name` in `state`, with these numbers.
    pub(super) fn status(
        &self,
        name: &str,
        state: ServerState,
        config: &McpServerConfig,
        sessions: usize,
    ) -> ServerStatus {
        ServerStatus {
            name: name.to_string(),
            state,
            tools: self.tools.clone(),
            calls: self.calls,
            errors: self.errors,
            last_call_latency: self.last_call_latency,
            last_error: self.last_error.clone(),
            pid: self.pid,
            required: config.required,
            scope: config.scope,
            sessions,
        }
    }
}

/// What calls use while the server is up.
#[derive(Clone)]
struct Live {
    peer: Peer<RoleClient>,
    /// Cancelled when this connection ended.
    down: CancellationToken,
}

struct Shared {
    name: String,
    config: McpServerConfig,
    state: watch::Sender<ServerState>,
    counters: Mutex<Counters>,
    live: Mutex<Option<Live>>,
    stop: CancellationToken,
    stopped: watch::Sender<bool>,
    /// A call saw the connection fail: the supervisor checks it (an HTTP
    /// session can break while its transport task lives on).
    suspect: tokio::sync::Notify,
}

/// A supervised server. Cheap to clone; every clone is the same server.
#[derive(Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.shared.name)
            .field("state", &*self.shared.state.borrow())
            .finish()
    }
}

/// How bub connects to the server of `config` (a gateway-scoped table),
/// the handshake within its `start_timeout`.
pub fn connector(name: &str, config: &McpServerConfig, lookup: EnvLookup, http: reqwest::Client) -> Connector {
    let name = name.to_string();
    let handshake = config.start_timeout;
    match &config.transport {
        McpTransport::Stdio { command, args, env, cwd } => {
            let command = Arc::new(StdioCommand {
                command: command.clone(),
                args: args.clone(),
                env: env.clone(),
                cwd: cwd.clone(),
            });
            Arc::new(move || {
                let (name, command, lookup) = (name.clone(), command.clone(), lookup.clone());
                Box::pin(async move { Connection::stdio(&name, &command, &lookup, handshake).await })
            })
        }
        McpTransport::Http { url, headers } => {
            let (url, headers) = (url.clone(), headers.clone());
            Arc::new(move || {
                let (name, url, headers, lookup, http) =
                    (name.clone(), url.clone(), headers.clone(), lookup.clone(), http.clone());
                Box::pin(async move { Connection::http(&name, &url, &headers, &lookup, http, handshake).await })
            })
        }
    }
}

impl McpServer {
    /// Starts supervising server `name`, connecting with `connector`
    /// (see [`connector`]); `on_tools` gets each listing.
    pub fn start(name: &str, config: McpServerConfig, connector: Connector, on_tools: OnTools) -> McpServer {
        let (stopped, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            name: name.to_string(),
            config,
            state: watch::channel(ServerState::Starting).0,
            counters: Mutex::new(Counters::default()),
            live: Mutex::new(None),
            stop: CancellationToken::new(),
            stopped,
            suspect: tokio::sync::Notify::new(),
        });
        let server = McpServer { shared: shared.clone() };
        metrics::gauge!("bub_mcp_server_up", "server" => shared.name.clone()).set(0.0);
        tokio::spawn(supervise(server.clone(), connector, on_tools));
        server
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.shared.config
    }

    pub fn state(&self) -> ServerState {
        self.shared.state.borrow().clone()
    }

    /// A snapshot: state, tools, counts, last error.
    pub fn status(&self) -> ServerStatus {
        self.shared.counters.lock().status(&self.shared.name, self.state(), &self.shared.config, 0)
    }

    /// Records why the server is not what it should be (a refused tool set).
    pub fn set_last_error(&self, error: impl Into<String>) {
        self.shared.counters.lock().last_error = Some(error.into());
    }

    /// Waits until the server is up or its start failed at least once (or
    /// it was stopped), at most `timeout`; returns the state then.
    pub async fn wait_settled(&self, timeout: Duration) -> ServerState {
        let mut state = self.shared.state.subscribe();
        let _ = tokio::time::timeout(timeout, state.wait_for(|state| *state != ServerState::Starting)).await;
        self.state()
    }

    /// Calls tool `tool` (the server's own name) with `arguments`, within
    /// `call_timeout`. An `isError` answer is `Ok` here (see `content`).
    pub async fn call(&self, tool: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, McpError> {
        let started = Instant::now();
        let result = self.call_live(tool, arguments).await;
        let elapsed = started.elapsed();
        let status = match &result {
            Ok(answer) if answer.is_error == Some(true) => "tool_error",
            Ok(_) => "ok",
            Err(error) => error.kind.label(),
        };
        let name = self.shared.name.clone();
        metrics::counter!("bub_mcp_calls_total", "server" => name.clone(), "status" => status).increment(1);
        metrics::histogram!("bub_mcp_call_seconds", "server" => name).record(elapsed.as_secs_f64());
        let mut counters = self.shared.counters.lock();
        counters.calls += 1;
        counters.last_call_latency = Some(elapsed);
        if status != "ok" {
            counters.errors += 1;
        }
        result
    }

    async fn call_live(&self, tool: &str, arguments: Option<JsonObject>) -> Result<CallToolResult, McpError> {
        let name = &self.shared.name;
        let live = self.shared.live.lock().clone();
        let Some(live) = live else {
            return Err(McpError::new(name, McpErrorKind::Down, self.not_up()));
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let timeout = self.shared.config.call_timeout;
        tokio::select! {
            answer = tokio::time::timeout(timeout, live.peer.call_tool(params)) => match answer {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(ServiceError::McpError(error))) => Err(McpError::new(
                    name,
                    McpErrorKind::Protocol,
                    format!("{tool} failed: {} (code {})", error.message, error.code.0),
                )),
                Ok(Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                    // The supervisor learns why in a moment (or checks the connection).
                    self.shared.suspect.notify_one();
                    let down = tokio::time::timeout(Duration::from_secs(3), live.down.cancelled()).await;
                    match down {
                        Ok(()) => Err(self.went_down(tool)),
                        Err(_) => Err(McpError::new(name, McpErrorKind::Down, format!("{tool} failed: {error}"))),
                    }
                }
                Ok(Err(other)) => Err(McpError::new(name, McpErrorKind::Protocol, format!("{tool} failed: {other}"))),
                Err(_) => Err(McpError::new(
                    name,
                    McpErrorKind::Timeout,
                    format!("{tool} did not answer within {}", seconds(timeout)),
                )),
            },
            _ = live.down.cancelled() => Err(self.went_down(tool)),
        }
    }

    fn went_down(&self, tool: &str) -> McpError {
        let why = self.shared.counters.lock().last_error.clone().unwrap_or_else(|| "its connection broke".to_string());
        McpError::new(&self.shared.name, McpErrorKind::Down, format!("went down during the call of {tool}: {why}"))
    }

    fn not_up(&self) -> String {
        let state = self.state();
        let last = self.shared.counters.lock().last_error.clone();
        let mut message = match state {
            ServerState::Starting => "is still starting".to_string(),
            ServerState::Ready => "is between connections".to_string(),
            ServerState::Restarting { attempt, .. } => format!("is down (restart attempt {attempt})"),
            ServerState::Failed { attempt, .. } => format!("has not started (attempt {attempt})"),
            ServerState::Stopped => "is stopped".to_string(),
        };
        if let Some(last) = last {
            message.push_str(&format!("; last error: {last}"));
        }
        message
    }

    /// Stops the server (its program ended) and waits for the supervisor
    /// to finish. Idempotent.
    pub async fn stop(&self) {
        self.shared.stop.cancel();
        let mut stopped = self.shared.stopped.subscribe();
        let _ = stopped.wait_for(|stopped| *stopped).await;
    }

    fn set_state(&self, state: ServerState) {
        self.shared.state.send_replace(state);
    }
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

/// The wait before restart `attempt` (1 for the first).
pub fn backoff(attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
    BACKOFF_START.saturating_mul(factor).min(BACKOFF_CAP)
}

/// Connects and lists the tools, the listing within what is left of `start_timeout`.
async fn start_once(
    server: &McpServer,
    connector: &Connector,
) -> Result<(Connection, Vec<rmcp::model::Tool>), McpError> {
    let started = Instant::now();
    let connection = connector().await?;
    let left = server.shared.config.start_timeout.saturating_sub(started.elapsed());
    let message = match tokio::time::timeout(left, connection.peer().list_all_tools()).await {
        Ok(Ok(tools)) => return Ok((connection, tools)),
        Ok(Err(error)) => format!("tools/list failed: {error}"),
        Err(_) => format!("did not list its tools within {}", seconds(server.shared.config.start_timeout)),
    };
    connection.close().await;
    Err(McpError::new(server.name(), McpErrorKind::Start, message))
}

async fn supervise(server: McpServer, connector: Connector, on_tools: OnTools) {
    let shared = server.shared.clone();
    let name = shared.name.clone();
    let mut attempt = 0u32;
    let mut ever_up = false;
    loop {
        // Each step of a start has its own deadline; this one stops a
        // connector that keeps none (one given to `McpServer::start`).
        let start_timeout = shared.config.start_timeout;
        let started = tokio::select! {
            _ = shared.stop.cancelled() => break,
            started = tokio::time::timeout(start_timeout + STOP_GRACE, start_once(&server, &connector)) => started,
        };
        match started {
            Ok(Ok((connection, tools))) => {
                let up_since = Instant::now();
                ever_up = true;
                tracing::info!(mcp_server = %name, tools = tools.len(), "mcp server up");
                let down = CancellationToken::new();
                *shared.live.lock() = Some(Live { peer: connection.peer().clone(), down: down.clone() });
                {
                    let mut counters = shared.counters.lock();
                    counters.tools = tools.iter().map(|tool| tool.name.to_string()).collect();
                    counters.pid = connection.pid();
                }
                on_tools(&server, tools);
                server.set_state(ServerState::Ready);
                metrics::gauge!("bub_mcp_server_up", "server" => name.clone()).set(1.0);
                let stopping = serve(&server, &connection, &on_tools).await;
                *shared.live.lock() = None;
                down.cancel();
                shared.counters.lock().pid = None;
                metrics::gauge!("bub_mcp_server_up", "server" => name.clone()).set(0.0);
                connection.close().await;
                if stopping {
                    break;
                }
                if up_since.elapsed() >= BACKOFF_RESET {
                    attempt = 0;
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(mcp_server = %name, %error, "mcp server did not start");
                shared.counters.lock().last_error = Some(error.message);
            }
            Err(_) => {
                let message = format!("did not start within {}", seconds(start_timeout));
                tracing::warn!(mcp_server = %name, error = %message, "mcp server did not start");
                shared.counters.lock().last_error = Some(message);
            }
        }
        attempt += 1;
        let retry_in = backoff(attempt);
        server.set_state(if ever_up {
            ServerState::Restarting { attempt, retry_in }
        } else {
            ServerState::Failed { attempt, retry_in }
        });
        metrics::counter!("bub_mcp_restarts_total", "server" => name.clone()).increment(1);
        tokio::select! {
            _ = shared.stop.cancelled() => break,
            _ = tokio::time::sleep(retry_in) => {}
        }
    }
    *shared.live.lock() = None;
    server.set_state(ServerState::Stopped);
    metrics::gauge!("bub_mcp_server_up", "server" => name).set(0.0);
    shared.stopped.send_replace(true);
}

/// Serves an up connection until it ends (false) or the server is stopped (true).
async fn serve(server: &McpServer, connection: &Connection, on_tools: &OnTools) -> bool {
    let shared = &server.shared;
    loop {
        tokio::select! {
            _ = shared.stop.cancelled() => return true,
            why = connection.ended() => {
                tracing::warn!(mcp_server = %shared.name, error = %why, "mcp server went down");
                shared.counters.lock().last_error = Some(why);
                return false;
            }
            _ = shared.suspect.notified() => {
                let probe = tokio::time::timeout(shared.config.call_timeout, connection.peer().list_all_tools()).await;
                let broken = match probe {
                    Ok(Ok(_)) => None,
                    Ok(Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                        // The program's end, when it follows: its exit code and last stderr lines say more.
                        match tokio::time::timeout(Duration::from_secs(2), connection.ended()).await {
                            Ok(why) => Some(why),
                            Err(_) => Some(format!("its connection broke: {error}")),
                        }
                    }
                    Ok(Err(_)) => None,
                    Err(_) => Some(format!("stopped answering (tools/list took over {})", seconds(shared.config.call_timeout))),
                };
                if let Some(why) = broken {
                    tracing::warn!(mcp_server = %shared.name, error = %why, "mcp server went down");
                    shared.counters.lock().last_error = Some(why);
                    return false;
                }
            }
            _ = connection.tools_changed() => {
                let listed = tokio::time::timeout(shared.config.call_timeout, connection.peer().list_all_tools()).await;
                match listed {
                    Ok(Ok(tools)) => {
                        tracing::info!(mcp_server = %shared.name, tools = tools.len(), "mcp server's tools changed");
                        shared.counters.lock().tools = tools.iter().map(|tool| tool.name.to_string()).collect();
                        on_tools(server, tools);
                    }
                    Ok(Err(error)) => {
                        shared.counters.lock().last_error = Some(format!("tools/list after a change failed: {error}"));
                    }
                    Err(_) => {
                        shared.counters.lock().last_error = Some("tools/list after a change timed out".to_string());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_up_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(4));
        assert_eq!(backoff(8), Duration::from_secs(60));
        assert_eq!(backoff(1000), Duration::from_secs(60));
    }
}
