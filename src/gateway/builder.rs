//! Starting a gateway, in the one order that is safe, for the `bub` binary
//! and for programs that embed bub alike:
//!
//! 1. [`GatewayBuilder::open`]: lock the home (one gateway per home: two would
//!    both resume its unfinished turns and send its pending replies), open
//!    the database, make the confinement every session's environment comes from.
//! 2. The caller gives the config (a file or a value) and builds its agent
//!    on that store and that confinement ([`OpenGateway::agent_builder`]
//!    presets both, and keeps every file the agent writes in the home).
//! 3. [`OpenGateway::start`]: policy enforced on the agent and its `,policy`
//!    and `,pairing` commands added; the config read (a file is checked
//!    against the agent's tools and watched) and what it opens wider than
//!    the defaults reported; the sandboxes it asks for built and tried (fail
//!    closed: a sandbox that cannot be built stops the start); the channels
//!    made; the HTTP server listening; then the previous run's unfinished
//!    work resumed and the channels started (and what their platforms'
//!    settings hide from the policy reported) — racing the caller's shutdown,
//!    so a stop while resuming is a graceful one too.
//! 4. [`RunningGateway::wait`]: until the shutdown, then the graceful stop:
//!    stop accepting, let turns finish for the config's grace, let the
//!    answers already decided go out, cut HTTP connections still open 5 s
//!    later, close the sessions' environments and the database.
//!
//! Nothing here reads the process environment: every path and setting is
//! given. What the binary prints comes as [`Notice`]s.

use super::confinement::{PolicyConfinement, SandboxUnavailable};
use super::store::GatewayStore;
use super::{Gateway, channels};
use crate::agent::{Agent, AgentBuilder};
use crate::config::{ConfigError, GatewayConfig, LiveConfig, ReloadOutcome};
use crate::db::{Durability, HomeStore, StoreLocation};
use crate::environment::sessions::DEFAULT_IDLE;
use crate::environment::{EnvironmentProvider, Environments};
use crate::home::BubHome;
use crate::http::{Dependency, HttpState, Readiness, router};
use crate::mcp::McpServers;
use crate::tape::{TapeError, TapeSettings, TapeStore};
use bub_channel::ChannelError;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// How long HTTP connections may stay open after the gateway stopped
/// (answers already decided are still being written); then they are cut.
const CONNECTIONS_DRAIN: Duration = Duration::from_secs(5);

/// Something the operator should read while the gateway starts or runs; the
/// `bub` binary prints each on stderr. Each is logged too.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Notice {
    /// Where the config opens access wider than the closed defaults (one
    /// notice per finding, `FILE:LINE:COL: warning: …`).
    ConfigOpensAccess(String),
    /// Sandboxes were built and tried; the kernel features they rely on.
    Sandboxed(String),
    /// A changed config file was refused; the running policy stays.
    ConfigRefused(String),
    /// A started channel's platform setting hides what the policy relies on
    /// (Telegram's privacy mode while groups are answered), and how to fix it.
    ChannelSetting(String),
    /// An MCP server of scope `session` cannot run in the sessions'
    /// environment (the sandbox): why, naming it. Its tools are missing
    /// until it can; `,mcp` and `/readyz` show it too.
    McpUnavailable(String),
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::ConfigOpensAccess(warning) => write!(f, "{warning}"),
            Notice::Sandboxed(report) => write!(f, "the shell and code run in the sandbox; kernel features:\n{report}"),
            Notice::ConfigRefused(error) => {
                write!(f, "error: the new config is invalid; the running policy stays: {error}")
            }
            Notice::ChannelSetting(warning) => write!(f, "warning: {warning}"),
            Notice::McpUnavailable(error) => {
                write!(f, "warning: {error}; its tools are missing until it starts (tried again with a growing delay)")
            }
        }
    }
}

