//! The gateway's inbox and outbox in SQLite: [`GatewayTables`] for
//! [`SqliteDb`]. The pairing statements are in `pairing`, the audit log's in
//! `audit`; the rows' meaning and the pipeline's guarantees are
//! `gateway::store`'s.

use super::SqliteDb;
use super::writer::Work;
use super::{audit, pairing};
use crate::db::gateway::{
    AuditRow, ChatRow, GatewayTables, InboxRow, LiveRow, NewAudit, NewFile, NewInbound, NewReply, OutboxRow,
    PairingApproval, PairingRequest, PairingRequested, PairingRow, ReplyState,
};
use crate::db::{DbError, Flush};
use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

/// [`GatewayTables::chats`]: the distinct sessions walked one probe of
/// `gateway_inbox_sessions` each (a loose index scan: SQLite has no skip
/// scan without statistics), each session's newest row found by one more
/// probe, the newest `?2` of channel `?1` (all when NULL) kept, and only
/// those counted. `MATERIALIZED` keeps the counts out of the sort: they are
/// taken for the rows kept, not for every session.
const CHATS_SQL: &str = "\
WITH RECURSIVE sessions (session) AS (
    SELECT min(session) FROM gateway_inbox
    UNION ALL
    SELECT (SELECT min(session) FROM gateway_inbox n WHERE n.session > s.session)
    FROM sessions s WHERE s.session IS NOT NULL
), latest AS MATERIALIZED (
    SELECT s.session, i.seq, i.channel, i.inbound, i.received_at
    FROM sessions s
    JOIN gateway_inbox i ON i.seq = (SELECT max(seq) FROM gateway_inbox l WHERE l.session = s.session)
    WHERE s.session IS NOT NULL AND (?1 IS NULL OR i.channel = ?1)
    ORDER BY i.seq DESC LIMIT ?2
)
SELECT channel, session, inbound, received_at,
    (SELECT count(*) FROM gateway_inbox c WHERE c.session = latest.session),
    (SELECT count(*) FROM gateway_inbox u WHERE u.session = latest.session AND u.state <> 'done')
FROM latest ORDER BY seq DESC";

#[async_trait]
impl GatewayTables for SqliteDb {
    async fn insert_inbound(&self, message: NewInbound, flush: Flush) -> Result<Option<i64>, DbError> {
        let work: Work<Option<i64>> = Box::new(move |conn| {
            let NewInbound { channel, message_id, inbound, session, received_at } = &message;
            conn.prepare_cached(
                "INSERT INTO gateway_inbox (channel, message_id, inbound, state, session, received_at) \
                 VALUES (?1, ?2, ?3, 'queued', ?4, ?5) ON CONFLICT (channel, message_id) DO NOTHING \
                 RETURNING seq",
            )?
            .query_row(params![channel, message_id, inbound, session, received_at], |row| row.get(0))
            .optional()
        });
        self.write_with(work, flush).await
    }

    async fn inbound(&self, channel: &str, message_id: &str) -> Result<Option<String>, DbError> {
        let (channel, message_id) = (channel.to_string(), message_id.to_string());
        Ok(self
            .read(move |conn| {
                conn.prepare_cached("SELECT inbound FROM gateway_inbox WHERE channel = ?1 AND message_id = ?2")?
                    .query_row([channel, message_id], |row| row.get(0))
                    .optional()
            })
            .await??)
    }

    async fn replace_inbound(&self, seq: i64, inbound: &str) -> Result<(), DbError> {
        let inbound = inbound.to_string();
        self.write(Box::new(move |conn| {
            conn.prepare_cached("UPDATE gateway_inbox SET inbound = ?1 WHERE seq = ?2 AND state <> 'done'")?
                .execute(params![inbound, seq])
                .map(|_| ())
        }))
        .await
    }

    async fn outcome(&self, channel: &str, message_id: &str) -> Result<Option<String>, DbError> {
        let (channel, message_id) = (channel.to_string(), message_id.to_string());
        let outcome: Option<Option<String>> = self
            .read(move |conn| {
                conn.prepare_cached("SELECT outcome FROM gateway_inbox WHERE channel = ?1 AND message_id = ?2")?
                    .query_row([channel, message_id], |row| row.get(0))
                    .optional()
            })
            .await??;
        Ok(outcome.flatten())
    }

    async fn start_turn(&self, seqs: &[i64], session: &str, turn: &str) -> Result<(), DbError> {
        let (seqs, session, turn) = (seqs.to_vec(), session.to_string(), turn.to_string());
        self.write(Box::new(move |conn| {
            let mut update = conn
                .prepare_cached("UPDATE gateway_inbox SET state = 'running', session = ?1, turn = ?2 WHERE seq = ?3")?;
            for seq in &seqs {
                update.execute(params![session, turn, seq])?;
            }
            Ok(())
        }))
        .await
    }

