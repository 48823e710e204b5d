//! The outbound scheduler: every message the gateway sends goes through it, so
//! budgets and platform rate limits are honoured in one place.
//!
//! - Final replies ([`OutboundScheduler::send_final`]) are split under the
//!   platform's limit, sent in order, wait for budget and 429 pauses, and are
//!   retried on transient failures with stable idempotency keys: they are
//!   never dropped for budget reasons, only delayed.
//! - Live replies ([`OutboundScheduler::live`]) grow one message by throttled,
//!   coalesced edits that are dropped, not queued, under pressure, each at
//!   least [`OutboundConfig::live_edit_interval`] after the one before, the
//!   final edit included; the first message waits for a useful amount of
//!   text that is still growing, so a text ready at once is one send; their
//!   [`LiveReply::finish`] is delivered like a final reply. The live
//!   message's id can be kept ([`LiveMessages`]) so a restart finishes it
//!   instead of sending another.
//! - Files ([`OutboundScheduler::send_file`]) are one message each, checked
//!   against the channel's upload limit before anything is sent, then
//!   delivered like one part of a final reply (budgets, pauses, retries).
//! - Hints ([`OutboundScheduler::typing`], "typing…") are sent only with
//!   spare budget: never while a send waits for the channel's budget, within
//!   half of it, never into a 429 pause; skipped otherwise, never queued.
//! - [`OutboundScheduler::stop`] ends every send at its next wait (budget,
//!   pause, backoff, its chat's turn) with [`OutboundError::Stopped`], naming
//!   the parts already delivered; a platform call already made is never cut,
//!   so what reached the platform is always known and can be recorded.
//!
//! - `delivery.rs`: the gateway's side of a send — replies and files handed to
//!   the scheduler among the gateway's deliveries, and what became of them
//!   recorded in the store.
//!
//! Metrics (through the `metrics` facade): `bub_outbound_messages_total{channel, kind}`,
//! `bub_outbound_edits_dropped_total{channel}`, `bub_outbound_errors_total{channel, kind}`,
//! `bub_outbound_rate_limit_wait_seconds{channel}`, `bub_outbound_queue_depth{channel}`,
//! `bub_outbound_typing_skipped_total{channel}` (typing counts as `kind="typing"`).

mod budget;
pub(crate) mod delivery;
mod live;

pub use budget::Budget;
pub use live::{LiveMessage, LiveMessages, LiveReply, REPLACED_MARKER};

use crate::gateway::split::split_message_counting;
use bub_channel::{Channel, ChatRef, Delivered, MenuCommand, MenuScope, Outbound, OutboundFile, SendError, SenderRef};
use budget::Gate;
use governor::Quota;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

/// Timing of retries and live edits. The defaults suit chat platforms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboundConfig {
    /// The first backoff after a transient failure; it doubles per failure.
    pub retry_base: Duration,
    /// The longest backoff between two attempts.
    pub retry_cap: Duration,
    /// How long transient failures of one message are retried, counted from
    /// the first one, before the send gives up ([`OutboundError::GaveUp`]).
    pub give_up_after: Duration,
    /// The shortest time between two updates of one live message, counted
    /// from the return of the call before, so the platform sees them at least
    /// this far apart. The final edit keeps it too, which delays the end of
    /// an answer by at most this much (see [`LiveReply::finish`]).
    pub live_edit_interval: Duration,
    /// A live reply's first message waits until its text holds this many
    /// characters at a word boundary and a later update shows it still
    /// growing (or [`OutboundConfig::live_first_wait`] passed, or the reply
    /// ended): a push notification that reads "echo:" tells nobody anything,
    /// a reply shorter than this is then one send and no edit, and so is a
    /// text that came whole (a command's output). 80 characters is about a
    /// sentence, and about what a phone's notification shows. 0 sends the
    /// first text as it comes.
    pub live_first_chars: usize,
    /// How long after its first text a live reply shows whatever it holds,
    /// short or not: a slow answer, or a note before a long tool call, still
    /// shows progress. 2 s: a model streaming at a usual pace reaches
    /// [`OutboundConfig::live_first_chars`] well before, and a short answer
    /// has usually ended by then (one send).
    pub live_first_wait: Duration,
}

