//! Live replies: one message that grows as the agent writes, by throttled,
//! coalesced edits that give way to everything else under pressure.
//!
//! # The first message
//! A live reply sends nothing until its text is worth a notification: at
//! least [`OutboundConfig::live_first_chars`](super::OutboundConfig)
//! characters, cut at a word boundary (so no "show **bo"), or whatever there
//! is once [`OutboundConfig::live_first_wait`](super::OutboundConfig) has
//! passed since the first text (a slow answer, or a short note before a long
//! tool call, still shows progress). A reply that ends before either is one
//! plain send: one platform call, no edit.
//!
//! A text long enough is sent only once a later update shows it still
//! growing: a text that came whole (a command's output, a fast model's
//! answer that arrived before the live reply looked) may be the whole reply,
//! and cutting it at a word boundary now would make it a message and an edit
//! a moment later. Held back, it is one send at [`LiveReply::finish`], split
//! only at the platform's limit, or is shown once the wait above has passed
//! (the note before a long tool call). A stream that keeps growing shows its
//! opening at the next update, as before.
//!
//! # Edits keep the interval, the final one included
//! An edit of the live message comes at least
//! [`OutboundConfig::live_edit_interval`](super::OutboundConfig) after the
//! previous send or edit of that message returned, so the platform sees them
//! at least that far apart. The final edit ([`LiveReply::finish`]) waits for
//! it too: a wait for the interval is never longer than the interval, so the
//! answer's end is delayed by at most one interval (1 s by default), which
//! this rule accepts rather than a burst of two edits in a few milliseconds.
//! Budget and 429 waits come on top, as for every call. Parts after the first
//! are new messages and are not held to the interval.
//!
//! # After a crash
//! The platform id of the live message (of the first part, for a reply sent
//! whole at the end) is kept in [`LiveMessages`] under the reply's key as
//! soon as the platform returns it, and forgotten when the outbox records the
//! reply delivered. A reply started again with the same key
//! ([`LiveReply::resuming`]: the turn run again after a restart, or a pending
//! outbox reply) edits that message, its live updates and its final text,
//! instead of sending another. If the platform refuses that edit for good
//! (the message was deleted, say), the old message is edited to
//! [`REPLACED_MARKER`] if it still can be, and the answer is sent as new
//! messages under `<key>#resent`.
//!
//! What is left open: a crash after the platform took the send and before
//! the id is kept (one platform answer and one database commit) leaves that
//! message as it was, and the reply comes as a new message, as before.

use super::{Op, OutboundError, Route};
use bub_channel::{ChatRef, Delivered, Outbound, SendError};
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

/// What an old live message is edited to when its answer has to be sent anew
/// below it: better than a frozen fragment that reads like the whole answer.
pub const REPLACED_MARKER: &str = "↓ (answer below)";

/// A live message as kept for a restart: where it is and what it showed when sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMessage {
    pub channel: String,
    pub chat: ChatRef,
    /// The platform's message id.
    pub message_id: String,
    /// What the message showed when it was sent (later edits are not kept).
    pub text: String,
}

