//! Answering a slash command through its interaction.
//!
//! Discord wants every interaction answered within 3 seconds, or the user
//! sees "The application did not respond". A turn takes longer, so the
//! handler acknowledges each command at once with a deferred answer ("bub
//! is thinking…"), straight through serenity's HTTP client and not through
//! the gateway's outbound scheduler: a command queued behind replies would
//! miss its 3 seconds, and interaction endpoints are outside the bot's
//! global rate limit. Then the command goes to the gateway (`commands`).
//!
//! The reply to it, threaded to the interaction's id (see
//! [`bub_channel::thread_to`]), fills the deferred answer: its first part
//! edits `@original` (so a part sent again after a lost answer replaces the
//! same text), later parts are followup messages, and edits of any of them
//! (a streamed reply) go through the token too. The token lasts 15
//! minutes; without one (expired, refused, or forgotten by a restart) a
//! reply goes to the channel as an ordinary message, and its edits as
//! ordinary edits (the answer is the bot's own message).
//!
//! A command the gateway refused to take (too fast, the store down) is
//! answered here, with why.

use bub_channel::{SendError, SenderRef};
use parking_lot::Mutex;
use serenity::builder::{CreateInteractionResponse, CreateInteractionResponseMessage, EditInteractionResponse};
use serenity::http::{Http, HttpError};
use serenity::model::application::CommandInteraction;
use serenity::model::id::MessageId;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a token is used: Discord's 15 minutes, less a margin for a
/// call under way when it runs out.
const TOKEN_LIFE: Duration = Duration::from_secs(14 * 60);
/// Interactions remembered at most (each is forgotten after [`TOKEN_LIFE`]
/// anyway); past this the oldest go first.
const REMEMBERED: usize = 10_000;

/// Discord's codes for a token that no longer works, or an answer that is
/// gone: unknown message, unknown webhook, invalid webhook token, unknown
/// interaction.
const TOKEN_GONE: [isize; 4] = [10008, 10015, 50027, 10062];

/// The interactions whose token still works, and the messages made with them.
#[derive(Default)]
pub(crate) struct Answers {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// By interaction id.
    live: HashMap<u64, Live>,
    /// Message id → the interaction whose token made it.
    messages: HashMap<u64, u64>,
}

struct Live {
    token: String,
    since: Instant,
    /// Whether `@original` holds a part of the reply already.
    original_filled: bool,
    messages: Vec<u64>,
}

/// Where one part of a reply goes.
pub(crate) struct AnswerPart {
    interaction: u64,
    token: String,
    original: bool,
}