impl Default for OutboundConfig {
    fn default() -> OutboundConfig {
        OutboundConfig {
            retry_base: Duration::from_millis(200),
            retry_cap: Duration::from_secs(30),
            give_up_after: Duration::from_secs(600),
            live_edit_interval: Duration::from_secs(1),
            live_first_chars: 80,
            live_first_wait: Duration::from_secs(2),
        }
    }
}

/// Why a reply was not (fully) delivered. `delivered` lists the parts that
/// were, in order, so an outbox can record them and not send them twice.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    #[error("no channel named `{0}` is registered with the outbound scheduler")]
    UnknownChannel(String),
    #[error("channel {channel}: part {part} of the reply was rejected: {source}")]
    Permanent {
        channel: String,
        part: usize,
        delivered: Vec<Delivered>,
        #[source]
        source: SendError,
    },
    #[error(
        "channel {channel}: gave up on part {part} of the reply after {attempts} attempts over {elapsed:?}: {source}"
    )]
    GaveUp {
        channel: String,
        part: usize,
        attempts: u32,
        elapsed: Duration,
        delivered: Vec<Delivered>,
        #[source]
        source: SendError,
    },
    /// The file is bigger than the channel can send (or it sends no files:
    /// `limit` is `None`); nothing was sent.
    #[error("{}", file_refusal(.channel, .name, *.bytes, *.limit))]
    FileRefused { channel: String, name: String, bytes: u64, limit: Option<u64> },
    /// [`OutboundScheduler::stop`] came while part `part` waited for its turn:
    /// it was not sent (nor any part after it).
    #[error("channel {channel}: the scheduler stopped before part {part} of the reply was sent")]
    Stopped { channel: String, part: usize, delivered: Vec<Delivered> },
}

impl OutboundError {
    /// The parts delivered before the failure.
    pub fn delivered(&self) -> &[Delivered] {
        match self {
            OutboundError::UnknownChannel(_) | OutboundError::FileRefused { .. } => &[],
            OutboundError::Permanent { delivered, .. }
            | OutboundError::GaveUp { delivered, .. }
            | OutboundError::Stopped { delivered, .. } => delivered,
        }
    }

    fn with_delivered(mut self, before: Vec<Delivered>) -> OutboundError {
        if let OutboundError::Permanent { delivered, .. }
        | OutboundError::GaveUp { delivered, .. }
        | OutboundError::Stopped { delivered, .. } = &mut self
        {
            *delivered = before;
        }
        self
    }
}

/// Sends replies on every registered channel within their budgets.
pub struct OutboundScheduler {
    routes: RwLock<HashMap<String, Arc<Route>>>,
    config: OutboundConfig,
    /// True once [`OutboundScheduler::stop`] was called.
    stopping: watch::Sender<bool>,
}

impl OutboundScheduler {
    pub fn new() -> Arc<OutboundScheduler> {
        OutboundScheduler::with_config(OutboundConfig::default())
    }

    pub fn with_config(config: OutboundConfig) -> Arc<OutboundScheduler> {
        Arc::new(OutboundScheduler { routes: RwLock::new(HashMap::new()), config, stopping: watch::Sender::new(false) })
    }

    /// Sends through `channel` (by its [`Channel::name`]) within `budget` from
    /// now on. Registering a name again replaces the channel and resets its budget.
    pub fn register(&self, channel: Arc<dyn Channel>, budget: Budget) {
        let name = channel.name().to_owned();
        let route = Arc::new(Route {
            name: name.clone(),
            channel,
            gate: Gate::new(budget),
            config: self.config,
            chat_turns: Mutex::default(),
            stopping: self.stopping.subscribe(),
        });
        let replaced = self.routes.write().insert(name.clone(), route);
        debug!(channel = %name, replaced = replaced.is_some(), "outbound channel registered");
    }

    /// Changes `channel`'s budget (after a policy reload), with the chats
    /// whose policy sets their own per-chat rate (`None`: unlimited). Budgets
    /// that did not change keep counting. Unknown channels are ignored.
    pub fn set_budget(&self, channel: &str, budget: Budget, own_chat_rates: HashMap<String, Option<Quota>>) {
        if let Ok(route) = self.route(channel) {
            route.gate.set(budget, own_chat_rates);
        }
    }

