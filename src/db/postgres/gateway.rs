//! The gateway's inbox, outbox, files and live messages in PostgreSQL:
//! [`GatewayTables`] for [`PgDb`]. The pairing statements are in `pairing`,
//! the audit log's in `audit`; the rows' meaning and the pipeline's
//! guarantees are `gateway::store`'s.
//!
//! A method that only writes is one statement, atomic on its own (a
//! statement with data-modifying `WITH` parts commits them together), so a
//! turn's store, finish and delivery cost one round trip each and no
//! `BEGIN`/`COMMIT`; a method that reads before it writes is a transaction.
//!
//! [`Flush`] is ignored: a commit is as durable as the connection's
//! `synchronous_commit`, chosen once from the
//! [`Durability`](crate::db::Durability) the pool was opened with
//! ([`PgDb::connect`]). There is no group commit here to defer a sync to.

use super::{PgDb, audit, pairing};
use crate::db::gateway::{
    AuditRow, ChatRow, GatewayTables, InboxRow, LiveRow, NewAudit, NewFile, NewInbound, NewReply, OutboxRow,
    PairingApproval, PairingRequest, PairingRequested, PairingRow, ReplyState,
};
use crate::db::{DbError, Flush};
use async_trait::async_trait;
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_core::row::Row;
use sqlx_postgres::Postgres;

/// Rows a statement touched, as the trait counts them.
pub(super) fn count(rows: u64) -> usize {
    usize::try_from(rows).unwrap_or(usize::MAX)
}

/// Gives the messages their outcome and queues the replies (the arrays `$4`,
/// `$5`, `$6`: keys, channels, replies) in one statement; a key already
/// queued is kept as it is. The replies are inserted in their order, which
/// `seq` keeps (they share `created_at`).
/// A turn's outcome and replies in one statement. Among replicas (`$7`,
/// this process's incarnation) only when every one of its rows is still
/// claimed by it: a replica taken for dead whose rows were claimed by
/// another since must not answer them too. The replies it queues are its
/// own to deliver. Returns whether it was allowed.
const FINISH_SQL: &str = "\
WITH mine AS (
    SELECT seq FROM gateway_inbox WHERE seq = ANY($3) AND ($7::text IS NULL OR claimed_by = $7) FOR UPDATE
), allowed AS (
    SELECT (SELECT count(*) FROM mine) = (SELECT count(DISTINCT s) FROM unnest($3::bigint[]) AS s) AS ok
), done AS (
    UPDATE gateway_inbox SET state = 'done', outcome = $1, finished_at = $2
    WHERE seq IN (SELECT seq FROM mine) AND (SELECT ok FROM allowed)
), queued AS (
    INSERT INTO gateway_outbox (key, channel, outbound, state, created_at, claimed_by)
    SELECT reply.key, reply.channel, reply.outbound, 'pending', $2, $7
    FROM UNNEST($4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS reply (key, channel, outbound, n)
    WHERE (SELECT ok FROM allowed)
    ORDER BY reply.n
    ON CONFLICT (key) DO NOTHING
)
SELECT ok FROM allowed";

/// The newest row of each chat (and thread) of channel `$1` since `$2`,
/// edits left out, newest first, at most `$3`: the greatest seq per chat
/// and thread id, read from the JSON (why not from columns:
/// migrations/postgres/0002_gateway.sql). PostgreSQL refuses to read a
/// document holding `\u0000` (which a message's text may: its `text` type
/// has no NUL), so that escape is read as U+FFFD first; ids have no control
/// characters, so what is grouped on is unchanged, and the row is returned
/// as it was stored.
const LATEST_PER_CHAT_SQL: &str = r"
SELECT inbound FROM gateway_inbox WHERE seq IN (
    SELECT max(seq)
    FROM gateway_inbox, LATERAL (SELECT replace(inbound, E'\\u0000', E'\\ufffd')::jsonb AS message) AS parsed
    WHERE channel = $1 AND received_at >= $2 AND (message ->> 'edit') IS NULL
    GROUP BY message #>> '{chat,id}', message #>> '{chat,thread_id}'
)
ORDER BY seq DESC LIMIT $3";

/// [`GatewayTables::chats`], of every channel or (`CHATS_OF_CHANNEL_SQL`)
/// of channel `$2`: each session's newest seq and row count from an
/// index-only scan of `gateway_inbox_sessions` (channel, session, seq), the
/// newest `$1` kept, and only their rows read and their unfinished counted
/// (`MATERIALIZED` keeps that out of the aggregate). Why not SQLite's loose
/// index scan: migrations/postgres/0005_inbox_sessions.sql.
macro_rules! chats_sql {
    ($filter:literal) => {
        concat!(
            "WITH latest AS MATERIALIZED (
    SELECT channel, session, max(seq) AS seq, count(*) AS messages
    FROM gateway_inbox WHERE session IS NOT NULL",
            $filter,
            "
    GROUP BY channel, session ORDER BY max(seq) DESC LIMIT $1
)
SELECT l.channel, l.session, i.inbound, i.received_at, l.messages,
    (SELECT count(*) FROM gateway_inbox u WHERE u.session = l.session AND u.state <> 'done')
FROM latest l JOIN gateway_inbox i ON i.seq = l.seq ORDER BY l.seq DESC"
        )
    };
}
const CHATS_SQL: &str = chats_sql!("");
const CHATS_OF_CHANNEL_SQL: &str = chats_sql!(" AND channel = $2");

