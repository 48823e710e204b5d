//! The [`Channel`] trait adapters implement.

use crate::attachment::{Attachment, FetchError};
use crate::command::{MenuCommand, MenuScope};
use crate::message::{ChatRef, Outbound, OutboundFile, SenderRef};
use crate::reply::InboundSink;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// What a platform allows, so the gateway can shape replies for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest message the platform accepts, in characters (Telegram 4096, Discord 2000)
    /// counted as [`Limits::length_unit`] says.
    pub max_message_chars: usize,
    /// How the platform counts a message's length.
    pub length_unit: LengthUnit,
    /// Sent messages can be edited (streamed replies grow in place).
    pub edits: bool,
    /// Bursts of messages should be merged into one turn (chat platforms, where
    /// people send several short lines; not webhooks).
    pub debounce: bool,
    /// The platform can show that the bot is typing ([`Channel::typing`]).
    pub typing: bool,
}

/// How a platform counts a message's length against [`Limits::max_message_chars`]; splitting by
/// the wrong count sends more messages than needed (or, the other way round, gets them refused).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LengthUnit {
    /// UTF-16 code units: a character outside the Basic Multilingual Plane (most emoji) counts 2
    /// (Telegram). The safe choice when unsure: no count is larger.
    #[default]
    Utf16,
    /// Unicode code points: every character counts 1 (Discord, which accepts 2000 emoji).
    CodePoints,
}

/// The platform's id of a delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub message_id: String,
}

/// Why a send failed; the gateway's scheduler decides what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The platform said to slow down: nothing more to this chat (or, with
    /// [`RateScope::Channel`], to the whole bot) for `retry_after`.
    #[error("rate limited ({scope:?}); retry after {} s", crate::reply::retry_after_seconds(*.retry_after))]
    RateLimited { retry_after: Duration, scope: RateScope },
    /// Worth retrying (network error, 5xx).
    #[error("temporary failure: {0}")]
    Transient(String),
    /// Retrying will not help (chat gone, message rejected, feature missing).
    #[error("{0}")]
    Permanent(String),
}

/// What a platform's rate limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope {
    /// Only the chat the message went to.
    Chat,
    /// Everything the bot sends on this channel.
    Channel,
}

/// A channel that could not start (bad credentials, unreachable platform).
#[derive(Debug, thiserror::Error)]
#[error("channel {channel}: {message}")]
pub struct ChannelError {
    pub channel: String,
    pub message: String,
}

impl ChannelError {
    pub fn new(channel: impl Into<String>, message: impl Into<String>) -> ChannelError {
        ChannelError { channel: channel.into(), message: message.into() }
    }
}

/// What is wrong with a channel's credentials ([`Channel::check_credentials`]),
/// and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}; {fix}")]
pub struct CredentialProblem {
    /// What was found: "Telegram rejects the bot token".
    pub problem: String,
    /// What to change, naming the config key or the command:
    /// "check channels.tg.token (from @BotFather)".
    pub fix: String,
}

impl CredentialProblem {
    pub fn new(problem: impl Into<String>, fix: impl Into<String>) -> CredentialProblem {
        CredentialProblem { problem: problem.into(), fix: fix.into() }
    }
}

