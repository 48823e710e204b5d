//! The gateway side of the contract: where adapters submit messages, and how a
//! caller that waits for its reply (webhook `sync` and `sse`) receives it.

use crate::check::InvalidInbound;
use crate::message::{ChatRef, Inbound};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;

/// How the gateway handled one inbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeStatus {
    /// The agent (or a command) answered; `text` is the reply.
    Replied,
    /// Kept on the tape as context, not answered (a group message that did not address the bot).
    Recorded,
    /// Not allowed (sender, chat or command); `text` says why.
    Refused,
    /// Not handled because the session was busy and its policy drops such messages.
    Dropped,
    /// The turn failed; `text` says why.
    Failed,
}

/// The final outcome of one inbound message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: OutcomeStatus,
    /// The reply, or the reason.
    pub text: String,
    /// The session that handled it.
    pub session: String,
}

/// One piece of a reply on its way to a waiting caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyEvent {
    /// More reply text (streamed as the model writes it).
    Delta(String),
    /// The text streamed so far is void (the model's answer was cut off and
    /// it is asked again): the reply is `text` (what earlier steps said)
    /// plus the deltas that follow.
    Restart { text: String, reason: String },
    /// The end: nothing follows.
    Done(Outcome),
}

/// The sending half of a caller's reply stream. Deltas are dropped when the
/// caller reads too slowly (the final outcome carries the whole text); the
/// outcome itself is never dropped while the caller listens.
#[derive(Debug, Clone)]
pub struct ReplySink {
    tx: mpsc::Sender<ReplyEvent>,
}

/// The receiving half of a [`ReplySink`].
pub type ReplyReceiver = mpsc::Receiver<ReplyEvent>;

impl ReplySink {
    /// A sink and its receiver; `buffer` deltas may wait unread.
    pub fn channel(buffer: usize) -> (ReplySink, ReplyReceiver) {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        (ReplySink { tx }, rx)
    }

    pub fn delta(&self, text: impl Into<String>) {
        let _ = self.tx.try_send(ReplyEvent::Delta(text.into()));
    }

    /// See [`ReplyEvent::Restart`]; dropped like a delta when the caller reads too slowly.
    pub fn restart(&self, text: impl Into<String>, reason: impl Into<String>) {
        let _ = self.tx.try_send(ReplyEvent::Restart { text: text.into(), reason: reason.into() });
    }

    pub async fn done(&self, outcome: Outcome) {
        let _ = self.tx.send(ReplyEvent::Done(outcome)).await;
    }

    /// The caller stopped listening.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// What happened to a submitted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// Stored; the outcome will follow (through the sink, or the channel).
    Accepted,
    /// This channel already received this message id: its outcome, or `None`
    /// while it is still being handled. It is not handled again.
    Duplicate(Option<Outcome>),
}

/// Why a message was not accepted; nothing was stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The sender sends faster than the policy allows.
    #[error("too many messages; retry after {} s", retry_after_seconds(*.retry_after))]
    RateLimited { retry_after: Duration },
    /// The gateway cannot take messages now (store unreachable, shutting down).
    #[error("gateway unavailable: {0}")]
    Unavailable(String),
    /// The message itself is unusable: a field over its limits (see
    /// [`Inbound::check`]), or no channel of that name.
    #[error("{0}")]
    Invalid(#[from] InvalidInbound),
}

/// A wait as a person or an HTTP client reads it (`Retry-After`): whole
/// seconds, rounded up so that waiting that long is enough, and at least 1.
pub fn retry_after_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

impl SubmitError {
    /// The gateway could not take the message now: a platform that can offer
    /// it again later (Telegram) should. A rate-limited or invalid message is
    /// settled; offering it again changes nothing.
    pub fn try_again_later(&self) -> bool {
        matches!(self, SubmitError::Unavailable(_))
    }
}

/// Where adapters hand messages to the gateway.
#[async_trait]
pub trait InboundSink: Send + Sync + 'static {
    /// Stores the message (deduplicated by channel and message id) and queues
    /// it. Returns once it is durable, so the adapter may acknowledge it to the
    /// platform. With [`Delivery::Caller`](crate::Delivery), `replies` receives
    /// the reply.
    async fn submit(&self, inbound: Inbound, replies: Option<ReplySink>) -> Result<Submitted, SubmitError>;

    /// The newest stored message of each chat of `channel` received since
    /// `since`, newest chats first, at most `limit` chats: where a platform
    /// that does not redeliver what a stopped bot missed (Discord) can ask for
    /// the messages after it. Empty when the sink keeps nothing.
    async fn latest_per_chat(&self, _channel: &str, _since: DateTime<Utc>, _limit: usize) -> Vec<LatestMessage> {
        Vec::new()
    }
}

/// The newest stored message of a chat (see [`InboundSink::latest_per_chat`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestMessage {
    pub chat: ChatRef,
    pub message_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_reads_in_whole_seconds_rounded_up() {
        assert_eq!(retry_after_seconds(Duration::from_nanos(1_234_567_891)), 2);
        assert_eq!(retry_after_seconds(Duration::from_secs(3)), 3);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        let refused = SubmitError::RateLimited { retry_after: Duration::from_millis(2_500) };
        assert_eq!(refused.to_string(), "too many messages; retry after 3 s");
    }
}
