//! A tape store held in process memory: the default for library users and tests,
//! and the overlay behind forks.

use super::entry::{Entry, EntryKind, NewEntry};
use super::error::TapeResult;
use super::name::TapeName;
use super::query::TapeQuery;
use super::store::{TapeStats, TapeStore, TapeSummary, check_batch};
use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Tapes in a map behind one lock; appends hold the lock for the whole batch,
/// which is what makes ids gapless and batches whole.
#[derive(Default)]
pub struct InMemoryTapeStore {
    tapes: Mutex<BTreeMap<TapeName, Vec<Entry>>>,
}

impl InMemoryTapeStore {
    pub fn new() -> InMemoryTapeStore {
        InMemoryTapeStore::default()
    }

    fn with_tapes<T>(&self, f: impl FnOnce(&mut BTreeMap<TapeName, Vec<Entry>>) -> T) -> T {
        // A panic while holding the lock cannot leave a half-written batch (the
        // batch is built before it is pushed), so a poisoned lock is still usable.
        let mut tapes = self.tapes.lock();
        f(&mut tapes)
    }
}

#[async_trait]
impl TapeStore for InMemoryTapeStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        check_batch(tape, &entries)?;
        Ok(self.with_tapes(|tapes| {
            let stored = tapes.entry(tape.clone()).or_default();
            let first = stored.len() as u64 + 1;
            let appended: Vec<Entry> =
                entries.into_iter().enumerate().map(|(i, e)| e.into_entry(first + i as u64)).collect();
            stored.extend(appended.iter().cloned());
            appended
        }))
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        self.with_tapes(|tapes| query.apply(tape, tapes.get(tape).map(Vec::as_slice).unwrap_or_default()))
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        Ok(self.with_tapes(|tapes| {
            let entries = tapes.get(tape).map(Vec::as_slice).unwrap_or_default();
            TapeStats {
                entries: entries.len() as u64,
                anchors: entries.iter().filter(|e| e.kind == EntryKind::Anchor).count() as u64,
                last_id: entries.last().map_or(0, |e| e.id),
                last_anchor: entries.iter().rev().find(|e| e.kind == EntryKind::Anchor).cloned(),
            }
        }))
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        Ok(self.with_tapes(|tapes| {
            tapes
                .iter()
                .map(|(name, entries)| TapeSummary {
                    name: name.to_string(),
                    entries: entries.len() as u64,
                    updated: entries.last().map(|e| e.date),
                })
                .collect()
        }))
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        self.with_tapes(|tapes| {
            if let Some(entries) = tapes.get_mut(tape) {
                entries.clear();
            }
        });
        Ok(())
    }

    fn location(&self) -> String {
        "memory".to_string()
    }
}
