//! `[channels.NAME]`: one channel instance each, of a `kind` whose keys and
//! checks live in that kind's file — `webhook.rs`, `telegram.rs`, `discord.rs`,
//! one settings type each ([`WebhookConfig`], [`TelegramConfig`],
//! [`DiscordConfig`]).
//!
//! A new kind is a new file here (its keys, its checks, its settings type),
//! a line in `KindName`, [`ChannelKind`] and `RawChannel`, and then its
//! registration outside `config/`: the adapter's construction in
//! `gateway::channels` and, for an optional adapter, its Cargo feature.
//!
//! Rules an adapter also applies when it is built (a URL is http(s), a token
//! is not blank, a webhook has a usable secret) are the adapter's own
//! functions ([`bub_channel::rules`], [`bub_channel::Secret::is_blank`],
//! [`bub_webhook::keys::secrets_are_usable`]); the config calls them at load to
//! say where in the file a value breaks them, so each rule is written once.

mod discord;
pub(super) mod secret_file;
mod telegram;
mod webhook;

pub use discord::DiscordConfig;
pub use telegram::TelegramConfig;
pub use webhook::WebhookConfig;

use super::error::{ConfigError, Source};
use super::file::ChatConfig;
use super::layer::PolicyLayer;
use super::value::Seconds;
use bub_channel::Secret;
use bub_channel::rules::{UrlError, http_url};
use indexmap::IndexMap;
use serde::Deserialize;
use std::ops::Range;
use toml::Spanned;

/// One channel instance.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelConfig {
    pub kind: ChannelKind,
    /// `[channels.NAME.policy]`: the second layer.
    pub policy: PolicyLayer,
    /// `[channels.NAME.chats."ID"]`: per-chat layers, by the platform's chat id.
    pub chats: IndexMap<String, ChatConfig>,
}

/// What a channel connects to, with the keys that kind takes.
#[derive(Debug, Clone, PartialEq)]
pub enum ChannelKind {
    Webhook(WebhookConfig),
    Telegram(TelegramConfig),
    Discord(DiscordConfig),
}

impl ChannelKind {
    /// The `kind` value as written in the file.
    pub fn name(&self) -> &'static str {
        match self {
            ChannelKind::Webhook(_) => "webhook",
            ChannelKind::Telegram(_) => "telegram",
            ChannelKind::Discord(_) => "discord",
        }
    }

    /// A chat platform, where anyone who finds the bot can write to it (as
    /// opposed to a webhook, whose senders hold its secret). Such channels
    /// are closed by default: pairing for direct messages, allowlisted
    /// groups, the sandbox.
    pub fn is_chat_platform(&self) -> bool {
        !matches!(self, ChannelKind::Webhook(_))
    }
}

/// Every kind parses in every build, so a misspelt one still lists them all;
/// a kind this build lacks is refused after ([`KindName::is_built_in`]).
#[derive(Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum KindName {
    Webhook,
    Telegram,
    Discord,
}

