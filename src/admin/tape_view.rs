//! A tape as the admin console shows it: pages of entries, the anchors,
//! search and a JSON-lines export, each costing what it returns, not the
//! length of the tape.
//!
//! Ids are per tape, from 1, without gaps (`tape::store`'s guarantee), so
//! a page is an id range: one read bounded by `after_id` and `before_id`,
//! which the SQL stores run as a range of the primary key (SQLite:
//! `tape_id = ? AND entry_id > ? AND entry_id < ? ORDER BY entry_id LIMIT ?`).
//! The anchors are a range of the `(tape_id, kind, entry_id)` index,
//! newest first. A search reads at most [`SEARCH_WINDOW`] entries per call
//! (the text is matched in Rust, on every backend alike) and says where the
//! next call goes on. The export reads [`PAGE`](crate::tape::archive::PAGE) entries at a time.

use crate::tape::archive::JsonlPages;
use crate::tape::summary::summarize;
use crate::tape::{COMPACTION_ANCHOR, entry::format_date};
use crate::tape::{Entry, EntryKind, Tape, TapeError, TapeName, TapeQuery, TapeResult, TapeStore};
use futures::Stream;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

/// The most entries one page holds.
pub const MAX_PAGE: usize = 500;

/// The most entries one search call reads.
pub const SEARCH_WINDOW: u64 = 20_000;

/// One entry as a page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct EntryView {
    pub id: u64,
    /// `message`, `system`, `anchor`, `tool_call`, `tool_result`, `error` or `event`.
    pub kind: String,
    /// RFC 3339, UTC, microseconds.
    pub date: String,
    /// An anchor's or an event's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the entry holds, on one line (as `bub tape show` prints it).
    pub summary: String,
    pub payload: Value,
    pub meta: Value,
}

impl EntryView {
    pub fn of(entry: Entry) -> EntryView {
        EntryView {
            id: entry.id,
            kind: entry.kind.as_str().to_string(),
            date: format_date(&entry.date),
            name: entry.name().map(str::to_string),
            summary: summarize(&entry),
            payload: Value::Object(entry.payload),
            meta: Value::Object(entry.meta),
        }
    }
}

/// A stretch of consecutive entries, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct TapePage {
    pub entries: Vec<EntryView>,
    /// The ids the page covers, both included (0 and 0 for an empty page).
    pub first_id: u64,
    pub last_id: u64,
    /// Entries on the tape when the page was read.
    pub total: u64,
    /// Entries before `first_id`: the previous page is `before = first_id`.
    pub has_older: bool,
    /// Entries after `last_id`: the next page is `before = last_id + 1 + limit`.
    pub has_newer: bool,
}

/// The page of at most `limit` entries (1 to [`MAX_PAGE`]) that ends just
/// before id `before`; the newest page without it (or when it lies past
/// the end). Two reads whatever the tape's length: its stats, then one id range.
pub async fn page(store: &dyn TapeStore, tape: &TapeName, before: Option<u64>, limit: usize) -> TapeResult<TapePage> {
    let limit = limit.clamp(1, MAX_PAGE) as u64;
    let total = store.stats(tape).await?.last_id;
    let end = before.map_or(total + 1, |before| before.min(total + 1)).max(1);
    let start = end.saturating_sub(limit).max(1);
    let entries = if start < end {
        store.read(tape, &TapeQuery::all().after_id(start - 1).before_id(end).limit((end - start) as usize)).await?
    } else {
        Vec::new()
    };
    let (first_id, last_id) = match (entries.first(), entries.last()) {
        (Some(first), Some(last)) => (first.id, last.id),
        _ => (0, 0),
    };
    Ok(TapePage {
        entries: entries.into_iter().map(EntryView::of).collect(),
        first_id,
        last_id,
        total,
        has_older: start > 1,
        has_newer: end <= total,
    })
}

/// One anchor in the list.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct AnchorView {
    pub id: u64,
    pub name: String,
    pub date: String,
    /// Written by a compaction (its summary replaces what came before) or
    /// by the overflow handoff, rather than by a person or a tool.
    pub compaction: bool,
    /// The ids a compaction summarised, first and last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub covers: Option<(u64, u64)>,
    /// The anchor on one line (its name and state).
    pub summary: String,
}

/// Anchors, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct AnchorPage {
    pub anchors: Vec<AnchorView>,
    /// Where the next (older) page starts: `before` for the next call; none
    /// after the oldest anchor.
    pub next_before: Option<u64>,
}

/// At most `limit` (1 to [`MAX_PAGE`]) anchors before id `before` (all
/// when none), newest first: one range of the `(tape_id, kind, entry_id)`
/// index, so a tape of a million entries answers as fast as a short one.
pub async fn anchors(
    store: &dyn TapeStore,
    tape: &TapeName,
    before: Option<u64>,
    limit: usize,
) -> TapeResult<AnchorPage> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut query = TapeQuery::all().kinds([EntryKind::Anchor]).newest_first().limit(limit + 1);
    query.before_id = before;
    let mut found = store.read(tape, &query).await?;
    let more = found.len() > limit;
    found.truncate(limit);
    let next_before = if more { found.last().map(|anchor| anchor.id) } else { None };
    Ok(AnchorPage { anchors: found.iter().map(anchor_view).collect(), next_before })
}

