//! Hot reload: [`LiveConfig`] serves the current [`GatewayConfig`] and
//! replaces it when the file changes or the process gets SIGHUP.
//!
//! Guarantees:
//! - An invalid new file never replaces a running config: the old one stays,
//!   and the error (`FILE:LINE:COL: …`) is logged and reported as
//!   [`ReloadOutcome::Rejected`].
//! - Nor does a valid file that would change what runs: an empty file (a
//!   save cut short), one without channels, one without the section of a
//!   running channel, or one that changes a running channel's `kind`. The
//!   gateway would fall back to open defaults for those channels; removing
//!   or re-kinding a channel needs a restart, and the rejection says so.
//!   ([`require_channels`]: a config file always names a channel, at start too.)
//! - The watcher watches the file's *directory*, so editors that save by
//!   writing a new file and renaming it over the old one are seen; bursts of
//!   events (one save is often several) are coalesced for 200 ms, and a file
//!   whose text did not change is not reloaded.
//! - Readers take an `Arc` snapshot ([`LiveConfig::current`]) and keep a
//!   consistent config for as long as they hold it (a turn keeps the policy
//!   it started with).
//!
//! Edits from the admin console go through the same checks and the same
//! installation ([`LiveConfig::check_text`], [`LiveConfig::replace`] in
//! `edit.rs`): one lock orders them with the watcher's reloads, so a file the
//! console wrote is not reloaded a second time when the watcher sees it (its
//! text is the running one by then).
//!
//! Policy takes effect live, and so do a webhook channel's `secrets` and
//! `callback_secret` (the adapter reads them from the config in force on
//! every request). The new file is served whole, but the gateway reads
//! `[http]` and the other connection keys (tokens, URLs) — and which
//! channels exist — once, at start; a reload that changes them (or adds a
//! channel) is applied to policies and reported with
//! [`ReloadOutcome::Applied::needs_restart`] naming those sections, compared
//! with the config the gateway started with.

use super::channel::{ChannelKind, WebhookConfig};
use super::error::ConfigError;
use super::file::GatewayConfig;
use super::http::HttpConfig;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use parking_lot::{Mutex, RwLock};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::Instrument;

/// How long a burst of file events is gathered before one reload.
const COALESCE: Duration = Duration::from_millis(200);

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReloadOutcome {
    /// The new config is in force. `needs_restart` names the sections whose
    /// changes the running gateway does not pick up (`http`, `channels.NAME`).
    Applied { needs_restart: Vec<String> },
    /// The file is invalid (the error text says where); the old config stays.
    Rejected(String),
}

/// The config in force, replaceable while the gateway runs.
pub struct LiveConfig {
    current: RwLock<Arc<GatewayConfig>>,
    /// The config the gateway started with: its channels are the ones running.
    started: Arc<GatewayConfig>,
    pub(super) path: Option<PathBuf>,
    known_tools: Vec<String>,
    /// The text of the config in force, to skip reloads that change nothing.
    pub(super) text: Mutex<Option<String>>,
    /// Held by a reload and by an edit from start to end: one at a time, so
    /// the watcher never reads a file an edit is writing, nor an edit a
    /// version a reload is replacing.
    pub(super) changing: Mutex<()>,
    /// Where outcomes are reported (the receiver [`LiveConfig::watch`]
    /// returns): the watcher's reloads and the edits both.
    reports: Option<mpsc::Sender<ReloadOutcome>>,
}

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveConfig").field("path", &self.path).finish_non_exhaustive()
    }
}

impl LiveConfig {
    /// A config that never changes (the gateway's no-file start, tests).
    pub fn fixed(config: GatewayConfig) -> Arc<LiveConfig> {
        let config = Arc::new(config);
        Arc::new(LiveConfig {
            current: RwLock::new(config.clone()),
            started: config,
            path: None,
            known_tools: Vec::new(),
            text: Mutex::new(None),
            changing: Mutex::new(()),
            reports: None,
        })
    }

    /// The config in force now. Cheap: one lock and an `Arc` clone.
    pub fn current(&self) -> Arc<GatewayConfig> {
        self.current.read().clone()
    }

