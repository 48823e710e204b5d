//! The context cache: each busy tape's latest context entries, decoded, so
//! a turn reads from the database only what was appended since the last one.
//!
//! Every model call reads its context: the last anchor and the messages,
//! tool calls and results after it (with a compaction's kept turns, the
//! entries from its `keep_from`). On a long chat that is thousands of
//! entries, and decoding their JSON was most of a turn's CPU. A store keeps
//! here, per tape, those entries (a *tail*) with the tape's last id and its
//! reset count, and each read asks the database only for the entries after
//! that id (one indexed range read, usually a turn's few entries) and the
//! current reset count; a reset from any process (a `bub tape reset` beside
//! the gateway, another replica) changes the count and drops the tail.
//! Entries are immutable and ids gapless, so "the tail up to id N, plus what
//! the database has after N" is exactly what a read of the database gives.
//!
//! A tail covers `[from, last]`: every entry of [`CONTEXT_KINDS`] with an id
//! in it, where `from` is the last anchor's id or, for a compaction anchor,
//! the first entry it kept (`keep_from`). A new anchor among the appended
//! entries moves `from` forward (the entries before it are dropped).
//!
//! Memory is bounded by the decoded entries' heap (see [`heap_bytes`]),
//! reported as the gauge `bub_context_cache_bytes`: past the budget the
//! least recently read tapes are dropped (they are read again from the
//! database when their chat speaks next). A tape whose tail alone is larger
//! than the budget is served but not kept, and so is a short one (under
//! [`MIN_KEPT_ENTRIES`]): it is cheap to read whole.

use crate::tape::entry::{Entry, EntryKind, JsonObject};
use crate::tape::error::TapeResult;
use crate::tape::handle::kept_from;
use crate::tape::name::TapeName;
use crate::tape::query::{CONTEXT_KINDS, Scope, TapeQuery};
use parking_lot::{Mutex, MutexGuard};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The default budget: enough for the contexts of a few dozen busy long
/// chats, small beside the rest of a gateway's memory.
pub const DEFAULT_BUDGET_BYTES: usize = 16 * 1024 * 1024;

/// Contexts shorter than this are not kept: decoding them costs a turn
/// little (about a tenth of a fresh turn's CPU at this size), and a gateway
/// with thousands of short chats keeps its memory for other things.
pub const MIN_KEPT_ENTRIES: usize = 256;

/// A tape's position as the database last showed it: what a refresh asks
/// for the entries after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// How often the tape was reset (a column of the tape's row).
    pub resets: i64,
    /// The tape's last entry id (of any kind).
    pub last_id: u64,
}

/// An entry with the heap it takes.
pub struct Sized {
    pub entry: Entry,
    pub bytes: usize,
}

/// What the database answered to "the entries after `last_id`": the tape's
/// current position and the new entries of [`CONTEXT_KINDS`], in id order.
pub struct Refresh {
    pub position: Position,
    pub entries: Vec<Sized>,
}

/// Per-tape tails of decoded context entries, bounded by bytes. Cheap to
/// clone; clones share the cache.
#[derive(Clone)]
pub struct ContextCache {
    budget: usize,
    min_entries: usize,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    tails: HashMap<TapeName, Tail>,
    bytes: usize,
    clock: u64,
}

struct Tail {
    position: Position,
    /// The first id covered.
    from: u64,
    entries: Vec<Arc<Entry>>,
    sizes: Vec<usize>,
    bytes: usize,
    used: u64,
}

impl State {
    /// Drops the tail of `tape`; whether there was one.
    fn drop_tail(&mut self, tape: &TapeName) -> bool {
        let Some(tail) = self.tails.remove(tape) else { return false };
        self.bytes -= tail.bytes;
        ContextCache::report(self);
        true
    }
}

impl Tail {
    /// Drops the entries before `from`.
    fn trim(&mut self, from: u64) {
        let cut = self.entries.partition_point(|e| e.id < from);
        let freed: usize = self.sizes.drain(..cut).sum();
        self.entries.drain(..cut);
        self.bytes -= freed;
        self.from = from;
    }
}