/// Why a gateway did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another gateway holds the home's lock.
    #[error(
        "another bub gateway is running on {}{}: stop it first (it holds {}); two gateways on one home would both \
         send its pending replies",
        .home.display(),
        .holder.as_ref().map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
        .lock.display()
    )]
    HomeInUse { home: PathBuf, lock: PathBuf, holder: Option<String> },
    /// The home or its lock file could not be made or locked.
    #[error("cannot {action} {}: {error}", .path.display())]
    Home { action: &'static str, path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Store(#[from] TapeError),
    /// Neither [`OpenGateway::config_file`] nor [`OpenGateway::config`] was given.
    #[error("no gateway config: give the builder a file (config_file) or a config (config)")]
    NoConfig,
    #[error("{0}")]
    Config(ConfigError),
    #[error(transparent)]
    Sandbox(#[from] SandboxUnavailable),
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error("cannot listen on {addr} (choose another address with [http] listen or --listen): {error}")]
    Listen { addr: SocketAddr, error: std::io::Error },
    #[error("cannot read the listening address: {0}")]
    LocalAddr(std::io::Error),
    /// Among replicas on PostgreSQL: this one could not register.
    #[error("{0}")]
    Replica(String),
    /// A part of the HTTP server (the admin console) cannot start.
    #[error("{0}")]
    HttpPart(String),
}

/// How long a dead replica's leases outlive its last heartbeat, unless
/// `[store] lease_seconds` says otherwise.
const DEFAULT_LEASE_SECONDS: u64 = 10;

type NoticeSink = Arc<dyn Fn(&Notice) + Send + Sync>;

enum ConfigSource {
    /// Read, checked against the agent's tools, and reloaded on change.
    File(PathBuf),
    Fixed(Box<GatewayConfig>),
}

/// Settings of a gateway before it opens its home; see the module docs.
pub struct GatewayBuilder {
    home: BubHome,
    durability: Durability,
    /// `None`: the home's SQLite file.
    store: Option<StoreLocation>,
    listen: Option<SocketAddr>,
    notices: NoticeSink,
    /// What MCP servers read of the gateway's environment.
    variables: crate::mcp::EnvLookup,
    /// Parts of the HTTP server made once the gateway exists (the admin console).
    http_parts: Vec<HttpPart>,
}

/// A part of the HTTP server that needs the gateway (the admin console,
/// `crate::admin::console`): given the gateway and the address it listens
/// on, its routes, none (the config leaves it off), or why it cannot start.
pub type HttpPart = Arc<dyn Fn(&Gateway, SocketAddr) -> Result<Option<axum::Router>, String> + Send + Sync>;

impl Gateway {
    /// A gateway keeping its files under `home` (see [`BubHome`] for the
    /// layout: database, lock, workspaces, archives, code-mode stubs).
    pub fn builder(home: impl Into<PathBuf>) -> GatewayBuilder {
        GatewayBuilder {
            home: BubHome::at(home),
            durability: Durability::Full,
            store: None,
            listen: None,
            notices: Arc::new(|_: &Notice| {}),
            variables: Arc::new(|_: &str| None),
            http_parts: Vec::new(),
        }
    }
}

impl GatewayBuilder {
    /// How commits reach the disk (default [`Durability::Full`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Keep tapes and gateway tables here instead of the home's SQLite file
    /// (a PostgreSQL database that several replicas share; see
    /// [`store_location`](crate::setup::store_location)).
    pub fn store(mut self, location: StoreLocation) -> Self {
        self.store = Some(location);
        self
    }

    /// Listen here instead of the config's `[http] listen` (port 0 picks a free one).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = Some(addr);
        self
    }

    /// The gateway's variables, as MCP servers get them: a stdio server's
    /// `PATH`, `HOME`, `LANG` and `TMPDIR`, and the `{ env = "NAME" }` values
    /// of `[mcp.NAME]` tables. Default: none (the `bub` binary passes the
    /// process's).
    pub fn mcp_variables(mut self, lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        self.variables = Arc::new(lookup);
        self
    }

    /// Serves `part`'s routes beside the channels' (see [`HttpPart`]).
    pub fn http_part(mut self, part: HttpPart) -> Self {
        self.http_parts.push(part);
        self
    }

    /// Called with each [`Notice`] (they are logged either way).
    pub fn on_notice(mut self, notices: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        self.notices = Arc::new(notices);
        self
    }

    /// Locks the home, opens its database and makes the confinement.
    pub async fn open(self) -> Result<OpenGateway, StartError> {
        let lock = lock_home(&self.home)?;
        let location = self.store.clone().unwrap_or_else(|| StoreLocation::Sqlite(self.home.database()));
        let store = Arc::new(crate::db::open(&location, self.durability).await?);
        Ok(OpenGateway { settings: self, config: None, _lock: lock, store, confinement: PolicyConfinement::new() })
    }
}

/// A gateway whose home is locked and database open, waiting for its agent.
pub struct OpenGateway {
    settings: GatewayBuilder,
    config: Option<ConfigSource>,
    /// Held until the gateway stopped (the lock goes with the process, however it ends).
    _lock: std::fs::File,
    store: Arc<HomeStore>,
    confinement: Arc<PolicyConfinement>,
}

