//! [`ReplicaTables`] on PostgreSQL (`migrations/postgres/0003_replicas.sql`).
//!
//! Leases are rows, not advisory locks: an advisory lock lives as long as
//! the session (connection) that took it, so a pool that reconnects drops
//! it silently, and a replica whose connection hangs keeps it until TCP
//! gives up. A row whose validity is its holder's heartbeat survives
//! reconnects, expires after a bounded time whatever the network does, and
//! is visible to operators (`SELECT * FROM gateway_leases`).

use super::PgDb;
use crate::db::DbError;
use crate::db::gateway::{InboxRow, OutboxRow};
use crate::db::replicas::{ClaimedRow, Lease, ReplicaTables};
use async_trait::async_trait;
use sqlx_core::query::query;
use sqlx_core::row::Row;
use sqlx_postgres::{PgListener, Postgres};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::Instrument;

/// The channel on which a replica that stored a message for a session held
/// elsewhere wakes the holders' sweeps.
const WORK_CHANNEL: &str = "bub_work";

/// Inbox rows (`i`) nobody alive handles: never claimed, claimed by a dead
/// replica, or claimed by the caller (parameter `holder`) and not in its
/// hands (parameter `in_hand`).
fn orphaned(holder: &str, in_hand: &str) -> String {
    format!(
        "(i.claimed_by IS NULL \
          OR (i.claimed_by = {holder} AND NOT (i.seq = ANY({in_hand}))) \
          OR (i.claimed_by <> {holder} AND NOT EXISTS \
                (SELECT 1 FROM gateway_replicas r WHERE r.id = i.claimed_by AND r.expires_at > now())))"
    )
}