/// Where live messages are kept, by reply key, so a restart finds them (the
/// gateway's store; the scheduler itself keeps nothing).
#[async_trait::async_trait]
pub trait LiveMessages: Send + Sync {
    /// `message` is now the live message of the reply keyed `key`.
    async fn remember(&self, key: &str, message: &LiveMessage) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// A reply streamed into one message.
///
/// [`LiveReply::update`] never blocks: it records the newest text, and a
/// background task sends the first message (see the module docs for when),
/// then edits it at most once per
/// [`OutboundConfig::live_edit_interval`](super::OutboundConfig). Only the
/// newest text is ever sent; an update that finds the chat paused or its budget
/// spent is dropped (and retried with the newest text at the next interval),
/// so live edits never delay final replies. Only the first part of a text over
/// the platform's limit is shown live. A channel without edits shows nothing
/// until [`LiveReply::finish`], which delivers the exact final text.
pub struct LiveReply {
    route: Option<Arc<Route>>,
    channel: String,
    template: Outbound,
    text: watch::Sender<String>,
    stop: Arc<Notify>,
    task: Mutex<Option<JoinHandle<Shown>>>,
    /// The message sent before a restart, which this reply finishes.
    resumed: Option<String>,
    memory: Memory,
}

/// What the live message shows.
#[derive(Debug, Default, Clone)]
struct Shown {
    message_id: Option<String>,
    /// Empty when unknown (a message resumed after a restart).
    text: String,
    /// When the last platform call on the message returned (`None`: no call
    /// yet, or it was before a restart): its next edit waits until the
    /// edit interval has passed since.
    called_at: Option<Instant>,
}

impl Shown {
    /// When the message may be edited next.
    fn editable_at(&self, interval: std::time::Duration) -> Option<Instant> {
        self.called_at.map(|at| at + interval)
    }
}

/// Keeps the live message of one reply in its [`LiveMessages`], if it has one.
#[derive(Clone)]
struct Memory {
    store: Option<Arc<dyn LiveMessages>>,
    channel: String,
    key: String,
    chat: ChatRef,
}

impl Memory {
    /// A failure is logged: the reply goes on, only a crash would now double it.
    async fn remember(&self, message_id: &str, text: &str) {
        let Some(store) = &self.store else { return };
        let message = LiveMessage {
            channel: self.channel.clone(),
            chat: self.chat.clone(),
            message_id: message_id.to_owned(),
            text: text.to_owned(),
        };
        if let Err(error) = store.remember(&self.key, &message).await {
            warn!(channel = %self.channel, key = %self.key, %error, "cannot keep the live message's id; a crash now would send the reply again");
        }
    }
}

impl LiveReply {
    pub(super) fn new(route: Option<Arc<Route>>, channel: String, template: Outbound) -> LiveReply {
        let memory = Memory {
            store: None,
            channel: channel.clone(),
            key: template.idempotency_key.clone(),
            chat: template.chat.clone(),
        };
        LiveReply {
            route,
            channel,
            template,
            text: watch::Sender::new(String::new()),
            stop: Arc::new(Notify::new()),
            task: Mutex::new(None),
            resumed: None,
            memory,
        }
    }

    /// The inbound messages this reply answers (the platform threads it to
    /// the first one). Set it before the first [`LiveReply::update`].
    pub fn reply_to(mut self, message_ids: Vec<String>) -> LiveReply {
        self.template.reply_to = message_ids;
        self
    }

    /// Keeps this reply's message in `store` as soon as it is sent, so that a
    /// restart can finish it. Set it before the first [`LiveReply::update`].
    pub fn remembered_in(mut self, store: Arc<dyn LiveMessages>) -> LiveReply {
        self.memory.store = Some(store);
        self
    }

    /// Finishes `message`, this reply's message from before a restart, rather
    /// than sending a new one: the updates and the final text edit it. Set it
    /// before the first [`LiveReply::update`].
    pub fn resuming(mut self, message: &LiveMessage) -> LiveReply {
        self.resumed = Some(message.message_id.clone());
        self
    }

    fn shown_before(&self) -> Shown {
        Shown { message_id: self.resumed.clone(), text: String::new(), called_at: None }
    }

    /// The people the reply mentions ([`Outbound::mentions`]). Set before the
    /// first [`LiveReply::update`], they head the live message (and ping);
    /// set again before [`LiveReply::finish`] (writers steered into the turn
    /// meanwhile), the final edit shows them all, pinging no one new: an
    /// edit pings nobody.
    pub fn mentioning(mut self, mentions: Vec<bub_channel::SenderRef>) -> LiveReply {
        self.template.mentions = mentions;
        self
    }