impl OpenGateway {
    /// The config file: read when the gateway starts (it must name a channel, and its
    /// tool patterns the agent's tools) and reloaded when it changes.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(ConfigSource::File(path.into()));
        self
    }

    /// A config fixed for the gateway's life.
    pub fn config(mut self, config: GatewayConfig) -> Self {
        self.config = Some(ConfigSource::Fixed(Box::new(config)));
        self
    }

    /// The home the gateway runs on.
    pub fn home(&self) -> &BubHome {
        &self.settings.home
    }

    /// The database: the agent's tapes must live here (a restart finds its
    /// turns on them), beside the gateway's inbox and outbox.
    pub fn tape_store(&self) -> Arc<HomeStore> {
        self.store.clone()
    }

    /// What the agent's session environments must be made by, so each
    /// session's shell and files are confined as its chat's policy says.
    pub fn environment_provider(&self) -> Arc<dyn EnvironmentProvider> {
        self.confinement.clone()
    }

    /// An agent builder set for this gateway: its tapes in [`tape_store`](Self::tape_store),
    /// sessions' environments from [`environment_provider`](Self::environment_provider)
    /// in `<home>/workspaces` (closed after 30 idle minutes), archives in
    /// `<home>/tapes`, code-mode stubs in `<home>/codemode`. Add tools, a
    /// model and a prompt, then [`start`](Self::start) with it.
    pub fn agent_builder(&self) -> AgentBuilder {
        let home = &self.settings.home;
        let environments =
            Arc::new(Environments::new(self.environment_provider(), home.workspaces_dir(), DEFAULT_IDLE));
        environments.sweep_idle(Duration::from_secs(60));
        Agent::builder()
            .store(self.store.clone() as Arc<dyn TapeStore>)
            .environments(environments)
            .tape_settings(TapeSettings { archive_dir: home.archive_dir(), ..TapeSettings::default() })
            .codemode_dir(home.codemode_dir())
    }

    /// Starts the gateway with `agent` (built on this store and
    /// confinement); see the module docs for the order. `shutdown` ends it:
    /// when it completes, even during the start, [`RunningGateway::wait`]
    /// stops gracefully. An error leaves nothing running.
    pub async fn start(
        self,
        agent: Agent,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<RunningGateway, StartError> {
        let OpenGateway { settings, config, _lock: lock, store, confinement } = self;
        let started = match config {
            Some(config) => start(&settings, config, agent, &store, confinement, Box::pin(shutdown)).await,
            None => Err(StartError::NoConfig),
        };
        match started {
            Ok(running) => Ok(RunningGateway { running, store, _lock: lock }),
            Err(error) => {
                store.close().await;
                Err(error)
            }
        }
    }
}

/// A started gateway (or one whose shutdown came while it was starting).
pub struct RunningGateway {
    running: Running,
    store: Arc<HomeStore>,
    /// Released when the stop is over.
    _lock: std::fs::File,
}

/// What [`start`] set going.
struct Running {
    gateway: Gateway,
    live: Arc<LiveConfig>,
    local_addr: SocketAddr,
    started: bool,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
    stop_accepting: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl RunningGateway {
    /// Where the HTTP server listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.running.local_addr
    }

    /// False when the shutdown came before every channel started (the next
    /// start resumes the rest).
    pub fn started(&self) -> bool {
        self.running.started
    }

    /// The gateway (to tell operators something, say).
    pub fn gateway(&self) -> &Gateway {
        &self.running.gateway
    }

    /// Runs until the shutdown, then stops gracefully: the server stops
    /// accepting, [`Gateway::stop`] with the grace of the config in force,
    /// HTTP connections still open 5 s later are cut, then the agent's
    /// session environments and the database are closed and the home unlocked.
    pub async fn wait(self) {
        let RunningGateway { running, store, _lock } = self;
        let Running { gateway, live, started, shutdown, stop_accepting, mut server, .. } = running;
        if started {
            shutdown.await;
        }
        let _ = stop_accepting.send(true);
        // A replica taken for dead stops at once: another may run its
        // sessions already, and a turn of it that ends now would land beside
        // that one's on the tape.
        let grace = match gateway.inner.replica.get() {
            Some(replica) if replica.is_fenced() => Duration::ZERO,
            _ => live.current().http.shutdown_grace(),
        };
        gateway.stop(grace).await;
        if let Some(mcp) = gateway.inner.mcp.get() {
            mcp.stop_all().await;
        }
        // Answers already decided are still being written; connections left after that are cut.
        if tokio::time::timeout(CONNECTIONS_DRAIN, &mut server).await.is_err() {
            tracing::warn!("HTTP connections still open 5 s after the stop; closing them");
            server.abort();
        }
        if let Some(environments) = gateway.inner.agent.environments() {
            environments.close_all().await;
        }
        store.close().await;
    }
}

