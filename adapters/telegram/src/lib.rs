//! bub's Telegram channel: a bot that receives by long polling (or by
//! webhook) and answers through the Bot API.
//!
//! Configured as `[channels.NAME] kind = "telegram"` with the bot's `token`
//! (from @BotFather), optionally `api_url` (a local Bot API server, or a
//! test fake), and optionally `webhook_url` + `webhook_secret` for webhook
//! mode. To see group messages that do not mention it, the bot needs privacy
//! mode off (BotFather: /setprivacy) or admin rights in the group.
//!
//! - [`TelegramChannel::start`] checks the token (`getMe`), then either
//!   registers the webhook or removes any (Telegram refuses `getUpdates`
//!   while one is set) and starts polling; see `poll` and `webhook` for how
//!   an update is confirmed only once stored.
//! - Replies are Telegram HTML rendered from Markdown ([`markdown`]), at most
//!   4096 characters each, threaded to the message they answer; streamed
//!   replies grow in place by edits; `sendChatAction` shows "typing…".
//! - Files go as multipart uploads: JPEG, PNG and WebP images up to 10 MB
//!   by `sendPhoto`, anything else up to 50 MB by `sendDocument`.
//! - Photos, documents, voice notes, audio and video arrive as attachments
//!   of the message (the caption is its text); the gateway fetches the ones
//!   it keeps through [`Channel::fetch_attachment`] (`getFile`, then the
//!   download from the same Bot API base).
//! - Commands: `/name@bot` loses `@bot` when it names this bot (the
//!   gateway reads `/name` as a comma command); the gateway's command menus
//!   go out as `setMyCommands`. When `getMe` says privacy mode is on, the
//!   gateway is told (it warns when a group policy needs what it hides).
//! - Failures map to the scheduler's three answers: 429 → wait `retry_after`,
//!   network / 5xx → retry, everything else (blocked by the user, chat
//!   gone) → give up.
//!
//! # Layout
//! - `inbound`: Telegram messages as [`bub_channel::Inbound`] (ids, chat kinds, addressing).
//! - `poll`: the `getUpdates` loop.
//! - `webhook`: `POST /telegram/<name>` in webhook mode.
//! - `send`: `sendMessage`, `editMessageText`, `sendChatAction`, `sendPhoto`/`sendDocument`, error mapping.
//! - `files`: the files people send, fetched by `getFile` and downloaded under a cap.
//! - `menu`: `setMyCommands`, `/cmd@bot`, what privacy mode hides.
//! - [`markdown`]: Markdown → Telegram HTML.

#![forbid(unsafe_code)]

mod files;
#[doc(hidden)]
pub mod fuzzing;
mod inbound;
pub mod markdown;
mod menu;
mod poll;
mod send;
mod webhook;

pub use webhook::SECRET_HEADER;

