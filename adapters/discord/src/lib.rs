//! bub's Discord channel: a bot connected to Discord's gateway (websocket),
//! answering through the REST API.
//!
//! Configured as `[channels.NAME] kind = "discord"` with the bot's `token`
//! (Developer Portal → Bot), optionally `api_url` (a REST proxy or a test
//! fake; the gateway URL is then asked of it too) and `shards` (1 by
//! default). The bot needs the privileged MESSAGE CONTENT intent (Developer
//! Portal → Bot → Privileged Gateway Intents) to read guild messages that
//! do not mention it.
//!
//! - [`DiscordChannel::start`] checks the token (`GET /users/@me`), connects
//!   every shard, and returns once Discord said READY on each, or fails with
//!   what to fix (a wrong token, an intent not enabled). Each shard is one
//!   gateway connection ([`Channel::exclusive_parts`]); gateway replicas
//!   start and stop shards one by one ([`Channel::start_part`],
//!   [`Channel::stop_part`]), see `shards`.
//! - Messages, and edits of their content, go to the gateway as they
//!   arrive; serenity reconnects and resumes by itself after a dropped
//!   connection. Discord replays what was missed only to a resumed session,
//!   so after every READY (the first, and any new session serenity had to
//!   start) what was written meanwhile is fetched from the channels' history
//!   (`catch_up`). A message in a thread is a thread of its parent channel
//!   (`threads`).
//! - Replies (2000 characters each), edits of streamed replies and "typing…"
//!   go through serenity's HTTP client, whose rate limiter follows Discord's
//!   buckets. Files go as one attachment each (up to 10 MiB, a bot's upload
//!   limit in a server without boosts).
//! - Slash commands: the gateway's command menu is the application's global
//!   command list (`commands`); a command someone runs is acknowledged at
//!   once and reaches the gateway as the message `/name args`, and its reply
//!   fills the acknowledged answer (`interactions`).
//!
//! # Layout
//! - `shards`: one gateway connection (a serenity client) per shard, and the spacing of their starts.
//! - `catch_up`: the messages missed while a shard had no session (stopped, or a new session).
//! - `commands`: the command list Discord shows, and a command someone ran as [`bub_channel::Inbound`].
//! - `interactions`: acknowledging a command, and its reply through the interaction's token.
//! - `inbound`: Discord messages and their edits as [`bub_channel::Inbound`].
//! - `send`: create (text or a file), edit and typing, and error mapping.
//! - `files`: attached files, fetched from Discord's CDN only.
//! - `threads`: which channels are threads, and of which parent; which server a channel is in.

#![forbid(unsafe_code)]

mod catch_up;
mod commands;
mod files;
#[doc(hidden)]
pub mod fuzzing;
mod inbound;
mod interactions;
mod send;
mod shards;
mod threads;

use async_trait::async_trait;
use bub_channel::{
    Attachment, Channel, ChannelError, ChatRef, CredentialProblem, Delivered, FetchError, InboundSink, LengthUnit,
    Limits, MenuCommand, MenuScope, Outbound, OutboundFile, Secret, SendError, SenderRef, SubmitError,
};
use inbound::BotUser;
use interactions::Answers;
use parking_lot::Mutex;
use serenity::all::{
    CommandInteraction, CommandType, Context, EventHandler, Interaction, Message, MessageUpdateEvent, Ready,
};
use serenity::http::{Http, HttpBuilder};
use shards::{IdentifyGate, Shard};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Discord's limit on one message's content, in Unicode code points.
pub const MAX_MESSAGE_CHARS: usize = 2000;
/// How long `start` waits for the token check and for READY.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One bot's configuration (`[channels.<name>]` with `kind = "discord"`).
/// The token is a [`Secret`]: `Debug` never shows it.
#[derive(Debug, Clone)]
pub struct DiscordSettings {
    pub name: String,
    /// The bot token from the Developer Portal.
    pub token: Secret,
    /// Where REST calls go instead of `https://discord.com` (a proxy, a test fake).
    pub api_url: Option<String>,
    /// Into how many shards (gateway connections) the bot's servers split; at least 1.
    pub shards: u32,
}

/// A Discord bot as a bub channel.
pub struct DiscordChannel {
    settings: DiscordSettings,
    /// Downloads attached files (serenity's REST client keeps its own private).
    files: reqwest::Client,
    /// Slash commands being answered, shared with the event handlers.
    answers: Arc<Answers>,
    /// Replies, edits, typing and the command menu: usable whether or not
    /// this process holds a shard (a gateway replica may run a chat whose
    /// shard is connected elsewhere).
    http: Arc<Http>,
    /// The shards connected here, by shard id.
    running: Mutex<BTreeMap<u32, Shard>>,
    /// Spaces the starts of this process's shards.
    identify: tokio::sync::Mutex<IdentifyGate>,
}