    /// Delivers a final reply: split under the channel's limit, part `i` sent
    /// with idempotency key `<key>` (i = 0) or `<key>#<i>`, in order. Waits for
    /// budgets and 429 pauses; retries transient failures until
    /// [`OutboundConfig::give_up_after`]. Replies to one chat go one after
    /// another, so their parts never interleave. Whitespace-only text sends nothing.
    pub async fn send_final(&self, channel: &str, outbound: Outbound) -> Result<Vec<Delivered>, OutboundError> {
        self.route(channel)?.send_final(outbound).await
    }

    /// [`OutboundScheduler::send_final`] for a reply whose first
    /// `delivered.len()` parts were delivered already (a stop came between
    /// its parts): sends the others; the result lists all of them.
    pub async fn send_final_after(
        &self,
        channel: &str,
        outbound: Outbound,
        delivered: Vec<Delivered>,
    ) -> Result<Vec<Delivered>, OutboundError> {
        self.route(channel)?.send_final_after(outbound, delivered).await
    }

    /// Delivers one file as a message of its own, after the replies already
    /// going to its chat. A file over the channel's
    /// [`Channel::max_file_bytes`] is refused before anything is sent
    /// ([`OutboundError::FileRefused`]); otherwise it waits and retries like a
    /// final reply's part 0.
    pub async fn send_file(&self, channel: &str, file: &OutboundFile) -> Result<Delivered, OutboundError> {
        self.route(channel)?.send_file(file).await
    }

    /// Shows "typing…" in `chat` once, if there is spare budget now (see
    /// [`OutboundScheduler`]): never waits, never retries; a 429 pauses the
    /// chat (or channel) like any send's. True when the platform took it.
    pub async fn typing(&self, channel: &str, chat: &ChatRef) -> bool {
        match self.route(channel) {
            Ok(route) => route.typing(chat).await,
            Err(_) => false,
        }
    }

    /// Stops sending, for a shutdown: every send, now or later, ends at its
    /// next wait — for budget, a 429 pause, a backoff or its chat's turn — with
    /// [`OutboundError::Stopped`] listing the parts it delivered. A platform
    /// call in flight is finished, never cut, so its outcome is known.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    /// Sets a command menu ([`Channel::set_commands`]) within the budgets:
    /// a menu for one chat counts against that chat's, the default menu
    /// against the channel's; 429 pauses and transient failures are waited
    /// out as for a reply.
    pub async fn set_commands(
        &self,
        channel: &str,
        scope: &MenuScope,
        commands: &[MenuCommand],
    ) -> Result<(), OutboundError> {
        self.route(channel)?.deliver(Op::Menu { scope, commands }, "menu", 0).await.map(|_| ())
    }

    /// Starts a live reply to `chat`: see [`LiveReply`]. With an unknown
    /// channel, updates do nothing and [`LiveReply::finish`] fails.
    pub fn live(&self, channel: &str, chat: ChatRef, key: impl Into<String>, session: impl Into<String>) -> LiveReply {
        let template = Outbound {
            chat,
            text: String::new(),
            reply_to: Vec::new(),
            idempotency_key: key.into(),
            session: session.into(),
            mentions: Vec::new(),
        };
        LiveReply::new(self.route(channel).ok(), channel.to_owned(), template)
    }

    fn route(&self, channel: &str) -> Result<Arc<Route>, OutboundError> {
        let routes = self.routes.read();
        routes.get(channel).cloned().ok_or_else(|| OutboundError::UnknownChannel(channel.to_owned()))
    }
}

/// The idempotency key of part `index` of a reply keyed `key`.
fn part_key(key: &str, index: usize) -> String {
    if index == 0 { key.to_owned() } else { format!("{key}#{index}") }
}

/// One registered channel with its budgets: where the sending happens.
struct Route {
    name: String,
    channel: Arc<dyn Channel>,
    gate: Gate,
    config: OutboundConfig,
    /// One reply at a time per chat, so the parts of two replies never interleave.
    chat_turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The scheduler's [`OutboundScheduler::stop`].
    stopping: watch::Receiver<bool>,
}