fn seconds(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

#[async_trait]
impl ReplicaTables for PgDb {
    async fn register(&self, id: &str, host: &str, ttl: Duration, previous: Option<&str>) -> Result<(), DbError> {
        let mut transaction = self.pool().begin().await?;
        if let Some(previous) = previous {
            query::<Postgres>(
                "UPDATE gateway_replicas SET expires_at = least(expires_at, now()), fenced = true WHERE id = $1",
            )
            .bind(previous)
            .execute(&mut *transaction)
            .await?;
        }
        // Incarnations dead for a day are only clutter.
        query::<Postgres>("DELETE FROM gateway_replicas WHERE expires_at < now() - interval '1 day'")
            .execute(&mut *transaction)
            .await?;
        query::<Postgres>(
            "INSERT INTO gateway_replicas (id, host, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3))",
        )
        .bind(id)
        .bind(host)
        .bind(seconds(ttl))
        .execute(&mut *transaction)
        .await?;
        transaction.commit().await?;
        Ok(())
    }

    async fn heartbeat(&self, id: &str, ttl: Duration) -> Result<bool, DbError> {
        let done = query::<Postgres>(
            "UPDATE gateway_replicas SET expires_at = now() + make_interval(secs => $2) \
             WHERE id = $1 AND NOT fenced",
        )
        .bind(id)
        .bind(seconds(ttl))
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn retire(&self, id: &str) -> Result<(), DbError> {
        // The leases stay, void with their holder: whoever takes one over
        // still sees which volume it was on.
        query::<Postgres>(
            "UPDATE gateway_replicas SET expires_at = least(expires_at, now()), fenced = true WHERE id = $1",
        )
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    async fn lease(&self, name: &str, holder: &str, volume: &str) -> Result<Lease, DbError> {
        // One statement: insert, or take over from a holder that is dead; the
        // old row's holder and volume come back to tell a takeover apart.
        // A lease another live replica holds (`taken`, as the statement's
        // snapshot sees it) is not tried at all: `ON CONFLICT DO UPDATE`
        // locks the row even when its WHERE refuses, and a row lock is a
        // write, committed and flushed like one. Replicas that are not the
        // holder ask for a session's lease at every message and sweep, so
        // those would be most of the database's commits among replicas.
        // The conflict's WHERE still decides when the snapshot is stale.
        let row = query::<Postgres>(
            "WITH before AS ( \
               SELECT holder, volume, holder <> $2 AND EXISTS \
                 (SELECT 1 FROM gateway_replicas r WHERE r.id = holder AND r.expires_at > now()) AS taken \
               FROM gateway_leases WHERE name = $1), \
             fence AS (UPDATE gateway_replicas SET fenced = true \
                       WHERE id = (SELECT holder FROM before) AND id <> $2 AND expires_at <= now()) \
             INSERT INTO gateway_leases AS l (name, holder, volume) \
             SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM before WHERE taken) \
             ON CONFLICT (name) DO UPDATE SET holder = $2, volume = $3, acquired_at = now() \
               WHERE l.holder = $2 OR NOT EXISTS \
                 (SELECT 1 FROM gateway_replicas r WHERE r.id = l.holder AND r.expires_at > now()) \
             RETURNING (SELECT holder FROM before), (SELECT volume FROM before)",
        )
        .bind(name)
        .bind(holder)
        .bind(volume)
        .fetch_optional(self.pool())
        .await?;
        let Some(row) = row else { return Ok(Lease::Elsewhere) };
        let before_holder: Option<String> = row.try_get(0)?;
        let before_volume: Option<String> = row.try_get(1)?;
        let moved_from = match (before_holder, before_volume) {
            (Some(old), Some(old_volume)) if old != holder && old_volume != volume => Some(old_volume),
            _ => None,
        };
        Ok(Lease::Held { moved_from })
    }

    async fn alive(&self) -> Result<i64, DbError> {
        let row = query::<Postgres>("SELECT count(*) FROM gateway_replicas WHERE expires_at > now()")
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    async fn release(&self, name: &str, holder: &str) -> Result<(), DbError> {
        query::<Postgres>("DELETE FROM gateway_leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    async fn holds(&self, name: &str, holder: &str) -> Result<bool, DbError> {
        let row = query::<Postgres>(
            "SELECT 1 FROM gateway_leases l JOIN gateway_replicas r ON r.id = l.holder \
             WHERE l.name = $1 AND l.holder = $2 AND r.expires_at > now()",
        )
        .bind(name)
        .bind(holder)
        .fetch_optional(self.pool())
        .await?;
        Ok(row.is_some())
    }

    async fn claim_session(&self, session: &str, holder: &str, in_hand: &[i64]) -> Result<Vec<ClaimedRow>, DbError> {
        let orphaned = orphaned("$2", "$3");
        let sql = format!(
            "WITH picked AS ( \
               SELECT i.seq, i.claimed_by FROM gateway_inbox i \
               WHERE i.session = $1 AND i.state <> 'done' AND {orphaned} \
               ORDER BY i.seq FOR UPDATE OF i SKIP LOCKED), \
             fence AS (UPDATE gateway_replicas SET fenced = true \
                       WHERE id IN (SELECT claimed_by FROM picked) AND id <> $2 AND expires_at <= now()) \
             UPDATE gateway_inbox g SET claimed_by = $2 FROM picked p WHERE g.seq = p.seq \
             RETURNING g.seq, g.inbound, g.turn, g.session, p.claimed_by IS NOT NULL"
        );
        let rows = query::<Postgres>(&sql).bind(session).bind(holder).bind(in_hand).fetch_all(self.pool()).await?;
        let mut claimed = rows
            .iter()
            .map(|row| {
                Ok(ClaimedRow {
                    row: InboxRow {
                        seq: row.try_get(0)?,
                        inbound: row.try_get(1)?,
                        turn: row.try_get(2)?,
                        session: row.try_get(3)?,
                    },
                    orphaned: row.try_get(4)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx_core::Error>>()?;
        claimed.sort_by_key(|claimed| claimed.row.seq);
        Ok(claimed)
    }

    async fn unclaimed_sessions(&self, holder: &str, in_hand: &[i64], limit: i64) -> Result<Vec<String>, DbError> {
        let orphaned = orphaned("$1", "$2");
        // Sessions another live replica holds are its business: left out.
        let sql = format!(
            "SELECT i.session FROM gateway_inbox i \
             WHERE i.state <> 'done' AND i.session IS NOT NULL AND {orphaned} \
               AND NOT EXISTS (SELECT 1 FROM gateway_leases l JOIN gateway_replicas r ON r.id = l.holder \
                               WHERE l.name = 'session:' || i.session AND l.holder <> $1 AND r.expires_at > now()) \
             GROUP BY i.session ORDER BY min(i.seq) LIMIT $3"
        );
        let rows = query::<Postgres>(&sql).bind(holder).bind(in_hand).bind(limit).fetch_all(self.pool()).await?;
        Ok(rows.iter().map(|row| row.try_get(0)).collect::<Result<_, _>>()?)
    }

    async fn wake_holders(&self) -> Result<(), DbError> {
        query::<Postgres>("SELECT pg_notify($1, '')").bind(WORK_CHANNEL).execute(self.pool()).await?;
        Ok(())
    }

    async fn watch_work(&self, wake: Arc<Notify>) -> Result<(), DbError> {
        let mut listener = PgListener::connect_with(self.pool()).await?;
        listener.listen(WORK_CHANNEL).await?;
        let listening = async move {
            loop {
                match listener.recv().await {
                    Ok(_) => wake.notify_one(),
                    Err(sqlx_core::Error::PoolClosed) => return,
                    // Reconnected at the next recv; what was sent meanwhile
                    // is found by the sweep's own rounds.
                    Err(error) => {
                        tracing::warn!(%error, "lost the work notifications; reconnecting");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        };
        tokio::spawn(listening.instrument(tracing::info_span!("db.work_notifications")));
        Ok(())
    }

    async fn claim_replies(&self, holder: &str, limit: i64) -> Result<Vec<OutboxRow>, DbError> {
        let rows = query::<Postgres>(
            "WITH picked AS ( \
               SELECT o.key FROM gateway_outbox o \
               WHERE o.state = 'pending' AND (o.claimed_by IS NULL OR (o.claimed_by <> $1 AND NOT EXISTS \
                 (SELECT 1 FROM gateway_replicas r WHERE r.id = o.claimed_by AND r.expires_at > now()))) \
               ORDER BY o.created_at LIMIT $2 FOR UPDATE OF o SKIP LOCKED), \
             fence AS (UPDATE gateway_replicas SET fenced = true \
                       WHERE id IN (SELECT claimed_by FROM gateway_outbox WHERE key IN (SELECT key FROM picked)) \
                         AND id <> $1 AND expires_at <= now()) \
             UPDATE gateway_outbox g SET claimed_by = $1 FROM picked p WHERE g.key = p.key \
             RETURNING g.channel, g.outbound, g.platform_ids, g.created_at",
        )
        .bind(holder)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let mut replies = rows
            .iter()
            .map(|row| {
                let reply =
                    OutboxRow { channel: row.try_get(0)?, outbound: row.try_get(1)?, platform_ids: row.try_get(2)? };
                Ok((row.try_get::<String, _>(3)?, reply))
            })
            .collect::<Result<Vec<_>, sqlx_core::Error>>()?;
        replies.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(replies.into_iter().map(|(_, reply)| reply).collect())
    }

    async fn outcomes(&self, messages: &[(String, String)]) -> Result<Vec<((String, String), String)>, DbError> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let (channels, ids): (Vec<&str>, Vec<&str>) =
            messages.iter().map(|(channel, id)| (channel.as_str(), id.as_str())).unzip();
        let rows = query::<Postgres>(
            "SELECT i.channel, i.message_id, i.outcome FROM gateway_inbox i \
             JOIN unnest($1::text[], $2::text[]) AS w(channel, message_id) \
               ON i.channel = w.channel AND i.message_id = w.message_id \
             WHERE i.outcome IS NOT NULL",
        )
        .bind(&channels)
        .bind(&ids)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|row| Ok(((row.try_get(0)?, row.try_get(1)?), row.try_get(2)?)))
            .collect::<Result<_, sqlx_core::Error>>()?)
    }
}