impl DiscordChannel {
    /// Checks the settings; nothing is sent to Discord until [`Channel::start`].
    pub fn new(settings: DiscordSettings) -> Result<DiscordChannel, ChannelError> {
        let name = &settings.name;
        if settings.token.is_blank() {
            return Err(ChannelError::new(
                name,
                format!("discord channel {name} has no token; set channels.{name}.token"),
            ));
        }
        if let Some(url) = &settings.api_url
            && let Err(error) = bub_channel::rules::http_url(url)
        {
            return Err(ChannelError::new(name, format!("channels.{name}.api_url {url:?}: {error}")));
        }
        if settings.shards == 0 {
            return Err(ChannelError::new(name, format!("channels.{name}.shards must be at least 1")));
        }
        let files = files::client()
            .map_err(|error| ChannelError::new(name, format!("cannot set up an HTTP client: {error}")))?;
        let http = Arc::new(rest_client(&settings));
        Ok(DiscordChannel {
            settings,
            files,
            answers: Arc::default(),
            http,
            running: Mutex::default(),
            identify: tokio::sync::Mutex::default(),
        })
    }

    /// A new REST client (each shard's serenity client takes one of its own).
    fn http(&self) -> Http {
        rest_client(&self.settings)
    }

    fn fail(&self, message: String) -> ChannelError {
        ChannelError::new(self.settings.name.clone(), message)
    }

    /// What a failed `GET /users/@me` says about the token, and what to fix.
    fn token_problem(&self, error: serenity::Error) -> CredentialProblem {
        let name = &self.settings.name;
        match error {
            serenity::Error::Http(serenity::http::HttpError::UnsuccessfulRequest(response))
                if response.status_code == 401 =>
            {
                CredentialProblem::new(
                    "Discord rejects the bot token",
                    format!("check channels.{name}.token (Developer Portal → Bot → Reset Token)"),
                )
            }
            other => CredentialProblem::new(
                format!("cannot reach Discord: {}", send::classify(other)),
                format!("check the network, or channels.{name}.api_url"),
            ),
        }
    }

    /// Stops the shards in `stopping`, one after the other.
    async fn stop_shards(&self, stopping: impl IntoIterator<Item = (u32, Shard)>) {
        for (id, shard) in stopping {
            shard.stop(&self.settings.name, id).await;
        }
    }
}

/// The REST client. With `api_url` it talks to that proxy without serenity's own rate
/// limiter, whose requests would bypass the proxy (it is the proxy's job then, as with
/// twilight-http-proxy); a 429 from the proxy becomes a pause in the gateway's scheduler.
fn rest_client(settings: &DiscordSettings) -> Http {
    let mut builder = HttpBuilder::new(settings.token.expose().trim());
    if let Some(url) = &settings.api_url {
        builder = builder.proxy(url.trim_end_matches('/')).ratelimiter_disabled(true);
    }
    builder.build()
}

/// What arrived from Discord for the gateway.
pub(crate) enum Arrived {
    /// A new message (live, or caught up).
    Created(Box<Message>),
    /// A message changed (content, or only embeds: see `inbound`).
    Updated(Box<MessageUpdateEvent>),
    /// Someone ran a slash command (acknowledged already: see `interactions`).
    Command(Box<CommandInteraction>),
}

impl Arrived {
    /// Discord's order: by message id (snowflakes grow with time), a message
    /// before its updates, and its updates by when they were made.
    fn order(&self) -> (serenity::model::id::MessageId, Option<i64>) {
        match self {
            Arrived::Created(message) => (message.id, None),
            Arrived::Updated(update) => {
                (update.id, Some(update.edited_timestamp.map_or(i64::MIN, |at| at.timestamp_micros())))
            }
            // Interaction ids are snowflakes of the same clock.
            Arrived::Command(command) => (serenity::model::id::MessageId::new(command.id.get()), None),
        }
    }
}