async fn start(
    settings: &GatewayBuilder,
    config: ConfigSource,
    agent: Agent,
    store: &HomeStore,
    confinement: Arc<PolicyConfinement>,
    mut shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
) -> Result<Running, StartError> {
    let notify = |notice: Notice| (settings.notices)(&notice);
    crate::policy::enforce(&agent);
    agent.add_tool(crate::policy::policy_tool());
    let gateway_store = GatewayStore::new(store.clone());
    agent.add_tool(super::pairing::command::pairing_tool(gateway_store.pairing()));
    // Before the config is read: `mcp` is a command operators' patterns may name.
    let mcp = McpServers::new(agent.clone(), settings.variables.clone());
    agent.add_tool(crate::mcp::command::mcp_tool(mcp.clone()));
    let notices = settings.notices.clone();
    mcp.on_unavailable(move |error| notices(&Notice::McpUnavailable(error.to_string())));
    // A config file is read, checked against the agent's tools and watched in one go.
    let (live, reloads, config_path) = match config {
        ConfigSource::File(path) => {
            let known_tools = agent.tools().iter().map(|tool| tool.name().to_string()).collect();
            let (live, reloads) = LiveConfig::watch(&path, known_tools).map_err(StartError::Config)?;
            (live, Some(reloads), Some(path))
        }
        ConfigSource::Fixed(config) => (LiveConfig::fixed(*config), None, None),
    };
    let config = live.current();
    // Where the config opens access wider than the closed defaults: always shown.
    for warning in config.warnings() {
        tracing::warn!(%warning, "config opens access");
        notify(Notice::ConfigOpensAccess(warning));
    }
    // Fail closed: the sandboxes the policies ask for are built and tried before anything starts.
    let hidden = super::confinement::hidden_paths(settings.home.root(), config_path.as_deref());
    if let Some(report) = confinement.prepare(&config, hidden).await? {
        tracing::info!(%report, "the shell and code run in the sandbox");
        notify(Notice::Sandboxed(report));
    }
    let adapters = channels::from_config(&live)?;
    let addr = settings.listen.unwrap_or(config.http.listen);
    let gateway = Gateway::new(agent, gateway_store, live.clone(), adapters, confinement);
    let _ = gateway.inner.mcp.set(mcp.clone());
    if let Some(db) = store.postgres() {
        let ttl = Duration::from_secs(config.store.lease_seconds.unwrap_or(DEFAULT_LEASE_SECONDS));
        let replica = super::replica::Replica::register(Arc::new(db.clone()), &settings.home, ttl)
            .await
            .map_err(StartError::Replica)?;
        // A turn's outcome is stored only while this incarnation holds its rows.
        db.act_as(&replica.id);
        let mut fenced = replica.fenced.subscribe();
        let _ = gateway.inner.replica.set(Arc::new(replica));
        let asked = shutdown;
        shutdown = Box::pin(async move {
            tokio::select! {
                () = asked => {}
                _ = fenced.wait_for(|fenced| *fenced) => {}
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|error| StartError::Listen { addr, error })?;
    let local_addr = listener.local_addr().map_err(StartError::LocalAddr)?;
    let state = HttpState::new(Arc::new(gateway.clone()));
    // The server stops accepting when a stop begins; the gateway's stop then answers whoever still waits.
    let (stop_accepting, mut stopping) = tokio::sync::watch::channel(false);
    let mut parts = vec![gateway.routes()];
    for part in &settings.http_parts {
        parts.extend(part(&gateway, local_addr).map_err(StartError::HttpPart)?);
    }
    let app = router(state.clone(), parts);
    let serving = crate::http::serve(listener, app, config.http.limits(), async move {
        let _ = stopping.wait_for(|stopping| *stopping).await;
    });
    let server = tokio::spawn(serving.instrument(tracing::info_span!("http.serve", addr = %local_addr)));
    // Each server comes up on its own, in the background: one that is slow or
    // broken holds back neither the channels nor the others.
    mcp.apply(&config.mcp).await;
    // The shutdown is heard from here on: one while the start resumes the
    // last run's work (POSTing its replies) is a graceful stop too, not a
    // kill that cuts a POST whose reply the next start would then send again.
    let started = tokio::select! {
        biased;
        () = &mut shutdown => None,
        started = gateway.start() => Some(started),
    };
    let started = match started {
        Some(Err(error)) => {
            server.abort();
            mcp.stop_all().await;
            if let Some(environments) = gateway.inner.agent.environments() {
                environments.close_all().await;
            }
            return Err(error.into());
        }
        Some(Ok(())) => {
            for warning in gateway.channel_warnings() {
                tracing::warn!(%warning, "a channel's platform setting hides what the policy relies on");
                notify(Notice::ChannelSetting(warning));
            }
            state.set_started();
            if let Some(reloads) = reloads {
                let reporting = report_reloads(gateway.clone(), reloads, settings.notices.clone());
                tokio::spawn(reporting.instrument(tracing::info_span!("config.reloads")));
            }
            true
        }
        None => {
            tracing::info!("stopped while starting; the next start resumes the rest");
            false
        }
    };
    Ok(Running { gateway, live, local_addr, started, shutdown, stop_accepting, server })
}

/// Locks the home's `gateway.lock` and writes the holder's pid in it.
fn lock_home(home: &BubHome) -> Result<std::fs::File, StartError> {
    use rustix::fs::{FlockOperation, flock};
    use std::io::{Read, Seek, Write};
    let path = home.gateway_lock_file();
    let failed = |action, path: PathBuf| move |error| StartError::Home { action, path, error };
    std::fs::create_dir_all(home.root()).map_err(failed("create", home.root().to_path_buf()))?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(failed("open", path.clone()))?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = Some(holder.trim().to_string()).filter(|holder| !holder.is_empty());
            return Err(StartError::HomeInUse { home: home.root().to_path_buf(), lock: path, holder });
        }
        Err(error) => return Err(failed("lock", path)(error.into())),
    }
    // The holder's pid, for the message above; the lock, not the text, is what counts.
    let written = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| write!(file, "{}", std::process::id()));
    written.map_err(failed("write", path))?;
    Ok(file)
}