/// What the chat reads when a file cannot go out on `channel`.
fn file_refusal(channel: &str, name: &str, bytes: u64, limit: Option<u64>) -> String {
    match limit {
        Some(limit) => format!(
            "{name} is {bytes} bytes; channel {channel} sends files of at most {limit} bytes, so nothing was sent"
        ),
        None => format!("channel {channel} cannot send files; {name} was not sent"),
    }
}

/// One platform call.
enum Op<'a> {
    Send(&'a Outbound),
    SendFile(&'a OutboundFile),
    Edit { chat: &'a ChatRef, message_id: &'a str, text: &'a str, mentions: &'a [SenderRef] },
    Menu { scope: &'a MenuScope, commands: &'a [MenuCommand] },
}

impl Op<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Op::Send(_) => "send",
            Op::SendFile(_) => "file",
            Op::Edit { .. } => "edit",
            Op::Menu { .. } => "menu",
        }
    }

    /// The chat whose budget the call takes ("" for none: the channel's only).
    fn chat_id(&self) -> &str {
        match self {
            Op::Send(outbound) => &outbound.chat.id,
            Op::SendFile(file) => &file.chat.id,
            Op::Edit { chat, .. } => &chat.id,
            Op::Menu { scope: MenuScope::Default, .. } => "",
            Op::Menu { scope: MenuScope::Chat { chat_id } | MenuScope::ChatMember { chat_id, .. }, .. } => chat_id,
        }
    }
}

impl Route {
    /// `text` as the messages this platform accepts, each leaving room for
    /// `mentions` in front (only the first part carries them, but every part
    /// is cut alike, so a live message and its final text split the same way).
    fn split(&self, text: &str, mentions: &[SenderRef]) -> Vec<String> {
        let limits = self.channel.limits();
        let limit = limits.max_message_chars;
        let max = limit.saturating_sub(bub_channel::mention_room(mentions)).max(limit / 2);
        split_message_counting(text, max, limits.length_unit)
    }

    async fn send_final(&self, outbound: Outbound) -> Result<Vec<Delivered>, OutboundError> {
        self.send_final_after(outbound, Vec::new()).await
    }

    async fn send_final_after(
        &self,
        outbound: Outbound,
        delivered: Vec<Delivered>,
    ) -> Result<Vec<Delivered>, OutboundError> {
        let _turn = match self.chat_turn_unless_stopped(&outbound.chat.id, delivered.len()).await {
            Ok(turn) => turn,
            Err(stopped) => return Err(stopped.with_delivered(delivered)),
        };
        let parts = self.split(&outbound.text, &outbound.mentions);
        self.send_parts(&outbound, parts.into_iter().enumerate().skip(delivered.len()), delivered).await
    }

    async fn send_file(&self, file: &OutboundFile) -> Result<Delivered, OutboundError> {
        let bytes = file.bytes.len() as u64;
        let limit = self.channel.max_file_bytes();
        if limit.is_none_or(|limit| bytes > limit) {
            return Err(OutboundError::FileRefused {
                channel: self.name.clone(),
                name: file.name.clone(),
                bytes,
                limit,
            });
        }
        let _turn = self.chat_turn_unless_stopped(&file.chat.id, 0).await?;
        self.deliver(Op::SendFile(file), &file.idempotency_key, 0).await
    }

