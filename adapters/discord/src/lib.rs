//! bub's Discord channel: a bot connected to Discord's gateway (websocket),
//! answering through the REST API.
//!
//! Configured as `[channels.NAME] kind = "discord"` with the bot's `token`
//! (Developer Portal → Bot) and optionally `api_url` (a REST proxy or a test
//! fake; the gateway URL is then asked of it too). The bot needs the
//! privileged MESSAGE CONTENT intent (Developer Portal → Bot → Privileged
//! Gateway Intents) to read guild messages that do not mention it.
//!
//! - [`DiscordChannel::start`] checks the token (`GET /users/@me`), connects,
//!   and returns once Discord said READY, or fails with what to fix (a wrong
//!   token, an intent not enabled).
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
//! - `catch_up`: the messages missed while the bot had no session (stopped, or a new session).
//! - `commands`: the command list Discord shows, and a command someone ran as [`bub_channel::Inbound`].
//! - `interactions`: acknowledging a command, and its reply through the interaction's token.
//! - `inbound`: Discord messages and their edits as [`bub_channel::Inbound`].
//! - `send`: create (text or a file), edit and typing, and error mapping.
//! - `files`: attached files, fetched from Discord's CDN only.
//! - `threads`: which channels are threads, and of which parent.

mod catch_up;
mod commands;
mod files;
#[doc(hidden)]
pub mod fuzzing;
mod inbound;
mod interactions;
mod send;
mod threads;

use async_trait::async_trait;
use bub_channel::{
    Attachment, Channel, ChannelError, ChatRef, Delivered, FetchError, InboundSink, LengthUnit, Limits, MenuCommand,
    MenuScope, Outbound, OutboundFile, Secret, SendError, SenderRef, SubmitError,
};
use inbound::BotUser;
use interactions::Answers;
use serenity::all::{
    CommandInteraction, CommandType, Context, EventHandler, GatewayIntents, Interaction, Message, MessageUpdateEvent,
    Ready,
};
use serenity::gateway::ShardManager;
use serenity::http::{Http, HttpBuilder, HttpError};
use std::sync::{Arc, Mutex};
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
}

/// A Discord bot as a bub channel.
pub struct DiscordChannel {
    settings: DiscordSettings,
    /// Downloads attached files (serenity's REST client keeps its own private).
    files: reqwest::Client,
    /// Slash commands being answered, shared with the event handler.
    answers: Arc<Answers>,
    running: Mutex<Option<Running>>,
}

struct Running {
    http: Arc<Http>,
    shards: Arc<ShardManager>,
    task: tokio::task::JoinHandle<()>,
    /// Fetching what was missed before each new session: kept so a stop ends
    /// it (it holds a sender of the queue, which `task` drains to its end).
    catch_up: tokio::task::JoinHandle<()>,
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
        let files = files::client()
            .map_err(|error| ChannelError::new(name, format!("cannot set up an HTTP client: {error}")))?;
        Ok(DiscordChannel { settings, files, answers: Arc::default(), running: Mutex::new(None) })
    }

    /// The REST client. With `api_url` it talks to that proxy without serenity's own rate
    /// limiter, whose requests would bypass the proxy (it is the proxy's job then, as with
    /// twilight-http-proxy); a 429 from the proxy becomes a pause in the gateway's scheduler.
    fn http(&self) -> Http {
        let mut builder = HttpBuilder::new(self.settings.token.expose().trim());
        if let Some(url) = &self.settings.api_url {
            builder = builder.proxy(url.trim_end_matches('/')).ratelimiter_disabled(true);
        }
        builder.build()
    }

    fn fail(&self, message: String) -> ChannelError {
        ChannelError::new(self.settings.name.clone(), message)
    }

    /// The running connection's HTTP client, or why there is none.
    fn sender(&self) -> Result<Arc<Http>, SendError> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .as_ref()
            .map(|running| running.http.clone())
            .ok_or_else(|| SendError::Transient(format!("discord channel {} is not connected", self.settings.name)))
    }
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

