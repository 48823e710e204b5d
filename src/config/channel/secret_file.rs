//! `KEY_file`: a channel's secret read from a file instead of written in the
//! config (`token_file`, `secrets_file`, `callback_secret_file`,
//! `webhook_secret_file`), as Kubernetes and compose mount secrets. The
//! config itself can then be a ConfigMap that anyone may read.
//!
//! Read at each load, so a reload (a change to the config file, or SIGHUP)
//! takes a rotated secret. A relative path is from the config file's folder.

use super::{Checking, RawChannel};
use crate::config::error::ConfigError;
use bub_channel::Secret;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A secret file is a few lines; anything bigger is the wrong file.
const MAX_BYTES: u64 = 64 * 1024;

/// The `_file` keys of a channel table, and the key each stands for.
pub(super) const FILE_KEYS: &[(&str, &str)] = &[
    ("secrets_file", "secrets"),
    ("callback_secret_file", "callback_secret"),
    ("token_file", "token"),
    ("webhook_secret_file", "webhook_secret"),
];

impl RawChannel {
    /// Each `KEY_file` read into `KEY`, positioned at the `_file` value so
    /// that a later check of the secret points at the line that named it.
    pub(super) fn read_secret_files(&mut self, checking: &Checking<'_>) -> Result<(), ConfigError> {
        if let Some(path) = self.secrets_file.take() {
            let text = read(checking, "secrets", self.secrets.as_ref().map(Spanned::span), &path)?;
            let secrets = text.lines().map(str::trim).filter(|line| !line.is_empty()).map(Secret::new).collect();
            self.secrets = Some(Spanned::new(path.span(), secrets));
        }
        let single = [
            ("callback_secret", &mut self.callback_secret, self.callback_secret_file.take()),
            ("token", &mut self.token, self.token_file.take()),
            ("webhook_secret", &mut self.webhook_secret, self.webhook_secret_file.take()),
        ];
        for (key, value, file) in single {
            if let Some(path) = file {
                let text = read(checking, key, value.as_ref().map(Spanned::span), &path)?;
                let first = text.lines().next().unwrap_or_default().trim();
                *value = Some(Spanned::new(path.span(), Secret::new(first)));
            }
        }
        Ok(())
    }
}

/// The text of the file `KEY_file` names, or the error at its position;
/// `inline`: where `KEY` itself is written, if it is (both is a mistake).
fn read(
    checking: &Checking<'_>,
    key: &str,
    inline: Option<std::ops::Range<usize>>,
    path: &Spanned<PathBuf>,
) -> Result<String, ConfigError> {
    if let Some(span) = inline {
        return Err(checking.error(span, format!("both `{key}` and `{key}_file` are set: keep one")));
    }
    read_secret_file(checking.config_path(), path.get_ref())
        .map_err(|(file, why)| checking.error(path.span(), format!("`{key}_file` {}: {why}", file.display())))
}

/// The text of the secret file at `path` (from the folder of the config at
/// `config` when relative): a regular file of at most 64 KiB, not blank. The
/// error is the file as resolved and why. Channels' `KEY_file` keys and MCP
/// servers' `{ file = "PATH" }` values read their files here.
pub(in crate::config) fn read_secret_file(config: &Path, path: &Path) -> Result<String, (PathBuf, String)> {
    let file = resolve(config, path);
    let metadata = match std::fs::metadata(&file) {
        Ok(metadata) => metadata,
        Err(error) => return Err((file, format!("cannot read: {error}"))),
    };
    if !metadata.is_file() {
        return Err((file, "not a regular file".into()));
    }
    if metadata.len() > MAX_BYTES {
        return Err((file, format!("{} bytes: a secret file holds at most {MAX_BYTES}", metadata.len())));
    }
    match std::fs::read_to_string(&file) {
        Ok(text) if text.trim().is_empty() => Err((file, "empty".into())),
        Ok(text) => Ok(text),
        Err(error) => Err((file, format!("cannot read: {error}"))),
    }
}

/// `path` as written, from the config file's folder when relative.
fn resolve(config: &Path, path: &Path) -> PathBuf {
    match config.parent() {
        Some(folder) if path.is_relative() => folder.join(path),
        _ => path.to_path_buf(),
    }
}