    /// Loads `path` (checking tool patterns against `known_tools`, and that it
    /// names a channel: [`require_channels`]), then reloads it on change and
    /// on SIGHUP until the `LiveConfig` is dropped.
    /// Every reload's outcome is logged and sent on the receiver (dropped when
    /// nobody keeps up). Needs a tokio runtime.
    pub fn watch(
        path: impl AsRef<Path>,
        known_tools: Vec<String>,
    ) -> Result<(Arc<LiveConfig>, mpsc::Receiver<ReloadOutcome>), ConfigError> {
        let path = path.as_ref().to_path_buf();
        let text = read(&path)?;
        let config = GatewayConfig::parse(&text, &path)?;
        config.validate_tools(&known_tools)?;
        require_channels(&config)?;
        let config = Arc::new(config);
        let (outcomes_tx, outcomes_rx) = mpsc::channel(16);
        let live = Arc::new(LiveConfig {
            current: RwLock::new(config.clone()),
            started: config,
            path: Some(path.clone()),
            known_tools,
            text: Mutex::new(Some(text)),
            changing: Mutex::new(()),
            reports: Some(outcomes_tx),
        });

        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let file_name = path.file_name().map(|n| n.to_os_string());
        let watch_error = |e: notify::Error| ConfigError::Watch { path: path.clone(), message: e.to_string() };
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            // Our own reads show up as access events: only changes count.
            let is_change = match event.kind {
                EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
                EventKind::Access(_) => false,
                _ => true,
            };
            if !is_change {
                return;
            }
            if event.paths.iter().any(|p| p.file_name().map(|n| n.to_os_string()) == file_name) {
                let _ = events_tx.send(());
            }
        })
        .map_err(watch_error)?;
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        watcher.watch(&directory, RecursiveMode::NonRecursive).map_err(watch_error)?;

        // Registered before returning, so a SIGHUP sent right after never
        // meets the default action (which ends the process).
        let hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; config reloads on file changes only");
                None
            }
        };
        let reloading = reload_loop(Arc::downgrade(&live), watcher, hangup, events_rx);
        tokio::spawn(reloading.instrument(tracing::info_span!("config.watch")));
        Ok((live, outcomes_rx))
    }

    /// Reads the file again now and applies it if valid (SIGHUP does this;
    /// an admin API can too), and reports the outcome as the watcher's
    /// reloads are. A config without a file is rejected. Blocking: it reads
    /// the file.
    pub fn reload(&self) -> ReloadOutcome {
        let outcome = self.reload_if_changed(true).unwrap_or(ReloadOutcome::Applied { needs_restart: Vec::new() });
        self.report(outcome.clone());
        outcome
    }

    /// Checks a config text exactly as a reload does, without applying it:
    /// it parses and passes every check of `bub policy check` (the file's
    /// checks and the tool names the agent knows; a file without channels
    /// fails), plus the reload's own rule — no running channel removed or
    /// given another kind (those need a restart).
    /// Errors name the config file and, where they point into the text, its
    /// line and column. A config without a file has nothing to check
    /// against: refused.
    pub fn check_text(&self, text: &str) -> Result<GatewayConfig, ConfigError> {
        let Some(path) = &self.path else {
            return Err(ConfigError::Invalid {
                path: PathBuf::from("(built-in config)"),
                location: None,
                message: NO_FILE.to_string(),
            });
        };
        let config = GatewayConfig::parse(text, path)?;
        config.validate_tools(&self.known_tools)?;
        keeps_running_channels(&self.started, text, &config, path)?;
        Ok(config)
    }

    /// `None` when not forced and the text is what is already in force.
    fn reload_if_changed(&self, forced: bool) -> Option<ReloadOutcome> {
        let Some(path) = &self.path else {
            return Some(ReloadOutcome::Rejected(NO_FILE.to_string()));
        };
        let _changing = self.changing.lock();
        let checked = read(path).and_then(|text| {
            let unchanged = self.text.lock().as_deref() == Some(text.as_str());
            if unchanged && !forced {
                return Ok(None);
            }
            let config = self.check_text(&text)?;
            Ok(Some((text, config)))
        });
        let outcome = match checked {
            Ok(None) => return None,
            Ok(Some((text, config))) => self.install(text, config),
            Err(error) => {
                tracing::warn!(error = %error, "config reload rejected; the running config stays");
                ReloadOutcome::Rejected(error.to_string())
            }
        };
        Some(outcome)
    }

    /// Puts a checked config (and its text) in force; the caller holds
    /// `changing`.
    pub(super) fn install(&self, text: String, config: GatewayConfig) -> ReloadOutcome {
        let needs_restart = needs_restart(&self.started, &config);
        *self.current.write() = Arc::new(config);
        *self.text.lock() = Some(text);
        let path = self.path.as_deref().unwrap_or(Path::new(""));
        tracing::info!(path = %path.display(), "config reloaded");
        if !needs_restart.is_empty() {
            tracing::warn!(
                path = %path.display(),
                sections = %needs_restart.join(", "),
                "config changes outside policy need a restart; policies are applied now"
            );
        }
        ReloadOutcome::Applied { needs_restart }
    }

    /// Hands an outcome to whoever follows reloads (the gateway's reporter:
    /// command menus, MCP servers, operators' notices); dropped, with a
    /// debug line, when nobody keeps up.
    pub(super) fn report(&self, outcome: ReloadOutcome) {
        if let Some(reports) = &self.reports
            && reports.try_send(outcome).is_err()
        {
            tracing::debug!("reload outcome not delivered: nobody is listening");
        }
    }
}