impl KindName {
    /// The kind as written, and the keys it takes.
    fn keys(self) -> (&'static str, &'static [&'static str]) {
        match self {
            KindName::Webhook => ("webhook", webhook::KEYS),
            KindName::Telegram => ("telegram", telegram::KEYS),
            KindName::Discord => ("discord", discord::KEYS),
        }
    }

    /// Whether this bub has the kind's adapter: the chat platforms are the
    /// Cargo features `telegram` and `discord` (both default), which a
    /// webhook-only build leaves out. Its one counterpart is the adapter's
    /// construction in `gateway::channels`.
    fn is_built_in(self) -> bool {
        match self {
            KindName::Webhook => true,
            KindName::Telegram => cfg!(feature = "telegram"),
            KindName::Discord => cfg!(feature = "discord"),
        }
    }
}

/// A channel table as written: the keys of every kind, each checked against
/// its kind once the kind is known ([`RawChannel::into_config`]); each kind's
/// file takes the keys it owns from it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChannel {
    kind: Spanned<KindName>,
    secrets: Option<Spanned<Vec<Secret>>>,
    callback_url: Option<Spanned<String>>,
    callback_secret: Option<Spanned<Secret>>,
    reply_timeout_seconds: Option<Spanned<Seconds>>,
    token: Option<Spanned<Secret>>,
    api_url: Option<Spanned<String>>,
    webhook_url: Option<Spanned<String>>,
    webhook_secret: Option<Spanned<Secret>>,
    shards: Option<Spanned<i64>>,
    secrets_file: Option<Spanned<std::path::PathBuf>>,
    callback_secret_file: Option<Spanned<std::path::PathBuf>>,
    token_file: Option<Spanned<std::path::PathBuf>>,
    webhook_secret_file: Option<Spanned<std::path::PathBuf>>,
    #[serde(default)]
    policy: PolicyLayer,
    #[serde(default)]
    chats: IndexMap<String, ChatConfig>,
}

impl RawChannel {
    /// Each of the kinds' own keys that is present, with its position.
    fn present(&self) -> [(&'static str, Option<Range<usize>>); 13] {
        [
            ("secrets", self.secrets.as_ref().map(Spanned::span)),
            ("callback_url", self.callback_url.as_ref().map(Spanned::span)),
            ("callback_secret", self.callback_secret.as_ref().map(Spanned::span)),
            ("reply_timeout_seconds", self.reply_timeout_seconds.as_ref().map(Spanned::span)),
            ("token", self.token.as_ref().map(Spanned::span)),
            ("api_url", self.api_url.as_ref().map(Spanned::span)),
            ("webhook_url", self.webhook_url.as_ref().map(Spanned::span)),
            ("webhook_secret", self.webhook_secret.as_ref().map(Spanned::span)),
            ("shards", self.shards.as_ref().map(Spanned::span)),
            ("secrets_file", self.secrets_file.as_ref().map(Spanned::span)),
            ("callback_secret_file", self.callback_secret_file.as_ref().map(Spanned::span)),
            ("token_file", self.token_file.as_ref().map(Spanned::span)),
            ("webhook_secret_file", self.webhook_secret_file.as_ref().map(Spanned::span)),
        ]
    }
}

/// What a kind's file needs to check its keys: the text for positions, and
/// the error for a key the kind requires.
struct Checking<'a> {
    source: &'a Source,
    kind: &'static str,
    kind_span: Range<usize>,
}

impl Checking<'_> {
    fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        self.source.error(Some(span), message)
    }

    /// `key` is required by this kind (written, or read from `KEY_file`).
    fn required<T>(&self, key: &str, value: Option<T>) -> Result<T, ConfigError> {
        value.ok_or_else(|| {
            let or_file = match secret_file::FILE_KEYS.iter().any(|(_, secret)| *secret == key) {
                true => format!(" (or `{key}_file`)"),
                false => String::new(),
            };
            self.source.error(Some(self.kind_span.clone()), format!("a {} channel needs `{key}`{or_file}", self.kind))
        })
    }

    /// The config file's path, from which a relative `KEY_file` is read.
    fn config_path(&self) -> &std::path::Path {
        &self.source.path
    }

    /// An `http://` or `https://` URL ([`http_url`]), or the error at its position.
    fn url(&self, url: Spanned<String>) -> Result<String, ConfigError> {
        match http_url(url.get_ref()) {
            Ok(_) => Ok(url.into_inner()),
            Err(UrlError::NotHttp) => Err(self.error(url.span(), format!("`{}` is not an http(s) URL", url.get_ref()))),
            Err(UrlError::NotAUrl(error)) => {
                Err(self.error(url.span(), format!("`{}` is not a URL: {error}", url.get_ref())))
            }
        }
    }
}