    async fn finish(
        &self,
        seqs: &[i64],
        outcome: &str,
        replies: Vec<NewReply>,
        at: &str,
        flush: Flush,
    ) -> Result<(), DbError> {
        let (seqs, outcome, at) = (seqs.to_vec(), outcome.to_string(), at.to_string());
        let work: Work<()> = Box::new(move |conn| {
            let mut done = conn.prepare_cached(
                "UPDATE gateway_inbox SET state = 'done', outcome = ?1, finished_at = ?2 WHERE seq = ?3",
            )?;
            for seq in &seqs {
                done.execute(params![outcome, at, seq])?;
            }
            let mut queue = conn.prepare_cached(
                "INSERT INTO gateway_outbox (key, channel, outbound, state, created_at) \
                 VALUES (?1, ?2, ?3, 'pending', ?4) ON CONFLICT (key) DO NOTHING",
            )?;
            for reply in &replies {
                queue.execute(params![reply.key, reply.channel, reply.outbound, at])?;
            }
            Ok(())
        });
        self.write_with(work, flush).await
    }

    async fn parts_delivered(&self, key: &str, platform_ids: &str) -> Result<(), DbError> {
        let (key, ids) = (key.to_string(), platform_ids.to_string());
        self.write(Box::new(move |conn| {
            conn.prepare_cached("UPDATE gateway_outbox SET platform_ids = ?1 WHERE key = ?2 AND state = 'pending'")?
                .execute(params![ids, key])
                .map(|_| ())
        }))
        .await
    }

    async fn set_reply_state(
        &self,
        key: &str,
        state: ReplyState,
        platform_ids: Option<&str>,
        error: Option<&str>,
        at: &str,
    ) -> Result<(), DbError> {
        let (key, ids, error, at) =
            (key.to_string(), platform_ids.map(str::to_string), error.map(str::to_string), at.to_string());
        self.write(Box::new(move |conn| {
            conn.prepare_cached(
                "UPDATE gateway_outbox SET state = ?1, platform_ids = ?2, error = ?3, finished_at = ?4 \
                 WHERE key = ?5",
            )?
            .execute(params![state.as_str(), ids, error, at, key])?;
            conn.prepare_cached("DELETE FROM gateway_live WHERE key = ?1")?.execute([&key]).map(|_| ())
        }))
        .await
    }

    async fn remember_live(&self, key: &str, row: LiveRow, at: &str) -> Result<(), DbError> {
        let (key, at) = (key.to_string(), at.to_string());
        self.write(Box::new(move |conn| {
            let LiveRow { channel, chat, message_id, text } = &row;
            conn.prepare_cached(
                "INSERT INTO gateway_live (key, channel, chat, message_id, text, sent_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (key) DO UPDATE SET \
                 channel = excluded.channel, chat = excluded.chat, message_id = excluded.message_id, \
                 text = excluded.text, sent_at = excluded.sent_at",
            )?
            .execute(params![key, channel, chat, message_id, text, at])
            .map(|_| ())
        }))
        .await
    }

    async fn begin_file(&self, file: NewFile) -> Result<Option<String>, DbError> {
        self.write(Box::new(move |conn| {
            let NewFile { key, channel, session, file, at } = &file;
            let delivered: Option<Option<String>> = conn
                .prepare_cached("SELECT platform_id FROM gateway_files WHERE key = ?1 AND state = 'delivered'")?
                .query_row([key], |row| row.get(0))
                .optional()?;
            if let Some(platform_id) = delivered {
                return Ok(Some(platform_id.unwrap_or_default()));
            }
            conn.prepare_cached(
                "INSERT INTO gateway_files (key, channel, session, file, state, created_at) \
                 VALUES (?1, ?2, ?3, ?4, 'sending', ?5) ON CONFLICT (key) DO UPDATE \
                 SET state = 'sending', file = excluded.file, error = NULL, finished_at = NULL",
            )?
            .execute(params![key, channel, session, file, at])?;
            Ok(None)
        }))
        .await
    }

    async fn set_file_state(
        &self,
        key: &str,
        state: ReplyState,
        platform_id: Option<&str>,
        error: Option<&str>,
        at: &str,
    ) -> Result<(), DbError> {
        let (key, id, error, at) =
            (key.to_string(), platform_id.map(str::to_string), error.map(str::to_string), at.to_string());
        self.write(Box::new(move |conn| {
            conn.prepare_cached(
                "UPDATE gateway_files SET state = ?1, platform_id = ?2, error = ?3, finished_at = ?4 WHERE key = ?5",
            )?
            .execute(params![state.as_str(), id, error, at, key])
            .map(|_| ())
        }))
        .await
    }

    async fn live(&self, key: &str) -> Result<Option<LiveRow>, DbError> {
        let key = key.to_string();
        Ok(self
            .read(move |conn| {
                conn.prepare_cached("SELECT channel, chat, message_id, text FROM gateway_live WHERE key = ?1")?
                    .query_row([key], |row| {
                        Ok(LiveRow {
                            channel: row.get(0)?,
                            chat: row.get(1)?,
                            message_id: row.get(2)?,
                            text: row.get(3)?,
                        })
                    })
                    .optional()
            })
            .await??)
    }