/// Receives one shard's events and reports READY to `connect`, and every READY
/// to the shard's catch-up (a new session gets nothing of what was said before it).
/// serenity runs each event handler call on a task of its own, so calls may
/// run out of order: messages go through one queue to one [`hand_over`] task
/// instead.
struct Handler {
    messages: mpsc::UnboundedSender<Arrived>,
    ready: Mutex<Option<oneshot::Sender<()>>>,
    sessions: mpsc::UnboundedSender<()>,
    answers: Arc<Answers>,
    channel: String,
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        tracing::info!(channel = %self.channel, shard = ctx.shard_id.0, bot = %ready.user.name, guilds = ready.guilds.len(), "discord bot connected");
        if let Some(ready) = self.ready.lock().take() {
            let _ = ready.send(());
        }
        let _ = self.sessions.send(());
    }

    async fn message(&self, _ctx: Context, message: Message) {
        let _ = self.messages.send(Arrived::Created(Box::new(message)));
    }

    async fn message_update(
        &self,
        _ctx: Context,
        _old: Option<Message>,
        _new: Option<Message>,
        update: MessageUpdateEvent,
    ) {
        let _ = self.messages.send(Arrived::Updated(Box::new(update)));
    }

    /// Acknowledges a slash command at once (Discord's 3 seconds), then
    /// queues it like a message.
    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        let Interaction::Command(command) = interaction else { return };
        if command.data.kind != CommandType::ChatInput {
            return;
        }
        self.answers.acknowledge(&ctx.http, &command).await;
        let _ = self.messages.send(Arrived::Command(Box::new(command)));
    }
}

/// How long messages are gathered before they are sorted and handed over:
/// serenity's handler tasks for messages that came together start within
/// microseconds of each other, in any order. Small beside the debounce of
/// chat channels (1 s by default).
const GATHER: Duration = Duration::from_millis(20);

/// Where [`hand_over`] gives what arrived.
struct Receiver {
    channel: String,
    bot: BotUser,
    inbox: Arc<dyn InboundSink>,
    /// Answers a command the gateway did not take.
    answers: Arc<Answers>,
    http: Arc<Http>,
}

/// Gives messages to the gateway one at a time, in Discord's order: whatever
/// arrives within [`GATHER`] of the first is sorted by id (snowflakes grow
/// with time) first, a message before its edits (see [`Arrived::order`]).
async fn hand_over(to: Receiver, mut messages: mpsc::UnboundedReceiver<Arrived>, mut threads: threads::Threads) {
    let channel = &to.channel;
    while let Some(first) = messages.recv().await {
        let mut batch = vec![first];
        let gathered = tokio::time::Instant::now() + GATHER;
        while let Ok(Some(more)) = tokio::time::timeout_at(gathered, messages.recv()).await {
            batch.push(more);
        }
        batch.sort_by_key(Arrived::order);
        for arrived in batch {
            let inbound = match &arrived {
                Arrived::Created(message) => {
                    let parent = threads.parent(message.channel_id, message.guild_id).await;
                    let inbound = inbound::to_inbound(channel, &to.bot, message, parent);
                    if inbound.is_none()
                        && message.content.is_empty()
                        && message.guild_id.is_some()
                        && message.attachments.is_empty()
                    {
                        tracing::debug!(%channel, "a guild message without content: is the MESSAGE CONTENT intent enabled?");
                    }
                    inbound
                }
                Arrived::Updated(update) => {
                    let parent = threads.parent(update.channel_id, update.guild_id).await;
                    inbound::edit_to_inbound(channel, &to.bot, update, parent)
                }
                Arrived::Command(command) => {
                    let parent = threads.parent(command.channel_id, command.guild_id).await;
                    let inbound = commands::to_inbound(channel, &to.bot, command, parent);
                    if inbound.is_none() {
                        let why = "This command cannot be read; check what follows it and try again.";
                        to.answers.refuse(&to.http, command.id.get(), why).await;
                    }
                    inbound
                }
            };
            let Some(inbound) = inbound else { continue };
            let id = inbound.message_id.clone();
            // Discord does not deliver a message twice; one the gateway could not store is lost.
            if let Err(error) = to.inbox.submit(inbound, None).await {
                if error.try_again_later() {
                    tracing::error!(%channel, message_id = %id, %error, "discord message lost: the gateway could not store it");
                }
                if let Arrived::Command(command) = &arrived {
                    to.answers.refuse(&to.http, command.id.get(), &refusal(&error)).await;
                }
            }
        }
    }
}

