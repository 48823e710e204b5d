//! Setup shared by the tape benches: realistic entries and cached SQLite tapes.
//!
//! A tape of `len` entries is built once, with batch appends, into
//! `$CARGO_TARGET_DIR/bench-data/tape-<len>-v<layout>.db` (`target/` when the
//! variable is unset) and reused by later runs while `tape.info()` still shows
//! the expected shape. Every cached tape has its last anchor [`ANCHOR_BACK`] entries
//! before its end, so its model context is the same size whatever its length.

use bub::db::{Durability, SqliteTapeStore};
use bub::tape::{NewEntry, Tape, TapeName};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// How far back the last anchor of a cached tape is.
pub const ANCHOR_BACK: u64 = 50;

/// Entries per `append_all` call while building a tape.
const BATCH: u64 = 5_000;

/// Part of the cached file names: bump it when [`entry_at`] changes.
const LAYOUT: u32 = 1;

/// Older anchors (handoffs) are spread this many entries apart.
const ANCHOR_EVERY: u64 = 1_000;

const FILLER: &str = "The customer reports that the order still shows as pending after the \
    payment cleared; please check the warehouse queue, the carrier hand-off and whether the \
    address change from last week was applied before the label was printed. ";

/// Where cached databases and scratch stores live.
pub fn data_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    PathBuf::from(target).join("bench-data")
}

/// The tape every cached database holds.
pub fn tape_name() -> TapeName {
    TapeName::new("bench").expect("a valid tape name")
}

/// Text of about `len` characters that differs from entry to entry.
pub fn text(id: u64, len: usize) -> String {
    let mut text = format!("#{id} ");
    while text.len() < len {
        text.push_str(FILLER);
    }
    text.truncate(len);
    text
}

/// The entry with id `id` on a cached tape of `len` entries: an anchor at id 1,
/// every [`ANCHOR_EVERY`] ids and [`ANCHOR_BACK`] ids before the end, each
/// followed by its `handoff` event; otherwise turns of a user message, a tool
/// call, its result, an assistant reply and a `run` event.
pub fn entry_at(id: u64, len: u64) -> NewEntry {
    let last_anchor = len - ANCHOR_BACK;
    let is_anchor = |id: u64| id == 1 || id == last_anchor || (id.is_multiple_of(ANCHOR_EVERY) && id < last_anchor);
    if is_anchor(id) {
        let state = json!({"owner": "agent", "summary": text(id, 200)});
        return NewEntry::anchor(format!("phase/{id}"), state);
    }
    if is_anchor(id - 1) {
        return NewEntry::event("handoff", json!({"name": format!("phase/{}", id - 1)}));
    }
    match id % 5 {
        0 => NewEntry::chat("user", text(id, 200)),
        1 => NewEntry::tool_call(vec![json!({
            "id": format!("call_{id}"),
            "type": "function",
            "function": {"name": "fs_read", "arguments": format!("{{\"path\":\"orders/{id}.json\"}}")},
        })]),
        2 => NewEntry::tool_result(vec![json!(text(id, 400))]),
        3 => NewEntry::chat("assistant", text(id, 200)),
        _ => NewEntry::event("run", json!({"status": "ok", "usage": {"total_tokens": 1_000 + id % 997}})),
    }
}

/// A tape of `len` entries (at least `ANCHOR_BACK + 2`) in its cached database,
/// built first if the cache is missing or has another shape.
pub async fn cached_tape(len: u64) -> Tape {
    let path = data_dir().join(format!("tape-{len}-v{LAYOUT}.db"));
    if path.exists() {
        let (store, tape) = open(&path).await;
        let info = tape.info().await.expect("tape info");
        if info.entries == len && info.entries_since_last_anchor == ANCHOR_BACK {
            return tape;
        }
        eprintln!("{} has another shape; rebuilding", path.display());
        store.close().await;
    }
    build(&path, len).await;
    open(&path).await.1
}

async fn open(path: &Path) -> (SqliteTapeStore, Tape) {
    let store = SqliteTapeStore::open_with(path, Durability::Normal).await.expect("open the bench database");
    let tape = Tape::new(Arc::new(store.clone()), tape_name());
    (store, tape)
}

/// The database file and its WAL and shared-memory files.
fn db_files(path: &Path) -> [PathBuf; 3] {
    ["", "-wal", "-shm"].map(|suffix| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    })
}

/// Builds into a scratch file and renames it, so an interrupted build is never reused.
async fn build(path: &Path, len: u64) {
    let partial = path.with_extension("db.partial");
    for file in db_files(path).into_iter().chain(db_files(&partial)) {
        let _ = std::fs::remove_file(file);
    }
    eprintln!("building a {len}-entry tape in {} ...", path.display());
    let started = Instant::now();
    let (store, tape) = open(&partial).await;
    let mut id = 1;
    while id <= len {
        let end = (id + BATCH).min(len + 1);
        let batch = (id..end).map(|id| entry_at(id, len)).collect();
        tape.append_all(batch).await.expect("append a batch");
        id = end;
    }
    store.close().await;
    for (from, to) in db_files(&partial).into_iter().zip(db_files(path)) {
        if from.exists() {
            std::fs::rename(from, to).expect("move the built database into place");
        }
    }
    eprintln!("built a {len}-entry tape in {:.1} s", started.elapsed().as_secs_f64());
}
