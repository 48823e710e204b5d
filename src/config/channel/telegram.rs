//! `kind = "telegram"`: a Telegram bot, polling or receiving by webhook (the
//! adapter is `bub_telegram`, behind the Cargo feature `telegram`).

use super::{Checking, RawChannel};
use crate::config::error::ConfigError;
use bub_channel::Secret;
use toml::Spanned;

/// The keys a Telegram channel takes.
pub(super) const KEYS: &[&str] =
    &["token", "token_file", "api_url", "webhook_url", "webhook_secret", "webhook_secret_file"];

/// A Telegram bot's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TelegramConfig {
    /// The bot token from @BotFather.
    pub token: Secret,
    /// The Bot API base, for a local Bot API server or a test fake;
    /// `None`: `https://api.telegram.org`.
    pub api_url: Option<String>,
    /// Receive by webhook at this public URL instead of polling.
    pub webhook_url: Option<String>,
    /// The secret Telegram sends with each webhook request; set exactly when
    /// `webhook_url` is.
    pub webhook_secret: Option<Secret>,
}

impl TelegramConfig {
    pub(super) fn from_keys(keys: RawChannel, checking: &Checking<'_>) -> Result<TelegramConfig, ConfigError> {
        let token = checking.required("token", keys.token)?;
        if token.get_ref().is_blank() {
            return Err(checking.error(token.span(), "`token` is empty"));
        }
        let (webhook_url, webhook_secret) = match (keys.webhook_url, keys.webhook_secret) {
            (None, None) => (None, None),
            (Some(url), Some(secret)) => {
                check_webhook_secret(checking, &secret)?;
                (Some(checking.url(url)?), Some(secret.into_inner()))
            }
            (Some(url), None) => {
                return Err(checking.error(url.span(), "`webhook_url` needs a `webhook_secret` beside it"));
            }
            (None, Some(secret)) => {
                return Err(checking.error(secret.span(), "`webhook_secret` needs a `webhook_url` beside it"));
            }
        };
        let api_url = keys.api_url.map(|url| checking.url(url)).transpose()?;
        Ok(TelegramConfig { token: token.into_inner(), api_url, webhook_url, webhook_secret })
    }
}

/// Telegram's rule for a webhook's secret token: 1–256 of `A-Z a-z 0-9 _ -`.
fn check_webhook_secret(checking: &Checking<'_>, secret: &Spanned<Secret>) -> Result<(), ConfigError> {
    let value = secret.get_ref().expose();
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if value.is_empty() || value.len() > 256 || !value.chars().all(allowed) {
        return Err(checking.error(
            secret.span(),
            "`webhook_secret` must be 1 to 256 characters of A-Z, a-z, 0-9, `_` and `-` (Telegram's rule)",
        ));
    }
    Ok(())
}