/// What a user who ran a command the gateway did not take is told.
fn refusal(error: &SubmitError) -> String {
    match error {
        SubmitError::RateLimited { retry_after } => {
            format!("You are sending too fast; try again in {} s.", bub_channel::retry_after_seconds(*retry_after))
        }
        SubmitError::Unavailable(_) => "I cannot take commands right now; try again in a minute.".to_string(),
        SubmitError::Invalid(invalid) => format!("This command cannot be taken: {invalid}."),
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> &str {
        &self.settings.name
    }

    fn limits(&self) -> Limits {
        Limits {
            max_message_chars: MAX_MESSAGE_CHARS,
            length_unit: LengthUnit::CodePoints,
            edits: true,
            debounce: true,
            typing: true,
        }
    }

    /// Connects every shard, one after the other (see `shards`).
    async fn start(&self, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        for shard in 0..self.settings.shards {
            if let Err(error) = self.start_part(shard, inbox.clone()).await {
                self.stop().await;
                return Err(error);
            }
        }
        Ok(())
    }

    /// `GET /users/@me` with the token, at the REST base the channel uses.
    async fn check_credentials(&self) -> Result<String, CredentialProblem> {
        let me = self.http.get_current_user().await.map_err(|error| self.token_problem(error))?;
        Ok(format!("the token is {}'s (user id {})", me.name, me.id))
    }

    async fn send(&self, outbound: &Outbound) -> Result<Delivered, SendError> {
        let mut reply_to = outbound.reply_to.as_slice();
        // The reply to a slash command answers it (see `interactions`); else, or when its token is gone, a message.
        if let Some(part) = self.answers.part_for(reply_to) {
            if let Some(id) = self.answers.send(&self.http, &part, &outbound.text, &outbound.mentions).await? {
                return Ok(Delivered { message_id: id.to_string() });
            }
            reply_to = &[];
        }
        let id = send::send_text(&self.http, &outbound.chat, &outbound.text, reply_to, &outbound.mentions).await?;
        Ok(Delivered { message_id: id.to_string() })
    }

    fn max_file_bytes(&self) -> Option<u64> {
        Some(send::MAX_FILE_BYTES)
    }

    async fn send_file(&self, file: &OutboundFile) -> Result<Delivered, SendError> {
        let id = send::send_file(&self.http, file).await?;
        Ok(Delivered { message_id: id.to_string() })
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        mentions: &[SenderRef],
    ) -> Result<(), SendError> {
        if let Ok(id) = message_id.parse::<u64>()
            && id != 0
            && self.answers.edit(&self.http, id, text, mentions).await?
        {
            return Ok(());
        }
        send::edit_text(&self.http, chat, message_id, text, mentions).await
    }

    fn slash_commands(&self) -> bool {
        true
    }

    async fn set_commands(&self, scope: &MenuScope, commands: &[MenuCommand]) -> Result<(), SendError> {
        // A shard's READY names the application; a process that connected none asks for it.
        if self.http.application_id().is_none() {
            let application = self.http.get_current_application_info().await.map_err(send::classify)?;
            self.http.set_application_id(application.id);
        }
        commands::set_commands(&self.http, scope, commands).await
    }

    async fn typing(&self, chat: &ChatRef) -> Result<(), SendError> {
        send::typing(&self.http, chat).await
    }

    async fn fetch_attachment(&self, attachment: &Attachment, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        let url = files::allowed_url(&attachment.reference, self.settings.api_url.as_deref())?;
        files::fetch(&self.files, url, attachment.size, max_bytes).await
    }

    async fn stop(&self) {
        let stopping = std::mem::take(&mut *self.running.lock());
        self.stop_shards(stopping).await;
    }

    /// One gateway connection per shard.
    fn exclusive_parts(&self) -> u32 {
        self.settings.shards
    }

    /// Connects shard `part`; returns once Discord said READY on it. A
    /// shard connected here already is closed first: never two
    /// connections of one shard.
    async fn start_part(&self, part: u32, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        let (name, total) = (&self.settings.name, self.settings.shards);
        if part >= total {
            return Err(self.fail(format!("there is no shard {part}: channels.{name}.shards is {total}")));
        }
        let previous = self.running.lock().remove(&part);
        self.stop_shards(previous.map(|shard| (part, shard))).await;
        self.connect(part, inbox).await?;
        tracing::info!(channel = %name, shard = part, shards = total, "discord shard connected");
        Ok(())
    }

    async fn stop_part(&self, part: u32) {
        let stopping = self.running.lock().remove(&part);
        self.stop_shards(stopping.map(|shard| (part, shard))).await;
    }
}

/// What to fix when the connection was refused before READY.
fn start_error(name: &str, error: &serenity::Error) -> String {
    use serenity::gateway::GatewayError;
    match error {
        serenity::Error::Gateway(GatewayError::OverloadedShard) => {
            format!("Discord requires more shards for this bot (close code 4011): raise channels.{name}.shards")
        }
        serenity::Error::Gateway(GatewayError::InvalidAuthentication) => {
            format!("Discord rejects the bot token; check channels.{name}.token")
        }
        serenity::Error::Gateway(GatewayError::DisallowedGatewayIntents) => {
            "Discord refused the MESSAGE CONTENT intent: \
             enable it in the Developer Portal (Bot → Privileged Gateway Intents)"
                .to_string()
        }
        other => format!("the Discord connection failed: {other}"),
    }
}
