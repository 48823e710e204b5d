//! `bub gateway`: the channels, the pipeline and the HTTP server, until
//! SIGINT or SIGTERM.
//!
//! Config: `--config FILE`, else `$BUB_HOME/bub.toml` when it exists (a file
//! must name at least one channel: an empty one is an error, not the
//! default), else the embedded default — one webhook channel named `webhook` on
//! 127.0.0.1:8080, signed with `BUB_WEBHOOK_SECRET` or a secret generated on
//! first start and kept in `$BUB_HOME/webhook.secret`; `BUB_WEBHOOK_CALLBACK_URL`
//! gives it a callback URL for `?mode=async`.

use crate::config::{GatewayConfig, LiveConfig, ReloadOutcome};
use crate::db::{Durability, SqliteTapeStore};
use crate::environment::EnvironmentProvider;
use crate::gateway::confinement::PolicyConfinement;
use crate::gateway::store::GatewayStore;
use crate::gateway::{Gateway, channels};
use crate::home::BubHome;
use crate::http::{HttpState, router};
use crate::setup::Setup;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) async fn run_gateway(home: &BubHome, config: Option<PathBuf>, listen: Option<SocketAddr>) -> Result<()> {
    let _one_gateway = lock_home(home)?;
    let config_path = config.or_else(|| Some(home.config_file()).filter(|path| path.exists()));
    let confinement = PolicyConfinement::new();
    let store = Arc::new(SqliteTapeStore::open_with(home.database(), durability()?).await?);
    let vars = std::env::vars().collect();
    let provider: Arc<dyn EnvironmentProvider> = confinement.clone();
    let setup = Setup::build_with(home, home.workspaces_dir(), store, vars, Some(provider))?;
    crate::policy::enforce(&setup.agent);
    setup.agent.add_tool(crate::policy::policy_tool());
    let store = GatewayStore::new((*setup.store).clone());
    setup.agent.add_tool(crate::gateway::pairing::command::pairing_tool(store.pairing()));
    // A config file is read, checked against the agent's tools and watched in one go.
    let (live, reloads) = match &config_path {
        Some(path) => {
            let known_tools = setup.agent.tools().iter().map(|tool| tool.name().to_string()).collect();
            let (live, reloads) = LiveConfig::watch(path, known_tools).map_err(|error| anyhow::anyhow!("{error}"))?;
            (live, Some(reloads))
        }
        None => (LiveConfig::fixed(default_config(home)?), None),
    };
    let config = live.current();
    // Where the config opens access wider than the closed defaults: always shown.
    for warning in config.warnings() {
        tracing::warn!(%warning, "config opens access");
        eprintln!("{warning}");
    }
    // Fail closed: the sandboxes the policies ask for are built and tried before anything starts.
    let mut hidden = vec![home.root().to_path_buf()];
    hidden.extend(config_path.iter().filter_map(|path| std::path::absolute(path).ok()));
    if let Some(report) = confinement.prepare(&config, hidden).await? {
        eprintln!("bub gateway: the shell and code run in the sandbox; kernel features:\n{report}");
    }
    let adapters = channels::from_config(&live)?;
    let addr = listen.unwrap_or(config.http.listen);
    let live_config = live.clone();
    let gateway = Gateway::new(setup.agent.clone(), store, live, adapters, confinement);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (choose another address with [http] listen or --listen)"))?;
    let bound = listener.local_addr().context("cannot read the listening address")?;
    let state = HttpState::new(gateway.clone());
    // The server stops accepting when a stop begins; the gateway's stop then answers whoever still waits.
    let (stopping, stop_requested) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(crate::http::serve(listener, router(state.clone()), config.http.limits(), async move {
        let mut stop_requested = stop_requested;
        let _ = stop_requested.wait_for(|stopping| *stopping).await;
    }));
    // Signals are caught from here on: a SIGTERM while the start resumes the
    // last run's work (POSTing its replies) is a graceful stop too, not a kill
    // that cuts a POST whose reply the next start would then send again.
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let started = tokio::select! {
        biased;
        () = &mut shutdown => None,
        started = gateway.start() => Some(started),
    };
    match started {
        Some(Err(error)) => {
            server.abort();
            setup.shutdown().await;
            return Err(error.into());
        }
        Some(Ok(())) => {
            state.set_started();
            if let Some(reloads) = reloads {
                tokio::spawn(report_reloads(gateway.clone(), reloads));
            }
            let mut names = gateway.channel_names();
            names.sort();
            eprintln!("bub gateway listening on http://{bound} (channels: {})", names.join(", "));
            shutdown.await;
        }
        None => tracing::info!("stopped while starting; the next start resumes the rest"),
    }
    let _ = stopping.send(true);
    // The grace of the config in force when the stop begins.
    gateway.stop(live_config.current().http.shutdown_grace()).await;
    // Answers already decided are still being written; connections left after that are cut.
    let mut server = server;
    if tokio::time::timeout(std::time::Duration::from_secs(5), &mut server).await.is_err() {
        tracing::warn!("HTTP connections still open 5 s after the stop; closing them");
        server.abort();
    }
    setup.shutdown().await;
    Ok(())
}