impl RawChannel {
    /// The typed channel, or the first key that does not fit its kind (or a
    /// kind this build lacks).
    pub(super) fn into_config(mut self, source: &Source, name: &str) -> Result<ChannelConfig, ConfigError> {
        // What is left after the policy and chats are taken is the kinds'
        // keys, which the kind's own file reads.
        let (policy, chats) = (std::mem::take(&mut self.policy), std::mem::take(&mut self.chats));
        let kind = self.kind.clone();
        let kind_span = kind.span();
        let kind = *kind.get_ref();
        let (kind_name, own_keys) = kind.keys();
        if !kind.is_built_in() {
            // The feature is named as the kind is.
            return Err(source.error(
                Some(kind_span),
                format!(
                    "channel `{name}`: kind `{kind_name}` is not built into this bub (rebuild with --features {kind_name})"
                ),
            ));
        }
        for (key, span) in self.present() {
            if let Some(span) = span
                && !own_keys.contains(&key)
            {
                return Err(source.error(
                    Some(span),
                    format!("`{key}` does not apply to a {kind_name} channel (its keys: {})", own_keys.join(", ")),
                ));
            }
        }
        let checking = Checking { source, kind: kind_name, kind_span };
        self.read_secret_files(&checking)?;
        let kind = match kind {
            KindName::Webhook => ChannelKind::Webhook(WebhookConfig::from_keys(self, &checking)?),
            KindName::Telegram => ChannelKind::Telegram(TelegramConfig::from_keys(self, &checking)?),
            KindName::Discord => ChannelKind::Discord(DiscordConfig::from_keys(self, &checking)?),
        };
        Ok(ChannelConfig { kind, policy, chats })
    }
}

