//! Forks: a run writes to an in-memory overlay of its tape and merges it back
//! when it ends.
//!
//! A [`ForkStore`] wraps the parent store. Writes to any tape go to that tape's
//! overlay (so sidecars such as the spill tape are forked along with their
//! tape); reads see the parent's entries followed by the overlay's, except that
//! when the overlay itself holds the anchor a query starts from, the parent's
//! entries are hidden. Ids inside an overlay are provisional (they continue from
//! the parent's last id when the overlay was opened); merging appends the
//! overlay to the parent, which assigns fresh ids and keeps the order. A reset
//! inside a fork hides the parent's entries and is applied to the parent at
//! merge time.
//!
//! Guarantees: each tape's overlay is merged as one atomic append, so two forks
//! of one tape that merge at once both land whole and never interleave; a merge
//! that fails keeps the overlays not yet merged, so it can be retried; forks of
//! `temp/…` tapes are never merged.

use super::entry::{Entry, EntryKind, NewEntry};
use super::error::{TapeError, TapeResult};
use super::handle::Tape;
use super::name::TapeName;
use super::query::{Scope, TapeQuery};
use super::store::{TapeStats, TapeStore, TapeSummary, check_batch};
use async_trait::async_trait;
use parking_lot::{Mutex, MutexGuard};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Default, Clone)]
struct Overlay {
    /// Provisional ids continue from here.
    base_id: u64,
    /// Shared, so a read takes a snapshot without copying every entry (a
    /// turn reads its tape after each append); an append copies only when a
    /// reader still holds the old snapshot.
    entries: Arc<Vec<Entry>>,
    /// The tape was reset inside the fork: the parent's entries are hidden.
    reset: bool,
}

#[derive(Default)]
struct ForkState {
    overlays: BTreeMap<TapeName, Overlay>,
    /// The parent's last id per tape, as a `stats` call before the tape's
    /// first write saw it: the base of its overlay without asking again (ids
    /// in an overlay are provisional anyway).
    parent_last_ids: BTreeMap<TapeName, u64>,
    /// `Some("merged")` / `Some("discarded")` once the fork is over.
    closed: Option<&'static str>,
}

/// A store that keeps writes in memory on top of a parent store.
pub struct ForkStore {
    parent: Arc<dyn TapeStore>,
    state: Mutex<ForkState>,
}

impl ForkStore {
    pub fn new(parent: Arc<dyn TapeStore>) -> ForkStore {
        ForkStore { parent, state: Mutex::new(ForkState::default()) }
    }

    fn state(&self) -> MutexGuard<'_, ForkState> {
        self.state.lock()
    }

    fn overlay(&self, tape: &TapeName) -> TapeResult<Option<Overlay>> {
        let state = self.state();
        if let Some(closed) = state.closed {
            return Err(TapeError::ForkClosed { tape: tape.clone(), state: closed });
        }
        Ok(state.overlays.get(tape).cloned())
    }
}

impl Overlay {
    /// Whether the parent has nothing to add to `query`: the tape was reset
    /// in the fork, or the query's scope starts at an anchor in the overlay.
    fn hides_parent(&self, query: &TapeQuery) -> bool {
        let has_anchor = |name: Option<&str>| {
            self.entries.iter().any(|e| e.kind == EntryKind::Anchor && name.is_none_or(|n| e.name() == Some(n)))
        };
        self.reset
            || match &query.scope {
                Scope::All => false,
                Scope::LastAnchor => has_anchor(None),
                Scope::AfterAnchor(name) | Scope::BetweenAnchors { start: name, .. } => has_anchor(Some(name)),
            }
    }
}

