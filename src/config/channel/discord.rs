//! `kind = "discord"`: a Discord bot (the adapter is `bub_discord`, behind
//! the Cargo feature `discord`).

use super::{Checking, RawChannel};
use crate::config::error::ConfigError;
use bub_channel::Secret;

/// The keys a Discord channel takes.
pub(super) const KEYS: &[&str] = &["token", "api_url"];

/// A Discord bot's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscordConfig {
    /// The bot token from the Developer Portal.
    pub token: Secret,
    /// Where REST calls go instead of `https://discord.com` (a proxy, a test
    /// fake); `None`: Discord itself.
    pub api_url: Option<String>,
}

impl DiscordConfig {
    pub(super) fn from_keys(keys: RawChannel, checking: &Checking) -> Result<DiscordConfig, ConfigError> {
        let token = checking.required("token", keys.token)?;
        if token.get_ref().is_blank() {
            return Err(checking.error(token.span(), "`token` is empty"));
        }
        let api_url = keys.api_url.map(|url| checking.url(url)).transpose()?;
        Ok(DiscordConfig { token: token.into_inner(), api_url })
    }
}
