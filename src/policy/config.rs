//! The gateway config file: `[http]`, `[policy.defaults]` and one
//! `[channels.NAME]` table per channel instance, each with an optional
//! `[channels.NAME.policy]` and `[channels.NAME.chats."ID".policy]`.
//!
//! Everything is checked once, at load: unknown keys (with a suggestion),
//! values of the wrong type, enum values (listing the allowed ones), rates,
//! tool globs, user names (`<channel>:<user id>` naming a configured channel),
//! the keys each channel kind needs. Tool patterns are checked against the
//! tools the agent really has with [`GatewayConfig::validate_tools`], because
//! only the binary knows them. Every error is `FILE:LINE:COL: message`.
//!
//! Secrets and tokens live in the file (mode 0600 is the admin's job); they
//! are [`Secret`]s so they never show up in logs or `Debug` output.

use super::error::{ConfigError, Source, closest, friendly_message};
use super::pattern::ToolPattern;
use super::rate::Rate;
pub use bub_channel::Secret;
use indexmap::IndexMap;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// The whole gateway config.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub http: HttpConfig,
    /// `[policy.defaults]`: the first policy layer, for every channel and chat.
    pub defaults: PolicyLayer,
    /// Channel instances by name, in file order. The name is what `Inbound::channel`
    /// carries and what user names start with (`hooks:alice`).
    pub channels: IndexMap<String, ChannelConfig>,
    /// The file's text, for positions in later checks ([`GatewayConfig::validate_tools`]).
    source: Option<Arc<Source>>,
}

/// `[http]`: the one HTTP server (health, metrics, webhooks, admin API).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address and port to listen on; default `127.0.0.1:8080`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// How long a client has to send a request's headers, and a webhook
    /// request's body; also how long an idle connection is kept. Default 30.
    #[serde(default, deserialize_with = "above_zero")]
    pub read_timeout_seconds: Option<Seconds>,
    /// Connections served at once; more wait to be accepted. Default 1024.
    #[serde(default, deserialize_with = "above_zero")]
    pub max_connections: Option<u32>,
    /// How long a stop (SIGTERM, SIGINT) lets turns in flight finish before
    /// leaving them to the next start. Default 10.
    pub shutdown_grace_seconds: Option<Seconds>,
}

/// For limits where 0 would shut the server: the value must be above zero.
fn above_zero<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + PartialOrd + Default + fmt::Display,
{
    let value = T::deserialize(deserializer)?;
    if value <= T::default() {
        return Err(de::Error::custom(format!("{value} must be above 0")));
    }
    Ok(Some(value))
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

impl HttpConfig {
    /// How long a stop waits for turns in flight: `shutdown_grace_seconds`, else 10 s.
    pub fn shutdown_grace(&self) -> std::time::Duration {
        self.shutdown_grace_seconds.map_or(std::time::Duration::from_secs(10), Seconds::duration)
    }

    /// The server's connection limits: these values, else the defaults.
    pub fn limits(&self) -> crate::http::ServeLimits {
        let defaults = crate::http::ServeLimits::default();
        crate::http::ServeLimits {
            read_timeout: self.read_timeout_seconds.map_or(defaults.read_timeout, Seconds::duration),
            max_connections: self.max_connections.map_or(defaults.max_connections, |count| count as usize),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            listen: default_listen(),
            read_timeout_seconds: None,
            max_connections: None,
            shutdown_grace_seconds: None,
        }
    }
}

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
    Webhook(WebhookChannel),
    Telegram(BotChannel),
    Discord(BotChannel),
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

/// `kind = "webhook"`: systems that POST signed messages to `/webhook/NAME`.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookChannel {
    /// HMAC keys; any of them verifies a request, so a secret can be rotated
    /// by adding the new one first and removing the old one later. Never empty.
    pub secrets: Vec<Secret>,
    /// Where replies are POSTed (async mode); `None`: replies go back on the request.
    pub callback_url: Option<String>,
    /// Signs callbacks; `None`: the first of `secrets` (see [`WebhookChannel::callback_secret`]).
    pub callback_secret: Option<Secret>,
    /// How long a `mode=sync` request waits for its reply (then 504; the turn
    /// goes on). `None`: the adapter's default, 10 minutes.
    pub reply_timeout: Option<Seconds>,
}

impl WebhookChannel {
    /// The key callbacks are signed with.
    pub fn callback_secret(&self) -> Option<&Secret> {
        self.callback_secret.as_ref().or(self.secrets.first())
    }
}