/// Channel names become part of session ids and user names (`hooks:alice`),
/// so they are plain words.
pub(super) fn check_channel_name(source: &Source, name: &Spanned<String>) -> Result<(), ConfigError> {
    let text = name.get_ref();
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(
            source.error(Some(name.span()), format!("channel name `{text}` may use only letters, digits, `_` and `-`"))
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::file::tests::{MINIMAL, error};
    #[cfg(all(feature = "telegram", feature = "discord"))]
    use {super::ChannelKind, crate::config::file::tests::parse};

    #[test]
    #[cfg(all(feature = "telegram", feature = "discord"))]
    fn each_kind_takes_its_own_keys() {
        assert_eq!(
            error("[channels.hooks]\nkind = \"webhook\"\n"),
            "bub.toml:2:8: a webhook channel needs `secrets` (or `secrets_file`)"
        );
        assert_eq!(
            error("[channels.hooks]\nkind = \"webhook\"\nsecrets = []\n"),
            "bub.toml:3:11: `secrets` needs at least one non-empty secret"
        );
        assert_eq!(
            error("[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\nsecrets = [\"x\"]\n"),
            "bub.toml:4:11: `secrets` does not apply to a telegram channel (its keys: token, token_file, api_url, webhook_url, webhook_secret, webhook_secret_file)"
        );
        assert_eq!(
            error("[channels.tg]\nkind = \"discord\"\n"),
            "bub.toml:2:8: a discord channel needs `token` (or `token_file`)"
        );
        let text = format!("{MINIMAL}callback_url = \"ftp://x\"\n");
        assert_eq!(error(&text), "bub.toml:4:16: `ftp://x` is not an http(s) URL");
        let config = parse("[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\napi_url = \"http://127.0.0.1:9\"\n");
        let ChannelKind::Telegram(bot) = &config.unwrap().channels["tg"].kind else { panic!("telegram") };
        assert_eq!(bot.api_url.as_deref(), Some("http://127.0.0.1:9"));
    }

    #[test]
    #[cfg(all(feature = "telegram", feature = "discord"))]
    fn a_telegram_webhook_needs_a_url_and_a_secret_telegram_accepts() {
        let tg = "[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n";
        let text = format!("{tg}webhook_url = \"https://bot.example.com/telegram/tg\"\n");
        assert_eq!(error(&text), "bub.toml:4:15: `webhook_url` needs a `webhook_secret` beside it");
        let text = format!("{tg}webhook_url = \"https://x/telegram/tg\"\nwebhook_secret = \"has space\"\n");
        assert!(
            error(&text).starts_with("bub.toml:5:18: `webhook_secret` must be 1 to 256 characters"),
            "{}",
            error(&text)
        );
        let text = format!("{tg}webhook_url = \"https://x/telegram/tg\"\nwebhook_secret = \"ok_Secret-1\"\n");
        let config = parse(&text).unwrap();
        let ChannelKind::Telegram(bot) = &config.channels["tg"].kind else { panic!("telegram") };
        assert_eq!(bot.webhook_url.as_deref(), Some("https://x/telegram/tg"));
        let discord = "[channels.dc]\nkind = \"discord\"\ntoken = \"t\"\nwebhook_url = \"https://x\"\n";
        assert!(error(discord).contains("`webhook_url` does not apply to a discord channel"), "{}", error(discord));
    }

    /// A webhook-only build (`--no-default-features`) refuses a chat
    /// platform where the file names it, and says how to get it.
    #[test]
    #[cfg(not(feature = "telegram"))]
    fn a_kind_this_build_lacks_is_refused_where_it_is_written() {
        let text = format!("{MINIMAL}[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\n");
        assert_eq!(
            error(&text),
            "bub.toml:5:8: channel `tg`: kind `telegram` is not built into this bub (rebuild with --features telegram)"
        );
    }

    /// Secrets from files, as Kubernetes and compose mount them: relative to
    /// the config's folder, one secret per line for `secrets_file`, and every
    /// mistake at the `_file` key's line.
    #[test]
    #[cfg(all(feature = "telegram", feature = "discord"))]
    fn secrets_are_read_from_files_beside_the_config() {
        use bub_channel::Secret;
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("hooks"), "new-key\n\nold-key\n").unwrap();
        std::fs::write(folder.path().join("tg"), "123:abc\n").unwrap();
        let config_path = folder.path().join("bub.toml");
        let text = "[channels.hooks]\nkind = \"webhook\"\nsecrets_file = \"hooks\"\n\n\
                    [channels.tg]\nkind = \"telegram\"\ntoken_file = \"tg\"\n";
        let config = crate::config::GatewayConfig::parse(text, &config_path).unwrap();
        let ChannelKind::Webhook(hooks) = &config.channels["hooks"].kind else { panic!("webhook") };
        assert_eq!(hooks.secrets, vec![Secret::new("new-key"), Secret::new("old-key")]);
        let ChannelKind::Telegram(bot) = &config.channels["tg"].kind else { panic!("telegram") };
        assert_eq!(bot.token.expose(), "123:abc");

        let error = |text: &str| crate::config::GatewayConfig::parse(text, &config_path).unwrap_err().to_string();
        let shown = config_path.display();
        let missing = error("[channels.tg]\nkind = \"discord\"\ntoken_file = \"nope\"\n");
        assert!(
            missing.starts_with(&format!(
                "{shown}:3:14: `token_file` {}: cannot read:",
                folder.path().join("nope").display()
            )),
            "{missing}"
        );
        assert_eq!(
            error("[channels.tg]\nkind = \"discord\"\ntoken = \"t\"\ntoken_file = \"tg\"\n"),
            format!("{shown}:3:9: both `token` and `token_file` are set: keep one")
        );
        std::fs::write(folder.path().join("blank"), " \n").unwrap();
        assert!(error("[channels.h]\nkind = \"webhook\"\nsecrets_file = \"blank\"\n").ends_with("blank: empty"));
        assert!(
            error("[channels.h]\nkind = \"discord\"\ntoken = \"t\"\nsecrets_file = \"hooks\"\n")
                .contains("`secrets_file` does not apply to a discord channel")
        );
    }
}