/// Receives serenity's events and reports READY to `start`, and every READY
/// to the catch-up (a new session gets nothing of what was said before it).
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
    async fn ready(&self, _ctx: Context, ready: Ready) {
        tracing::info!(channel = %self.channel, bot = %ready.user.name, guilds = ready.guilds.len(), "discord bot connected");
        if let Some(ready) = self.ready.lock().unwrap_or_else(|p| p.into_inner()).take() {
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
                    tracing::error!(%channel, message = %id, %error, "discord message lost: the gateway could not store it");
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
            format!("You are sending too fast; try again in {} s.", retry_after.as_secs().max(1))
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

    async fn start(&self, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        let name = self.settings.name.clone();
        let http = self.http();
        let me = tokio::time::timeout(START_TIMEOUT, http.get_current_user())
            .await
            .map_err(|_| self.fail(format!("Discord did not answer within {START_TIMEOUT:?}")))?
            .map_err(|error| match error {
                serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) if response.status_code == 401 => {
                    self.fail(format!(
                        "Discord rejects the bot token; check channels.{name}.token (Developer Portal → Bot → Reset Token)"
                    ))
                }
                other => self.fail(format!("cannot reach Discord: {}", send::classify(other))),
            })?;
        let bot = BotUser { id: me.id.get(), name: me.name.clone() };
        let (ready_tx, ready_rx) = oneshot::channel();
        let (messages, queue) = mpsc::unbounded_channel();
        let catch_up_queue = messages.clone();
        let catch_up_inbox = inbox.clone();
        let (sessions, new_sessions) = mpsc::unbounded_channel();
        let handler = Handler {
            messages,
            ready: Mutex::new(Some(ready_tx)),
            sessions,
            answers: self.answers.clone(),
            channel: name.clone(),
        };
        let intents =
            GatewayIntents::GUILD_MESSAGES | GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT;
        let mut client = serenity::client::ClientBuilder::new_with_http(http, intents)
            .event_handler(handler)
            .await
            .map_err(|error| self.fail(format!("cannot set up the Discord client: {error}")))?;
        let (http, shards) = (client.http.clone(), client.shard_manager.clone());
        let task_name = name.clone();
        let (ended_tx, ended_rx) = oneshot::channel();
        let threads = threads::Threads::new(http.clone());
        let receiver =
            Receiver { channel: name.clone(), bot, inbox, answers: self.answers.clone(), http: http.clone() };
        let task = tokio::spawn(async move {
            let handing_over = tokio::spawn(hand_over(receiver, queue, threads));
            let ended = client.start().await;
            // Before READY `start` reports the failure; after it, only the log can.
            if let Err(returned) = ended_tx.send(ended)
                && let Err(error) = returned
            {
                tracing::error!(channel = %task_name, reason = %start_error(&task_name, &error), "the Discord connection ended; no more messages arrive until a restart");
            }
            // Messages already queued still reach the gateway.
            drop(client);
            let _ = handing_over.await;
        });
        tokio::select! {
            ready = ready_rx => {
                if ready.is_err() {
                    return Err(self.fail("the Discord client stopped before it was ready".into()));
                }
            }
            ended = ended_rx => {
                let reason = match ended {
                    Ok(Err(error)) => start_error(&name, &error),
                    _ => "the Discord connection ended before READY".to_string(),
                };
                return Err(self.fail(reason));
            }
            () = tokio::time::sleep(START_TIMEOUT) => {
                shards.shutdown_all().await;
                return Err(self.fail(format!("Discord did not say READY within {START_TIMEOUT:?}")));
            }
        }
        let catch_up = tokio::spawn(catch_up::each_session(
            name.clone(),
            http.clone(),
            catch_up_inbox,
            catch_up_queue,
            new_sessions,
        ));
        let running = Running { http, shards, task, catch_up };
        let previous = self.running.lock().unwrap_or_else(|p| p.into_inner()).replace(running);
        if let Some(previous) = previous {
            previous.catch_up.abort();
            previous.shards.shutdown_all().await;
        }
        Ok(())
    }

    async fn send(&self, outbound: &Outbound) -> Result<Delivered, SendError> {
        let http = self.sender()?;
        let mut reply_to = outbound.reply_to.as_slice();
        // The reply to a slash command answers it (see `interactions`); else, or when its token is gone, a message.
        if let Some(part) = self.answers.part_for(reply_to) {
            if let Some(id) = self.answers.send(&http, &part, &outbound.text, &outbound.mentions).await? {
                return Ok(Delivered { message_id: id.to_string() });
            }
            reply_to = &[];
        }
        let id = send::send_text(&http, &outbound.chat, &outbound.text, reply_to, &outbound.mentions).await?;
        Ok(Delivered { message_id: id.to_string() })
    }

    fn max_file_bytes(&self) -> Option<u64> {
        Some(send::MAX_FILE_BYTES)
    }

    async fn send_file(&self, file: &OutboundFile) -> Result<Delivered, SendError> {
        let http = self.sender()?;
        let id = send::send_file(&http, file).await?;
        Ok(Delivered { message_id: id.to_string() })
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        mentions: &[SenderRef],
    ) -> Result<(), SendError> {
        let http = self.sender()?;
        if let Ok(id) = message_id.parse::<u64>()
            && id != 0
            && self.answers.edit(&http, id, text, mentions).await?
        {
            return Ok(());
        }
        send::edit_text(&http, chat, message_id, text, mentions).await
    }

    fn slash_commands(&self) -> bool {
        true
    }

    async fn set_commands(&self, scope: &MenuScope, commands: &[MenuCommand]) -> Result<(), SendError> {
        let http = self.sender()?;
        commands::set_commands(&http, scope, commands).await
    }

    async fn typing(&self, chat: &ChatRef) -> Result<(), SendError> {
        let http = self.sender()?;
        send::typing(&http, chat).await
    }

    async fn fetch_attachment(&self, attachment: &Attachment, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        let url = files::allowed_url(&attachment.reference, self.settings.api_url.as_deref())?;
        files::fetch(&self.files, url, attachment.size, max_bytes).await
    }

    async fn stop(&self) {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(running) = running {
            // What it had handed over is queued and still reaches the gateway;
            // what it had not fetched yet, the next start catches up.
            running.catch_up.abort();
            running.shards.shutdown_all().await;
            let _ = tokio::time::timeout(Duration::from_secs(5), running.task).await;
        }
    }
}

/// What to fix when the connection was refused before READY.
fn start_error(name: &str, error: &serenity::Error) -> String {
    use serenity::gateway::GatewayError;
    match error {
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
