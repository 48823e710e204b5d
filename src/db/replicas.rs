//! What several gateway replicas on one database need from it
//! ([`ReplicaTables`]): who is alive, leases, and claiming the inbox and
//! outbox rows nobody alive handles. Only PostgreSQL implements it: SQLite
//! is one process.
//!
//! Liveness is a row per replica incarnation with an expiry that its
//! heartbeat moves; a lease is valid while its holder is alive. So one
//! heartbeat statement keeps every lease of a replica, and a replica that
//! dies loses all of them `ttl` after its last heartbeat with nobody writing
//! anything. Whoever takes work over from an expired replica fences it: it
//! may not come back (its heartbeat says so, and it stops). Times are the
//! database's clock.

use super::DbError;
use super::gateway::{InboxRow, OutboxRow};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// What [`ReplicaTables::lease`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lease {
    /// The caller holds it (it held it already, or took it now).
    Held {
        /// Taken now from a replica whose workspaces were on another volume
        /// (the one it names): what that replica wrote is not here.
        moved_from: Option<String>,
    },
    /// Another live replica holds it.
    Elsewhere,
}

/// An inbox row claimed by [`ReplicaTables::claim_session`].
#[derive(Debug, Clone)]
pub struct ClaimedRow {
    pub row: InboxRow,
    /// A replica claimed it before and died (or lost it): its turn may be on
    /// the tape already.
    pub orphaned: bool,
}

/// The coordination tables. Every method is one statement or transaction.
#[async_trait]
pub trait ReplicaTables: Send + Sync {
    /// Registers incarnation `id` alive for `ttl`; `previous`, this
    /// replica's last incarnation (a restart), is declared dead (and fenced)
    /// at once so its work is taken over now rather than `ttl` later.
    async fn register(&self, id: &str, host: &str, ttl: Duration, previous: Option<&str>) -> Result<(), DbError>;

    /// Keeps `id` alive for `ttl` more; `false` when another replica took
    /// work over from it (after it expired): it must not go on as if not.
    /// An expired replica nobody took anything from (every replica lost
    /// the database for longer than `ttl`) lives on.
    async fn heartbeat(&self, id: &str, ttl: Duration) -> Result<bool, DbError>;

    /// A clean stop: `id` is dead now, so its leases are free (the rows
    /// stay, naming the volume they were on).
    async fn retire(&self, id: &str) -> Result<(), DbError>;

    /// Takes lease `name` for `holder` (whose workspaces are on `volume`)
    /// unless another live replica holds it.
    async fn lease(&self, name: &str, holder: &str, volume: &str) -> Result<Lease, DbError>;

    /// How many replicas are alive.
    async fn alive(&self) -> Result<i64, DbError>;

    /// Gives lease `name` up, if `holder` holds it.
    async fn release(&self, name: &str, holder: &str) -> Result<(), DbError>;

    /// Whether `holder` holds lease `name` and is alive.
    async fn holds(&self, name: &str, holder: &str) -> Result<bool, DbError>;

    /// Claims for `holder`, oldest first, the unfinished rows of `session`
    /// that nobody alive handles: never claimed, claimed by a dead replica,
    /// or claimed by `holder` but not among `in_hand` (its work on them was
    /// lost, a store failure). Rows another transaction is claiming are
    /// skipped (`SKIP LOCKED`).
    async fn claim_session(&self, session: &str, holder: &str, in_hand: &[i64]) -> Result<Vec<ClaimedRow>, DbError>;

    /// Sessions that have rows [`claim_session`](Self::claim_session) would
    /// claim and that no other live replica holds, oldest row first, at
    /// most `limit`.
    async fn unclaimed_sessions(&self, holder: &str, in_hand: &[i64], limit: i64) -> Result<Vec<String>, DbError>;

    /// Wakes every replica's sweep (a message was stored for a session
    /// another replica holds).
    async fn wake_holders(&self) -> Result<(), DbError>;

    /// From now on, `wake` is notified when a replica calls
    /// [`wake_holders`](Self::wake_holders) (best effort: the sweep also
    /// runs on its own every second).
    async fn watch_work(&self, wake: Arc<Notify>) -> Result<(), DbError>;

    /// Claims for `holder` the pending replies that nobody alive delivers
    /// (stored by a replica that died before they went out), oldest first.
    async fn claim_replies(&self, holder: &str, limit: i64) -> Result<Vec<OutboxRow>, DbError>;

    /// The outcomes (JSON) of those of `messages` (channel, message id)
    /// that have one.
    async fn outcomes(&self, messages: &[(String, String)]) -> Result<Vec<((String, String), String)>, DbError>;
}