/// Why a config without a file cannot be reloaded or edited.
const NO_FILE: &str = "this gateway runs without a config file";

/// A config file names at least one channel: without one the gateway has
/// nothing to serve, and an empty file is more likely a save cut short than
/// a choice. (With no file at all the gateway starts its embedded default,
/// one webhook channel.)
pub fn require_channels(config: &GatewayConfig) -> Result<(), ConfigError> {
    if !config.channels.is_empty() {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        path: config.path().map(Path::to_path_buf).unwrap_or_default(),
        location: None,
        message: "no channels: the file has no [channels.NAME] section, so the gateway would serve nothing; \
                  add one (see config/bub.example.toml), or remove the file to start on the embedded default \
                  webhook channel"
            .to_string(),
    })
}

/// Refuses a reload that would take a running channel's section away (its
/// chats would fall back to the open defaults) or change its kind: both need
/// a restart. An empty file or one without channels says so first.
fn keeps_running_channels(
    started: &GatewayConfig,
    text: &str,
    new: &GatewayConfig,
    path: &Path,
) -> Result<(), ConfigError> {
    let running: Vec<&str> = started.channels.keys().map(String::as_str).collect();
    let refuse = |message: String| Err(ConfigError::Invalid { path: path.to_path_buf(), location: None, message });
    if new.channels.is_empty() && !running.is_empty() {
        let what = if text.trim().is_empty() { "the file is empty" } else { "the file has no [channels.NAME] section" };
        return refuse(format!(
            "{what}: no channels, while channels {} run; write the whole config back \
             (removing channels needs a restart)",
            running.join(", ")
        ));
    }
    let removed: Vec<&str> = running.iter().copied().filter(|name| !new.channels.contains_key(*name)).collect();
    if let [name] = removed.as_slice() {
        return refuse(format!(
            "removing channel {name} needs a restart; put [channels.{name}] back, or restart the gateway to remove it"
        ));
    }
    if !removed.is_empty() {
        return refuse(format!(
            "removing channels {} needs a restart; put their sections back, or restart the gateway to remove them",
            removed.join(", ")
        ));
    }
    for (name, channel) in &started.channels {
        let (was, now) = (channel.kind.name(), new.channels.get(name).map(|c| c.kind.name()));
        if let Some(now) = now
            && now != was
        {
            return refuse(format!(
                "changing the kind of channel {name} from {was} to {now} needs a restart; \
                 put `kind = \"{was}\"` back, or restart the gateway"
            ));
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })
}

