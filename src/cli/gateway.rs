//! `bub gateway`: the channels, the pipeline and the HTTP server, until
//! SIGINT or SIGTERM.
//!
//! Config: `--config FILE`, else `$BUB_HOME/bub.toml` when it exists (a file
//! must name at least one channel: an empty one is an error, not the
//! default), else the embedded default — one webhook channel named `webhook` on
//! 127.0.0.1:8080, signed with `BUB_WEBHOOK_SECRET` or a secret generated on
//! first start and kept in `$BUB_HOME/webhook.secret`; `BUB_WEBHOOK_CALLBACK_URL`
//! gives it a callback URL for `?mode=async`.

use super::env;
use crate::config::GatewayConfig;
use crate::gateway::{Gateway, Notice};
use crate::home::BubHome;
use crate::setup::Setup;
use crate::telemetry::logs::LogFormat;
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tracing::Level;

/// Reads what the gateway needs from the environment and the arguments, and
/// runs it with [`Gateway::builder`] (which owns the start-up order).
pub(crate) async fn run_gateway(home: &BubHome, config: Option<PathBuf>, listen: Option<SocketAddr>) -> Result<()> {
    // What the gateway says itself (that it listens, its notices) is written like its log lines.
    let format = env::log_settings()?.format;
    let config_path = config_file(home, config);
    let location = crate::setup::store_location(home, config_path.as_deref(), &env::vars())?;
    let mut builder = Gateway::builder(home.root())
        .durability(env::durability()?)
        .store(location)
        .on_notice(move |notice| print_notice(format, notice))
        .mcp_variables(env::mcp_variable)
        .http_part(crate::admin::console(env::admin_tokens()?));
    if let Some(addr) = listen {
        builder = builder.listen(addr);
    }
    let open = builder.open().await?;
    let setup = Setup::build_with(
        home,
        home.workspaces_dir(),
        open.tape_store(),
        env::vars(),
        Some(open.environment_provider()),
    )?;
    let open = match config_path {
        Some(path) => open.config_file(path),
        None => open.config(default_config(home, format)?),
    };
    let result = async {
        let running = open.start(setup.agent.clone(), shutdown_signal()).await?;
        if running.started() {
            let mut names = running.gateway().channel_names();
            names.sort();
            let listening =
                format!("bub gateway listening on http://{} (channels: {})", running.local_addr(), names.join(", "));
            eprintln!("{}", format.user_line(Level::INFO, &listening));
        }
        let gateway = running.gateway().clone();
        running.wait().await;
        if gateway.lost_registration() {
            anyhow::bail!(
                "this replica was taken for dead (no heartbeat reached the database for longer than [store] \
                 lease_seconds) and the others took its work over; it stopped so that it can be restarted cleanly"
            );
        }
        anyhow::Ok(())
    }
    .await;
    setup.shutdown().await;
    result
}

/// The config file the gateway runs on: `--config`, else the home's
/// `bub.toml` when it exists; `None`: the embedded default ([`default_config`]).
pub(crate) fn config_file(home: &BubHome, given: Option<PathBuf>) -> Option<PathBuf> {
    given.or_else(|| Some(home.config_file()).filter(|path| path.exists()))
}

fn print_notice(format: LogFormat, notice: &Notice) {
    let (level, text) = match notice {
        Notice::Sandboxed(_) => (Level::INFO, format!("bub gateway: {notice}")),
        Notice::ConfigRefused(_) => (Level::ERROR, notice.to_string()),
        Notice::ConfigOpensAccess(_) | Notice::ChannelSetting(_) | Notice::McpUnavailable(_) => {
            (Level::WARN, notice.to_string())
        }
    };
    eprintln!("{}", format.user_line(level, &text));
}

/// The embedded default: one webhook channel, its secret and optional callback from the environment.
fn default_config(home: &BubHome, format: LogFormat) -> Result<GatewayConfig> {
    default_config_with(webhook_secret(home, format)?)
}

/// The embedded default with this secret.
pub(crate) fn default_config_with(secret: String) -> Result<GatewayConfig> {
    let mut config = GatewayConfig::default_webhook(secret);
    if let Some(url) = env::var("BUB_WEBHOOK_CALLBACK_URL")
        && let Some(channel) = config.channels.get_mut("webhook")
        && let crate::config::ChannelKind::Webhook(settings) = &mut channel.kind
    {
        settings.callback_url = Some(url);
    }
    Ok(config)
}

/// `BUB_WEBHOOK_SECRET`, or the stored one, or a new one (stored; where it
/// is kept is printed, never the secret: stderr is the log of a gateway run
/// as a service).
fn webhook_secret(home: &BubHome, format: LogFormat) -> Result<String> {
    if let Some(secret) = existing_webhook_secret(home)? {
        return Ok(secret);
    }
    let path = home.webhook_secret_file();
    let secret: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
    std::fs::create_dir_all(home.root()).with_context(|| format!("cannot create {}", home.root().display()))?;
    write_private(&path, &secret).with_context(|| format!("cannot store the webhook secret in {}", path.display()))?;
    let generated = format!(
        "generated a webhook secret, kept in {} (readable by this user only): sign requests with it",
        path.display()
    );
    eprintln!("{}", format.user_line(Level::INFO, &generated));
    Ok(secret)
}

/// `BUB_WEBHOOK_SECRET`, or the one stored in the home; `None`: the
/// gateway will generate one at its first start.
pub(crate) fn existing_webhook_secret(home: &BubHome) -> Result<Option<String>> {
    if let Some(secret) = env::var("BUB_WEBHOOK_SECRET") {
        return Ok(Some(secret));
    }
    let path = home.webhook_secret_file();
    match std::fs::read_to_string(&path) {
        Ok(secret) if !secret.trim().is_empty() => Ok(Some(secret.trim().to_string())),
        Ok(_) => Ok(None),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
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