    /// Records the whole reply text so far; returns at once.
    pub fn update(&self, full_text_so_far: impl Into<String>) {
        self.text.send_replace(full_text_so_far.into());
        self.start_editing();
    }

    /// Stops the live updates and delivers `final_text` exactly: the live
    /// message, if one was sent, is edited to the first part (waiting for the
    /// edit interval since its last update, then for budget and pauses; this
    /// edit is never dropped) and the other parts
    /// follow as new messages (keys `<key>#<i>`); without a live message the
    /// parts are sent like [`OutboundScheduler::send_final`](super::OutboundScheduler::send_final)
    /// does, the first one's id kept as the live message.
    /// If the platform rejects the final edit for good (the message was
    /// deleted, say), the old message is edited to [`REPLACED_MARKER`] if it
    /// can be, and the whole text is sent as new messages under the key
    /// `<key>#resent` (part 0's own key is already used).
    pub async fn finish(self, final_text: impl Into<String>) -> Result<Vec<Delivered>, OutboundError> {
        let final_text = final_text.into();
        self.stop.notify_one();
        let task = self.task.lock().take();
        let shown = match task {
            Some(task) => task.await.unwrap_or_else(|error| {
                warn!(channel = %self.channel, %error, "live reply task failed; finishing from what was known before it");
                self.shown_before()
            }),
            None => self.shown_before(),
        };
        let route = self.route.clone().ok_or_else(|| OutboundError::UnknownChannel(self.channel.clone()))?;
        let outbound = Outbound { text: final_text, ..self.template.clone() };
        let Some(message_id) = shown.message_id.clone() else {
            let _turn = route.chat_turn_unless_stopped(&outbound.chat.id, 0).await?;
            return self.send_new(&route, outbound).await;
        };
        let mut parts = route.split(&outbound.text, &outbound.mentions).into_iter().enumerate();
        let delivered = vec![Delivered { message_id: message_id.clone() }];
        let Some((_, first)) = parts.next() else {
            warn!(channel = %self.channel, key = %outbound.idempotency_key, "final text is empty; the live message stays as it is");
            return Ok(delivered);
        };
        let edits = first != shown.text;
        if edits && let Some(at) = shown.editable_at(route.config.live_edit_interval) {
            // Before the chat's turn: other replies to the chat need not wait for this one's interval.
            tokio::select! {
                biased;
                () = route.stopped() => return Err(route.stopped_error(0)),
                () = tokio::time::sleep_until(at) => {}
            }
        }
        let _turn = route.chat_turn_unless_stopped(&outbound.chat.id, 0).await?;
        if edits {
            let edit =
                Op::Edit { chat: &outbound.chat, message_id: &message_id, text: &first, mentions: &outbound.mentions };
            match route.deliver(edit, &outbound.idempotency_key, 0).await {
                Ok(_) => {}
                Err(OutboundError::Permanent { source, .. }) => {
                    // The live message cannot take the answer (deleted meanwhile, say): the
                    // whole answer goes as new messages, under keys of their own.
                    warn!(channel = %self.channel, error = %source, "final edit refused; sending the reply as new messages");
                    self.mark_replaced(&route, &outbound, &message_id).await?;
                    let key = format!("{}#resent", outbound.idempotency_key);
                    return self.send_new(&route, Outbound { idempotency_key: key, ..outbound }).await;
                }
                Err(other) => return Err(other),
            }
        }
        route.send_parts(&outbound, parts, delivered).await
    }

    /// Sends `outbound` as new messages (the caller holds the chat's turn),
    /// keeping the first one's id as the live message.
    async fn send_new(&self, route: &Route, outbound: Outbound) -> Result<Vec<Delivered>, OutboundError> {
        let mut parts = route.split(&outbound.text, &outbound.mentions).into_iter().enumerate();
        let Some((_, first)) = parts.next() else { return Ok(Vec::new()) };
        let head = Outbound { text: first, ..outbound.clone() };
        let sent = route.deliver(Op::Send(&head), &outbound.idempotency_key, 0).await?;
        self.memory.remember(&sent.message_id, &head.text).await;
        route.send_parts(&outbound, parts, vec![sent]).await
    }