/// The sections whose change the running gateway does not pick up.
fn needs_restart(old: &GatewayConfig, new: &GatewayConfig) -> Vec<String> {
    let mut sections = Vec::new();
    // The stop's grace is read when a stop begins; the rest is fixed at start.
    let fixed_at_start = |http: &HttpConfig| HttpConfig { shutdown_grace_seconds: None, ..http.clone() };
    if fixed_at_start(&old.http) != fixed_at_start(&new.http) {
        sections.push("http".to_string());
    }
    if old.sandbox != new.sandbox {
        sections.push("sandbox".to_string());
    }
    if old.store != new.store {
        sections.push("store".to_string());
    }
    // The console's routes are mounted at start; its tokens follow reloads.
    let mounted = |config: &GatewayConfig| config.admin.as_ref().map(|admin| admin.base_path.clone());
    if mounted(old) != mounted(new) {
        sections.push("admin".to_string());
    }
    let names = old.channels.keys().chain(new.channels.keys().filter(|n| !old.channels.contains_key(*n)));
    for name in names {
        match (old.channels.get(name), new.channels.get(name)) {
            (Some(a), Some(b)) if fixed_keys(&a.kind) == fixed_keys(&b.kind) => {}
            _ => sections.push(format!("channels.{name}")),
        }
    }
    sections
}

/// A channel's keys that are read once, at start: all but a webhook's secrets.
fn fixed_keys(kind: &ChannelKind) -> ChannelKind {
    match kind {
        ChannelKind::Webhook(hook) => {
            ChannelKind::Webhook(WebhookConfig { secrets: Vec::new(), callback_secret: None, ..hook.clone() })
        }
        other => other.clone(),
    }
}

