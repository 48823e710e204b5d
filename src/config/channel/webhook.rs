//! `kind = "webhook"`: systems that POST signed messages to `/webhook/NAME`
//! (the adapter is `bub_webhook`).

use super::{Checking, RawChannel};
use crate::config::error::ConfigError;
use crate::config::value::Seconds;
use bub_channel::Secret;
use toml::Spanned;

/// The keys a webhook channel takes.
pub(super) const KEYS: &[&str] =
    &["secrets", "secrets_file", "callback_url", "callback_secret", "callback_secret_file", "reply_timeout_seconds"];

/// A webhook channel's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookConfig {
    /// HMAC keys; any of them verifies a request, so a secret can be rotated
    /// by adding the new one first and removing the old one later. Never empty.
    pub secrets: Vec<Secret>,
    /// Where replies are POSTed (async mode); `None`: replies go back on the request.
    pub callback_url: Option<String>,
    /// Signs callbacks; `None`: the first of `secrets` (see [`WebhookConfig::callback_secret`]).
    pub callback_secret: Option<Secret>,
    /// How long a `mode=sync` request waits for its reply (then 504; the turn
    /// goes on). `None`: the adapter's default, 10 minutes.
    pub reply_timeout: Option<Seconds>,
}

impl WebhookConfig {
    /// The settings of the channel the gateway starts with when there is no
    /// file: this one secret, replies on the request.
    pub fn with_secret(secret: Secret) -> WebhookConfig {
        WebhookConfig { secrets: vec![secret], callback_url: None, callback_secret: None, reply_timeout: None }
    }

    /// The key callbacks are signed with.
    pub fn callback_secret(&self) -> Option<&Secret> {
        self.callback_secret.as_ref().or(self.secrets.first())
    }

    pub(super) fn from_keys(keys: RawChannel, checking: &Checking<'_>) -> Result<WebhookConfig, ConfigError> {
        let secrets = checking.required("secrets", keys.secrets)?;
        if !bub_webhook::keys::secrets_are_usable(secrets.get_ref()) {
            return Err(checking.error(secrets.span(), "`secrets` needs at least one non-empty secret"));
        }
        let callback_secret = match keys.callback_secret {
            Some(secret) if secret.get_ref().is_empty() => {
                return Err(checking.error(secret.span(), "`callback_secret` is empty"));
            }
            other => other.map(Spanned::into_inner),
        };
        let callback_url = keys.callback_url.map(|url| checking.url(url)).transpose()?;
        let reply_timeout = match keys.reply_timeout_seconds {
            Some(seconds) if !(seconds.get_ref().0 > 0.0 && seconds.get_ref().0.is_finite()) => {
                return Err(checking.error(seconds.span(), "`reply_timeout_seconds` must be above 0"));
            }
            other => other.map(Spanned::into_inner),
        };
        Ok(WebhookConfig { secrets: secrets.into_inner(), callback_url, callback_secret, reply_timeout })
    }
}
