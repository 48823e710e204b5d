//! The gateway's durable inbox and outbox, in the tape database.
//!
//! This module gives the rows their meaning (messages, outcomes and replies
//! as JSON) and states what the pipeline may rely on; the statements are the
//! database backend's ([`GatewayTables`]: `db/sqlite/gateway.rs`,
//! `db/postgres/gateway.rs`), so a backend changes nothing here.
//!
//! Guarantees the pipeline builds on:
//! - [`GatewayStore::receive`] stores an inbound message once per channel and
//!   [`Inbound::key`] (the platform message id; for an edit, the id and the
//!   edit's version); a second delivery of the same key is reported as a
//!   duplicate with the first one's outcome (or none while it is running).
//! - [`GatewayStore::replace_waiting`] gives a message that has no outcome
//!   yet the text of its edit, so a restart runs the edited text.
//! - [`GatewayStore::finish`] marks a turn's messages done and stores its
//!   replies in the outbox in one transaction, so a reply exists exactly when
//!   its messages are done.
//! - [`GatewayStore::unfinished`] and [`GatewayStore::undelivered`] are what a
//!   restart resumes; a pending reply keeps the parts a stop left delivered
//!   ([`GatewayStore::parts_delivered`]), so they are not sent again.
//! - [`GatewayStore::begin_file`] tells a file already delivered under its
//!   key (by a run of the turn before a restart) from one to send now; one
//!   whose sending was cut by a crash (no answer recorded) is sent again.
//! - A live message kept for a reply key ([`LiveMessages::remember`]) is
//!   found by [`GatewayStore::live_message`] until the reply is recorded
//!   delivered or undeliverable, which forgets it in the same transaction.

use crate::db::gateway::{InboxRow, LiveRow, NewFile, NewInbound, NewReply, OutboxRow, ReplyState};
use crate::db::{Flush, GatewayTables};
use crate::gateway::outbound::{LiveMessage, LiveMessages};
use bub_channel::{Delivery, Inbound, Outbound, Outcome, OutcomeStatus};
use chrono::Utc;
use std::sync::Arc;

/// The store failed; the message it was about is not acknowledged.
#[derive(Debug, thiserror::Error)]
#[error("gateway store ({operation}): {source}")]
pub struct StoreError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

impl StoreError {
    /// Whether the same write may pass later: the database failed (a
    /// dropped connection, a restart, a busy file), rather than refused
    /// for good (the rows are another replica's now, the database was
    /// closed for a stop, a value could not be encoded).
    pub(crate) fn may_pass_later(&self) -> bool {
        self.source.downcast_ref::<crate::db::DbError>().is_some_and(crate::db::DbError::may_pass_later)
    }
}

/// How long a write the pipeline cannot do without (a turn's outcome, a
/// delivery's record) is tried again while the database fails: longer than
/// a database restart or a failover, short of hiding an outage.
pub(crate) const STORE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `write` until it passes, fails for good, or [`STORE_PATIENCE`] is
/// spent, pausing longer each time. For writes that are the same when done
/// twice (an outcome stored under its claim, a delivery recorded by key):
/// one whose reply was lost may have committed.
pub(crate) async fn patiently<T, F, Fut>(what: &'static str, mut write: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let deadline = tokio::time::Instant::now() + STORE_PATIENCE;
    let mut pause = std::time::Duration::from_millis(100);
    loop {
        match write().await {
            Err(error) if error.may_pass_later() && tokio::time::Instant::now() + pause < deadline => {
                tracing::warn!(%error, what, retry_in = ?pause, "the store failed; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
            done => return done,
        }
    }
}

pub(crate) fn failed<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
) -> impl Fn(E) -> StoreError {
    move |source| StoreError { operation, source: Box::new(source) }
}

/// What [`GatewayStore::receive`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// First time: stored under this sequence number.
    New(i64),
    /// Seen before; its outcome when it is done.
    Duplicate(Option<Outcome>),
}

/// A stored message that has no outcome yet.
#[derive(Debug, Clone)]
pub struct Unfinished {
    pub seq: i64,
    pub inbound: Inbound,
    /// The turn it was steered into, if any.
    pub turn: Option<String>,
    pub session: Option<String>,
}

impl PendingReply {
    /// A pending outbox row, decoded.
    pub(crate) fn from_row(row: OutboxRow) -> StoreResult<PendingReply> {
        let outbound = serde_json::from_str(&row.outbound).map_err(failed("decode reply"))?;
        let sent = match row.platform_ids {
            Some(ids) => serde_json::from_str(&ids).map_err(failed("decode ids"))?,
            None => Vec::new(),
        };
        Ok(PendingReply { channel: row.channel, outbound, sent })
    }
}