/// Waits for file events (coalesced) or SIGHUP, reloads, reports. Ends when
/// the `LiveConfig` is gone.
async fn reload_loop(
    live: Weak<LiveConfig>,
    watcher: notify::RecommendedWatcher,
    mut hangup: Option<tokio::signal::unix::Signal>,
    mut events: mpsc::UnboundedReceiver<()>,
) {
    let _watcher = watcher;
    loop {
        let forced = tokio::select! {
            event = events.recv() => match event {
                Some(()) => false,
                None => return,
            },
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        if !forced {
            while let Ok(Some(())) = tokio::time::timeout(COALESCE, events.recv()).await {}
        }
        let Some(config) = live.upgrade() else { return };
        // What the reload logs ("config reloaded", a rejection) stays in this task's span.
        let span = tracing::Span::current();
        let _ = tokio::task::spawn_blocking(move || {
            span.in_scope(|| {
                if let Some(outcome) = config.reload_if_changed(forced) {
                    config.report(outcome);
                }
            })
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"a\"]\n";

    #[test]
    #[cfg(feature = "telegram")]
    fn only_connection_changes_need_a_restart() {
        let old = GatewayConfig::parse(BASE, "bub.toml").unwrap();
        let policy_only = format!("{BASE}[channels.hooks.policy]\nbusy = \"drop\"\n");
        let new = GatewayConfig::parse(&policy_only, "bub.toml").unwrap();
        assert!(needs_restart(&old, &new).is_empty());
        let grace_only = format!("[http]\nshutdown_grace_seconds = 60\n{BASE}");
        let new = GatewayConfig::parse(&grace_only, "bub.toml").unwrap();
        assert!(needs_restart(&old, &new).is_empty(), "the stop's grace is read when a stop begins");
        let rotated = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"b\", \"c\"]\ncallback_secret = \"d\"\n";
        let new = GatewayConfig::parse(rotated, "bub.toml").unwrap();
        assert!(needs_restart(&old, &new).is_empty(), "a webhook's secrets follow reloads");
        let moved = "[http]\nlisten = \"0.0.0.0:9\"\n[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"b\"]\n\
                     callback_url = \"http://127.0.0.1:9/cb\"\n[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n";
        let new = GatewayConfig::parse(moved, "bub.toml").unwrap();
        assert_eq!(needs_restart(&old, &new), ["http", "channels.hooks", "channels.tg"]);
        let capped = format!("[sandbox]\nsession_memory_bytes = 1073741824\n{BASE}");
        let new = GatewayConfig::parse(&capped, "bub.toml").unwrap();
        assert_eq!(needs_restart(&old, &new), ["sandbox"], "the sandboxes are built at start");
        let zero = format!("[sandbox]\nsession_processes = 0\n{BASE}");
        assert!(GatewayConfig::parse(&zero, "bub.toml").is_err(), "a limit of 0 is a typo");
        let shown = format!("[sandbox]\nread_only = [\"/opt/mcp\"]\n{BASE}");
        let new = GatewayConfig::parse(&shown, "bub.toml").unwrap();
        assert_eq!(new.sandbox.read_only, [std::path::PathBuf::from("/opt/mcp")]);
        assert_eq!(needs_restart(&old, &new), ["sandbox"], "what the sandbox shows is fixed at start");
        let relative = format!("[sandbox]\nread_only = [\"opt/mcp\"]\n{BASE}");
        let error = GatewayConfig::parse(&relative, "bub.toml").unwrap_err().to_string();
        assert!(error.contains("`opt/mcp` is not an absolute path"), "{error}");
    }

    #[test]
    #[cfg(feature = "discord")]
    fn a_new_shard_count_needs_a_restart() {
        let dc = "[channels.dc]\nkind = \"discord\"\ntoken = \"t\"\n";
        let old = GatewayConfig::parse(dc, "bub.toml").unwrap();
        let new = GatewayConfig::parse(&format!("{dc}shards = 2\n"), "bub.toml").unwrap();
        assert_eq!(needs_restart(&old, &new), ["channels.dc"], "the connections are opened at start");
    }

    #[cfg(all(feature = "telegram", feature = "discord"))]
    fn refusal(text: &str) -> Option<String> {
        let started =
            GatewayConfig::parse(&format!("{BASE}[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n"), "bub.toml")
                .unwrap();
        let new = GatewayConfig::parse(text, "bub.toml").unwrap();
        keeps_running_channels(&started, text, &new, Path::new("bub.toml")).err().map(|error| error.to_string())
    }

    #[test]
    #[cfg(all(feature = "telegram", feature = "discord"))]
    fn a_reload_may_not_take_a_running_channel_away_or_change_its_kind() {
        let empty = refusal("  \n").unwrap();
        assert!(empty.starts_with("bub.toml: the file is empty: no channels, while channels hooks, tg run"), "{empty}");
        let no_channels = refusal("[policy.defaults]\nbusy = \"drop\"\n").unwrap();
        assert!(no_channels.contains("no [channels.NAME] section"), "{no_channels}");
        assert_eq!(
            refusal(BASE).unwrap(),
            "bub.toml: removing channel tg needs a restart; put [channels.tg] back, or restart the gateway to remove it"
        );
        let rekinded = format!("{BASE}[channels.tg]\nkind = \"discord\"\ntoken = \"t\"\n");
        assert!(
            refusal(&rekinded)
                .unwrap()
                .contains("changing the kind of channel tg from telegram to discord needs a restart")
        );
        let added = format!(
            "{BASE}[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n[channels.more]\nkind = \"webhook\"\nsecrets = [\"m\"]\n"
        );
        assert_eq!(refusal(&added), None, "adding a channel is applied (and needs a restart to run)");
    }

    #[test]
    fn a_config_file_without_channels_is_an_error() {
        let error = require_channels(&GatewayConfig::parse("", "bub.toml").unwrap()).unwrap_err().to_string();
        assert!(error.starts_with("bub.toml: no channels: "), "{error}");
        assert!(error.contains("remove the file to start on the embedded default"), "{error}");
        assert!(require_channels(&GatewayConfig::parse(BASE, "bub.toml").unwrap()).is_ok());
    }

    #[test]
    fn a_fixed_config_cannot_reload() {
        let live = LiveConfig::fixed(GatewayConfig::default_webhook("s".into()));
        assert!(matches!(live.reload(), ReloadOutcome::Rejected(_)));
        assert!(live.current().channels.contains_key("webhook"));
    }
}
