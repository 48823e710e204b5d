//! Delivery: a reply or a file leaves through the [scheduler](super) and
//! what became of it is recorded in the store — here, once for both.
//!
//! - Each send runs among the gateway's deliveries
//!   ([`Inner::deliveries`](crate::gateway::Inner)), not in the caller's
//!   task, so a turn abandoned by a stop does not cut a platform call in
//!   flight (one cut would be sent again by the next start though it may
//!   have arrived). Once a stop began nothing new starts: a reply stays in
//!   the outbox for the next start; a file is recorded as not sent.
//! - The record is written patiently where a lost one would double a reply
//!   (whoever takes this replica's work over, or the next start, would send
//!   it again).
//! - Its task carries the span of the turn that sent it (the deliveries
//!   spawn every task in the spawner's span).

use super::{LiveReply, OutboundError};
use crate::gateway::Inner;
use crate::gateway::store::{PendingReply, StoreError, patiently};
use crate::tools::{SentFile, ToolError};
use bub_channel::{Delivered, Outbound, OutboundFile};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Why a delivery did not run to its end.
enum Unsent {
    /// The gateway is stopping: it did not start.
    Stopping,
    /// The stop's drain ran out while it was under way.
    Cut,
}

/// Runs `send` among the gateway's deliveries and waits for its result.
async fn among_deliveries<T: Send + 'static>(
    inner: &Arc<Inner>,
    send: impl Future<Output = T> + Send + 'static,
) -> Result<T, Unsent> {
    let (done_tx, done) = oneshot::channel();
    let task = async move {
        let _ = done_tx.send(send.await);
    };
    if !inner.deliveries.spawn(task) {
        return Err(Unsent::Stopping);
    }
    done.await.map_err(|_| Unsent::Cut)
}

/// Sends a stored reply and records the delivery; true when the platform
/// took it. Once a stop began, the reply stays in the outbox for the next
/// start.
pub(crate) async fn deliver_reply(inner: &Arc<Inner>, reply: PendingReply, live: Option<LiveReply>) -> bool {
    let task = {
        let inner = inner.clone();
        async move { send_and_record_reply(&inner, reply, live).await }
    };
    match among_deliveries(inner, task).await {
        Ok(reached) => reached,
        Err(Unsent::Stopping) => {
            tracing::info!("gateway stopping; the reply goes out at the next start");
            false
        }
        Err(Unsent::Cut) => false,
    }
}

async fn send_and_record_reply(inner: &Arc<Inner>, reply: PendingReply, live: Option<LiveReply>) -> bool {
    let PendingReply { channel, outbound, sent } = reply;
    let key = outbound.idempotency_key.clone();
    let edits = inner.channels.get(&channel).is_some_and(|target| target.limits().edits);
    let sent = match live {
        Some(live) => live.mentioning(outbound.mentions.clone()).finish(&outbound.text).await,
        // Nothing of it reached the chat, unless a message kept for its key did
        // (a crash after it was sent): that one is finished.
        None if edits && sent.is_empty() => {
            kept_live_reply(inner, &channel, &outbound).await.finish(&outbound.text).await
        }
        None => {
            let sent = sent.into_iter().map(|message_id| Delivered { message_id }).collect();
            inner.outbound().send_final_after(&channel, outbound, sent).await
        }
    };
    let reached = sent.is_ok();
    let platform_ids = |delivered: &[Delivered]| delivered.iter().map(|d| d.message_id.clone()).collect::<Vec<_>>();
    // Patiently: a reply left pending would be sent again by whoever takes
    // this replica's work over (or the next start).
    let stored = match sent {
        Ok(delivered) => {
            let ids = platform_ids(&delivered);
            patiently("record a delivery", || inner.store.delivered(&key, &ids)).await
        }
        // Nothing of the rest was attempted: the next start sends it, and only it.
        Err(OutboundError::Stopped { delivered, .. }) => {
            tracing::info!(key = %key, channel = %channel, parts_sent = delivered.len(), "gateway stopping; the reply goes out at the next start");
            inner.store.parts_delivered(&key, &platform_ids(&delivered)).await
        }
        Err(error) => {
            tracing::warn!(%error, key = %key, channel = %channel, "reply not delivered");
            metrics::counter!("bub_delivery_errors_total", "channel" => channel.clone()).increment(1);
            let error = error.to_string();
            patiently("record an undeliverable reply", || inner.store.undeliverable(&key, &error)).await
        }
    };
    if let Err(error) = stored {
        tracing::error!(%error, key = %key, "cannot record the delivery; it may be sent again after a restart");
    }
    reached
}