impl ContextCache {
    /// A cache of at most `budget` bytes that keeps tails of at least
    /// `min_entries` entries.
    pub fn new(budget: usize, min_entries: usize) -> ContextCache {
        ContextCache { budget, min_entries, state: Arc::default() }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// `bub_context_cache_bytes`: what the cache holds now.
    fn report(state: &State) {
        metrics::gauge!("bub_context_cache_bytes").set(state.bytes as f64);
    }

    /// Whether the cache can answer `query` once its tape's tail is fresh:
    /// oldest first, only context kinds, from the last anchor or after an
    /// id (the entries a compaction kept).
    pub fn answers(query: &TapeQuery) -> bool {
        let kinds = !query.kinds.is_empty() && query.kinds.iter().all(|kind| CONTEXT_KINDS.contains(kind));
        let scope = match query.scope {
            Scope::LastAnchor => true,
            Scope::All => query.after_id.is_some(),
            Scope::AfterAnchor(_) | Scope::BetweenAnchors { .. } => false,
        };
        kinds && scope && !query.newest_first
    }

    /// Where the cached tail of `tape` ends, if there is one.
    pub fn position(&self, tape: &TapeName) -> Option<Position> {
        self.state().tails.get(tape).map(|tail| tail.position)
    }

    /// Keeps `entries` (every context-kind entry from `from` on, at
    /// `position`) as the tail of `tape`, replacing any.
    pub fn install(&self, tape: &TapeName, position: Position, from: u64, entries: Vec<Sized>) {
        let mut state = self.state();
        state.clock += 1;
        let used = state.clock;
        let mut tail = Tail { position, from, entries: Vec::new(), sizes: Vec::new(), bytes: 0, used };
        push_all(&mut tail, entries);
        state.bytes += tail.bytes;
        if let Some(old) = state.tails.insert(tape.clone(), tail) {
            state.bytes -= old.bytes;
        }
        Self::report(&state);
    }

    /// Adds what a refresh from `base` found. Returns false when the tail
    /// cannot take it (gone, moved on by another read, reset, or a new
    /// anchor that keeps entries from before the tail): the caller reloads.
    pub fn extend(&self, tape: &TapeName, base: Position, refresh: Refresh) -> bool {
        let mut guard = self.state();
        let state = &mut *guard;
        let Some(tail) = state.tails.get_mut(tape) else { return false };
        let (now, seen) = (tail.position, refresh.position);
        if now.resets == seen.resets && now.last_id >= seen.last_id {
            return true; // another read brought it this far already
        }
        let anchor = refresh.entries.iter().rev().find(|e| e.entry.kind == EntryKind::Anchor);
        let start = anchor.map(|anchor| tail_start(&anchor.entry));
        if now != base || seen.resets != base.resets || start.is_some_and(|from| from < tail.from) {
            state.drop_tail(tape);
            return false;
        }
        let before = tail.bytes;
        if let Some(from) = start {
            tail.trim(from);
        }
        let from = tail.from;
        push_all(tail, refresh.entries.into_iter().filter(|e| e.entry.id >= from));
        tail.position = seen;
        state.bytes = state.bytes - before + tail.bytes;
        Self::report(state);
        true
    }

    /// Answers `query` from the tail of `tape` (see [`ContextCache::answers`]),
    /// `None` when there is no tail or it does not reach back far enough.
    /// Then trims the cache to its budget, the least recently read tapes first.
    pub fn read(&self, tape: &TapeName, query: &TapeQuery) -> Option<TapeResult<Vec<Arc<Entry>>>> {
        let mut state = self.state();
        state.clock += 1;
        let clock = state.clock;
        let tail = state.tails.get_mut(tape)?;
        if query.after_id.is_some_and(|after| after.saturating_add(1) < tail.from) {
            return None;
        }
        tail.used = clock;
        let found = query.apply_shared(tape, &tail.entries);
        if tail.entries.len() < self.min_entries {
            // Answered from what was just loaded, then let go.
            state.drop_tail(tape);
        } else if self.evict(&mut state) {
            Self::report(&state);
        }
        Some(found)
    }

    /// Forgets the tail of `tape` (after this process reset it).
    pub fn forget(&self, tape: &TapeName) {
        self.state().drop_tail(tape);
    }

    /// The estimated bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.state().bytes
    }

    /// Drops the least recently read tails while past the budget; whether it did.
    fn evict(&self, state: &mut State) -> bool {
        if state.bytes <= self.budget {
            return false;
        }
        // Down to three quarters, so the next few reads do not evict again:
        // the oldest tails whose bytes make up the excess go, in one pass.
        let excess = state.bytes - self.budget / 4 * 3;
        let mut by_age: Vec<(u64, usize)> = state.tails.values().map(|tail| (tail.used, tail.bytes)).collect();
        by_age.sort_unstable();
        let mut freed = 0;
        let cutoff = by_age.iter().find_map(|&(used, bytes)| {
            freed += bytes;
            (freed >= excess).then_some(used)
        });
        let cutoff = cutoff.unwrap_or(u64::MAX);
        state.tails.retain(|_, tail| tail.used > cutoff);
        state.bytes = state.tails.values().map(|tail| tail.bytes).sum();
        true
    }
}

fn push_all(tail: &mut Tail, entries: impl IntoIterator<Item = Sized>) {
    for Sized { entry, bytes } in entries {
        tail.bytes += bytes;
        tail.sizes.push(bytes);
        tail.entries.push(Arc::new(entry));
    }
}

/// Where the tail of a tape whose last anchor is `anchor` starts: at the
/// anchor, or at the first entry it kept when it is a compaction's (those
/// entries, before the anchor, are read too).
pub fn tail_start(anchor: &Entry) -> u64 {
    match kept_from(anchor) {
        Some(keep_from) if keep_from > 0 && keep_from < anchor.id => keep_from,
        _ => anchor.id,
    }
}