    async fn forget_live_before(&self, before: &str) -> Result<usize, DbError> {
        let before = before.to_string();
        self.write(Box::new(move |conn| {
            conn.prepare_cached("DELETE FROM gateway_live WHERE sent_at < ?1")?.execute([&before])
        }))
        .await
    }

    async fn latest_per_chat(&self, channel: &str, since: &str, limit: i64) -> Result<Vec<String>, DbError> {
        let (channel, since) = (channel.to_string(), since.to_string());
        Ok(self
            .read(move |conn| -> rusqlite::Result<Vec<String>> {
                // The newest row of each chat (and thread): the greatest seq per chat and thread id.
                conn.prepare_cached(
                    "SELECT inbound FROM gateway_inbox WHERE seq IN ( \
                         SELECT max(seq) FROM gateway_inbox WHERE channel = ?1 AND received_at >= ?2 \
                         AND json_extract(inbound, '$.edit') IS NULL \
                         GROUP BY json_extract(inbound, '$.chat.id'), json_extract(inbound, '$.chat.thread_id')) \
                     ORDER BY seq DESC LIMIT ?3",
                )?
                .query_map(params![channel, since, limit], |row| row.get(0))?
                .collect()
            })
            .await??)
    }

    async fn chats(&self, channel: Option<&str>, limit: i64) -> Result<Vec<ChatRow>, DbError> {
        let channel = channel.map(str::to_string);
        Ok(self
            .read(move |conn| -> rusqlite::Result<Vec<ChatRow>> {
                conn.prepare_cached(CHATS_SQL)?
                    .query_map(params![channel, limit], |row| {
                        Ok(ChatRow {
                            channel: row.get(0)?,
                            session: row.get(1)?,
                            inbound: row.get(2)?,
                            last_received_at: row.get(3)?,
                            messages: row.get(4)?,
                            unfinished: row.get(5)?,
                        })
                    })?
                    .collect()
            })
            .await??)
    }

    async fn unfinished(&self) -> Result<Vec<InboxRow>, DbError> {
        Ok(self
            .read(|conn| -> rusqlite::Result<Vec<InboxRow>> {
                conn.prepare_cached(
                    "SELECT seq, inbound, turn, session FROM gateway_inbox WHERE state <> 'done' ORDER BY seq",
                )?
                .query_map([], |row| {
                    Ok(InboxRow { seq: row.get(0)?, inbound: row.get(1)?, turn: row.get(2)?, session: row.get(3)? })
                })?
                .collect()
            })
            .await??)
    }

    async fn undelivered(&self) -> Result<Vec<OutboxRow>, DbError> {
        Ok(self
            .read(|conn| -> rusqlite::Result<Vec<OutboxRow>> {
                conn.prepare_cached(
                    "SELECT channel, outbound, platform_ids FROM gateway_outbox WHERE state = 'pending' \
                     ORDER BY created_at",
                )?
                .query_map([], |row| {
                    Ok(OutboxRow { channel: row.get(0)?, outbound: row.get(1)?, platform_ids: row.get(2)? })
                })?
                .collect()
            })
            .await??)
    }

    async fn ping(&self) -> Result<(), DbError> {
        self.read(|conn| {
            conn.prepare_cached("SELECT count(*) FROM gateway_outbox WHERE state = 'pending'")?
                .query_row([], |row| row.get::<_, i64>(0))
        })
        .await??;
        Ok(())
    }

    async fn is_approved(&self, channel: &str, subject: &str, id: &str) -> Result<bool, DbError> {
        pairing::is_approved(self, channel, subject, id).await
    }

    async fn request_pairing(&self, request: PairingRequest) -> Result<PairingRequested, DbError> {
        pairing::request(self, request).await
    }

    async fn approve_pairing(
        &self,
        channel: &str,
        code: &str,
        by: &str,
        now: &str,
        expired_before: &str,
    ) -> Result<PairingApproval, DbError> {
        pairing::approve(self, channel, code, by, now, expired_before).await
    }

    async fn revoke_pairing(&self, channel: &str, id: &str) -> Result<usize, DbError> {
        pairing::revoke(self, channel, id).await
    }

    async fn list_pairing(&self, channel: Option<&str>, expired_before: &str) -> Result<Vec<PairingRow>, DbError> {
        pairing::list(self, channel, expired_before).await
    }

    async fn record_audit(&self, row: NewAudit) -> Result<i64, DbError> {
        audit::record(self, row).await
    }

    async fn audit(&self, before_seq: Option<i64>, limit: i64) -> Result<Vec<AuditRow>, DbError> {
        audit::list(self, before_seq, limit).await
    }
}