#[async_trait]
impl TapeStore for ForkStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        check_batch(tape, &entries)?;
        let opened = self.overlay(tape)?.is_some();
        let known = self.state().parent_last_ids.get(tape).copied();
        // The parent's last id is fetched outside the lock, only for a new overlay.
        let base_id = match (opened, known) {
            (true, _) => 0,
            (false, Some(last_id)) => last_id,
            (false, None) => self.parent.stats(tape).await?.last_id,
        };
        let mut state = self.state();
        if let Some(closed) = state.closed {
            return Err(TapeError::ForkClosed { tape: tape.clone(), state: closed });
        }
        let overlay = state.overlays.entry(tape.clone()).or_insert_with(|| Overlay { base_id, ..Overlay::default() });
        let first = overlay.base_id + overlay.entries.len() as u64 + 1;
        let stored: Vec<Entry> = entries.into_iter().enumerate().map(|(i, e)| e.into_entry(first + i as u64)).collect();
        Arc::make_mut(&mut overlay.entries).extend(stored.iter().cloned());
        Ok(stored)
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        if self.overlay(tape)?.is_none() {
            return self.parent.read(tape, query).await;
        }
        // Entries nobody else holds are unwrapped without a copy.
        Ok(self.read_shared(tape, query).await?.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    async fn read_shared(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Arc<Entry>>> {
        let Some(overlay) = self.overlay(tape)? else {
            return self.parent.read_shared(tape, query).await;
        };
        // Only what the query keeps of the overlay is copied.
        let own = |query: &TapeQuery| -> TapeResult<Vec<Arc<Entry>>> {
            Ok(query.apply(tape, &overlay.entries)?.into_iter().map(Arc::new).collect())
        };
        if overlay.hides_parent(query) {
            return own(query);
        }
        if query.scope == Scope::All {
            // Filter each side, then combine in the query's order and cut at the limit.
            let parent = self.parent.read_shared(tape, query).await?;
            let own = own(query)?;
            let combined: Vec<Arc<Entry>> = if query.newest_first {
                own.into_iter().chain(parent).collect()
            } else {
                parent.into_iter().chain(own).collect()
            };
            return Ok(combined.into_iter().take(query.limit.unwrap_or(usize::MAX)).collect());
        }
        // The scope starts in the parent: read it from its opening anchor to its
        // end (open-ended, since a closing anchor may sit in the overlay), then
        // evaluate the whole query over parent + overlay.
        let mut opening = match &query.scope {
            Scope::AfterAnchor(name) | Scope::BetweenAnchors { start: name, .. } => TapeQuery::after_anchor(name),
            _ => TapeQuery::last_anchor(),
        };
        if query.kinds.contains(&EntryKind::Anchor) {
            // The opening anchor survives the filter: the parent reads only what the query keeps.
            opening.kinds = query.kinds.clone();
        }
        let mut entries = self.parent.read_shared(tape, &opening).await?;
        entries.extend(overlay.entries.iter().cloned().map(Arc::new));
        query.apply_shared(tape, &entries)
    }

    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        let Some(overlay) = self.overlay(tape)? else {
            let found = super::store::checked_latest(tape, queries.len(), self.parent.latest(tape, queries).await?)?;
            // An unfiltered query's answer is the parent's last entry: the base
            // of this tape's overlay, so its first write needs no `stats`.
            if let Some(i) = queries.iter().position(|q| *q == TapeQuery::all()) {
                let last_id = found[i].as_ref().map_or(0, |e| e.id);
                self.state().parent_last_ids.insert(tape.clone(), last_id);
            }
            return Ok(found);
        };
        let newest = |query: &TapeQuery| TapeQuery { newest_first: true, limit: Some(1), ..query.clone() };
        let mut found = Vec::with_capacity(queries.len());
        for query in queries {
            if query.scope != Scope::All {
                // A scope may start in the parent and end in the overlay: read it whole.
                found.push(self.read(tape, &newest(query)).await?.into_iter().next());
                continue;
            }
            found.push(newest(query).apply(tape, &overlay.entries)?.into_iter().next());
        }
        if overlay.reset {
            return Ok(found);
        }
        // What the overlay does not hold comes from the parent, in one call.
        let missing: Vec<usize> = (0..queries.len()).filter(|i| found[*i].is_none()).collect();
        if !missing.is_empty() {
            let asked: Vec<TapeQuery> = missing.iter().map(|i| queries[*i].clone()).collect();
            let answers = super::store::checked_latest(tape, asked.len(), self.parent.latest(tape, &asked).await?)?;
            for (i, entry) in missing.into_iter().zip(answers) {
                found[i] = entry;
            }
        }
        Ok(found)
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        let Some(overlay) = self.overlay(tape)? else {
            let stats = self.parent.stats(tape).await?;
            self.state().parent_last_ids.insert(tape.clone(), stats.last_id);
            return Ok(stats);
        };
        let parent = if overlay.reset { TapeStats::default() } else { self.parent.stats(tape).await? };
        let own_anchors: Vec<&Entry> = overlay.entries.iter().filter(|e| e.kind == EntryKind::Anchor).collect();
        Ok(TapeStats {
            entries: parent.entries + overlay.entries.len() as u64,
            anchors: parent.anchors + own_anchors.len() as u64,
            last_id: overlay.entries.last().map_or(parent.last_id, |e| e.id),
            last_anchor: own_anchors.last().map(|e| (*e).clone()).or(parent.last_anchor),
        })
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        let mut tapes: BTreeMap<String, TapeSummary> =
            self.parent.list().await?.into_iter().map(|t| (t.name.clone(), t)).collect();
        for (name, overlay) in self.state().overlays.iter() {
            let summary = tapes.entry(name.to_string()).or_insert_with(|| TapeSummary {
                name: name.to_string(),
                entries: 0,
                updated: None,
            });
            if overlay.reset {
                summary.entries = 0;
                summary.updated = None;
            }
            summary.entries += overlay.entries.len() as u64;
            summary.updated = overlay.entries.last().map(|e| e.date).or(summary.updated);
        }
        Ok(tapes.into_values().collect())
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        let mut state = self.state();
        if let Some(closed) = state.closed {
            return Err(TapeError::ForkClosed { tape: tape.clone(), state: closed });
        }
        state.overlays.insert(tape.clone(), Overlay { base_id: 0, entries: Arc::default(), reset: true });
        Ok(())
    }

    fn location(&self) -> String {
        format!("fork of {}", self.parent.location())
    }
}