fn anchor_view(entry: &Entry) -> AnchorView {
    let name = entry.name().unwrap_or_default().to_string();
    let compaction = name == COMPACTION_ANCHOR || name == crate::agent::OVERFLOW_ANCHOR;
    let covers = entry.data().and_then(|state| state.get("covers")).and_then(|covers| {
        let ids = covers.as_array()?;
        Some((ids.first()?.as_u64()?, ids.get(1)?.as_u64()?))
    });
    AnchorView {
        id: entry.id,
        date: format_date(&entry.date),
        compaction,
        covers: covers.filter(|_| compaction),
        summary: summarize(entry),
        name,
    }
}

/// Search hits, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SearchPage {
    pub hits: Vec<EntryView>,
    /// Where the search goes on (`before` for the next call): below the
    /// last hit when the page is full, else below the stretch this call
    /// read. None once the start of the tape was read.
    pub next_before: Option<u64>,
    /// The ids this call read, oldest and newest (0 and 0 when none).
    pub searched_from: u64,
    pub searched_to: u64,
}

/// Entries whose payload holds `text` (case-insensitive, as
/// [`TapeQuery::search`] matches), newest first, at most `limit` (1 to
/// [`MAX_PAGE`]), among the [`SEARCH_WINDOW`] entries before `before` (the
/// tape's end when none). A rare word on a long tape takes several calls,
/// each of bounded cost; `next_before` says where the next one starts.
pub async fn search(
    store: &dyn TapeStore,
    tape: &TapeName,
    text: &str,
    before: Option<u64>,
    limit: usize,
) -> TapeResult<SearchPage> {
    let limit = limit.clamp(1, MAX_PAGE);
    let total = store.stats(tape).await?.last_id;
    let end = before.map_or(total + 1, |before| before.min(total + 1)).max(1);
    let start = end.saturating_sub(SEARCH_WINDOW).max(1);
    if start >= end {
        return Ok(SearchPage { hits: Vec::new(), next_before: None, searched_from: 0, searched_to: 0 });
    }
    let query = TapeQuery::search(text).after_id(start - 1).before_id(end).limit(limit);
    let hits = store.read(tape, &query).await?;
    let (next_before, searched_from) = match hits.last() {
        Some(last) if hits.len() == limit => (Some(last.id).filter(|&id| id > 1), last.id),
        _ => (Some(start).filter(|&start| start > 1), start),
    };
    Ok(SearchPage {
        hits: hits.into_iter().map(EntryView::of).collect(),
        next_before,
        searched_from,
        searched_to: end - 1,
    })
}