/// Locks the home's `gateway.lock` for as long as the gateway runs (the lock
/// goes with the process, however it ends). Two gateways on one home would
/// both resume its unfinished turns and pending replies: callbacks POSTed
/// twice, turns answered twice.
fn lock_home(home: &BubHome) -> Result<std::fs::File> {
    use rustix::fs::{FlockOperation, flock};
    use std::io::{Read, Seek, Write};
    let path = home.gateway_lock_file();
    std::fs::create_dir_all(home.root()).with_context(|| format!("cannot create {}", home.root().display()))?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let by = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            anyhow::bail!(
                "another bub gateway is running on {}{by}: stop it first (it holds {}); two gateways on one \
                 home would both send its pending replies",
                home.root().display(),
                path.display()
            );
        }
        Err(error) => return Err(error).with_context(|| format!("cannot lock {}", path.display())),
    }
    // The holder's pid, for the message above; the lock, not the text, is what counts.
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

/// `BUB_SQLITE_SYNC`: `full` (default: every commit reaches the disk before a
/// message is acknowledged) or `normal` (commits survive a crash of the
/// process, not of the machine; faster on slow disks).
fn durability() -> Result<Durability> {
    match std::env::var("BUB_SQLITE_SYNC").ok().as_deref().map(str::trim) {
        None | Some("") | Some("full") => Ok(Durability::Full),
        Some("normal") => Ok(Durability::Normal),
        Some(other) => anyhow::bail!("BUB_SQLITE_SYNC={other:?}: must be full or normal"),
    }
}

/// The embedded default: one webhook channel, its secret and optional callback from the environment.
fn default_config(home: &BubHome) -> Result<GatewayConfig> {
    let mut config = GatewayConfig::default_webhook(webhook_secret(home)?);
    if let Ok(url) = std::env::var("BUB_WEBHOOK_CALLBACK_URL")
        && !url.trim().is_empty()
        && let Some(channel) = config.channels.get_mut("webhook")
        && let crate::config::ChannelKind::Webhook(settings) = &mut channel.kind
    {
        settings.callback_url = Some(url.trim().to_string());
    }
    Ok(config)
}

/// `BUB_WEBHOOK_SECRET`, or the stored one, or a new one (stored, and printed once).
fn webhook_secret(home: &BubHome) -> Result<String> {
    if let Ok(secret) = std::env::var("BUB_WEBHOOK_SECRET")
        && !secret.trim().is_empty()
    {
        return Ok(secret.trim().to_string());
    }
    let path = home.webhook_secret_file();
    match std::fs::read_to_string(&path) {
        Ok(secret) if !secret.trim().is_empty() => return Ok(secret.trim().to_string()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
    let secret: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
    std::fs::create_dir_all(home.root()).with_context(|| format!("cannot create {}", home.root().display()))?;
    write_private(&path, &secret).with_context(|| format!("cannot store the webhook secret in {}", path.display()))?;
    eprintln!("generated a webhook secret (kept in {}): {secret}", path.display());
    Ok(secret)
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
}

/// Logs each reload of the config file and tells the operators when a new
/// file was refused (the running policy stays).
async fn report_reloads(gateway: Gateway, mut reloads: tokio::sync::mpsc::Receiver<ReloadOutcome>) {
    while let Some(outcome) = reloads.recv().await {
        match outcome {
            ReloadOutcome::Applied { needs_restart } if needs_restart.is_empty() => {
                tracing::info!("config reloaded");
            }
            ReloadOutcome::Applied { needs_restart } => {
                tracing::warn!(sections = %needs_restart.join(", "), "config reloaded; these sections need a restart");
            }
            ReloadOutcome::Rejected(error) => {
                tracing::error!(%error, "the new config is invalid; the running policy stays");
                eprintln!("error: the new config is invalid; the running policy stays: {error}");
                gateway
                    .notify_operators(&format!("⚠️ The new config was refused; the running policy stays.\n{error}"))
                    .await;
            }
        }
    }
}
