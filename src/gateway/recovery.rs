//! What a start does about the previous run's unfinished work.
//!
//! - Replies stored but not delivered are sent (once: the outbox row is
//!   marked delivered when the platform confirms; of a reply a stop left
//!   half-sent, only the parts not delivered; of one whose live message was
//!   sent before the crash, that message is edited, not sent again).
//! - Live messages kept more than [`LIVE_KEPT_FOR`] whose reply never
//!   finished are forgotten.
//! - Messages without an outcome: if a turn's marker event on the session's
//!   tape names them (or, for messages steered into a turn, names that turn),
//!   the turn happened (the fork merged) and only its outcome and reply were
//!   lost — they are rebuilt from the tape. Otherwise no turn landed for them
//!   and they go through the pipeline again, in the order they arrived.
//!   When the session's tape cannot be read, which is which cannot be told:
//!   its messages wait (for the next start; among replicas, the next sweep).

use super::session::dispatch;
use super::store::{StoreError, Unfinished};
use super::{Inner, Message, TURN_EVENT, admission, outcome, turn};
use crate::tape::{EntryKind, TapeError, TapeQuery};
use bub_channel::OutcomeStatus;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;

/// How far back a restart looks for a turn's marker.
const MARKER_SEARCH: usize = 64;

/// How long a live message whose reply never finished is kept for a restart.
const LIVE_KEPT_FOR: chrono::TimeDelta = chrono::TimeDelta::days(7);

pub(crate) async fn resume(inner: &Arc<Inner>) -> Result<(), StoreError> {
    let forgotten = inner.store.forget_live_before(chrono::Utc::now() - LIVE_KEPT_FOR).await?;
    if forgotten > 0 {
        tracing::info!(forgotten, "forgot live messages whose reply never finished");
    }
    // Among replicas, the sweep takes up what nobody alive handles (this
    // replica's previous run's work included): the rest may be another's.
    if inner.replica.get().is_some() {
        return Ok(());
    }
    let undelivered = inner.store.undelivered().await?;
    let unfinished = inner.store.unfinished().await?;
    if !undelivered.is_empty() || !unfinished.is_empty() {
        tracing::info!(replies = undelivered.len(), messages = unfinished.len(), "resuming unfinished work");
    }
    for reply in undelivered {
        let inner = inner.clone();
        tokio::spawn(
            async move { super::outbound::delivery::deliver_reply(&inner, reply, None).await }.in_current_span(),
        );
    }
    let mut sessions: BTreeMap<String, Vec<Unfinished>> = BTreeMap::new();
    let mut again = Vec::new();
    for row in unfinished {
        match row.session.clone() {
            Some(session) => sessions.entry(session).or_default().push(row),
            None => again.push(row),
        }
    }
    for (session, rows) in sessions {
        match resume_session(inner, &session, rows).await {
            Ok(rows) => again.extend(rows),
            // Run again, a turn that landed would land twice: they wait for the next start.
            Err(error) => tracing::error!(
                %error,
                session,
                "cannot read the session's tape to tell which turns landed; its messages wait for the next start"
            ),
        }
    }
    again.sort_by_key(|row| row.seq);
    for row in again {
        dispatch(inner, message(inner, row, true)).await;
    }
    Ok(())
}