impl Sized {
    /// `entry` with the heap it takes (see [`heap_bytes`]).
    pub fn new(entry: Entry) -> Sized {
        let bytes = heap_bytes(&entry);
        Sized { entry, bytes }
    }
}

/// The heap a decoded entry takes, near enough to budget by: its `Arc`
/// and struct, each string's buffer, each array's slots, and each object's
/// fields (an ordered map: a bucket of hash, key and value per field, and
/// a table of indices).
pub fn heap_bytes(entry: &Entry) -> usize {
    use std::mem::size_of;
    fn value(item: &Value) -> usize {
        match item {
            Value::String(text) => text.capacity(),
            Value::Array(items) => items.capacity() * size_of::<Value>() + items.iter().map(value).sum::<usize>(),
            Value::Object(map) => object(map),
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
        }
    }
    fn object(map: &JsonObject) -> usize {
        if map.is_empty() {
            return 0;
        }
        let bucket = size_of::<u64>() + size_of::<String>() + size_of::<Value>();
        let index = 2 * size_of::<usize>();
        map.len() * (bucket + index) + map.iter().map(|(key, item)| key.capacity() + value(item)).sum::<usize>()
    }
    2 * size_of::<usize>() + size_of::<Entry>() + object(&entry.payload) + object(&entry.meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::entry::NewEntry;
    use serde_json::json;

    fn sized(entry: NewEntry, id: u64) -> Sized {
        Sized { entry: entry.into_entry(id), bytes: 1000 }
    }

    fn tape(name: &str) -> TapeName {
        TapeName::new(name).unwrap()
    }

    fn ids(found: Option<TapeResult<Vec<Arc<Entry>>>>) -> Vec<u64> {
        found.unwrap().unwrap().iter().map(|e| e.id).collect()
    }

    #[test]
    fn a_new_anchor_moves_the_tail_and_a_compaction_keeps_its_turns() {
        let cache = ContextCache::new(1 << 20, 1);
        let t = tape("t");
        let at = |last_id| Position { resets: 0, last_id };
        cache.install(
            &t,
            at(3),
            1,
            vec![sized(NewEntry::anchor("a", json!({})), 1), sized(NewEntry::chat("user", "x"), 3)],
        );
        let compaction = NewEntry::anchor("auto_handoff/compaction", json!({"summary": "s", "keep_from": 3}));
        let refresh =
            Refresh { position: at(6), entries: vec![sized(compaction, 5), sized(NewEntry::chat("user", "y"), 6)] };
        assert!(cache.extend(&t, at(3), refresh));
        assert_eq!(ids(cache.read(&t, &TapeQuery::context())), vec![5, 6]);
        assert_eq!(ids(cache.read(&t, &TapeQuery::all().kinds(CONTEXT_KINDS).after_id(2))), vec![3, 5, 6]);
        assert!(cache.read(&t, &TapeQuery::all().kinds(CONTEXT_KINDS).after_id(1)).is_none(), "1 was dropped");
        assert_eq!(cache.bytes(), 3000);
    }

    #[test]
    fn a_query_after_the_largest_id_finds_nothing() {
        let cache = ContextCache::new(1 << 20, 1);
        let t = tape("t");
        cache.install(&t, Position { resets: 0, last_id: 1 }, 1, vec![sized(NewEntry::anchor("a", json!({})), 1)]);
        let query = TapeQuery::all().kinds(CONTEXT_KINDS).after_id(u64::MAX);
        assert_eq!(ids(cache.read(&t, &query)), Vec::<u64>::new());
    }

    #[test]
    fn a_reset_or_a_stale_base_drops_the_tail() {
        let cache = ContextCache::new(1 << 20, 1);
        let t = tape("t");
        cache.install(&t, Position { resets: 0, last_id: 1 }, 1, vec![sized(NewEntry::anchor("a", json!({})), 1)]);
        let reset = Refresh { position: Position { resets: 1, last_id: 4 }, entries: Vec::new() };
        assert!(!cache.extend(&t, Position { resets: 0, last_id: 1 }, reset));
        assert!(cache.position(&t).is_none());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn past_the_budget_the_least_recently_read_tape_goes() {
        let cache = ContextCache::new(2500, 1);
        let (a, b, c) = (tape("a"), tape("b"), tape("c"));
        for name in [&a, &b, &c] {
            cache.install(
                name,
                Position { resets: 0, last_id: 1 },
                1,
                vec![sized(NewEntry::anchor("a", json!({})), 1)],
            );
            cache.read(name, &TapeQuery::context());
        }
        // Three tails of 1000 bytes passed 2500: down to 1875, the oldest (a, then b) went.
        assert!(cache.position(&a).is_none() && cache.position(&b).is_none());
        assert!(cache.position(&c).is_some());
    }
}