/// `kind = "telegram"` or `"discord"`: a bot account.
#[derive(Debug, Clone, PartialEq)]
pub struct BotChannel {
    pub token: Secret,
    /// The platform API base, for a local Bot API server or a test fake;
    /// `None`: the platform's public API.
    pub api_url: Option<String>,
    /// Telegram only: receive by webhook at this public URL instead of polling.
    pub webhook_url: Option<String>,
    /// Telegram only: the secret Telegram sends with each webhook request.
    pub webhook_secret: Option<Secret>,
}

/// `[channels.NAME.chats."ID"]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatConfig {
    /// The third and last layer.
    #[serde(default)]
    pub policy: PolicyLayer,
}

/// One policy layer. Every key is optional: an unset key leaves the value of
/// the layer below (defaults → channel → chat); a set key replaces it, lists
/// included (they are never appended). Tables (`addressing`, `debounce`,
/// `rate`) merge key by key. What each key means, and its built-in default,
/// is documented in `config/bub.example.toml` and on [`super::EffectivePolicy`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyLayer {
    pub allow_users: Option<Vec<Spanned<UserPattern>>>,
    pub allow_chats: Option<Vec<String>>,
    pub operators: Option<Vec<Spanned<Operator>>>,
    pub allowed_tools: Option<Vec<Spanned<ToolPattern>>>,
    pub denied_tools: Option<Vec<Spanned<ToolPattern>>>,
    pub addressing: Option<AddressingLayer>,
    pub session_scope: Option<SessionScope>,
    pub busy: Option<BusyRule>,
    pub debounce: Option<DebounceLayer>,
    pub rate: Option<RateLayer>,
    pub model: Option<Spanned<String>>,
    pub confine_fs: Option<bool>,
    pub dm_policy: Option<Spanned<DmPolicy>>,
    pub group_policy: Option<Spanned<GroupPolicy>>,
    pub environment: Option<Spanned<EnvironmentKind>>,
    pub sandbox_network: Option<Spanned<bool>>,
    pub allow_with_untrusted_context: Option<Vec<Spanned<ToolPattern>>>,
}

/// Who may talk to the bot in a direct chat, besides the users `allow_users`
/// and `operators` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// An unknown sender gets a one-time code and nothing else until an admin
    /// (`bub pairing approve`) or an operator (`,pairing approve`) approves it.
    /// The default on chat platforms.
    Pairing,
    /// Only the users named; everyone else is ignored.
    Allowlist,
    /// Anyone (when `allow_users` is unset). The default on webhooks, whose
    /// senders prove themselves with the channel's HMAC secret.
    Open,
}

/// Which group chats (and their threads) the bot answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    /// Only the chats `allow_chats` lists or an admin or operator approved.
    /// The default on chat platforms.
    Allowlist,
    /// Every group (or those `allow_chats` lists, when set). The default on webhooks.
    Open,
    /// No group at all.
    Disabled,
}

/// Where a session's shell and code run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvironmentKind {
    /// In a sandbox: the workspace read-write, the system read-only, no
    /// `$BUB_HOME`, no network unless `sandbox_network`, resource limits. The
    /// default on chat platforms; a channel that needs it and cannot have it
    /// refuses to start.
    Sandbox,
    /// On the host, as the gateway's user.
    Local,
}

/// `addressing = { ... }`: when a group message counts as addressed to the bot.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressingLayer {
    pub mention: Option<bool>,
    pub reply: Option<bool>,
    pub keywords: Option<Vec<String>>,
}

/// `debounce = { ... }`: how a burst of messages becomes one turn.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebounceLayer {
    pub enabled: Option<bool>,
    pub quiet_seconds: Option<Seconds>,
    pub max_wait_seconds: Option<Seconds>,
    pub active_window_seconds: Option<Seconds>,
}

/// `rate = { ... }`: budgets, each `N/s`, `N/min` or `N/h`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLayer {
    pub inbound_per_user: Option<Rate>,
    pub outbound_per_chat: Option<Rate>,
    pub outbound_per_channel: Option<Rate>,
}

/// A duration in seconds: finite, not negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Seconds(pub f64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Seconds {
    pub fn duration(self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.0)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Seconds, D::Error> {
        let value = f64::deserialize(deserializer)?;
        if !value.is_finite() || value < 0.0 {
            return Err(de::Error::custom(format!("{value} is not a number of seconds (0 or more)")));
        }
        Ok(Seconds(value))
    }
}

/// How messages map to sessions (tapes and workspaces).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionScope {
    /// One session per chat; a thread or forum topic is a session of its own
    /// (`channel:chat[:thread]`). The default.
    #[default]
    Thread,
    /// One session per chat, its threads included.
    Chat,
    /// One session per person inside each chat or thread.
    Sender,
}

/// What happens to a message that arrives while its session is mid-turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusyRule {
    /// It reaches the running turn before its next model step.
    Steer,
    /// It waits and starts the next turn. The default: nothing is lost or reordered.
    #[default]
    Queue,
    /// It is recorded on the tape but starts no turn.
    Drop,
}