/// A live reply for `template` whose message is kept in the store, so a
/// restart finishes it; when one was kept for its key before a restart (in
/// the same chat), the reply finishes that one instead of sending another.
pub(crate) async fn kept_live_reply(inner: &Inner, channel: &str, template: &Outbound) -> LiveReply {
    let key = &template.idempotency_key;
    let live = inner
        .outbound()
        .live(channel, template.chat.clone(), key.clone(), template.session.clone())
        .reply_to(template.reply_to.clone())
        .mentioning(template.mentions.clone())
        .remembered_in(Arc::new(inner.store.clone()));
    match inner.store.live_message(key).await {
        Ok(Some(message)) if message.channel == channel && message.chat == template.chat => {
            tracing::info!(key = %key, channel, message_id = %message.message_id, "finishing the reply's message from before the restart");
            live.resuming(&message)
        }
        Ok(Some(message)) => {
            tracing::warn!(key = %key, channel, kept_in = %message.channel, "a live message kept for this key is in another chat; sending anew");
            live
        }
        Ok(None) => live,
        Err(error) => {
            tracing::warn!(%error, key = %key, "cannot read the reply's live message; sending anew");
            live
        }
    }
}

/// Sends `file` (already recorded as begun under its key) and records what
/// became of it: what the tool answers the model.
pub(crate) async fn deliver_file(inner: &Arc<Inner>, channel: &str, file: OutboundFile) -> Result<SentFile, ToolError> {
    let key = file.idempotency_key.clone();
    let task = {
        let (inner, channel) = (inner.clone(), channel.to_string());
        async move { send_and_record_file(&inner, &channel, file).await }
    };
    let stopping = || ToolError::failed("the gateway is stopping; the file was not sent");
    match among_deliveries(inner, task).await {
        Ok(sent) => sent,
        Err(Unsent::Stopping) => {
            record_file(inner.store.file_not_sent(&key, "the gateway was stopping").await, &key);
            Err(stopping())
        }
        Err(Unsent::Cut) => Err(stopping()),
    }
}

/// Sends `file` through the scheduler and records what became of it.
async fn send_and_record_file(inner: &Arc<Inner>, channel: &str, file: OutboundFile) -> Result<SentFile, ToolError> {
    let key = file.idempotency_key.clone();
    match inner.outbound().send_file(channel, &file).await {
        Ok(delivered) => {
            record_file(inner.store.file_delivered(&key, &delivered.message_id).await, &key);
            tracing::info!(channel, key = %key, file = %file.name, bytes = file.bytes.len(), message_id = %delivered.message_id, "file sent");
            Ok(SentFile { message_id: delivered.message_id, earlier: false })
        }
        Err(error) => {
            tracing::warn!(%error, channel, key = %key, file = %file.name, "file not sent");
            record_file(inner.store.file_not_sent(&key, &error.to_string()).await, &key);
            Err(ToolError::failed(not_sent(&file.name, error)))
        }
    }
}

/// What the model reads when `name` did not go out.
fn not_sent(name: &str, error: OutboundError) -> String {
    match error {
        OutboundError::FileRefused { .. } => error.to_string(),
        OutboundError::Permanent { source, .. } => format!("{name} was not sent: {source}"),
        OutboundError::GaveUp { attempts, source, .. } => {
            format!("{name} was not sent: the platform failed {attempts} times ({source})")
        }
        OutboundError::Stopped { .. } => format!("{name} was not sent: the gateway is stopping"),
        OutboundError::UnknownChannel(channel) => format!("{name} was not sent: no channel {channel}"),
    }
}

fn record_file(stored: Result<(), StoreError>, key: &str) {
    if let Err(error) = stored {
        tracing::error!(%error, key, "cannot record what became of a file; a rerun of its turn may send it again");
    }
}