use async_trait::async_trait;
use bub_channel::{
    Attachment, Channel, ChannelError, ChatRef, CredentialProblem, Delivered, FetchError, InboundSink, LengthUnit,
    Limits, MenuCommand, MenuScope, Outbound, OutboundFile, Secret, SendError, SenderRef,
};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use teloxide_core::payloads::SetWebhookSetters;
use teloxide_core::prelude::Requester;
use teloxide_core::types::{AllowedUpdate, Me};
use teloxide_core::{ApiError, Bot, RequestError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Telegram's limit on one message's text (after entity parsing).
pub const MAX_MESSAGE_CHARS: usize = 4096;
/// The updates bub asks Telegram for: new messages and their edits.
const READ_UPDATES: [AllowedUpdate; 2] = [AllowedUpdate::Message, AllowedUpdate::EditedMessage];
/// How long `start` waits for `getMe` and `setWebhook` / `deleteWebhook` before giving up.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long stopping the poller waits for the message being handed to the gateway.
const HAND_OVER_DRAIN: Duration = Duration::from_secs(5);

/// One bot's configuration (`[channels.<name>]` with `kind = "telegram"`).
/// Its token and webhook secret are [`Secret`]s: `Debug` never shows them.
#[derive(Debug, Clone)]
pub struct TelegramSettings {
    /// The channel instance's name.
    pub name: String,
    /// The bot token from @BotFather.
    pub token: Secret,
    /// The Bot API base; `None`: `https://api.telegram.org`.
    pub api_url: Option<String>,
    /// Receive by webhook instead of polling (see [`TelegramWebhook`]).
    pub webhook: Option<TelegramWebhook>,
}

/// Where Telegram POSTs updates in webhook mode, and the secret it sends along.
#[derive(Debug, Clone)]
pub struct TelegramWebhook {
    /// The public HTTPS URL that reaches `POST /telegram/<name>` on bub's server.
    pub url: String,
    /// Sent by Telegram in [`SECRET_HEADER`] (1–256 of `A-Z a-z 0-9 _ -`).
    pub secret: Secret,
}

/// A Telegram bot as a bub channel.
pub struct TelegramChannel {
    name: String,
    bot: Bot,
    /// Webhook mode: the URL to register and the route that receives.
    webhook: Option<(url::Url, Arc<webhook::WebhookIngress>)>,
    polling: Mutex<Option<Polling>>,
    /// What privacy mode hides, as `getMe` said at start.
    hidden: Mutex<Option<String>>,
}

struct Polling {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl TelegramChannel {
    /// Checks the settings (a token, a valid `api_url`); nothing is sent to
    /// Telegram until [`Channel::start`].
    pub fn new(settings: TelegramSettings) -> Result<TelegramChannel, ChannelError> {
        let name = settings.name;
        let invalid = |message: String| ChannelError::new(name.clone(), message);
        if settings.token.is_blank() {
            return Err(invalid(format!("telegram channel {name} has no token; set channels.{name}.token")));
        }
        let client = teloxide_core::net::default_reqwest_settings()
            .build()
            .map_err(|error| invalid(format!("cannot set up an HTTP client: {error}")))?;
        let mut bot = Bot::with_client(settings.token.expose().trim(), client);
        if let Some(url) = settings.api_url {
            let parsed = bub_channel::rules::http_url(&url)
                .map_err(|error| invalid(format!("channels.{name}.api_url {url:?}: {error}")))?;
            bot = bot.set_api_url(parsed);
        }
        let webhook = match settings.webhook {
            None => None,
            Some(hook) => {
                let url = bub_channel::rules::http_url(&hook.url)
                    .map_err(|error| invalid(format!("channels.{name}.webhook_url {:?}: {error}", hook.url)))?;
                Some((url, Arc::new(webhook::WebhookIngress::new(name.clone(), hook.secret))))
            }
        };
        Ok(TelegramChannel { name, bot, webhook, polling: Mutex::new(None), hidden: Mutex::new(None) })
    }

    fn fail(&self, message: String) -> ChannelError {
        ChannelError::new(self.name.clone(), message)
    }

    /// One Bot API call at start, given [`START_TIMEOUT`] to answer.
    async fn at_start<T>(
        &self,
        call: impl std::future::IntoFuture<Output = Result<T, RequestError>>,
    ) -> Result<Result<T, RequestError>, ChannelError> {
        tokio::time::timeout(START_TIMEOUT, call.into_future())
            .await
            .map_err(|_| self.fail(format!("Telegram did not answer within {START_TIMEOUT:?}")))
    }

    /// Who the bot is; fails with a message that says what to fix.
    async fn whoami(&self) -> Result<Me, ChannelError> {
        self.at_start(self.bot.get_me()).await?.map_err(|problem| self.fail(self.token_problem(problem).to_string()))
    }

    /// What a failed `getMe` says about the token, and what to fix.
    fn token_problem(&self, error: RequestError) -> CredentialProblem {
        let name = &self.name;
        match error {
            RequestError::Api(ApiError::InvalidToken) => CredentialProblem::new(
                "Telegram rejects the bot token",
                format!("check channels.{name}.token (from @BotFather)"),
            ),
            other => CredentialProblem::new(
                format!("cannot reach the Telegram Bot API at {}: {other}", self.bot.api_url()),
                format!("check the network, or channels.{name}.api_url"),
            ),
        }
    }

    /// Tells Telegram how updates reach bub: to the webhook, or (by removing
    /// any webhook, which would make `getUpdates` fail) to polling.
    async fn route_updates(&self) -> Result<(), ChannelError> {
        match &self.webhook {
            Some((url, ingress)) => {
                let request = self
                    .bot
                    .set_webhook(url.clone())
                    .secret_token(ingress.secret().to_string())
                    .allowed_updates(READ_UPDATES);
                self.at_start(request).await?.map(|_| ()).map_err(|error| {
                    self.fail(format!("Telegram refused the webhook {url}: {error} (it must be HTTPS)"))
                })
            }
            None => {
                self.at_start(self.bot.delete_webhook()).await?.map(|_| ()).map_err(|error| {
                    self.fail(format!("cannot remove the bot's webhook (needed for polling): {error}"))
                })
            }
        }
    }
}

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn limits(&self) -> Limits {
        Limits {
            max_message_chars: MAX_MESSAGE_CHARS,
            length_unit: LengthUnit::Utf16,
            edits: true,
            debounce: true,
            typing: true,
        }
    }

    fn routes(&self) -> Option<axum::Router> {
        self.webhook.as_ref().map(|(_, ingress)| ingress.routes())
    }

    async fn start(&self, inbox: Arc<dyn InboundSink>) -> Result<(), ChannelError> {
        let me = self.whoami().await?;
        *self.hidden.lock() = menu::privacy_mode(&me);
        self.route_updates().await?;
        if let Some((url, ingress)) = &self.webhook {
            tracing::info!(channel = %self.name, %url, "telegram bot receiving by webhook");
            ingress.attach(me, inbox);
            return Ok(());
        }
        // Started again (a replica taking polling back): the old poller ends first, or the two would
        // end each other's polls.
        self.stop_polling().await;
        tracing::info!(channel = %self.name, bot = %me.user.username.as_deref().unwrap_or("?"), "telegram bot polling");
        let (stop, stopped) = watch::channel(false);
        let poller = poll::Poller { channel: self.name.clone(), bot: self.bot.clone(), me, inbox, stop: stopped };
        let span = tracing::info_span!("telegram.poll", channel = %self.name);
        let task = tokio::spawn(poller.run().instrument(span));
        let previous = self.polling.lock().replace(Polling { stop, task });
        if let Some(previous) = previous {
            // Another start raced this one: one poller is enough.
            let _ = previous.stop.send(true);
            previous.task.abort();
        }
        Ok(())
    }

    /// `getMe`, and in webhook mode the strength of the secret Telegram sends.
    async fn check_credentials(&self) -> Result<String, CredentialProblem> {
        let me = self.bot.get_me().await.map_err(|error| self.token_problem(error))?;
        let bot = format!("@{}", me.user.username.as_deref().unwrap_or("?"));
        if let Some((_, ingress)) = &self.webhook
            && let Some(weakness) = bub_channel::rules::secret_weakness(ingress.secret())
        {
            return Err(CredentialProblem::new(
                format!("the token works ({bot}), but the webhook secret is weak: {weakness}"),
                format!("set channels.{}.webhook_secret to a new random one, e.g. `openssl rand -hex 32`", self.name),
            ));
        }
        let how = if self.webhook.is_some() { "by webhook" } else { "by polling" };
        Ok(format!("the token is {bot}'s; receiving {how}"))
    }

    async fn send(&self, outbound: &Outbound) -> Result<Delivered, SendError> {
        let id =
            send::send_text(&self.bot, &outbound.chat, &outbound.text, &outbound.reply_to, &outbound.mentions).await?;
        Ok(Delivered { message_id: id.to_string() })
    }

    fn max_file_bytes(&self) -> Option<u64> {
        Some(send::MAX_FILE_BYTES)
    }

    async fn send_file(&self, file: &OutboundFile) -> Result<Delivered, SendError> {
        let id = send::send_file(&self.bot, file).await?;
        Ok(Delivered { message_id: id.to_string() })
    }

    async fn edit(
        &self,
        chat: &ChatRef,
        message_id: &str,
        text: &str,
        mentions: &[SenderRef],
    ) -> Result<(), SendError> {
        send::edit_text(&self.bot, chat, message_id, text, mentions).await
    }

    async fn typing(&self, chat: &ChatRef) -> Result<(), SendError> {
        send::typing(&self.bot, chat).await
    }

    async fn fetch_attachment(&self, attachment: &Attachment, max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        files::fetch(&self.bot, attachment, max_bytes).await
    }

    fn slash_commands(&self) -> bool {
        true
    }

    fn menus_per_chat(&self) -> bool {
        true
    }

    async fn set_commands(&self, scope: &MenuScope, commands: &[MenuCommand]) -> Result<(), SendError> {
        menu::set_commands(&self.bot, scope, commands).await
    }

    fn hidden_group_messages(&self) -> Option<String> {
        self.hidden.lock().clone()
    }

    /// Polling: one poller per token (Telegram answers a second with 409).
    /// A webhook is received by every replica.
    fn exclusive_parts(&self) -> u32 {
        if self.webhook.is_some() { 0 } else { 1 }
    }

    async fn stop(&self) {
        // The webhook stays registered: Telegram keeps the updates until bub (or a replica) answers again.
        if let Some((_, ingress)) = &self.webhook {
            ingress.detach();
        }
        self.stop_polling().await;
    }
}

impl TelegramChannel {
    /// Ends the poller, if one runs: when this returns, no `getUpdates` of
    /// this process is in flight or to come (another process may poll at once).
    /// A message being handed over finishes, for up to [`HAND_OVER_DRAIN`]; a
    /// poll in flight is dropped (nothing confirmed: Telegram sends it again).
    async fn stop_polling(&self) {
        let polling = self.polling.lock().take();
        if let Some(Polling { stop, mut task }) = polling {
            let _ = stop.send(true);
            if tokio::time::timeout(HAND_OVER_DRAIN, &mut task).await.is_err() {
                tracing::warn!(channel = %self.name, "a message was still being handed over at the stop; it comes again");
                task.abort();
                let _ = task.await;
            }
        }
    }
}
