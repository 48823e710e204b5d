//! The config check: the file loaded as `bub policy check` loads it, and
//! kept from other users' eyes when it holds a secret itself (rather than
//! naming a file that does: `token_file`, `secrets_file`, …).

use super::Finding;
use crate::config::GatewayConfig;
use crate::home::BubHome;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The config the gateway would run on, for the checks that need it.
pub(crate) struct Checked {
    pub config: GatewayConfig,
    /// `None`: the built-in default (one webhook channel).
    pub file: Option<PathBuf>,
    /// The built-in default has no secret yet: the first start generates one.
    pub secret_pending: bool,
}

/// The findings about the config, and the config when it loads.
pub(crate) fn check(home: &BubHome, file: Option<&Path>) -> (Vec<Finding>, Option<Checked>) {
    let Some(file) = file else { return builtin(home) };
    let loaded = match crate::cli::policy::load(file) {
        Ok(loaded) => loaded,
        Err(error) => {
            let fix = format!("correct the file where it says, then `bub policy check {}`", file.display());
            return (vec![Finding::fail("config", error.to_string(), fix)], None);
        }
    };
    let mut findings = Vec::new();
    let shown = file.display();
    match loaded.warnings.len() {
        0 => findings.push(Finding::ok("config", format!("{shown}: {}", loaded.summary()))),
        n => findings.push(Finding::warn(
            "config",
            format!(
                "{shown}: {} channels; {n} places open access wider than the defaults: {}",
                loaded.config.channels.len(),
                loaded.warnings.join("; ")
            ),
            format!("if that is not meant, close them; `bub policy check {shown}` lists them"),
        )),
    }
    if let Ok(metadata) = std::fs::metadata(file)
        && let Some(key) = inline_secret(file)
    {
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            findings.push(Finding::warn(
                "config",
                format!("{shown} holds a secret (`{key}`), and others may read it (mode {mode:04o})"),
                format!("chmod 600 {shown}, or read the secret from a file (`{key}_file`)"),
            ));
        }
    }
    (findings, Some(Checked { config: loaded.config, file: Some(file.to_path_buf()), secret_pending: false }))
}

/// The first secret written in the file itself (a channel's `token`,
/// `secrets`, `callback_secret`, `webhook_secret`, or `[store] url`); `None`
/// when every secret is read from a file (`KEY_file`), so the config may be
/// world-readable (a Kubernetes ConfigMap).
fn inline_secret(file: &Path) -> Option<&'static str> {
    const CHANNEL_SECRETS: [&str; 4] = ["token", "secrets", "callback_secret", "webhook_secret"];
    let table: toml::Table = std::fs::read_to_string(file).ok()?.parse().ok()?;
    let channels = table.get("channels").and_then(toml::Value::as_table);
    let in_channel = channels.into_iter().flat_map(|channels| channels.values()).find_map(|channel| {
        let channel = channel.as_table()?;
        CHANNEL_SECRETS.into_iter().find(|key| channel.contains_key(*key))
    });
    let in_store = table.get("store").and_then(toml::Value::as_table).is_some_and(|store| store.contains_key("url"));
    in_channel.or(in_store.then_some("url"))
}

/// No file: the gateway's built-in default, with the secret it would use.
fn builtin(home: &BubHome) -> (Vec<Finding>, Option<Checked>) {
    let none = home.config_file();
    let secret = match crate::cli::gateway::existing_webhook_secret(home) {
        Ok(secret) => secret,
        Err(error) => {
            let fix = format!("give the gateway's user read access to {}", home.webhook_secret_file().display());
            return (vec![Finding::fail("config", format!("{error:#}"), fix)], None);
        }
    };
    let secret_pending = secret.is_none();
    let config = match crate::cli::gateway::default_config_with(secret.unwrap_or_default()) {
        Ok(config) => config,
        Err(error) => return (vec![Finding::fail("config", format!("{error:#}"), "see the error")], None),
    };
    let detail = format!(
        "no {} and no --config: the built-in default, one webhook channel `webhook` on {}",
        none.display(),
        config.http.listen
    );
    (vec![Finding::ok("config", detail)], Some(Checked { config, file: None, secret_pending }))
}