/// Logs each reload of the config file and tells the operators when a new
/// file was refused (the running policy stays).
async fn report_reloads(
    gateway: Gateway,
    mut reloads: tokio::sync::mpsc::Receiver<ReloadOutcome>,
    notices: NoticeSink,
) {
    while let Some(outcome) = reloads.recv().await {
        if matches!(outcome, ReloadOutcome::Applied { .. }) {
            // Command menus that show what the policy lets people run.
            gateway.inner.menus.follow_config(&gateway.inner);
            // The MCP servers whose tables changed are restarted, the others left alone.
            if let Some(mcp) = gateway.inner.mcp.get() {
                mcp.apply(&gateway.inner.config.current().mcp).await;
            }
        }
        match outcome {
            ReloadOutcome::Applied { needs_restart } if needs_restart.is_empty() => {
                tracing::info!("config reloaded");
            }
            ReloadOutcome::Applied { needs_restart } => {
                tracing::warn!(sections = %needs_restart.join(", "), "config reloaded; these sections need a restart");
            }
            ReloadOutcome::Rejected(error) => {
                tracing::error!(%error, "the new config is invalid; the running policy stays");
                notices(&Notice::ConfigRefused(error.clone()));
                gateway
                    .notify_operators(&format!("⚠️ The new config was refused; the running policy stays.\n{error}"))
                    .await;
            }
        }
    }
}

#[async_trait::async_trait]
impl Readiness for Gateway {
    fn channel_names(&self) -> Vec<String> {
        Gateway::channel_names(self)
    }

    async fn ping(&self) -> Result<(), String> {
        self.store().ping().await.map_err(|error| error.to_string())
    }

    fn dependencies(&self) -> Vec<Dependency> {
        let Some(mcp) = self.inner.mcp.get() else { return Vec::new() };
        mcp.status()
            .into_iter()
            .map(|status| Dependency {
                name: format!("mcp.{}", status.name),
                state: status.state.label().to_string(),
                up: status.state == crate::mcp::ServerState::Ready,
                required: status.required,
                reason: status.last_error.filter(|_| status.state != crate::mcp::ServerState::Ready),
            })
            .collect()
    }
}
