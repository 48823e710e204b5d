//! A replica's background work: the heartbeat that keeps its leases, and
//! the sweep that claims what nobody alive runs (messages stored by other
//! replicas for sessions this one holds or can take, the work of replicas
//! that died, replies nobody delivers) and answers callers waiting on
//! another replica's turns.

use super::Replica;
use crate::gateway::store::PendingReply;
use crate::gateway::{Inner, Message};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tracing::{Instrument, info_span};

/// How often the sweep looks when nothing wakes it (a replica that stores a
/// message for a session held elsewhere wakes the holders at once): the
/// bound on the delay of a message whose wake-up was lost, and how soon a
/// dead replica's work is found once its leases expired.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How often callers waiting on another replica's turn are looked after.
const ANSWER_EVERY: Duration = Duration::from_millis(20);

/// Sessions (and replies) one sweep claims at most.
const SWEEP_BATCH: i64 = 64;

/// Starts the heartbeat and the sweep; they run until aborted (the stop).
/// Each in a span of its own naming it and the replica.
pub(super) fn start(inner: &Arc<Inner>, replica: &Arc<Replica>) -> (JoinHandle<()>, Vec<JoinHandle<()>>) {
    let id = &replica.id;
    let sweeping = sweep(inner.clone(), replica.clone()).instrument(info_span!("replica.sweep", replica = %id));
    let answering = answer(replica.clone()).instrument(info_span!("replica.answer", replica = %id));
    let beating = heartbeat(replica.clone()).instrument(info_span!("replica.heartbeat", replica = %id));
    (tokio::spawn(beating), vec![tokio::spawn(sweeping), tokio::spawn(answering)])
}

/// Callers waiting on another replica's turn hear its outcome.
async fn answer(replica: Arc<Replica>) {
    loop {
        tokio::time::sleep(ANSWER_EVERY).await;
        if !replica.waiters.is_empty() {
            replica.waiters.answer(replica.tables.as_ref()).await;
        }
    }
}

/// Heartbeats per lease. The registration outlives the last heartbeat by
/// the lease, so a database outage is survived when it is shorter than the
/// lease less one period (and the reconnect): six beats make that most of
/// the lease, for one small `UPDATE` per period.
const BEATS_PER_LEASE: u32 = 6;

/// The pause after an attempt that failed, before the next.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Attempts of one heartbeat in flight at most.
const MAX_ATTEMPTS: usize = 4;

async fn heartbeat(replica: Arc<Replica>) {
    let every = replica.ttl / BEATS_PER_LEASE;
    loop {
        tokio::time::sleep(every).await;
        if !beat(&replica, every).await {
            tracing::error!(
                replica = %replica.id,
                "this replica was taken for dead (no heartbeat for longer than lease_seconds) and another \
                 replica took its work over, so it stops; restart it"
            );
            let _ = replica.fenced.send(true);
            return;
        }
    }
}

/// One heartbeat, tried until the database answers; whether the
/// registration was still alive. A new attempt starts when one fails (after
/// a short pause) or takes longer than a period, and the slow ones go on
/// rather than being given up: after the database comes back, a statement
/// can sleep in the pool's reconnect backoff (seconds) while a fresh one
/// would pass at once, and on a loaded machine the slow one may be the
/// first to pass.
async fn beat(replica: &Arc<Replica>, every: Duration) -> bool {
    let mut attempts = tokio::task::JoinSet::new();
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        if attempts.len() < MAX_ATTEMPTS {
            let (tables, id, ttl) = (replica.tables.clone(), replica.id.clone(), replica.ttl);
            let sent = tokio::time::Instant::now();
            let attempt = async move { tables.heartbeat(&id, ttl).await.map(|alive| (alive, sent)) };
            attempts.spawn(attempt.in_current_span());
        }
        let failed = tokio::select! {
            Some(done) = attempts.join_next() => match done {
                Ok(Ok((alive, sent))) => {
                    if alive {
                        replica.alive_at(sent);
                    }
                    if let Some(since) = failing_since {
                        tracing::info!(replica = %replica.id, failed_for = ?since.elapsed(), "heartbeat reaches the database again");
                    }
                    // Dropping the set aborts the attempts still in flight.
                    return alive;
                }
                Ok(Err(error)) => error.to_string(),
                Err(error) => error.to_string(),
            },
            () = tokio::time::sleep(every) => format!("no answer within {every:?}; trying again beside it"),
        };
        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
        tracing::warn!(error = %failed, failing_for = ?since.elapsed(), "heartbeat failed; retrying");
        tokio::time::sleep(RETRY_AFTER).await;
    }
}

async fn sweep(inner: Arc<Inner>, replica: Arc<Replica>) {
    let wake = Arc::new(tokio::sync::Notify::new());
    if let Err(error) = replica.tables.watch_work(wake.clone()).await {
        tracing::warn!(%error, "cannot listen for work; messages stored on other replicas wait for the sweep's rounds");
    }
    loop {
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        let in_hand: Vec<i64> = replica.in_hand.lock().iter().copied().collect();
        match replica.tables.unclaimed_sessions(&replica.id, &in_hand, SWEEP_BATCH).await {
            Ok(sessions) => {
                for session in sessions {
                    let _claiming = replica.lock(&session).lock().await;
                    match replica.lease(&inner, &session, None).await {
                        Ok(true) => replica.claim_and_dispatch(&inner, &session).await,
                        Ok(false) => {}
                        Err(error) => tracing::warn!(%error, session, "cannot lease a session"),
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot look for unclaimed messages"),
        }
        match replica.tables.claim_replies(&replica.id, SWEEP_BATCH).await {
            Ok(replies) => {
                for row in replies {
                    match PendingReply::from_row(row) {
                        Ok(reply) => {
                            let inner = inner.clone();
                            tokio::spawn(
                                async move { crate::gateway::outbound::delivery::deliver_reply(&inner, reply, None).await }
                                    .in_current_span(),
                            );
                        }
                        Err(error) => tracing::error!(%error, "a stored reply cannot be read; it is skipped"),
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "cannot look for replies nobody delivers"),
        }
    }
}

/// Tells the chat of `message` that its session moved to a replica whose
/// workspaces are on another volume (best effort, not stored).
pub(super) async fn tell_workspace_moved(inner: &Arc<Inner>, message: &Message) {
    const NOTICE: &str = "Note: this chat is now served by another gateway replica, whose workspace volume is not \
                          the one used before: files written here earlier are not available, and the workspace \
                          starts empty. (Operators: mount one shared volume as every replica's workspaces folder \
                          to keep them.)";
    let notice = bub_channel::Outbound {
        chat: message.inbound.chat.clone(),
        text: NOTICE.to_string(),
        reply_to: Vec::new(),
        idempotency_key: format!("moved:{}", uuid::Uuid::new_v4().simple()),
        session: message.session.clone(),
        mentions: Vec::new(),
    };
    if let Err(error) = inner.outbound().send_final(&message.inbound.channel, notice).await {
        tracing::warn!(%error, session = %message.session, "cannot tell the chat its workspace moved");
    }
}