/// One configured channel instance (a bot on a platform, a webhook endpoint).
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The instance's configured name; [`Inbound::channel`](crate::Inbound) carries it.
    fn name(&self) -> &str;

    fn limits(&self) -> Limits;

    /// Starts receiving: every message goes to `inbox`. An error means the
    /// channel cannot run, and the gateway stops with it.
    async fn start(&self, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError>;

    /// HTTP routes the channel serves on the gateway's server (webhooks),
    /// mounted at the root. Called once, before [`Channel::start`].
    fn routes(&self) -> Option<axum::Router> {
        None
    }

    /// Sends one message and returns the platform's id for it.
    async fn send(&self, outbound: &Outbound) -> Result<Delivered, SendError>;

    /// Replaces the text of a message sent earlier ([`Limits::edits`]).
    /// `mentions` are the message's [`Outbound::mentions`], rendered in front
    /// of the new text as [`Channel::send`] renders them, so they stay (an
    /// edit pings nobody).
    async fn edit(
        &self,
        _chat: &ChatRef,
        _message_id: &str,
        _text: &str,
        _mentions: &[SenderRef],
    ) -> Result<(), SendError> {
        Err(SendError::Permanent(format!("channel {} cannot edit messages", self.name())))
    }

    /// The largest file, in bytes, [`Channel::send_file`] can send (the
    /// platform's upload limit for a bot); `None`: the channel sends no files.
    /// The gateway refuses a bigger file before reading it, so nothing of it
    /// is sent.
    fn max_file_bytes(&self) -> Option<u64> {
        None
    }

    /// Sends one file as a message (with its caption) and returns the
    /// platform's id for it; within [`Channel::max_file_bytes`].
    async fn send_file(&self, _file: &OutboundFile) -> Result<Delivered, SendError> {
        Err(SendError::Permanent(format!("channel {} cannot send files", self.name())))
    }

    /// Shows that the bot is working on an answer in `chat` ("typing…"), for
    /// a few seconds; the gateway repeats it while a turn runs. Platforms
    /// without such a signal ignore it.
    async fn typing(&self, _chat: &ChatRef) -> Result<(), SendError> {
        Ok(())
    }

    /// The bytes of a file sent with a message this channel received, at
    /// most `max_bytes` of them: a larger file is [`FetchError::TooLarge`]
    /// and nothing of it is kept. Only called for admitted messages. Fetches
    /// only from the platform's own file servers, whatever the attachment's
    /// reference says (a reference is never a URL to follow blindly).
    async fn fetch_attachment(&self, _attachment: &Attachment, _max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        Err(FetchError::Refused(format!("channel {} cannot fetch files", self.name())))
    }

    /// Whether `/name args` typed on this platform is one of its commands
    /// (Telegram, Discord). The gateway then reads it as the comma command
    /// `name` maps to (see bub's `command::platform`); an adapter removes
    /// only its own bot's `@name` from `/name@bot`.
    fn slash_commands(&self) -> bool {
        false
    }

    /// Whether the platform shows a menu per chat and per member of a chat
    /// (Telegram's command scopes). Where it shows one list to everyone
    /// (Discord's application commands), the gateway sets only
    /// [`MenuScope::Default`], with every command someone may run on the
    /// channel.
    fn menus_per_chat(&self) -> bool {
        false
    }

    /// Sets the command menu the platform shows to `scope`. Platforms
    /// without a menu ignore it.
    async fn set_commands(&self, _scope: &MenuScope, _commands: &[MenuCommand]) -> Result<(), SendError> {
        Ok(())
    }

    /// Why the platform does not deliver group messages that do not
    /// address the bot, and how to change that, as it said when the channel
    /// started (Telegram's privacy mode); `None` when they arrive or it
    /// cannot tell. The gateway warns when its policy needs them.
    fn hidden_group_messages(&self) -> Option<String> {
        None
    }

    /// Checks the channel's credentials without starting it (`bub doctor`):
    /// asks the platform who the bot is, or judges the secrets the channel
    /// signs and verifies with. `Ok`: what was found ("@my_bot"). Sends no
    /// message and changes nothing on the platform. The caller bounds how
    /// long it may take.
    async fn check_credentials(&self) -> Result<String, CredentialProblem> {
        Ok("no credentials to check".to_string())
    }

    /// Stops receiving; called at shutdown, and (through the default
    /// [`Channel::stop_part`]) when a replica gives its part up, so a later
    /// [`Channel::start`] must work again.
    async fn stop(&self) {}

    /// Into how many parts the channel's receiving splits that must each
    /// run in one process at a time, however many gateway replicas share
    /// the work: 1 for a Telegram bot that polls (a second poller of the
    /// token gets 409), the shard count for Discord (one connection per
    /// shard). 0, the default: receiving runs in every replica (webhooks).
    /// With one process, [`Channel::start`] starts every part.
    fn exclusive_parts(&self) -> u32 {
        0
    }

    /// Starts receiving part `part` (below [`Channel::exclusive_parts`])
    /// into `inbox`: replicas call it for the parts they lease. The default
    /// starts the whole channel (for channels of one part).
    async fn start_part(&self, part: u32, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        let _ = part;
        self.start(inbox).await
    }

    /// Stops receiving part `part` (its lease moves to another replica).
    /// When it returns nothing of the part runs here any more (another
    /// replica starts it at once), and [`Channel::start_part`] may start it
    /// here again later. The default stops the whole channel.
    async fn stop_part(&self, part: u32) {
        let _ = part;
        self.stop().await
    }
}