/// Of `rows`, unfinished messages of `session` whose run was interrupted:
/// those whose turn is on the tape get their outcome and reply rebuilt from
/// it; the others are returned, to go through the pipeline again. When the
/// tape cannot be read, nothing is done (a turn that landed must not run
/// again, nor be answered with a reply that could not be read): the error.
pub(crate) async fn resume_session(
    inner: &Arc<Inner>,
    session: &str,
    rows: Vec<Unfinished>,
) -> Result<Vec<Unfinished>, TapeError> {
    let markers = markers(inner, session).await?;
    // By the marker's entry id: where the turn's reply starts on the tape.
    let mut landed: BTreeMap<u64, (&Marker, Vec<Unfinished>)> = BTreeMap::new();
    let mut again = Vec::new();
    for row in rows {
        let turn = markers.iter().find(|marker| match &row.turn {
            Some(turn) => &marker.turn == turn,
            None => marker.messages.iter().any(|key| *key == row.inbound.key()),
        });
        match turn {
            Some(marker) => landed.entry(marker.entry).or_insert_with(|| (marker, Vec::new())).1.push(row),
            None => again.push(row),
        }
    }
    // Every reply read before any is concluded: all or nothing.
    let mut replies = Vec::with_capacity(landed.len());
    for (marker, rows) in landed.into_values() {
        replies.push((landed_reply(inner, session, marker.entry).await?, marker, rows));
    }
    for (text, marker, rows) in replies {
        tracing::info!(session, turn = %marker.turn, "turn was on the tape; sending its reply");
        let messages = rows.into_iter().map(|row| message(inner, row, true)).collect();
        turn::conclude(inner, messages, outcome(OutcomeStatus::Replied, text, session), true).await;
    }
    Ok(again)
}

/// Whether turn `turn`'s fork merged into `session`'s tape (its marker is there).
pub(crate) async fn turn_landed(inner: &Arc<Inner>, session: &str, turn: &str) -> Result<bool, TapeError> {
    Ok(markers(inner, session).await?.iter().any(|marker| marker.turn == turn))
}

/// A turn marker read back from a tape.
struct Marker {
    /// The marker's entry id on the tape.
    entry: u64,
    turn: String,
    messages: Vec<String>,
}

/// The latest turn markers of `session` (a restart happens before any new turn,
/// so an interrupted turn's marker is among them if it landed).
async fn markers(inner: &Arc<Inner>, session: &str) -> Result<Vec<Marker>, TapeError> {
    // A session whose name cannot be a tape has no turns on one.
    let Ok(tape) = inner.agent.tape(session) else { return Ok(Vec::new()) };
    let query = TapeQuery::all().kinds([EntryKind::Event]).named(TURN_EVENT).newest_first().limit(MARKER_SEARCH);
    let entries = tape.read(&query).await?;
    Ok(entries
        .iter()
        .filter_map(|entry| {
            let data = entry.data()?;
            let turn = data.get("turn")?.as_str()?.to_string();
            let messages =
                data.get("messages")?.as_array()?.iter().filter_map(|m| m.as_str().map(String::from)).collect();
            Some(Marker { entry: entry.id, turn, messages })
        })
        .collect())
}

/// A stored message back into the pipeline; `recovered`: a run of it was
/// interrupted (it may be on the tape already).
pub(crate) fn message(inner: &Arc<Inner>, row: Unfinished, recovered: bool) -> Message {
    let policy = inner.policy(&row.inbound.channel, &row.inbound.chat.id);
    let user = admission::user_name(&row.inbound);
    let session = row.session.unwrap_or_else(|| admission::session_id(&row.inbound, policy.session_scope.value));
    let provenance = crate::tape::Provenance::Stranger;
    let trace = super::caller_trace(&row.inbound);
    Message { seq: row.seq, inbound: row.inbound, sink: None, policy, user, session, recovered, provenance, trace }
}

/// The reply of a turn that is on the tape: the assistant text (or the
/// command output) recorded after its marker, entry `marker`.
async fn landed_reply(inner: &Arc<Inner>, session: &str, marker: u64) -> Result<String, TapeError> {
    let Ok(tape) = inner.agent.tape(session) else { return Ok(String::new()) };
    let after = tape.read(&TapeQuery::all().after_id(marker)).await?;
    let mut text = String::new();
    for entry in &after {
        match entry.kind {
            EntryKind::Event if entry.name() == Some(TURN_EVENT) => break,
            EntryKind::Event if entry.name() == Some("command") => {
                if let Some(output) = entry.data().and_then(|d| d.get("output")).and_then(Value::as_str) {
                    text.push_str(output);
                }
            }
            EntryKind::Message if entry.payload.get("role").and_then(Value::as_str) == Some("assistant") => {
                if let Some(content) = entry.payload.get("content").and_then(Value::as_str) {
                    text.push_str(content);
                }
            }
            _ => {}
        }
    }
    Ok(text)
}