#[async_trait]
impl GatewayTables for PgDb {
    async fn insert_inbound(&self, message: NewInbound, _flush: Flush) -> Result<Option<i64>, DbError> {
        let NewInbound { channel, message_id, inbound, session, received_at } = message;
        // A replica storing the same key at the same time waits on the unique
        // index until this commits, then stores nothing: one row, one `New`.
        Ok(query_scalar::<Postgres, i64>(
            "INSERT INTO gateway_inbox (channel, message_id, inbound, state, session, received_at) \
             VALUES ($1, $2, $3, 'queued', $4, $5) ON CONFLICT (channel, message_id) DO NOTHING \
             RETURNING seq",
        )
        .bind(channel)
        .bind(message_id)
        .bind(inbound)
        .bind(session)
        .bind(received_at)
        .fetch_optional(self.pool())
        .await?)
    }

    async fn inbound(&self, channel: &str, message_id: &str) -> Result<Option<String>, DbError> {
        Ok(query_scalar::<Postgres, String>("SELECT inbound FROM gateway_inbox WHERE channel = $1 AND message_id = $2")
            .bind(channel)
            .bind(message_id)
            .fetch_optional(self.pool())
            .await?)
    }

    async fn replace_inbound(&self, seq: i64, inbound: &str) -> Result<(), DbError> {
        query::<Postgres>("UPDATE gateway_inbox SET inbound = $1 WHERE seq = $2 AND state <> 'done'")
            .bind(inbound)
            .bind(seq)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn outcome(&self, channel: &str, message_id: &str) -> Result<Option<String>, DbError> {
        let outcome = query_scalar::<Postgres, Option<String>>(
            "SELECT outcome FROM gateway_inbox WHERE channel = $1 AND message_id = $2",
        )
        .bind(channel)
        .bind(message_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(outcome.flatten())
    }

    async fn start_turn(&self, seqs: &[i64], session: &str, turn: &str) -> Result<(), DbError> {
        query::<Postgres>("UPDATE gateway_inbox SET state = 'running', session = $1, turn = $2 WHERE seq = ANY($3)")
            .bind(session)
            .bind(turn)
            .bind(seqs)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn finish(
        &self,
        seqs: &[i64],
        outcome: &str,
        replies: Vec<NewReply>,
        at: &str,
        _flush: Flush,
    ) -> Result<(), DbError> {
        let mut keys = Vec::with_capacity(replies.len());
        let mut channels = Vec::with_capacity(replies.len());
        let mut outbounds = Vec::with_capacity(replies.len());
        for NewReply { key, channel, outbound } in replies {
            keys.push(key);
            channels.push(channel);
            outbounds.push(outbound);
        }
        let allowed: bool = query::<Postgres>(FINISH_SQL)
            .bind(outcome)
            .bind(at)
            .bind(seqs)
            .bind(keys)
            .bind(channels)
            .bind(outbounds)
            .bind(self.holder())
            .fetch_one(self.pool())
            .await?
            .try_get(0)?;
        if !allowed {
            return Err(DbError::NotClaimed);
        }
        Ok(())
    }

    async fn parts_delivered(&self, key: &str, platform_ids: &str) -> Result<(), DbError> {
        query::<Postgres>("UPDATE gateway_outbox SET platform_ids = $1 WHERE key = $2 AND state = 'pending'")
            .bind(platform_ids)
            .bind(key)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn set_reply_state(
        &self,
        key: &str,
        state: ReplyState,
        platform_ids: Option<&str>,
        error: Option<&str>,
        at: &str,
    ) -> Result<(), DbError> {
        query::<Postgres>(
            "WITH reply AS ( \
                 UPDATE gateway_outbox SET state = $1, platform_ids = $2, error = $3, finished_at = $4 \
                 WHERE key = $5 \
             ) \
             DELETE FROM gateway_live WHERE key = $5",
        )
        .bind(state.as_str())
        .bind(platform_ids)
        .bind(error.map(storable))
        .bind(at)
        .bind(key)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn begin_file(&self, file: NewFile) -> Result<Option<String>, DbError> {
        let NewFile { key, channel, session, file, at } = file;
        let mut transaction = self.pool().begin().await?;
        // A delivered row is left as it is, and locked: the read below sees it.
        let sending = query::<Postgres>(
            "INSERT INTO gateway_files (key, channel, session, file, state, created_at) \
             VALUES ($1, $2, $3, $4, 'sending', $5) ON CONFLICT (key) DO UPDATE \
             SET state = 'sending', file = EXCLUDED.file, error = NULL, finished_at = NULL \
             WHERE gateway_files.state <> 'delivered' \
             RETURNING key",
        )
        .bind(&key)
        .bind(channel)
        .bind(session)
        .bind(file)
        .bind(at)
        .fetch_optional(&mut *transaction)
        .await?;
        let delivered = match sending {
            Some(_) => None,
            None => Some(
                query_scalar::<Postgres, Option<String>>("SELECT platform_id FROM gateway_files WHERE key = $1")
                    .bind(&key)
                    .fetch_one(&mut *transaction)
                    .await?
                    .unwrap_or_default(),
            ),
        };
        transaction.commit().await?;
        Ok(delivered)
    }

    async fn set_file_state(
        &self,
        key: &str,
        state: ReplyState,
        platform_id: Option<&str>,
        error: Option<&str>,
        at: &str,
    ) -> Result<(), DbError> {
        query::<Postgres>(
            "UPDATE gateway_files SET state = $1, platform_id = $2, error = $3, finished_at = $4 WHERE key = $5",
        )
        .bind(state.as_str())
        .bind(platform_id)
        .bind(error.map(storable))
        .bind(at)
        .bind(key)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn remember_live(&self, key: &str, row: LiveRow, at: &str) -> Result<(), DbError> {
        let LiveRow { channel, chat, message_id, text } = row;
        query::<Postgres>(
            "INSERT INTO gateway_live (key, channel, chat, message_id, text, sent_at) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key) DO UPDATE SET \
             channel = EXCLUDED.channel, chat = EXCLUDED.chat, message_id = EXCLUDED.message_id, \
             text = EXCLUDED.text, sent_at = EXCLUDED.sent_at",
        )
        .bind(key)
        .bind(channel)
        .bind(chat)
        .bind(message_id)
        .bind(storable(&text))
        .bind(at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn live(&self, key: &str) -> Result<Option<LiveRow>, DbError> {
        let row = query_as::<Postgres, (String, String, String, String)>(
            "SELECT channel, chat, message_id, text FROM gateway_live WHERE key = $1",
        )
        .bind(key)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.map(|(channel, chat, message_id, text)| LiveRow { channel, chat, message_id, text }))
    }

    async fn forget_live_before(&self, before: &str) -> Result<usize, DbError> {
        let done =
            query::<Postgres>("DELETE FROM gateway_live WHERE sent_at < $1").bind(before).execute(self.pool()).await?;
        Ok(count(done.rows_affected()))
    }

    async fn latest_per_chat(&self, channel: &str, since: &str, limit: i64) -> Result<Vec<String>, DbError> {
        Ok(query_scalar::<Postgres, String>(LATEST_PER_CHAT_SQL)
            .bind(channel)
            .bind(since)
            .bind(limit)
            .fetch_all(self.pool())
            .await?)
    }

    async fn chats(&self, channel: Option<&str>, limit: i64) -> Result<Vec<ChatRow>, DbError> {
        let statement = match channel {
            None => query_as::<Postgres, (String, String, String, String, i64, i64)>(CHATS_SQL).bind(limit),
            Some(channel) => query_as(CHATS_OF_CHANNEL_SQL).bind(limit).bind(channel),
        };
        let rows = statement.fetch_all(self.pool()).await?;
        Ok(rows
            .into_iter()
            .map(|(channel, session, inbound, last_received_at, messages, unfinished)| ChatRow {
                channel,
                session,
                inbound,
                last_received_at,
                messages,
                unfinished,
            })
            .collect())
    }

    async fn unfinished(&self) -> Result<Vec<InboxRow>, DbError> {
        let rows = query_as::<Postgres, (i64, String, Option<String>, Option<String>)>(
            "SELECT seq, inbound, turn, session FROM gateway_inbox WHERE state <> 'done' ORDER BY seq",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(|(seq, inbound, turn, session)| InboxRow { seq, inbound, turn, session }).collect())
    }

    async fn undelivered(&self) -> Result<Vec<OutboxRow>, DbError> {
        let rows = query_as::<Postgres, (String, String, Option<String>)>(
            "SELECT channel, outbound, platform_ids FROM gateway_outbox WHERE state = 'pending' \
             ORDER BY created_at, seq",
        )
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(channel, outbound, platform_ids)| OutboxRow { channel, outbound, platform_ids })
            .collect())
    }

    async fn ping(&self) -> Result<(), DbError> {
        query_scalar::<Postgres, i64>("SELECT count(*) FROM gateway_outbox WHERE state = 'pending'")
            .fetch_one(self.pool())
            .await?;
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

/// Free text (a platform's error, what a live message showed) as PostgreSQL
/// can keep it: its `text` holds no NUL character, which SQLite keeps and a
/// model or a platform may write, so each becomes U+FFFD. JSON columns need
/// none of this: serde writes a NUL as `\u0000`.
fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') { text.replace('\0', "\u{FFFD}").into() } else { text.into() }
}
