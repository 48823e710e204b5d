//! `[store]`: where bub keeps its tapes and the gateway's tables.
//!
//! Unset, the embedded SQLite file in the home (`$BUB_HOME/bub.db`): one
//! process. `url = "postgres://…"` (or `url_file`, a file holding it, as
//! Kubernetes and compose mount secrets; or the `BUB_DATABASE_URL`
//! variable, which wins over both) puts everything in one PostgreSQL
//! database that several gateway replicas share. Read once at start: a
//! change needs a restart.

use super::Secret;
use serde::Deserialize;
use std::path::PathBuf;

/// `[store]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database` (a secret: it may hold
    /// a password, so it is never printed).
    #[serde(default)]
    pub url: Option<Secret>,
    /// A file whose first line is the URL.
    #[serde(default)]
    pub url_file: Option<PathBuf>,
    /// Seconds a replica's leases (its sessions, a Telegram poller) outlive
    /// its last heartbeat: how long the others wait before they take over
    /// from a replica that died. Default 10.
    #[serde(default)]
    pub lease_seconds: Option<u64>,
}

impl StoreConfig {
    /// Both `url` and `url_file` set is a mistake: which one is meant?
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.url.is_some() && self.url_file.is_some() {
            return Err("[store] sets both url and url_file: keep one".into());
        }
        if self.lease_seconds == Some(0) || self.lease_seconds.is_some_and(|s| s > 3600) {
            return Err("[store] lease_seconds must be between 1 and 3600".into());
        }
        Ok(())
    }
}

/// The file's `[store]` table alone: `bub run`, `bub tape` and the others
/// need where the database is, not the channels (a config whose channels do
/// not check yet still names its database).
#[derive(Deserialize)]
struct StoreOnly {
    #[serde(default)]
    store: StoreConfig,
}

impl StoreConfig {
    /// The `[store]` table of the config file at `path`.
    pub fn read_from(path: &std::path::Path) -> Result<StoreConfig, super::ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| super::ConfigError::Read { path: path.to_path_buf(), source })?;
        let invalid = |location, message| super::ConfigError::Invalid { path: path.to_path_buf(), location, message };
        // Other tables are the full parser's business; only `[store]` is read here.
        let table: toml::Table = toml::from_str(&text).map_err(|error| invalid(None, error.message().to_string()))?;
        let store = match table.get("store") {
            Some(value) => {
                let only: StoreOnly = toml::Value::Table(toml::Table::from_iter([("store".into(), value.clone())]))
                    .try_into()
                    .map_err(|error: toml::de::Error| invalid(None, format!("[store]: {}", error.message())))?;
                only.store
            }
            None => StoreConfig::default(),
        };
        store.check().map_err(|message| invalid(None, message))?;
        Ok(store)
    }

    /// The PostgreSQL URL this table names, reading `url_file` if that is
    /// how; `None`: the embedded SQLite file.
    pub fn url(&self) -> Result<Option<Secret>, String> {
        if let Some(url) = &self.url {
            return Ok(Some(url.clone()));
        }
        let Some(file) = &self.url_file else { return Ok(None) };
        let text = std::fs::read_to_string(file)
            .map_err(|error| format!("[store] url_file {}: cannot read: {error}", file.display()))?;
        match text.lines().next().map(str::trim).filter(|line| !line.is_empty()) {
            Some(url) => Ok(Some(Secret::new(url))),
            None => Err(format!("[store] url_file {} is empty: it must hold the postgres:// URL", file.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<StoreConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bub.toml");
        std::fs::write(&path, text).unwrap();
        StoreConfig::read_from(&path).map_err(|error| error.to_string())
    }

    #[test]
    fn only_the_store_table_is_read() {
        let store = read("[store]\nurl = \"postgres://bub:pw@db/bub\"\n[channels.x]\nkind = \"nonsense\"\n").unwrap();
        assert_eq!(store.url().unwrap().unwrap().expose(), "postgres://bub:pw@db/bub");
        assert_eq!(read("[http]\n").unwrap(), StoreConfig::default());
    }

    #[test]
    fn mistakes_say_what_to_fix() {
        assert!(read("[store]\nurl = \"a\"\nurl_file = \"/x\"\n").unwrap_err().contains("keep one"));
        assert!(read("[store]\nurl_typo = \"a\"\n").unwrap_err().contains("url_typo"));
        assert!(read("[store]\nlease_seconds = 0\n").unwrap_err().contains("between 1 and 3600"));
    }

    #[test]
    fn the_url_may_come_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("url");
        std::fs::write(&file, "postgres://db/bub\n").unwrap();
        let store = StoreConfig { url_file: Some(file.clone()), ..StoreConfig::default() };
        assert_eq!(store.url().unwrap().unwrap().expose(), "postgres://db/bub");
        std::fs::write(&file, "\n").unwrap();
        assert!(store.url().unwrap_err().contains("is empty"));
        let debug =
            format!("{:?}", StoreConfig { url: Some(Secret::new("postgres://u:pw@h/d")), ..Default::default() });
        assert!(!debug.contains("pw"), "{debug}");
    }
}
