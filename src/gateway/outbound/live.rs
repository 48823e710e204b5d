//! Live replies: one message that grows as the agent writes, by throttled,
//! coalesced edits that give way to everything else under pressure.

use super::{Op, OutboundError, Route};
use bub_channel::{Delivered, Outbound, SendError};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

/// A reply streamed into one message.
///
/// [`LiveReply::update`] never blocks: it records the newest text, and a
/// background task sends the first message, then edits it at most once per
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
}

/// What the live message shows.
#[derive(Debug, Default)]
struct Shown {
    message_id: Option<String>,
    text: String,
}

impl LiveReply {
    pub(super) fn new(route: Option<Arc<Route>>, channel: String, template: Outbound) -> LiveReply {
        LiveReply {
            route,
            channel,
            template,
            text: watch::Sender::new(String::new()),
            stop: Arc::new(Notify::new()),
            task: Mutex::new(None),
        }
    }

    /// The inbound messages this reply answers (the platform may thread it to
    /// the last one). Set it before the first [`LiveReply::update`].
    pub fn reply_to(mut self, message_ids: Vec<String>) -> LiveReply {
        self.template.reply_to = message_ids;
        self
    }

    /// Records the whole reply text so far; returns at once.
    pub fn update(&self, full_text_so_far: impl Into<String>) {
        self.text.send_replace(full_text_so_far.into());
        self.start_editing();
    }

    /// Stops the live updates and delivers `final_text` exactly: the live
    /// message, if one was sent, is edited to the first part (waiting for
    /// budget and pauses; this edit is never dropped) and the other parts
    /// follow as new messages (keys `<key>#<i>`); without a live message this
    /// is [`OutboundScheduler::send_final`](super::OutboundScheduler::send_final).
    /// If the platform rejects the final edit for good (the message was
    /// deleted, say), the whole text is sent as new messages instead, under
    /// the key `<key>#resent` (part 0's own key is already used).
    pub async fn finish(self, final_text: impl Into<String>) -> Result<Vec<Delivered>, OutboundError> {
        let final_text = final_text.into();
        self.stop.notify_one();
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        let shown = match task {
            Some(task) => task.await.unwrap_or_else(|error| {
                warn!(channel = %self.channel, %error, "live reply task failed; sending the final text anew");
                Shown::default()
            }),
            None => Shown::default(),
        };
        let route = self.route.clone().ok_or_else(|| OutboundError::UnknownChannel(self.channel.clone()))?;
        let outbound = Outbound { text: final_text, ..self.template.clone() };
        let Some(message_id) = shown.message_id else {
            return route.send_final(outbound).await;
        };
        let _turn = route.chat_turn_unless_stopped(&outbound.chat.id, 0).await?;
        let mut parts = route.split(&outbound.text).into_iter().enumerate();
        let delivered = vec![Delivered { message_id: message_id.clone() }];
        let Some((_, first)) = parts.next() else {
            warn!(channel = %self.channel, key = %outbound.idempotency_key, "final text is empty; the live message stays as it is");
            return Ok(delivered);
        };
        if first != shown.text {
            let edit = Op::Edit { chat: &outbound.chat, message_id: &message_id, text: &first };
            match route.deliver(edit, &outbound.idempotency_key, 0).await {
                Ok(_) => {}
                Err(OutboundError::Permanent { source, .. }) => {
                    // The live message cannot take the answer (deleted meanwhile, say): the
                    // whole answer goes as new messages, under keys of their own.
                    warn!(channel = %self.channel, error = %source, "final edit refused; sending the reply as new messages");
                    drop(_turn);
                    let key = format!("{}#resent", outbound.idempotency_key);
                    return route.send_final(Outbound { idempotency_key: key, ..outbound }).await;
                }
                Err(other) => return Err(other),
            }
        }
        route.send_parts(&outbound, parts, delivered).await
    }

    /// Starts the background task on the first update, when the channel can edit.
    fn start_editing(&self) {
        let Some(route) = &self.route else { return };
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.is_some() || !route.channel.limits().edits {
            return;
        }
        let span = info_span!(
            "live_reply",
            channel = %route.name,
            chat = %self.template.chat.id,
            key = %self.template.idempotency_key,
        );
        let editor = Editor { route: route.clone(), template: self.template.clone(), shown: Shown::default() };
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
}

impl Editor {
    async fn run(mut self, mut text: watch::Receiver<String>, stop: Arc<Notify>) -> Shown {
        let interval = self.route.config.live_edit_interval;
        let mut next_at: Option<Instant> = None;
        loop {
            tokio::select! {
                biased;
                () = stop.notified() => break,
                changed = text.changed() => if changed.is_err() { break },
            }
            if let Some(at) = next_at {
                tokio::select! {
                    biased;
                    () = stop.notified() => break,
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            let newest = text.borrow_and_update().clone();
            let Some(first) = self.route.split(&newest).into_iter().next() else { continue };
            if first == self.shown.text {
                continue;
            }
            next_at = Some(Instant::now() + interval);
            match self.try_show(&first).await {
                Ok(()) => self.shown.text = first,
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
            Some(message_id) => route.call(&Op::Edit { chat, message_id, text }).await.map(|_| None),
        };
        let kind = if self.shown.message_id.is_some() { "edit" } else { "send" };
        match result {
            Ok(message_id) => {
                route.count_message(kind);
                if message_id.is_some() {
                    self.shown.message_id = message_id;
                }
                Ok(())
            }
            Err(error) => {
                route.count_error(&error);
                self.count_dropped();
                match error {
                    SendError::RateLimited { retry_after, scope } => {
                        warn!(?retry_after, ?scope, "live update rate limited; pausing");
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