    /// Edits an old live message whose answer goes below it to
    /// [`REPLACED_MARKER`]; a refusal leaves it as it is (it may be gone).
    async fn mark_replaced(&self, route: &Route, outbound: &Outbound, message_id: &str) -> Result<(), OutboundError> {
        let edit = Op::Edit { chat: &outbound.chat, message_id, text: REPLACED_MARKER, mentions: &[] };
        match route.deliver(edit, &outbound.idempotency_key, 0).await {
            Ok(_) => Ok(()),
            Err(stopped @ OutboundError::Stopped { .. }) => Err(stopped),
            Err(error) => {
                debug!(channel = %self.channel, %error, "the old live message cannot be marked either");
                Ok(())
            }
        }
    }

    /// Starts the background task on the first update, when the channel can edit.
    fn start_editing(&self) {
        let Some(route) = &self.route else { return };
        let mut task = self.task.lock();
        if task.is_some() || !route.channel.limits().edits {
            return;
        }
        let span = info_span!(
            "live_reply",
            channel = %route.name,
            chat = %self.template.chat.id,
            key = %self.template.idempotency_key,
        );
        let editor = Editor {
            route: route.clone(),
            template: self.template.clone(),
            shown: self.shown_before(),
            memory: self.memory.clone(),
        };
        // The text that started the editor is news to it too.
        let mut text = self.text.subscribe();
        text.mark_changed();
        *task = Some(tokio::spawn(editor.run(text, self.stop.clone()).instrument(span)));
    }
}

impl Drop for LiveReply {
    /// An abandoned live reply stops editing; what it showed stays.
    fn drop(&mut self) {
        self.stop.notify_one();
    }
}

/// The background task behind a [`LiveReply`].
struct Editor {
    route: Arc<Route>,
    template: Outbound,
    shown: Shown,
    memory: Memory,
}

impl Editor {
    async fn run(mut self, mut text: watch::Receiver<String>, stop: Arc<Notify>) -> Shown {
        let config = self.route.config;
        let mut next_at: Option<Instant> = None;
        // Once the first text came: when it is shown whatever it holds.
        let mut show_anyway_at: Option<Instant> = None;
        let mut first_shown = false;
        // An opening was found and held back, as the text may have come whole;
        // the next update shows it growing (see the module docs).
        let mut opening_held = config.live_first_chars == 0;
        loop {
            let waiting_to_show = !first_shown && show_anyway_at.is_some();
            tokio::select! {
                biased;
                () = stop.notified() => break,
                changed = text.changed() => if changed.is_err() { break },
                () = tokio::time::sleep_until(show_anyway_at.unwrap_or_else(Instant::now)), if waiting_to_show => {}
            }
            if let Some(at) = next_at {
                tokio::select! {
                    biased;
                    () = stop.notified() => break,
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            let newest = text.borrow_and_update().clone();
            let Some(first) = self.route.split(&newest, &self.template.mentions).into_iter().next() else { continue };
            let candidate = if first_shown {
                first
            } else {
                let deadline = *show_anyway_at.get_or_insert_with(|| Instant::now() + config.live_first_wait);
                let due = Instant::now() >= deadline;
                match opening(&first, config.live_first_chars) {
                    Some(opening) if due || opening_held => opening.to_owned(),
                    Some(_) => {
                        opening_held = true;
                        continue;
                    }
                    None if due => first,
                    None => continue,
                }
            };
            if candidate == self.shown.text {
                continue;
            }
            let shown = self.try_show(&candidate).await;
            // Counted from the call's return: the platform sees the updates at least the interval apart.
            next_at = Some(Instant::now() + config.live_edit_interval);
            match shown {
                Ok(()) => {
                    self.shown.text = candidate;
                    first_shown = true;
                }
                Err(Dropped::Retry) => text.mark_changed(),
                Err(Dropped::Stop) => break,
            }
        }
        self.shown
    }

    /// Sends or edits the live message once, if the budget has room now.
    async fn try_show(&mut self, text: &str) -> Result<(), Dropped> {
        let route = &self.route;
        let chat = &self.template.chat;
        if !route.gate.try_take(&chat.id) {
            debug!("live update dropped: chat paused or budget spent");
            self.count_dropped();
            return Err(Dropped::Retry);
        }
        let result = match &self.shown.message_id {
            None => {
                let outbound = Outbound { text: text.to_owned(), ..self.template.clone() };
                route.call(&Op::Send(&outbound)).await.map(|delivered| Some(delivered.message_id))
            }
            Some(message_id) => {
                let mentions = &self.template.mentions;
                route.call(&Op::Edit { chat, message_id, text, mentions }).await.map(|_| None)
            }
        };
        self.shown.called_at = Some(Instant::now());
        let kind = if self.shown.message_id.is_some() { "edit" } else { "send" };
        match result {
            Ok(message_id) => {
                route.count_message(kind);
                if let Some(message_id) = message_id {
                    // Kept before the first edit: from now on a restart finishes this message.
                    self.memory.remember(&message_id, text).await;
                    self.shown.message_id = Some(message_id);
                }
                Ok(())
            }
            Err(error) => {
                route.count_error(&error);
                self.count_dropped();
                match error {
                    SendError::RateLimited { retry_after, scope } => {
                        warn!(
                            retry_after_ms = retry_after.as_millis() as u64,
                            ?scope,
                            "live update rate limited; pausing"
                        );
                        route.gate.pause(&chat.id, scope, retry_after);
                        Err(Dropped::Retry)
                    }
                    SendError::Transient(message) => {
                        debug!(error = %message, "live update failed; the next one may succeed");
                        Err(Dropped::Retry)
                    }
                    SendError::Permanent(message) => {
                        warn!(error = %message, "live update rejected; no more live updates for this reply");
                        Err(Dropped::Stop)
                    }
                }
            }
        }
    }

    fn count_dropped(&self) {
        metrics::counter!("bub_outbound_edits_dropped_total", "channel" => self.route.name.clone()).increment(1);
    }
}

/// Why a live update was not shown.
enum Dropped {
    /// Show the newest text at the next interval.
    Retry,
    /// The platform will not take live updates for this reply.
    Stop,
}

/// The opening of a streamed text worth a first message: the text up to its
/// last word boundary (its last word may still be growing), once that holds
/// at least `min_chars` characters. With `min_chars` 0, the text as it is.
fn opening(text: &str, min_chars: usize) -> Option<&str> {
    if min_chars == 0 {
        return Some(text);
    }
    let boundary = text.rfind(char::is_whitespace)?;
    let opening = text[..boundary].trim_end();
    (opening.chars().count() >= min_chars).then_some(opening)
}

#[cfg(test)]
mod tests {
    use super::opening;

    #[test]
    fn an_opening_ends_at_a_word_boundary_and_holds_enough_text() {
        assert_eq!(opening("echo:", 10), None, "a fragment is never an opening");
        assert_eq!(opening("show **bo", 4), Some("show"), "a word still growing is left out");
        assert_eq!(opening("show **bold** text ", 4), Some("show **bold** text"));
        assert_eq!(opening("one two thr", 8), None, "`one two` is under 8 characters");
        assert_eq!(opening("one two three four", 8), Some("one two three"));
        assert_eq!(opening("ééééé ééé", 5), Some("ééééé"), "characters, not bytes");
        assert_eq!(opening("長い文章です", 3), None, "no word boundary: the wait decides");
        assert_eq!(opening("echo:", 0), Some("echo:"), "0 shows everything at once");
    }
}