macro_rules! display_as_serde {
    ($($ty:ty),*) => {$(
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let text = serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string));
                f.write_str(&text.unwrap_or_default())
            }
        }
    )*};
}
display_as_serde!(SessionScope, BusyRule, DmPolicy, GroupPolicy, EnvironmentKind);

/// A user name in a policy: `<channel>:<user id>`, `<channel>:*` (everyone on
/// that channel) or `*` (everyone).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserPattern(String);

impl UserPattern {
    pub fn new(text: &str) -> Result<UserPattern, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(UserPattern(text.to_string()));
        }
        match text.split_once(':') {
            Some((channel, id)) if !channel.is_empty() && !id.is_empty() => Ok(UserPattern(text.to_string())),
            _ => Err(format!("user `{text}` is not `<channel>:<user id>` (like `tg:42`), `<channel>:*` or `*`")),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The channel part, `None` for `*`.
    pub fn channel(&self) -> Option<&str> {
        self.0.split_once(':').map(|(channel, _)| channel)
    }

    pub fn matches(&self, user: &str) -> bool {
        match self.0.strip_suffix('*') {
            _ if self.0 == user => true,
            Some("") => true,
            Some(prefix) if prefix.ends_with(':') => user.starts_with(prefix),
            _ => false,
        }
    }
}

impl fmt::Display for UserPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lenient: the form is checked after parsing ([`GatewayConfig::parse`]), where
/// the error can point at the element rather than at its whole list.
impl<'de> Deserialize<'de> for UserPattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<UserPattern, D::Error> {
        Ok(UserPattern(String::deserialize(deserializer)?.trim().to_string()))
    }
}

/// Who may run comma commands: a user, and optionally which commands (globs
/// over tool names). Written `"tg:42"` or `{ user = "tg:42", commands = ["tape.*"] }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator {
    pub user: UserPattern,
    /// `None`: every command.
    pub commands: Option<Vec<Spanned<ToolPattern>>>,
}

impl<'de> Deserialize<'de> for Operator {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Operator, D::Error> {
        struct OperatorVisitor;
        const KEYS: &[&str] = &["user", "commands"];
        impl<'de> Visitor<'de> for OperatorVisitor {
            type Value = Operator;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a user (`tg:42`) or a table `{ user = \"tg:42\", commands = [\"tape.*\"] }`")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Operator, E> {
                Ok(Operator { user: UserPattern(text.trim().to_string()), commands: None })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Operator, A::Error> {
                let (mut user, mut commands) = (None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "user" => user = Some(map.next_value::<UserPattern>()?),
                        "commands" => commands = Some(map.next_value::<Vec<Spanned<ToolPattern>>>()?),
                        other => return Err(de::Error::unknown_field(other, KEYS)),
                    }
                }
                let user = user.ok_or_else(|| de::Error::missing_field("user"))?;
                Ok(Operator { user, commands })
            }
        }
        deserializer.deserialize_any(OperatorVisitor)
    }
}

