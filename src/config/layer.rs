//! The `[policy]` tables as written: one [`PolicyLayer`] per place in the
//! file ([`Layer`]), each key optional.
//!
//! These types are the *shape* of the file, so they live here, in `config/`;
//! what a layer means once merged with the layers below it (who is answered,
//! which tools run) is decided in `policy/` (`EffectivePolicy`). `config/`
//! parses and checks the keys; `policy/` reads them and never parses.

use super::pattern::ToolPattern;
use super::rate::Rate;
use super::value::{Operator, Seconds, UserPattern};
use serde::{Deserialize, Serialize};
use std::fmt;
use toml::Spanned;

/// Where a value was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layer {
    /// Nothing set it: bub's built-in default.
    BuiltIn,
    /// `[agent]`, the gateway-wide setting under the policies.
    Agent,
    /// `[policy.defaults]`.
    Defaults,
    /// `[channels.NAME.policy]`.
    Channel(String),
    /// `[channels.NAME.chats."ID".policy]`.
    Chat { channel: String, chat: String },
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layer::BuiltIn => f.write_str("built-in default"),
            Layer::Agent => f.write_str("agent"),
            Layer::Defaults => f.write_str("policy.defaults"),
            Layer::Channel(channel) => write!(f, "channels.{channel}.policy"),
            Layer::Chat { channel, chat } => write!(f, "channels.{channel}.chats.{chat:?}.policy"),
        }
    }
}

/// One policy layer. Every key is optional: an unset key leaves the value of
/// the layer below (defaults → channel → chat); a set key replaces it, lists
/// included (they are never appended). Tables (`addressing`, `debounce`,
/// `rate`) merge key by key. What each key means, and its built-in default,
/// is documented in `config/bub.example.toml` and on `policy::EffectivePolicy`.
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
    pub on_edit: Option<EditRule>,
    pub debounce: Option<DebounceLayer>,
    pub rate: Option<RateLayer>,
    pub model: Option<Spanned<String>>,
    /// The context window of the model here, in tokens (over `[agent]
    /// context_window` and the model family's): for a `model` whose window
    /// bub does not know, or a deployment with a smaller one.
    #[serde(default, deserialize_with = "super::agent::window")]
    pub context_window: Option<u64>,
    pub confine_fs: Option<bool>,
    pub dm_policy: Option<Spanned<DmPolicy>>,
    pub group_policy: Option<Spanned<GroupPolicy>>,
    pub environment: Option<Spanned<EnvironmentKind>>,
    pub sandbox_network: Option<Spanned<bool>>,
    pub allow_with_untrusted_context: Option<Vec<Spanned<ToolPattern>>>,
    pub max_attachment_bytes: Option<u64>,
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

/// What an edit of a message does once its turn has started (before that,
/// the edit replaces the waiting message's text, whatever this says).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EditRule {
    /// The edit is recorded on the session's tape and not answered. The default.
    #[default]
    Record,
    /// The edited message is answered again, in a turn of its own.
    Rerun,
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
display_as_serde!(SessionScope, BusyRule, EditRule, DmPolicy, GroupPolicy, EnvironmentKind);
