//! `kind = "discord"`: a Discord bot (the adapter is `bub_discord`, behind
//! the Cargo feature `discord`).

use super::{Checking, RawChannel};
use crate::config::error::ConfigError;
use bub_channel::Secret;

/// The keys a Discord channel takes.
pub(super) const KEYS: &[&str] = &["token", "token_file", "api_url", "shards"];

/// The most shards a channel may name: a bot in more than 2.5 million
/// servers (Discord asks for one shard per 2500) is beyond what bub is for,
/// and a larger number is more likely a typo.
const MAX_SHARDS: u32 = 1024;

/// A Discord bot's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscordConfig {
    /// The bot token from the Developer Portal.
    pub token: Secret,
    /// Where REST calls go instead of `https://discord.com` (a proxy, a test
    /// fake); `None`: Discord itself.
    pub api_url: Option<String>,
    /// Into how many shards the bot's gateway connection splits (one
    /// connection each; among replicas, spread over them). Default 1.
    pub shards: u32,
}

impl DiscordConfig {
    pub(super) fn from_keys(keys: RawChannel, checking: &Checking<'_>) -> Result<DiscordConfig, ConfigError> {
        let token = checking.required("token", keys.token)?;
        if token.get_ref().is_blank() {
            return Err(checking.error(token.span(), "`token` is empty"));
        }
        let api_url = keys.api_url.map(|url| checking.url(url)).transpose()?;
        let shards = match keys.shards {
            None => 1,
            Some(shards) => match u32::try_from(*shards.get_ref()) {
                Ok(count @ 1..=MAX_SHARDS) => count,
                _ => {
                    return Err(checking.error(
                        shards.span(),
                        format!(
                            "`shards` must be from 1 to {MAX_SHARDS} (one gateway connection each; \
                             Discord asks for one per 2500 servers)"
                        ),
                    ));
                }
            },
        };
        Ok(DiscordConfig { token: token.into_inner(), api_url, shards })
    }
}

#[cfg(test)]
#[cfg(all(feature = "telegram", feature = "discord"))]
mod tests {
    use crate::config::channel::ChannelKind;
    use crate::config::file::tests::{error, parse};

    const DC: &str = "[channels.dc]\nkind = \"discord\"\ntoken = \"t\"\n";

    fn shards(text: &str) -> u32 {
        let config = parse(text).unwrap();
        let ChannelKind::Discord(bot) = &config.channels["dc"].kind else { panic!("discord") };
        bot.shards
    }

    #[test]
    fn shards_default_to_one_and_take_1_to_1024() {
        assert_eq!(shards(DC), 1);
        assert_eq!(shards(&format!("{DC}shards = 4\n")), 4);
        assert_eq!(shards(&format!("{DC}shards = 1024\n")), 1024);
        for wrong in ["0", "-2", "1025", "5000000000"] {
            assert_eq!(
                error(&format!("{DC}shards = {wrong}\n")),
                "bub.toml:4:10: `shards` must be from 1 to 1024 (one gateway connection each; \
                 Discord asks for one per 2500 servers)",
                "shards = {wrong}"
            );
        }
        let telegram = "[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\nshards = 2\n";
        assert!(error(telegram).contains("`shards` does not apply to a telegram channel"), "{}", error(telegram));
    }
}