// ---- the file as written, before the per-kind checks ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    http: HttpConfig,
    #[serde(default)]
    policy: RawPolicySection,
    #[serde(default)]
    channels: IndexMap<Spanned<String>, RawChannel>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicySection {
    #[serde(default)]
    defaults: PolicyLayer,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChannel {
    kind: Spanned<KindName>,
    secrets: Option<Spanned<Vec<Secret>>>,
    callback_url: Option<Spanned<String>>,
    callback_secret: Option<Spanned<Secret>>,
    reply_timeout_seconds: Option<Spanned<Seconds>>,
    token: Option<Spanned<Secret>>,
    api_url: Option<Spanned<String>>,
    webhook_url: Option<Spanned<String>>,
    webhook_secret: Option<Spanned<Secret>>,
    #[serde(default)]
    policy: PolicyLayer,
    #[serde(default)]
    chats: IndexMap<String, ChatConfig>,
}

impl GatewayConfig {
    /// Reads and checks a config file (tool patterns are checked separately,
    /// by [`GatewayConfig::validate_tools`]).
    pub fn load(path: impl AsRef<Path>) -> Result<GatewayConfig, ConfigError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        GatewayConfig::parse(&text, path)
    }

    /// [`GatewayConfig::load`] plus [`GatewayConfig::validate_tools`]: what the
    /// gateway, hot reload and `bub policy check` use.
    pub fn load_checked(path: impl AsRef<Path>, known_tools: &[String]) -> Result<GatewayConfig, ConfigError> {
        let config = GatewayConfig::load(path)?;
        config.validate_tools(known_tools)?;
        Ok(config)
    }

    /// Parses and checks config text; `path` only names it in errors.
    pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<GatewayConfig, ConfigError> {
        let source = Arc::new(Source { path: path.as_ref().to_path_buf(), text: text.to_string() });
        let raw: RawConfig =
            toml::from_str(text).map_err(|error| source.error(error.span(), friendly_message(error.message())))?;
        let mut channels = IndexMap::new();
        for (name, channel) in raw.channels {
            check_channel_name(&source, &name)?;
            let channel = channel.into_config(&source, name.get_ref())?;
            channels.insert(name.into_inner(), channel);
        }
        let config = GatewayConfig { http: raw.http, defaults: raw.policy.defaults, channels, source: Some(source) };
        config.check_layers()?;
        Ok(config)
    }

    /// The config the gateway starts with when there is no file: one webhook
    /// channel named `webhook` with this secret, on 127.0.0.1:8080, replies on
    /// the request (no callback), and the built-in policy defaults.
    pub fn default_webhook(secret: String) -> GatewayConfig {
        let webhook = WebhookChannel {
            secrets: vec![Secret::new(secret)],
            callback_url: None,
            callback_secret: None,
            reply_timeout: None,
        };
        let channel = ChannelConfig {
            kind: ChannelKind::Webhook(webhook),
            policy: PolicyLayer::default(),
            chats: IndexMap::new(),
        };
        GatewayConfig {
            http: HttpConfig::default(),
            defaults: PolicyLayer::default(),
            channels: IndexMap::from([("webhook".to_string(), channel)]),
            source: None,
        }
    }

    /// The file this config came from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.source.as_deref().map(|s| s.path.as_path())
    }

    /// Every policy layer with its place in the file (`policy.defaults`,
    /// `channels.hooks.policy`, `channels.hooks.chats."room-1".policy`).
    pub fn layers(&self) -> Vec<(super::Layer, &PolicyLayer)> {
        let mut layers = vec![(super::Layer::Defaults, &self.defaults)];
        for (name, channel) in &self.channels {
            layers.push((super::Layer::Channel(name.clone()), &channel.policy));
            for (chat, config) in &channel.chats {
                layers.push((super::Layer::Chat { channel: name.clone(), chat: chat.clone() }, &config.policy));
            }
        }
        layers
    }

    /// Checks that every tool pattern (`allowed_tools`, `denied_tools`,
    /// operators' `commands`) matches at least one of `known` (registry
    /// names): a pattern that matches nothing is a typo that would silently
    /// deny (or fail to deny) a tool.
    pub fn validate_tools(&self, known: &[String]) -> Result<(), ConfigError> {
        let mut candidates: Vec<String> = known.to_vec();
        for name in known {
            if let Some((family, _)) = name.split_once('.') {
                let glob = format!("{family}.*");
                if !candidates.contains(&glob) {
                    candidates.push(glob);
                }
            }
        }
        for (_, layer) in self.layers() {
            let operator_commands =
                layer.operators.iter().flatten().flat_map(|op| op.get_ref().commands.iter().flatten());
            let patterns = layer
                .allowed_tools
                .iter()
                .flatten()
                .chain(layer.denied_tools.iter().flatten())
                .chain(layer.allow_with_untrusted_context.iter().flatten())
                .chain(operator_commands);
            for pattern in patterns {
                // A capability is checked when parsed; it may match no tool yet.
                if pattern.get_ref().capability().is_some()
                    || known.iter().any(|tool| pattern.get_ref().matches(tool, crate::tools::Capabilities::NONE))
                {
                    continue;
                }
                let text = pattern.get_ref().as_str();
                let hint = match closest(text, candidates.iter().map(String::as_str)) {
                    Some(close) => format!("; did you mean `{close}`?"),
                    None => "; no tool has such a name (see `bub tools`)".to_string(),
                };
                return Err(self.error(Some(pattern.span()), format!("unknown tool pattern `{text}`{hint}")));
            }
        }
        Ok(())
    }

    /// Where this config opens access wider than its channels' closed
    /// defaults, one line each as `FILE:LINE:COL: warning: …`: operator
    /// rights or chat-platform access given to `*` or a whole channel, open
    /// direct messages or groups on a chat platform, the shell on the host.
    /// Nothing here is an error (an admin may mean it); `bub policy check`
    /// and the gateway's start print them so it is always seen.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for (layer, policy) in self.layers() {
            let platforms = self.chat_platforms_under(&layer);
            for operator in policy.operators.iter().flatten() {
                let user = &operator.get_ref().user;
                if user.as_str() == "*" || user.as_str().ends_with(":*") {
                    let whom = match user.channel() {
                        Some(channel) => format!("everyone on {channel}"),
                        None => "everyone".to_string(),
                    };
                    let what = match &operator.get_ref().commands {
                        None => "every command, the shell included".to_string(),
                        Some(_) => "the commands listed".to_string(),
                    };
                    warnings.push(
                        self.warning(operator.span(), format!("operators: `{user}` makes {whom} an operator ({what})")),
                    );
                }
            }
            for user in policy.allow_users.iter().flatten() {
                let pattern = user.get_ref();
                let wide = pattern.as_str() == "*" || pattern.as_str().ends_with(":*");
                let on_platform = match pattern.channel() {
                    Some(channel) => platforms.iter().any(|p| p == channel),
                    None => !platforms.is_empty(),
                };
                if wide && on_platform {
                    warnings.push(self.warning(
                        user.span(),
                        format!(
                            "allow_users: `{pattern}` lets everyone who finds the bot on {} talk to it, \
                             without pairing{}",
                            platforms.join(", "),
                            self.tools_note(&platforms)
                        ),
                    ));
                }
            }
            if platforms.is_empty() {
                continue;
            }
            if let Some(dm) = policy.dm_policy.as_ref().filter(|dm| *dm.get_ref() == DmPolicy::Open) {
                warnings.push(self.warning(
                    dm.span(),
                    format!(
                        "dm_policy = \"open\": anyone who finds the bot on {} can talk to it in direct \
                         messages{}",
                        platforms.join(", "),
                        self.tools_note(&platforms)
                    ),
                ));
            }
            if let Some(group) = policy.group_policy.as_ref().filter(|g| *g.get_ref() == GroupPolicy::Open) {
                warnings.push(self.warning(
                    group.span(),
                    format!(
                        "group_policy = \"open\": every group the bot is added to on {} is answered",
                        platforms.join(", ")
                    ),
                ));
            }
            if let Some(environment) = policy.environment.as_ref().filter(|e| *e.get_ref() == EnvironmentKind::Local) {
                warnings.push(self.warning(
                    environment.span(),
                    format!(
                        "environment = \"local\": on {} the shell and code run on the host as the gateway's \
                         user, with its files, secrets and network",
                        platforms.join(", ")
                    ),
                ));
            }
            if let Some(network) = policy.sandbox_network.as_ref().filter(|n| *n.get_ref()) {
                warnings.push(self.warning(
                    network.span(),
                    format!(
                        "sandbox_network = true: the shell and code on {} may reach the network",
                        platforms.join(", ")
                    ),
                ));
            }
        }
        warnings
    }

    /// The chat-platform channels a layer applies to.
    fn chat_platforms_under(&self, layer: &super::Layer) -> Vec<String> {
        let platform = |name: &String| self.channels.get(name).is_some_and(|c| c.kind.is_chat_platform());
        match layer {
            super::Layer::BuiltIn | super::Layer::Defaults => {
                self.channels.keys().filter(|name| platform(name)).cloned().collect()
            }
            super::Layer::Channel(name) | super::Layer::Chat { channel: name, .. } => {
                if platform(name) {
                    vec![name.clone()]
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// `, and use bash, fs.write…` when those channels' direct chats allow them.
    fn tools_note(&self, channels: &[String]) -> String {
        let mut risky: Vec<&str> = Vec::new();
        for channel in channels {
            let policy = self.effective(channel, "");
            for tool in super::SHARED_CHAT_GUARDED {
                let can = match *tool {
                    "fs.write" | "fs.edit" => crate::tools::Capability::Write,
                    _ => crate::tools::Capability::Exec,
                };
                let capabilities = crate::tools::Capabilities::of([can]);
                if policy.tool_verdict(tool, capabilities, None, false, false).allowed && !risky.contains(tool) {
                    risky.push(tool);
                }
            }
        }
        if risky.is_empty() { String::new() } else { format!(", and use {}", risky.join(", ")) }
    }

    fn warning(&self, span: std::ops::Range<usize>, message: String) -> String {
        match &self.source {
            Some(source) => {
                let (line, column) = super::error::line_column(&source.text, span.start);
                format!("{}:{line}:{column}: warning: {message}", source.path.display())
            }
            None => format!("(built-in config): warning: {message}"),
        }
    }

    fn error(&self, span: Option<std::ops::Range<usize>>, message: String) -> ConfigError {
        match &self.source {
            Some(source) => source.error(span, message),
            None => ConfigError::Invalid { path: PathBuf::from("(built-in config)"), location: None, message },
        }
    }

    /// Checks across layers: users are well-formed and name configured
    /// channels, models parse.
    fn check_layers(&self) -> Result<(), ConfigError> {
        let channel_names: Vec<&str> = self.channels.keys().map(String::as_str).collect();
        for (_, layer) in self.layers() {
            let operators = layer.operators.iter().flatten().map(|op| (op.span(), &op.get_ref().user));
            let users = layer.allow_users.iter().flatten().map(|u| (u.span(), u.get_ref())).chain(operators);
            for (span, user) in users {
                if let Err(message) = UserPattern::new(user.as_str()) {
                    return Err(self.error(Some(span), message));
                }
                let Some(channel) = user.channel() else { continue };
                if !channel_names.contains(&channel) {
                    let hint = match closest(channel, channel_names.iter().copied()) {
                        Some(close) => format!("; did you mean `{close}`?"),
                        None => format!("; channels here: {}", channel_names.join(", ")),
                    };
                    return Err(self.error(Some(span), format!("user `{user}` names no channel `{channel}`{hint}")));
                }
            }
            if let Some(model) = &layer.model
                && let Err(error) = crate::model::ModelSpec::parse(model.get_ref())
            {
                return Err(self.error(Some(model.span()), format!("model: {error}")));
            }
        }
        Ok(())
    }
}

/// Channel names become part of session ids and user names (`hooks:alice`),
/// so they are plain words.
fn check_channel_name(source: &Source, name: &Spanned<String>) -> Result<(), ConfigError> {
    let text = name.get_ref();
    if text.is_empty() || !text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(
            source.error(Some(name.span()), format!("channel name `{text}` may use only letters, digits, `_` and `-`"))
        );
    }
    Ok(())
}

impl RawChannel {
    /// The typed channel, or the first key that does not fit its kind (or a
    /// kind this build lacks).
    fn into_config(self, source: &Source, name: &str) -> Result<ChannelConfig, ConfigError> {
        let kind_span = self.kind.span();
        let kind = *self.kind.get_ref();
        let (kind_name, own_keys): (&str, &[&str]) = match kind {
            KindName::Webhook => ("webhook", &["secrets", "callback_url", "callback_secret", "reply_timeout_seconds"]),
            KindName::Telegram => ("telegram", &["token", "api_url", "webhook_url", "webhook_secret"]),
            KindName::Discord => ("discord", &["token", "api_url"]),
        };
        if !kind.is_built_in() {
            // The feature is named as the kind is.
            return Err(source.error(
                Some(kind_span),
                format!(
                    "channel `{name}`: kind `{kind_name}` is not built into this bub (rebuild with --features {kind_name})"
                ),
            ));
        }
        let present: [(&str, Option<std::ops::Range<usize>>); 8] = [
            ("secrets", self.secrets.as_ref().map(Spanned::span)),
            ("callback_url", self.callback_url.as_ref().map(Spanned::span)),
            ("callback_secret", self.callback_secret.as_ref().map(Spanned::span)),
            ("reply_timeout_seconds", self.reply_timeout_seconds.as_ref().map(Spanned::span)),
            ("token", self.token.as_ref().map(Spanned::span)),
            ("api_url", self.api_url.as_ref().map(Spanned::span)),
            ("webhook_url", self.webhook_url.as_ref().map(Spanned::span)),
            ("webhook_secret", self.webhook_secret.as_ref().map(Spanned::span)),
        ];
        for (key, span) in present {
            if let Some(span) = span
                && !own_keys.contains(&key)
            {
                return Err(source.error(
                    Some(span),
                    format!("`{key}` does not apply to a {kind_name} channel (its keys: {})", own_keys.join(", ")),
                ));
            }
        }
        let missing = |key: &str| source.error(Some(kind_span.clone()), format!("a {kind_name} channel needs `{key}`"));
        let kind = match kind {
            KindName::Webhook => {
                let secrets = self.secrets.ok_or_else(|| missing("secrets"))?;
                let span = secrets.span();
                let secrets = secrets.into_inner();
                if secrets.is_empty() || secrets.iter().any(|s| s.expose().is_empty()) {
                    return Err(source.error(Some(span), "`secrets` needs at least one non-empty secret"));
                }
                let callback_secret = match self.callback_secret {
                    Some(secret) if secret.get_ref().expose().is_empty() => {
                        return Err(source.error(Some(secret.span()), "`callback_secret` is empty"));
                    }
                    other => other.map(Spanned::into_inner),
                };
                let callback_url = self.callback_url.map(|url| check_url(source, url)).transpose()?;
                let reply_timeout = match self.reply_timeout_seconds {
                    Some(seconds) if !(seconds.get_ref().0 > 0.0 && seconds.get_ref().0.is_finite()) => {
                        return Err(source.error(Some(seconds.span()), "`reply_timeout_seconds` must be above 0"));
                    }
                    other => other.map(Spanned::into_inner),
                };
                ChannelKind::Webhook(WebhookChannel { secrets, callback_url, callback_secret, reply_timeout })
            }
            KindName::Telegram | KindName::Discord => {
                let token = self.token.ok_or_else(|| missing("token"))?;
                if token.get_ref().expose().trim().is_empty() {
                    return Err(source.error(Some(token.span()), "`token` is empty"));
                }
                let (webhook_url, webhook_secret) = match (self.webhook_url, self.webhook_secret) {
                    (None, None) => (None, None),
                    (Some(url), Some(secret)) => {
                        check_webhook_secret(source, &secret)?;
                        (Some(check_url(source, url)?), Some(secret.into_inner()))
                    }
                    (Some(url), None) => {
                        return Err(source.error(Some(url.span()), "`webhook_url` needs a `webhook_secret` beside it"));
                    }
                    (None, Some(secret)) => {
                        return Err(
                            source.error(Some(secret.span()), "`webhook_secret` needs a `webhook_url` beside it")
                        );
                    }
                };
                let bot = BotChannel {
                    token: token.into_inner(),
                    api_url: self.api_url.map(|url| check_url(source, url)).transpose()?,
                    webhook_url,
                    webhook_secret,
                };
                if kind == KindName::Telegram { ChannelKind::Telegram(bot) } else { ChannelKind::Discord(bot) }
            }
        };
        Ok(ChannelConfig { kind, policy: self.policy, chats: self.chats })
    }
}

/// An `http://` or `https://` URL, or the error at its position.
/// Telegram's rule for a webhook's secret token: 1–256 of `A-Z a-z 0-9 _ -`.
fn check_webhook_secret(source: &Source, secret: &Spanned<Secret>) -> Result<(), ConfigError> {
    let value = secret.get_ref().expose();
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if value.is_empty() || value.len() > 256 || !value.chars().all(allowed) {
        return Err(source.error(
            Some(secret.span()),
            "`webhook_secret` must be 1 to 256 characters of A-Z, a-z, 0-9, `_` and `-` (Telegram's rule)",
        ));
    }
    Ok(())
}

fn check_url(source: &Source, url: Spanned<String>) -> Result<String, ConfigError> {
    match reqwest::Url::parse(url.get_ref()) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(url.into_inner()),
        Ok(_) => Err(source.error(Some(url.span()), format!("`{}` is not an http(s) URL", url.get_ref()))),
        Err(error) => Err(source.error(Some(url.span()), format!("`{}` is not a URL: {error}", url.get_ref()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n";

    fn parse(text: &str) -> Result<GatewayConfig, ConfigError> {
        GatewayConfig::parse(text, "bub.toml")
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_minimal_webhook_config_parses_with_defaults() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.http.listen.to_string(), "127.0.0.1:8080");
        let ChannelKind::Webhook(hook) = &config.channels["hooks"].kind else { panic!("a webhook") };
        assert_eq!(hook.secrets, vec![Secret::new("s3cret")]);
        assert_eq!(hook.callback_secret().map(Secret::expose), Some("s3cret"));
        assert_eq!(format!("{:?}", hook.secrets), "[Secret(***)]", "secrets never print");
    }

    #[test]
    fn unknown_keys_point_at_the_key_with_a_suggestion() {
        let text = format!("{MINIMAL}\n[policy.defaults]\nallowed_tool = [\"*\"]\n");
        assert_eq!(error(&text), "bub.toml:6:1: unknown key `allowed_tool`; did you mean `allowed_tools`?");
        let text = "[http]\nlisten = \"127.0.0.1:80\"\nlisen = 1\n";
        assert_eq!(error(text), "bub.toml:3:1: unknown key `lisen`; did you mean `listen`?");
    }

    #[test]
    fn http_limits_default_and_must_be_above_zero() {
        let limits = parse(MINIMAL).unwrap().http.limits();
        assert_eq!(limits, crate::http::ServeLimits::default());
        let text = format!("[http]\nread_timeout_seconds = 2.5\nmax_connections = 8\n{MINIMAL}");
        let limits = parse(&text).unwrap().http.limits();
        assert_eq!((limits.read_timeout.as_millis(), limits.max_connections), (2500, 8));
        let text = format!("[http]\nread_timeout_seconds = 0\n{MINIMAL}");
        assert_eq!(error(&text), "bub.toml:2:24: 0 must be above 0");
        let text = format!("[http]\nmax_connections = 0\n{MINIMAL}");
        assert_eq!(error(&text), "bub.toml:2:19: 0 must be above 0");
    }

    #[test]
    fn toml_syntax_errors_have_a_position_too() {
        assert_eq!(error("[http\nlisten = 1\n"), "bub.toml:1:6: unclosed table, expected `]`");
        let text = format!("{MINIMAL}[channels.hooks]\nkind = \"webhook\"\n");
        assert_eq!(error(&text), "bub.toml:4:11: duplicate key");
    }

    #[test]
    fn bad_enum_values_list_the_allowed_ones() {
        let text = format!("{MINIMAL}[channels.hooks.policy]\nbusy = \"wait\"\n");
        assert_eq!(error(&text), "bub.toml:5:8: unknown value `wait`; expected one of steer, queue, drop");
        let text = "[channels.x]\nkind = \"slack\"\n";
        assert_eq!(error(text), "bub.toml:2:8: unknown value `slack`; expected one of webhook, telegram, discord");
    }

    #[test]
    #[cfg(all(feature = "telegram", feature = "discord"))]
    fn each_kind_takes_its_own_keys() {
        assert_eq!(error("[channels.hooks]\nkind = \"webhook\"\n"), "bub.toml:2:8: a webhook channel needs `secrets`");
        assert_eq!(
            error("[channels.hooks]\nkind = \"webhook\"\nsecrets = []\n"),
            "bub.toml:3:11: `secrets` needs at least one non-empty secret"
        );
        assert_eq!(
            error("[channels.tg]\nkind = \"telegram\"\ntoken = \"t\"\nsecrets = [\"x\"]\n"),
            "bub.toml:4:11: `secrets` does not apply to a telegram channel (its keys: token, api_url, webhook_url, webhook_secret)"
        );
        assert_eq!(error("[channels.tg]\nkind = \"discord\"\n"), "bub.toml:2:8: a discord channel needs `token`");
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

    #[test]
    fn rates_users_and_models_are_checked_where_they_are_written() {
        let text = format!("{MINIMAL}[policy.defaults]\nrate = {{ inbound_per_user = \"20/day\" }}\n");
        assert_eq!(
            error(&text),
            "bub.toml:5:29: invalid rate `20/day`: the unit is not s, min or h; write N/s, N/min or N/h (like `20/min`)"
        );
        let text = format!("{MINIMAL}[policy.defaults]\nallow_users = [\"hook:alice\"]\n");
        assert_eq!(error(&text), "bub.toml:5:16: user `hook:alice` names no channel `hook`; did you mean `hooks`?");
        let text = format!("{MINIMAL}[policy.defaults]\nallow_users = [\"alice\"]\n");
        assert!(
            error(&text).starts_with("bub.toml:5:16: user `alice` is not `<channel>:<user id>`"),
            "{}",
            error(&text)
        );
        let text = format!("{MINIMAL}[policy.defaults]\noperators = [{{ user = \"hooks:a\", comands = [] }}]\n");
        assert_eq!(error(&text), "bub.toml:5:14: unknown key `comands`; did you mean `commands`?");
        let text = format!("{MINIMAL}[policy.defaults]\nmodel = \"gpt-4o\"\n");
        assert!(error(&text).starts_with("bub.toml:5:9: model: "), "{}", error(&text));
    }

    #[test]
    fn tool_patterns_must_match_a_known_tool() {
        let known: Vec<String> = ["fs.read", "fs.write", "bash", "tape.info"].map(String::from).to_vec();
        let text =
            format!("{MINIMAL}[channels.hooks.chats.\"room-1\".policy]\ndenied_tools = [\"bash\", \"fs.reed\"]\n");
        let config = parse(&text).unwrap();
        let error = config.validate_tools(&known).unwrap_err();
        assert_eq!(error.to_string(), "bub.toml:5:25: unknown tool pattern `fs.reed`; did you mean `fs.read`?");
        let text = format!("{MINIMAL}[policy.defaults]\nallowed_tools = [\"fz.*\"]\n");
        let error = parse(&text).unwrap().validate_tools(&known).unwrap_err();
        assert_eq!(error.message(), "unknown tool pattern `fz.*`; did you mean `fs.*`?");
        let text =
            format!("{MINIMAL}[policy.defaults]\noperators = [{{ user = \"hooks:a\", commands = [\"zzz\"] }}]\n");
        let error = parse(&text).unwrap().validate_tools(&known).unwrap_err();
        assert_eq!(error.message(), "unknown tool pattern `zzz`; no tool has such a name (see `bub tools`)");
        let text = format!("{MINIMAL}[policy.defaults]\nallowed_tools = [\"*\", \"fs.*\", \"tape.{{info,search}}\"]\n");
        parse(&text).unwrap().validate_tools(&known).unwrap();
    }

    #[test]
    fn user_patterns_match_one_user_a_channel_or_everyone() {
        let user = |text| UserPattern::new(text).unwrap();
        assert!(user("tg:42").matches("tg:42") && !user("tg:42").matches("tg:421"));
        assert!(user("tg:*").matches("tg:7") && !user("tg:*").matches("hooks:7"));
        assert!(user("*").matches("hooks:alice"));
    }
}