/// The whole tape as JSON lines (one entry a line, as [`Entry`]
/// serializes: `{id, kind, payload, meta, date}`), oldest first, in chunks
/// of [`PAGE`](crate::tape::archive::PAGE) entries each read by id range: memory stays one
/// chunk whatever the tape's length. For `axum::body::Body::from_stream`.
/// An error ends the stream after the chunks already sent.
pub fn export(
    store: Arc<dyn TapeStore>,
    tape: TapeName,
) -> impl Stream<Item = Result<Vec<u8>, TapeError>> + Send + 'static {
    let pages = JsonlPages::new(&Tape::new(store, tape));
    futures::stream::try_unfold(pages, |mut pages| async move {
        Ok(pages.next().await?.filter(|lines| !lines.is_empty()).map(|lines| (lines, pages)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{InMemoryTapeStore, NewEntry};
    use futures::TryStreamExt;
    use serde_json::json;

    const LONG: u64 = 100_000;

    /// A tape of `n` entries: a message each, an anchor every 10,000 (a
    /// compaction anchor every 30,000), appended in big batches.
    async fn long_tape(store: &dyn TapeStore, tape: &TapeName, n: u64) {
        let mut batch = Vec::new();
        for id in 1..=n {
            batch.push(match id {
                id if id % 30_000 == 0 => {
                    NewEntry::anchor(COMPACTION_ANCHOR, json!({"summary": "so far", "covers": [id - 29_999, id - 1]}))
                }
                id if id % 10_000 == 0 => NewEntry::anchor("phase", json!({"n": id})),
                id if id % 7_777 == 0 => NewEntry::chat("user", format!("needle number {id}")),
                id => NewEntry::chat("user", format!("message {id}")),
            });
            if batch.len() == 10_000 {
                store.append(tape, std::mem::take(&mut batch)).await.unwrap();
            }
        }
        store.append(tape, batch).await.unwrap();
    }

    fn ids(page: &TapePage) -> Vec<u64> {
        page.entries.iter().map(|e| e.id).collect()
    }

    async fn pages_are_id_ranges(store: &dyn TapeStore) {
        let tape = TapeName::new("long").unwrap();
        long_tape(store, &tape, LONG).await;

        let newest = page(store, &tape, None, 50).await.unwrap();
        assert_eq!(ids(&newest), (LONG - 49..=LONG).collect::<Vec<_>>());
        assert_eq!((newest.first_id, newest.last_id, newest.total), (LONG - 49, LONG, LONG));
        assert!(newest.has_older && !newest.has_newer);
        assert_eq!(newest.entries[48].summary, format!("user: message {}", LONG - 1));
        assert_eq!(newest.entries[49].summary, format!("phase {{\"n\":{LONG}}}"));

        let older = page(store, &tape, Some(newest.first_id), 50).await.unwrap();
        assert_eq!((older.first_id, older.last_id), (LONG - 99, LONG - 50));
        assert!(older.has_older && older.has_newer);

        let oldest = page(store, &tape, Some(31), 50).await.unwrap();
        assert_eq!(ids(&oldest), (1..=30).collect::<Vec<_>>(), "the first page is short");
        assert!(!oldest.has_older && oldest.has_newer);
        let none = page(store, &tape, Some(1), 50).await.unwrap();
        assert!(none.entries.is_empty() && !none.has_older && none.has_newer);
        let past = page(store, &tape, Some(LONG * 2), 50).await.unwrap();
        assert_eq!(past.last_id, LONG, "a bound past the end is the newest page");
        assert_eq!(page(store, &tape, None, 10_000).await.unwrap().entries.len(), MAX_PAGE);

        let anchor = &page(store, &tape, Some(30_001), 1).await.unwrap().entries[0];
        assert_eq!((anchor.kind.as_str(), anchor.name.as_deref()), ("anchor", Some(COMPACTION_ANCHOR)));

        let empty = page(store, &TapeName::new("empty").unwrap(), None, 50).await.unwrap();
        assert!(empty.entries.is_empty() && !empty.has_older && !empty.has_newer && empty.total == 0);
    }

    async fn anchors_page_newest_first(store: &dyn TapeStore) {
        let tape = TapeName::new("long").unwrap();
        let first = anchors(store, &tape, None, 4).await.unwrap();
        let seen: Vec<(u64, bool)> = first.anchors.iter().map(|a| (a.id, a.compaction)).collect();
        assert_eq!(seen, vec![(100_000, false), (90_000, true), (80_000, false), (70_000, false)]);
        assert_eq!(first.anchors[1].covers, Some((60_001, 89_999)));
        assert_eq!(first.next_before, Some(70_000));
        let rest = anchors(store, &tape, first.next_before, 100).await.unwrap();
        assert_eq!(rest.anchors.len(), 6);
        assert_eq!(rest.next_before, None);
    }

    async fn search_walks_back_in_bounded_windows(store: &dyn TapeStore) {
        let tape = TapeName::new("long").unwrap();
        // Needles at every multiple of 7,777 but the multiples of 10,000 (anchors there).
        let expected: Vec<u64> = (1..=LONG / 7_777).rev().map(|k| k * 7_777).collect();
        let mut found = Vec::new();
        let mut before = None;
        let mut calls = 0;
        loop {
            let hits = search(store, &tape, "NEEDLE", before, 3).await.unwrap();
            assert!(hits.searched_to + 1 - hits.searched_from <= SEARCH_WINDOW);
            found.extend(hits.hits.iter().map(|h| h.id));
            calls += 1;
            match hits.next_before {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        assert_eq!(found, expected);
        assert!(calls >= (LONG / SEARCH_WINDOW) as usize, "{calls} calls");
    }

    async fn export_is_every_entry_as_a_line(store: Arc<dyn TapeStore>) {
        let tape = TapeName::new("long").unwrap();
        let chunks: Vec<Vec<u8>> = export(store.clone(), tape).try_collect().await.unwrap();
        assert_eq!(chunks.len(), (LONG as usize).div_ceil(crate::tape::archive::PAGE));
        let text = String::from_utf8(chunks.concat()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as u64, LONG);
        let last: Entry = serde_json::from_str(lines[lines.len() - 1]).unwrap();
        assert_eq!(last.id, LONG);
        let empty: Vec<Vec<u8>> = export(store, TapeName::new("empty").unwrap()).try_collect().await.unwrap();
        assert!(empty.is_empty());
    }

    async fn every_case(store: Arc<dyn TapeStore>) {
        pages_are_id_ranges(store.as_ref()).await;
        anchors_page_newest_first(store.as_ref()).await;
        search_walks_back_in_bounded_windows(store.as_ref()).await;
        export_is_every_entry_as_a_line(store).await;
    }

    #[tokio::test]
    async fn a_long_tape_in_memory_pages_searches_and_exports() {
        every_case(Arc::new(InMemoryTapeStore::new())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_tape_in_sqlite_pages_searches_and_exports() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::db::SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        every_case(Arc::new(store)).await;
    }

    #[test]
    fn the_views_have_schemas_for_the_api() {
        for schema in
            [schemars::schema_for!(TapePage), schemars::schema_for!(AnchorPage), schemars::schema_for!(SearchPage)]
        {
            assert!(serde_json::to_value(schema).unwrap().get("properties").is_some());
        }
    }
}
