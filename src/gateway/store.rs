//! The gateway's durable inbox and outbox, in the tape database.
//!
//! Guarantees the pipeline builds on:
//! - [`GatewayStore::receive`] stores an inbound message once per channel and
//!   platform message id; a second delivery of the same id is reported as a
//!   duplicate with the first one's outcome (or none while it is running).
//! - [`GatewayStore::finish`] marks a turn's messages done and stores its
//!   replies in the outbox in one transaction, so a reply exists exactly when
//!   its messages are done.
//! - [`GatewayStore::unfinished`] and [`GatewayStore::undelivered`] are what a
//!   restart resumes; a pending reply keeps the parts a stop left delivered
//!   ([`GatewayStore::parts_delivered`]), so they are not sent again.

use crate::tape::SqliteTapeStore;
use bub_channel::{Inbound, Outbound, Outcome};
use chrono::Utc;
use rusqlite::{OptionalExtension, params};

/// The store failed; the message it was about is not acknowledged.
#[derive(Debug, thiserror::Error)]
#[error("gateway store ({operation}): {source}")]
pub struct StoreError {
    operation: &'static str,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

pub(crate) type StoreResult<T> = Result<T, StoreError>;

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
    db: SqliteTapeStore,
}

pub(crate) fn now() -> String {
    Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl GatewayStore {
    /// The gateway tables of this database (created by its migrations).
    pub fn new(db: SqliteTapeStore) -> GatewayStore {
        GatewayStore { db }
    }

    /// The pairing table of the same database.
    pub fn pairing(&self) -> super::pairing::PairingStore {
        super::pairing::PairingStore::new(self.db.clone())
    }

    /// Stores `inbound`, as a message of `session`, unless its channel
    /// already stored its message id.
    pub async fn receive(&self, inbound: &Inbound, session: &str) -> StoreResult<Received> {
        let json = serde_json::to_string(inbound).map_err(failed("encode inbound"))?;
        let (channel, message_id, session, received_at) =
            (inbound.channel.clone(), inbound.message_id.clone(), session.to_string(), now());
        let inserted: Option<i64> = self
            .db
            .write(Box::new(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO gateway_inbox (channel, message_id, inbound, state, session, received_at) \
                     VALUES (?1, ?2, ?3, 'queued', ?4, ?5) ON CONFLICT (channel, message_id) DO NOTHING \
                     RETURNING seq",
                )?
                .query_row(params![channel, message_id, json, session, received_at], |row| row.get(0))
                .optional()
            }))
            .await
            .map_err(failed("store inbound"))?;
        if let Some(seq) = inserted {
            return Ok(Received::New(seq));
        }
        Ok(Received::Duplicate(self.outcome(&inbound.channel, &inbound.message_id).await?))
    }

    /// The outcome of a stored message, once it is done.
    pub async fn outcome(&self, channel: &str, message_id: &str) -> StoreResult<Option<Outcome>> {
        let (channel, message_id) = (channel.to_string(), message_id.to_string());
        let text: Option<Option<String>> = self
            .db
            .on_reader(move |conn| {
                conn.prepare_cached("SELECT outcome FROM gateway_inbox WHERE channel = ?1 AND message_id = ?2")?
                    .query_row([channel, message_id], |row| row.get(0))
                    .optional()
            })
            .await
            .map_err(failed("read outcome"))?
            .map_err(failed("read outcome"))?;
        match text.flatten() {
            Some(text) => Ok(Some(serde_json::from_str(&text).map_err(failed("decode outcome"))?)),
            None => Ok(None),
        }
    }

    /// Marks messages as part of `turn` in `session`: messages steered into a
    /// running turn, which its marker on the tape does not list.
    pub async fn start_turn(&self, seqs: &[i64], session: &str, turn: &str) -> StoreResult<()> {
        let (seqs, session, turn) = (seqs.to_vec(), session.to_string(), turn.to_string());
        self.db
            .write(Box::new(move |conn| {
                let mut update = conn.prepare_cached(
                    "UPDATE gateway_inbox SET state = 'running', session = ?1, turn = ?2 WHERE seq = ?3",
                )?;
                for seq in &seqs {
                    update.execute(params![session, turn, seq])?;
                }
                Ok(())
            }))
            .await
            .map_err(failed("start turn"))
    }

    /// Gives messages their final outcome and queues `replies`, atomically.
    pub async fn finish(&self, seqs: &[i64], outcome: &Outcome, replies: &[PendingReply]) -> StoreResult<()> {
        let outcome = serde_json::to_string(outcome).map_err(failed("encode outcome"))?;
        let mut rows = Vec::with_capacity(replies.len());
        for reply in replies {
            let json = serde_json::to_string(&reply.outbound).map_err(failed("encode reply"))?;
            rows.push((reply.outbound.idempotency_key.clone(), reply.channel.clone(), json));
        }
        let (seqs, now) = (seqs.to_vec(), now());
        self.db
            .write(Box::new(move |conn| {
                let mut done = conn.prepare_cached(
                    "UPDATE gateway_inbox SET state = 'done', outcome = ?1, finished_at = ?2 WHERE seq = ?3",
                )?;
                for seq in &seqs {
                    done.execute(params![outcome, now, seq])?;
                }
                let mut queue = conn.prepare_cached(
                    "INSERT INTO gateway_outbox (key, channel, outbound, state, created_at) \
                     VALUES (?1, ?2, ?3, 'pending', ?4) ON CONFLICT (key) DO NOTHING",
                )?;
                for (key, channel, json) in &rows {
                    queue.execute(params![key, channel, json, now])?;
                }
                Ok(())
            }))
            .await
            .map_err(failed("finish turn"))
    }

    /// Records that a reply reached the platform.
    pub async fn delivered(&self, key: &str, platform_ids: &[String]) -> StoreResult<()> {
        let ids = serde_json::to_string(platform_ids).map_err(failed("encode ids"))?;
        self.set_reply_state(key, "delivered", Some(ids), None).await
    }

    /// Records the parts of a reply delivered before a stop; the rest stays
    /// pending for the next start.
    pub async fn parts_delivered(&self, key: &str, platform_ids: &[String]) -> StoreResult<()> {
        let ids = serde_json::to_string(platform_ids).map_err(failed("encode ids"))?;
        let key = key.to_string();
        self.db
            .write(Box::new(move |conn| {
                conn.prepare_cached("UPDATE gateway_outbox SET platform_ids = ?1 WHERE key = ?2 AND state = 'pending'")?
                    .execute(params![ids, key])
                    .map(|_| ())
            }))
            .await
            .map_err(failed("update reply"))
    }

    /// Records that a reply cannot be delivered (the platform refused it for good).
    pub async fn undeliverable(&self, key: &str, error: &str) -> StoreResult<()> {
        self.set_reply_state(key, "failed", None, Some(error.to_string())).await
    }

    async fn set_reply_state(
        &self,
        key: &str,
        state: &str,
        ids: Option<String>,
        error: Option<String>,
    ) -> StoreResult<()> {
        let (state, finished_at, key) = (state.to_string(), now(), key.to_string());
        self.db
            .write(Box::new(move |conn| {
                conn.prepare_cached(
                    "UPDATE gateway_outbox SET state = ?1, platform_ids = ?2, error = ?3, finished_at = ?4 \
                     WHERE key = ?5",
                )?
                .execute(params![state, ids, error, finished_at, key])
                .map(|_| ())
            }))
            .await
            .map_err(failed("update reply"))
    }

    /// The newest message of each chat of `channel` received since `since`,
    /// newest chats first, at most `limit` (see `InboundSink::latest_per_chat`).
    pub async fn latest_per_chat(
        &self,
        channel: &str,
        since: chrono::DateTime<chrono::Utc>,
        limit: usize,
    ) -> StoreResult<Vec<bub_channel::LatestMessage>> {
        let (channel, since) = (channel.to_string(), since.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .on_reader(move |conn| -> StoreResult<Vec<bub_channel::LatestMessage>> {
                let read = failed("read latest messages");
                // The newest row of each chat: the greatest seq per chat id.
                let mut select = conn
                    .prepare_cached(
                        "SELECT inbound FROM gateway_inbox WHERE seq IN ( \
                             SELECT max(seq) FROM gateway_inbox WHERE channel = ?1 AND received_at >= ?2 \
                             GROUP BY json_extract(inbound, '$.chat.id')) \
                         ORDER BY seq DESC LIMIT ?3",
                    )
                    .map_err(&read)?;
                let mut rows = select.query(rusqlite::params![channel, since, limit]).map_err(&read)?;
                let mut out = Vec::new();
                while let Some(row) = rows.next().map_err(&read)? {
                    let text: String = row.get(0).map_err(&read)?;
                    let inbound: Inbound = serde_json::from_str(&text).map_err(failed("decode inbound"))?;
                    out.push(bub_channel::LatestMessage { chat: inbound.chat, message_id: inbound.message_id });
                }
                Ok(out)
            })
            .await
            .map_err(failed("read latest messages"))?
    }

    /// Messages without an outcome, oldest first.
    pub async fn unfinished(&self) -> StoreResult<Vec<Unfinished>> {
        self.db
            .on_reader(|conn| -> StoreResult<Vec<Unfinished>> {
                let read = failed("read unfinished");
                let mut select = conn
                    .prepare_cached(
                        "SELECT seq, inbound, turn, session FROM gateway_inbox WHERE state <> 'done' ORDER BY seq",
                    )
                    .map_err(&read)?;
                let mut rows = select.query([]).map_err(&read)?;
                let mut out = Vec::new();
                while let Some(row) = rows.next().map_err(&read)? {
                    let text: String = row.get(1).map_err(&read)?;
                    out.push(Unfinished {
                        seq: row.get(0).map_err(&read)?,
                        inbound: serde_json::from_str(&text).map_err(failed("decode inbound"))?,
                        turn: row.get(2).map_err(&read)?,
                        session: row.get(3).map_err(&read)?,
                    });
                }
                Ok(out)
            })
            .await
            .map_err(failed("read unfinished"))?
    }

    /// Replies stored but not yet delivered, oldest first.
    pub async fn undelivered(&self) -> StoreResult<Vec<PendingReply>> {
        self.db
            .on_reader(|conn| -> StoreResult<Vec<PendingReply>> {
                let read = failed("read outbox");
                let mut select = conn
                    .prepare_cached(
                        "SELECT channel, outbound, platform_ids FROM gateway_outbox WHERE state = 'pending' \
                         ORDER BY created_at",
                    )
                    .map_err(&read)?;
                let mut rows = select.query([]).map_err(&read)?;
                let mut out = Vec::new();
                while let Some(row) = rows.next().map_err(&read)? {
                    let text: String = row.get(1).map_err(&read)?;
                    let outbound = serde_json::from_str(&text).map_err(failed("decode reply"))?;
                    let sent: Option<String> = row.get(2).map_err(&read)?;
                    let sent = match sent {
                        Some(ids) => serde_json::from_str(&ids).map_err(failed("decode ids"))?,
                        None => Vec::new(),
                    };
                    out.push(PendingReply { channel: row.get(0).map_err(&read)?, outbound, sent });
                }
                Ok(out)
            })
            .await
            .map_err(failed("read outbox"))?
    }

    /// The database answers (for `/readyz`).
    pub async fn ping(&self) -> StoreResult<()> {
        self.db
            .on_reader(|conn| {
                conn.prepare_cached("SELECT count(*) FROM gateway_outbox WHERE state = 'pending'")?
                    .query_row([], |row| row.get::<_, i64>(0))
            })
            .await
            .map_err(failed("ping"))?
            .map(|_| ())
            .map_err(failed("ping"))
    }
}