impl Answers {
    /// Acknowledges `command` with a deferred answer and remembers its token.
    /// When Discord refuses (too late, already answered), the reply will go
    /// to the channel instead.
    pub(crate) async fn acknowledge(&self, http: &Http, command: &CommandInteraction) {
        let deferred = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new());
        match http.create_interaction_response(command.id, &command.token, &deferred, Vec::new()).await {
            Ok(()) => {
                let mut state = self.lock();
                state.prune();
                let live = Live {
                    token: command.token.clone(),
                    since: Instant::now(),
                    original_filled: false,
                    messages: Vec::new(),
                };
                state.live.insert(command.id.get(), live);
            }
            Err(error) => {
                tracing::warn!(interaction = command.id.get(), command = %command.data.name, %error, "cannot acknowledge a Discord command; its reply goes to the channel");
            }
        }
    }

    /// Where the reply threaded to `reply_to` goes, when that is a live interaction.
    pub(crate) fn part_for(&self, reply_to: &[String]) -> Option<AnswerPart> {
        let interaction = bub_channel::thread_to(reply_to)?.parse::<u64>().ok()?;
        let mut state = self.lock();
        state.prune();
        let live = state.live.get(&interaction)?;
        Some(AnswerPart { interaction, token: live.token.clone(), original: !live.original_filled })
    }

    /// The interaction that made message `message_id`, and its token, while it works.
    fn token_of(&self, message_id: u64) -> Option<(u64, String)> {
        let mut state = self.lock();
        state.prune();
        let interaction = *state.messages.get(&message_id)?;
        state.live.get(&interaction).map(|live| (interaction, live.token.clone()))
    }

    /// Sends `text` as `part`; the message's id. `Ok(None)` when the token no
    /// longer works (forgotten now): the caller sends it to the channel.
    pub(crate) async fn send(
        &self,
        http: &Http,
        part: &AnswerPart,
        text: &str,
        mentions: &[SenderRef],
    ) -> Result<Option<u64>, SendError> {
        let (content, pings) = (crate::send::content(text, mentions), crate::send::pings(mentions));
        let sent = if part.original {
            let edit = EditInteractionResponse::new().content(content).allowed_mentions(pings);
            http.edit_original_interaction_response(&part.token, &edit, Vec::new()).await
        } else {
            let followup =
                serenity::builder::CreateInteractionResponseFollowup::new().content(content).allowed_mentions(pings);
            http.create_followup_message(&part.token, &followup, Vec::new()).await
        };
        match sent {
            Ok(message) => {
                let mut state = self.lock();
                if let Some(live) = state.live.get_mut(&part.interaction) {
                    live.original_filled = true;
                    live.messages.push(message.id.get());
                }
                state.messages.insert(message.id.get(), part.interaction);
                Ok(Some(message.id.get()))
            }
            Err(error) if token_gone(&error) => {
                tracing::info!(interaction = part.interaction, %error, "a Discord command's token no longer works; its reply goes to the channel");
                self.forget(part.interaction);
                Ok(None)
            }
            Err(error) => Err(crate::send::classify(error)),
        }
    }

    /// Edits message `message_id` through its interaction's token. `Ok(false)`
    /// when no working token made it: the caller edits it in the channel.
    pub(crate) async fn edit(
        &self,
        http: &Http,
        message_id: u64,
        text: &str,
        mentions: &[SenderRef],
    ) -> Result<bool, SendError> {
        let Some((interaction, token)) = self.token_of(message_id) else { return Ok(false) };
        let edit = EditInteractionResponse::new()
            .content(crate::send::content(text, mentions))
            .allowed_mentions(crate::send::pings(mentions));
        match http.edit_followup_message(&token, MessageId::new(message_id), &edit, Vec::new()).await {
            Ok(_) => Ok(true),
            Err(error) if token_gone(&error) => {
                self.forget(interaction);
                Ok(false)
            }
            Err(error) => Err(crate::send::classify(error)),
        }
    }

    /// Answers a command the gateway did not take with `why`, when it was acknowledged.
    pub(crate) async fn refuse(&self, http: &Http, interaction: u64, why: &str) {
        let Some(part) = self.part_for(&[interaction.to_string()]) else { return };
        if let Err(error) = self.send(http, &part, why, &[]).await {
            tracing::warn!(interaction, %error, "cannot tell a Discord user why their command was not taken");
        }
    }

    fn forget(&self, interaction: u64) {
        let mut state = self.lock();
        if let Some(live) = state.live.remove(&interaction) {
            for message in live.messages {
                state.messages.remove(&message);
            }
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }
}

impl State {
    /// Forgets interactions whose token ran out, and the oldest past [`REMEMBERED`].
    fn prune(&mut self) {
        let now = Instant::now();
        let mut expired: Vec<u64> =
            self.live.iter().filter(|(_, live)| now - live.since > TOKEN_LIFE).map(|(id, _)| *id).collect();
        if self.live.len() - expired.len() >= REMEMBERED {
            // Interaction ids are snowflakes: the smallest are the oldest.
            let mut ids: Vec<u64> = self.live.keys().copied().collect();
            ids.sort_unstable();
            expired.extend(ids.into_iter().take(self.live.len() + 1 - REMEMBERED));
        }
        for id in expired {
            if let Some(live) = self.live.remove(&id) {
                for message in live.messages {
                    self.messages.remove(&message);
                }
            }
        }
    }
}

/// Whether Discord refused because the token or the answer is gone.
fn token_gone(error: &serenity::Error) -> bool {
    match error {
        serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            response.status_code.as_u16() == 401 || TOKEN_GONE.contains(&response.error.code)
        }
        serenity::Error::Http(HttpError::ApplicationIdMissing) => true,
        _ => false,
    }
}