    /// Resolves once the scheduler stops (never, if it was dropped without stopping).
    async fn stopped(&self) {
        let mut stopping = self.stopping.clone();
        if stopping.wait_for(|stopping| *stopping).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    fn stopped_error(&self, part: usize) -> OutboundError {
        OutboundError::Stopped { channel: self.name.clone(), part, delivered: Vec::new() }
    }

    /// [`Route::chat_turn`], or [`OutboundError::Stopped`] (for `part`) once the scheduler stops.
    async fn chat_turn_unless_stopped(
        &self,
        chat: &str,
        part: usize,
    ) -> Result<tokio::sync::OwnedMutexGuard<()>, OutboundError> {
        tokio::select! {
            biased;
            () = self.stopped() => Err(self.stopped_error(part)),
            turn = self.chat_turn(chat) => Ok(turn),
        }
    }

    /// Waits until no other reply is being delivered to `chat`; holding the
    /// guard keeps the next reply out until this one's parts are all sent.
    async fn chat_turn(&self, chat: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = {
            let mut turns = self.chat_turns.lock();
            // Forget chats nobody is sending to.
            turns.retain(|_, turn| Arc::strong_count(turn) > 1);
            turns.entry(chat.to_owned()).or_default().clone()
        };
        turn.lock_owned().await
    }

    /// Sends numbered parts of `template`'s reply in order after `delivered`;
    /// only the first part carries the mentions.
    async fn send_parts(
        &self,
        template: &Outbound,
        parts: impl Iterator<Item = (usize, String)>,
        mut delivered: Vec<Delivered>,
    ) -> Result<Vec<Delivered>, OutboundError> {
        for (index, text) in parts {
            let key = part_key(&template.idempotency_key, index);
            let mentions = if index == 0 { template.mentions.clone() } else { Vec::new() };
            let outbound = Outbound { text, idempotency_key: key.clone(), mentions, ..template.clone() };
            match self.deliver(Op::Send(&outbound), &key, index).await {
                Ok(message) => delivered.push(message),
                Err(error) => return Err(error.with_delivered(delivered)),
            }
        }
        Ok(delivered)
    }

    /// Performs `op` until it succeeds: waiting for budget and pauses before
    /// each attempt, pausing on 429s, backing off on transient failures.
    async fn deliver(&self, op: Op<'_>, key: &str, part: usize) -> Result<Delivered, OutboundError> {
        let span = info_span!("outbound", channel = %self.name, chat = %op.chat_id(), key, part, kind = op.kind());
        let delivered = self.deliver_in_span(op, part).instrument(span.clone()).await;
        if delivered.is_err() {
            crate::telemetry::traces::set_error(&span, "not delivered");
        }
        delivered
    }

    async fn deliver_in_span(&self, op: Op<'_>, part: usize) -> Result<Delivered, OutboundError> {
        let chat = op.chat_id().to_owned();
        let mut attempts = 0u32;
        let mut transient_since: Option<Instant> = None;
        let mut transient_failures = 0u32;
        loop {
            if !self.wait_turn(&chat).await {
                return Err(self.stopped_error(part));
            }
            attempts += 1;
            let error = match self.call(&op).await {
                Ok(delivered) => {
                    self.count_message(op.kind());
                    return Ok(delivered);
                }
                Err(error) => error,
            };
            self.count_error(&error);
            match error {
                SendError::RateLimited { retry_after, scope } => {
                    warn!(
                        retry_after_ms = retry_after.as_millis() as u64,
                        ?scope,
                        attempts,
                        "rate limited by the platform; pausing"
                    );
                    // Never spin on a platform that says "retry after 0".
                    self.gate.pause(&chat, scope, retry_after.max(self.config.retry_base));
                    transient_since = None;
                    transient_failures = 0;
                }
                SendError::Transient(ref message) => {
                    let since = *transient_since.get_or_insert_with(Instant::now);
                    transient_failures += 1;
                    let delay = backoff(&self.config, transient_failures);
                    let elapsed = since.elapsed();
                    if elapsed + delay > self.config.give_up_after {
                        warn!(attempts, ?elapsed, error = %message, "giving up after transient failures");
                        metrics::counter!("bub_outbound_errors_total", "channel" => self.name.clone(), "kind" => "gave_up")
                            .increment(1);
                        return Err(OutboundError::GaveUp {
                            channel: self.name.clone(),
                            part,
                            attempts,
                            elapsed,
                            delivered: Vec::new(),
                            source: error,
                        });
                    }
                    debug!(attempts, ?delay, error = %message, "transient failure; retrying");
                    tokio::select! {
                        biased;
                        () = self.stopped() => return Err(self.stopped_error(part)),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                SendError::Permanent(ref message) => {
                    warn!(attempts, error = %message, "rejected by the platform");
                    return Err(OutboundError::Permanent {
                        channel: self.name.clone(),
                        part,
                        delivered: Vec::new(),
                        source: error,
                    });
                }
            }
        }
    }

    /// One hint, if [`Gate::try_take_hint`] finds room for it; false when skipped or refused.
    async fn typing(&self, chat: &ChatRef) -> bool {
        if *self.stopping.borrow() || !self.gate.try_take_hint(&chat.id) {
            debug!(channel = %self.name, chat = %chat.id, "typing skipped: no spare budget, or the chat is paused");
            metrics::counter!("bub_outbound_typing_skipped_total", "channel" => self.name.clone()).increment(1);
            return false;
        }
        let error = match self.channel.typing(chat).await {
            Ok(()) => {
                self.count_message("typing");
                return true;
            }
            Err(error) => error,
        };
        self.count_error(&error);
        match error {
            SendError::RateLimited { retry_after, scope } => {
                warn!(channel = %self.name, chat = %chat.id, retry_after_ms = retry_after.as_millis() as u64, ?scope, "typing rate limited; pausing");
                self.gate.pause(&chat.id, scope, retry_after.max(self.config.retry_base));
            }
            error => debug!(channel = %self.name, chat = %chat.id, %error, "typing status not shown"),
        }
        false
    }

    /// One attempt, with no waiting and no retry.
    async fn call(&self, op: &Op<'_>) -> Result<Delivered, SendError> {
        match *op {
            Op::Send(outbound) => self.channel.send(outbound).await,
            Op::SendFile(file) => self.channel.send_file(file).await,
            Op::Edit { chat, message_id, text, mentions } => {
                self.channel.edit(chat, message_id, text, mentions).await?;
                Ok(Delivered { message_id: message_id.to_owned() })
            }
            Op::Menu { scope, commands } => {
                self.channel.set_commands(scope, commands).await?;
                Ok(Delivered { message_id: String::new() })
            }
        }
    }

    /// Waits for the chat's turn, counted in the queue-depth gauge and the
    /// wait histogram; false when the scheduler stopped first.
    async fn wait_turn(&self, chat: &str) -> bool {
        let depth = metrics::gauge!("bub_outbound_queue_depth", "channel" => self.name.clone());
        depth.increment(1.0);
        let started = Instant::now();
        let turn = tokio::select! {
            biased;
            () = self.stopped() => false,
            () = self.gate.wait(chat) => true,
        };
        depth.decrement(1.0);
        if turn {
            metrics::histogram!("bub_outbound_rate_limit_wait_seconds", "channel" => self.name.clone())
                .record(started.elapsed().as_secs_f64());
        }
        turn
    }

    fn count_message(&self, kind: &'static str) {
        metrics::counter!("bub_outbound_messages_total", "channel" => self.name.clone(), "kind" => kind).increment(1);
    }

    fn count_error(&self, error: &SendError) {
        let kind = match error {
            SendError::RateLimited { .. } => "rate_limited",
            SendError::Transient(_) => "transient",
            SendError::Permanent(_) => "permanent",
        };
        metrics::counter!("bub_outbound_errors_total", "channel" => self.name.clone(), "kind" => kind).increment(1);
    }
}

/// The wait before retry number `failures` (1-based): the shared
/// [`Backoff`](bub_channel::Backoff) from [`OutboundConfig::retry_base`] up
/// to [`OutboundConfig::retry_cap`].
fn backoff(config: &OutboundConfig, failures: u32) -> Duration {
    bub_channel::Backoff::new(config.retry_base, config.retry_cap).delay(failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_keys_are_stable_and_distinct() {
        assert_eq!(part_key("k", 0), "k");
        assert_eq!(part_key("k", 1), "k#1");
        assert_eq!(part_key("k", 12), "k#12");
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap_with_jitter() {
        let config = OutboundConfig::default();
        for failures in 1..40 {
            let ceiling = (config.retry_base * 2u32.saturating_pow(failures - 1).min(1 << 20)).min(config.retry_cap);
            let delay = backoff(&config, failures);
            assert!(delay >= ceiling / 2 && delay <= ceiling, "{failures}: {delay:?} vs {ceiling:?}");
        }
        assert!(backoff(&config, 1) <= Duration::from_millis(200));
        assert!(backoff(&config, 30) >= Duration::from_secs(15));
    }
}