impl Unfinished {
    /// An inbox row, decoded.
    pub(crate) fn from_row(row: InboxRow) -> StoreResult<Unfinished> {
        Ok(Unfinished {
            seq: row.seq,
            inbound: serde_json::from_str(&row.inbound).map_err(failed("decode inbound"))?,
            turn: row.turn,
            session: row.session,
        })
    }
}

/// A reply waiting to be sent.
#[derive(Debug, Clone)]
pub struct PendingReply {
    pub channel: String,
    pub outbound: Outbound,
    /// The platform ids of its first parts, already delivered (a stop came
    /// between its parts): they are not sent again.
    pub sent: Vec<String>,
}

/// The inbox and outbox tables of the bub database.
#[derive(Clone)]
pub struct GatewayStore {
    tables: Arc<dyn GatewayTables>,
}

pub(crate) fn now() -> String {
    Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// When a received message must be on the disk. A message answered to the
/// caller that waits for it (webhook `sync`, `sse`) has been acknowledged to
/// nobody yet: if a power cut takes it, the caller has no answer (or was told
/// to send it again) and sends it again, and the turn's first synced write
/// (its fork's merge, or a refusal's outcome) carries it to the disk first.
/// Any other message was acknowledged to its platform, and is synced before
/// the gateway goes on.
fn receive_flush(delivery: Delivery) -> Flush {
    match delivery {
        Delivery::Caller => Flush::WithNext,
        Delivery::Channel => Flush::Now,
    }
}

/// When a turn's outcome must be on the disk (see [`GatewayStore::finish`]).
fn finish_flush(status: OutcomeStatus, queues_replies: bool) -> Flush {
    match (queues_replies, status) {
        (false, OutcomeStatus::Replied) => Flush::WithNext,
        _ => Flush::Now,
    }
}

impl GatewayStore {
    /// The gateway tables of this database (created by its migrations): a
    /// `HomeStore`, `SqliteTapeStore`, `SqliteDb`, `PgTapeStore` or `PgDb`
    /// gives those of its database.
    pub fn new(db: impl Into<Arc<dyn GatewayTables>>) -> GatewayStore {
        GatewayStore { tables: db.into() }
    }

    /// The database's tables (the admin console reads its audit log and chats here).
    pub(crate) fn tables(&self) -> &Arc<dyn GatewayTables> {
        &self.tables
    }

    /// The pairing table of the same database.
    pub fn pairing(&self) -> super::pairing::PairingStore {
        super::pairing::PairingStore::new(self.tables.clone())
    }

    /// Stores `inbound`, as a message of `session`, unless its channel
    /// already stored its key ([`Inbound::key`]).
    pub async fn receive(&self, inbound: &Inbound, session: &str) -> StoreResult<Received> {
        let json = serde_json::to_string(inbound).map_err(failed("encode inbound"))?;
        let key = inbound.key().into_owned();
        let message = NewInbound {
            channel: inbound.channel.clone(),
            message_id: key.clone(),
            inbound: json,
            session: session.to_string(),
            received_at: now(),
        };
        let inserted = self
            .tables
            .insert_inbound(message, receive_flush(inbound.delivery))
            .await
            .map_err(failed("store inbound"))?;
        if let Some(seq) = inserted {
            return Ok(Received::New(seq));
        }
        Ok(Received::Duplicate(self.outcome(&inbound.channel, &key).await?))
    }

    /// The stored message `message_id` of `channel` (the message itself, not
    /// one of its edits), if the gateway ever received it.
    pub async fn original(&self, channel: &str, message_id: &str) -> StoreResult<Option<Inbound>> {
        match self.tables.inbound(channel, message_id).await.map_err(failed("read inbound"))? {
            Some(text) => Ok(Some(serde_json::from_str(&text).map_err(failed("decode inbound"))?)),
            None => Ok(None),
        }
    }

    /// Stores `inbound` as the message of row `seq`, which has no outcome
    /// yet: an edit that arrived before its turn (a restart runs the new text).
    pub async fn replace_waiting(&self, seq: i64, inbound: &Inbound) -> StoreResult<()> {
        let json = serde_json::to_string(inbound).map_err(failed("encode inbound"))?;
        self.tables.replace_inbound(seq, &json).await.map_err(failed("replace inbound"))
    }

    /// The outcome of a stored message (by its [`Inbound::key`]), once it is done.
    pub async fn outcome(&self, channel: &str, message_id: &str) -> StoreResult<Option<Outcome>> {
        match self.tables.outcome(channel, message_id).await.map_err(failed("read outcome"))? {
            Some(text) => Ok(Some(serde_json::from_str(&text).map_err(failed("decode outcome"))?)),
            None => Ok(None),
        }
    }

    /// Marks messages as part of `turn` in `session`: messages steered into a
    /// running turn, which its marker on the tape does not list.
    pub async fn start_turn(&self, seqs: &[i64], session: &str, turn: &str) -> StoreResult<()> {
        self.tables.start_turn(seqs, session, turn).await.map_err(failed("start turn"))
    }

    /// Gives messages their final outcome and queues `replies`, atomically.
    ///
    /// A replied turn's outcome with no reply to queue (its answer went to
    /// a waiting caller) does not wait for the disk: the turn's marker is on
    /// its tape, synced when the fork merged, and a restart after a power
    /// cut rebuilds the outcome from it (see `recovery`). Everything else
    /// (a queued reply, which must not be sent twice, a refusal or failure
    /// with no marker) is synced before this returns.
    pub async fn finish(&self, seqs: &[i64], outcome: &Outcome, replies: &[PendingReply]) -> StoreResult<()> {
        let flush = finish_flush(outcome.status, !replies.is_empty());
        let outcome_json = serde_json::to_string(outcome).map_err(failed("encode outcome"))?;
        let mut rows = Vec::with_capacity(replies.len());
        for reply in replies {
            let json = serde_json::to_string(&reply.outbound).map_err(failed("encode reply"))?;
            rows.push(NewReply {
                key: reply.outbound.idempotency_key.clone(),
                channel: reply.channel.clone(),
                outbound: json,
            });
        }
        self.tables.finish(seqs, &outcome_json, rows, &now(), flush).await.map_err(failed("finish turn"))
    }

    /// Records that a reply reached the platform.
    pub async fn delivered(&self, key: &str, platform_ids: &[String]) -> StoreResult<()> {
        let ids = serde_json::to_string(platform_ids).map_err(failed("encode ids"))?;
        self.tables
            .set_reply_state(key, ReplyState::Delivered, Some(&ids), None, &now())
            .await
            .map_err(failed("update reply"))
    }

    /// Records the parts of a reply delivered before a stop; the rest stays
    /// pending for the next start.
    pub async fn parts_delivered(&self, key: &str, platform_ids: &[String]) -> StoreResult<()> {
        let ids = serde_json::to_string(platform_ids).map_err(failed("encode ids"))?;
        self.tables.parts_delivered(key, &ids).await.map_err(failed("update reply"))
    }

    /// Records that a reply cannot be delivered (the platform refused it for good).
    pub async fn undeliverable(&self, key: &str, error: &str) -> StoreResult<()> {
        self.tables
            .set_reply_state(key, ReplyState::Failed, None, Some(error), &now())
            .await
            .map_err(failed("update reply"))
    }

    /// The platform id of file `key` if it was delivered already; else it is
    /// recorded (`file`: its description, for the row) as being sent now.
    pub async fn begin_file(
        &self,
        key: &str,
        channel: &str,
        session: &str,
        file: &serde_json::Value,
    ) -> StoreResult<Option<String>> {
        let row = NewFile {
            key: key.to_string(),
            channel: channel.to_string(),
            session: session.to_string(),
            file: file.to_string(),
            at: now(),
        };
        self.tables.begin_file(row).await.map_err(failed("record file"))
    }

    /// Records that a file reached the chat as message `platform_id`.
    pub async fn file_delivered(&self, key: &str, platform_id: &str) -> StoreResult<()> {
        self.tables
            .set_file_state(key, ReplyState::Delivered, Some(platform_id), None, &now())
            .await
            .map_err(failed("update file"))
    }

    /// Records that a file was not sent (refused, or the gateway stopped
    /// first); a later run of the turn may send it.
    pub async fn file_not_sent(&self, key: &str, error: &str) -> StoreResult<()> {
        self.tables
            .set_file_state(key, ReplyState::Failed, None, Some(error), &now())
            .await
            .map_err(failed("update file"))
    }

    /// The live message kept for the reply keyed `key` (sent before a
    /// restart, and not yet recorded delivered).
    pub async fn live_message(&self, key: &str) -> StoreResult<Option<LiveMessage>> {
        let Some(row) = self.tables.live(key).await.map_err(failed("read live message"))? else { return Ok(None) };
        Ok(Some(LiveMessage {
            channel: row.channel,
            chat: serde_json::from_str(&row.chat).map_err(failed("decode live message chat"))?,
            message_id: row.message_id,
            text: row.text,
        }))
    }

    /// Forgets live messages sent before `before` whose reply never
    /// finished (a turn that ended without a reply): a restart long after
    /// would not edit them anyway. How many went.
    pub async fn forget_live_before(&self, before: chrono::DateTime<Utc>) -> StoreResult<usize> {
        let before = before.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        self.tables.forget_live_before(&before).await.map_err(failed("forget live messages"))
    }

    /// The newest message of each chat of `channel` received since `since`,
    /// newest chats first, at most `limit` (see `InboundSink::latest_per_chat`).
    pub async fn latest_per_chat(
        &self,
        channel: &str,
        since: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> StoreResult<Vec<bub_channel::LatestMessage>> {
        let since = since.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.tables.latest_per_chat(channel, &since, limit).await.map_err(failed("read latest messages"))?;
        let mut out = Vec::with_capacity(rows.len());
        for text in rows {
            let inbound: Inbound = serde_json::from_str(&text).map_err(failed("decode inbound"))?;
            out.push(bub_channel::LatestMessage { chat: inbound.chat, message_id: inbound.message_id });
        }
        Ok(out)
    }

    /// Messages without an outcome, oldest first.
    pub async fn unfinished(&self) -> StoreResult<Vec<Unfinished>> {
        let rows = self.tables.unfinished().await.map_err(failed("read unfinished"))?;
        rows.into_iter().map(Unfinished::from_row).collect()
    }

    /// Replies stored but not yet delivered, oldest first.
    pub async fn undelivered(&self) -> StoreResult<Vec<PendingReply>> {
        let rows = self.tables.undelivered().await.map_err(failed("read outbox"))?;
        rows.into_iter().map(PendingReply::from_row).collect()
    }

    /// The database answers (for `/readyz`).
    pub async fn ping(&self) -> StoreResult<()> {
        self.tables.ping().await.map_err(failed("ping"))
    }
}

#[async_trait::async_trait]
impl LiveMessages for GatewayStore {
    async fn remember(&self, key: &str, message: &LiveMessage) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let row = LiveRow {
            channel: message.channel.clone(),
            chat: serde_json::to_string(&message.chat)?,
            message_id: message.message_id.clone(),
            text: message.text.clone(),
        };
        self.tables.remember_live(key, row, &now()).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::DbError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_database_failed_is_tried_again_and_one_refused_for_good_is_not() {
        let attempts = AtomicUsize::new(0);
        let stored = patiently("test", || {
            let n = attempts.fetch_add(1, Ordering::Relaxed);
            async move {
                match n {
                    0 | 1 => Err(failed("finish turn")(DbError::Postgres(sqlx_core::Error::PoolTimedOut))),
                    n => Ok(n),
                }
            }
        })
        .await;
        assert_eq!(stored.unwrap(), 2, "passes on the third attempt");

        let attempts = AtomicUsize::new(0);
        let refused: StoreResult<()> = patiently("test", || {
            attempts.fetch_add(1, Ordering::Relaxed);
            async { Err(failed("finish turn")(DbError::NotClaimed)) }
        })
        .await;
        assert!(refused.is_err());
        assert_eq!(attempts.load(Ordering::Relaxed), 1, "another replica's rows: not tried again");

        let attempts = AtomicUsize::new(0);
        let outage: StoreResult<()> = patiently("test", || {
            attempts.fetch_add(1, Ordering::Relaxed);
            async { Err(failed("finish turn")(DbError::Postgres(sqlx_core::Error::PoolTimedOut))) }
        })
        .await;
        assert!(outage.is_err(), "gives up once its patience is spent");
        assert!(attempts.load(Ordering::Relaxed) > 3);
    }

    /// Only what a power cut cannot lose or double waits for the next sync:
    /// a caller's message before its answer, a replied turn's outcome
    /// without a queued reply (rebuilt from the turn's marker).
    #[test]
    fn only_writes_that_can_be_rebuilt_or_resent_defer_their_sync() {
        assert_eq!(receive_flush(Delivery::Caller), Flush::WithNext);
        assert_eq!(receive_flush(Delivery::Channel), Flush::Now);
        assert_eq!(finish_flush(OutcomeStatus::Replied, false), Flush::WithNext);
        assert_eq!(finish_flush(OutcomeStatus::Replied, true), Flush::Now, "a queued reply must not be sent twice");
        for status in [OutcomeStatus::Refused, OutcomeStatus::Failed, OutcomeStatus::Recorded, OutcomeStatus::Dropped] {
            assert_eq!(finish_flush(status, false), Flush::Now, "{status:?} has no marker to rebuild it from");
        }
    }
}