/// An open fork of one tape. Drop it without merging and its writes are lost.
pub struct Fork {
    store: Arc<ForkStore>,
    parent: Tape,
    tape: Tape,
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MergeReport {
    /// Entries appended to the parent, per tape.
    pub merged: Vec<(TapeName, usize)>,
    /// The tape is temporary (`temp/…`): nothing was merged.
    pub skipped_temporary: bool,
    /// The root tape's entries as the parent stored them (with their ids),
    /// oldest first; empty when nothing was appended there.
    pub appended: Vec<Entry>,
    /// The root tape was reset by the fork before its entries were appended.
    pub reset: bool,
}

impl Fork {
    pub(crate) fn open(parent: &Tape) -> Fork {
        let store = Arc::new(ForkStore::new(parent.store().clone()));
        let tape = parent.on_store(store.clone());
        Fork { store, parent: parent.clone(), tape }
    }

    /// The forked tape: write the run's entries here.
    pub fn tape(&self) -> &Tape {
        &self.tape
    }

    /// Appends every overlay to the parent store: sidecars first (so a spill
    /// handle is readable by the time the entry naming it lands), then the tape.
    /// A sidecar that fails to merge is recorded on the tape as a `sidecar.merge`
    /// error event and does not block the tape's merge.
    pub async fn merge(&self) -> TapeResult<MergeReport> {
        let root = self.parent.name().clone();
        let overlays = {
            let mut state = self.store.state();
            if let Some(closed) = state.closed {
                return Err(TapeError::ForkClosed { tape: root, state: closed });
            }
            if root.is_temporary() {
                state.closed = Some("discarded");
                state.overlays.clear();
                return Ok(MergeReport { skipped_temporary: true, ..MergeReport::default() });
            }
            state.closed = Some("merging");
            state.overlays.clone()
        };
        let result = self.merge_overlays(&root, overlays).await;
        let mut state = self.store.state();
        state.closed = if result.is_ok() { Some("merged") } else { None };
        result
    }

    async fn merge_overlays(&self, root: &TapeName, overlays: BTreeMap<TapeName, Overlay>) -> TapeResult<MergeReport> {
        let parent = self.parent.store();
        let mut report = MergeReport::default();
        let mut failures = Vec::new();
        let (mut rooted, others): (Vec<_>, Vec<_>) = overlays.into_iter().partition(|(name, _)| name == root);
        for (name, overlay) in others {
            match merge_one(parent.as_ref(), &name, &overlay).await {
                Ok(stored) => {
                    self.store.state().overlays.remove(&name);
                    report.merged.push((name, stored.len()));
                }
                Err(error) if name.belongs_to(root) => failures.push(
                    NewEntry::event(
                        "sidecar.merge",
                        json!({"sidecar": name.as_str(), "status": "error", "error": error.to_string()}),
                    )
                    .hidden_from_context(),
                ),
                Err(error) => return Err(error),
            }
        }
        let mut overlay = rooted.pop().map(|(_, overlay)| overlay).unwrap_or_default();
        Arc::make_mut(&mut overlay.entries).extend(failures.into_iter().map(|e| e.into_entry(0)));
        if overlay.reset || !overlay.entries.is_empty() {
            let stored = merge_one(parent.as_ref(), root, &overlay).await?;
            self.store.state().overlays.remove(root);
            report.merged.insert(0, (root.clone(), stored.len()));
            report.reset = overlay.reset;
            report.appended = stored;
        }
        Ok(report)
    }

    /// Drops every write of the fork.
    pub fn discard(&self) {
        let mut state = self.store.state();
        state.overlays.clear();
        state.closed = Some("discarded");
    }
}

async fn merge_one(parent: &dyn TapeStore, name: &TapeName, overlay: &Overlay) -> TapeResult<Vec<Entry>> {
    if overlay.reset {
        parent.reset(name).await?;
    }
    let entries: Vec<NewEntry> = overlay.entries.iter().map(Entry::to_new).collect();
    parent.append(name, entries).await
}
