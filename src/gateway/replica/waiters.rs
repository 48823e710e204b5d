//! Callers waiting on the request (`?mode=sync`, `sse`) for a message whose
//! turn another replica runs: answered from the outcome once it is stored.

use crate::db::replicas::ReplicaTables;
use bub_channel::{Outcome, ReplySink};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A caller who is still waiting after this has given up long ago (the
/// webhook's own timeout is shorter): forgotten.
const GIVE_UP: Duration = Duration::from_secs(3600);

type Key = (String, String);

#[derive(Default)]
pub(super) struct Waiters {
    waiting: Mutex<HashMap<Key, Vec<(ReplySink, Instant)>>>,
}

impl Waiters {
    pub(super) fn wait(&self, key: Key, sink: ReplySink) {
        self.waiting.lock().entry(key).or_default().push((sink, Instant::now()));
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.lock().is_empty()
    }

    /// One look at the outcomes of every message waited on: those that have
    /// one are told it.
    pub(super) async fn answer(&self, tables: &dyn ReplicaTables) {
        let keys: Vec<Key> = {
            let mut waiting = self.waiting.lock();
            waiting.retain(|_, sinks| {
                sinks.retain(|(sink, since)| !sink.is_closed() && since.elapsed() < GIVE_UP);
                !sinks.is_empty()
            });
            waiting.keys().cloned().collect()
        };
        if keys.is_empty() {
            return;
        }
        let found = match tables.outcomes(&keys).await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "cannot read the outcomes callers wait for; trying again");
                return;
            }
        };
        for (key, json) in found {
            let outcome: Outcome = match serde_json::from_str(&json) {
                Ok(outcome) => outcome,
                Err(error) => {
                    tracing::error!(%error, channel = %key.0, "a stored outcome cannot be read");
                    continue;
                }
            };
            let sinks = self.waiting.lock().remove(&key).unwrap_or_default();
            for (sink, _) in sinks {
                // A streaming caller (`sse`) reads the reply from its deltas:
                // the turn streamed on another replica, so it comes whole.
                if outcome.status == bub_channel::OutcomeStatus::Replied && !outcome.text.is_empty() {
                    sink.delta(outcome.text.clone());
                }
                sink.done(outcome.clone()).await;
            }
        }
    }
}
