//! Property: whatever mix of concurrent writers and batch sizes, ids on a tape
//! are exactly 1..=n and every batch occupies consecutive ids.

use crate::support;

use bub::db::{PgTapeStore, SqliteTapeStore};
use bub::tape::{NewEntry, Tape, TapeName, TapeQuery, TapeStore};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;
use support::TestStore;

/// Each writer appends its batches in order; batch sizes are the inner values.
async fn check(store: TestStore, writers: Vec<Vec<usize>>) {
    let tape = store.tape("shared");
    let total: usize = writers.iter().flatten().sum();
    let tasks: Vec<_> = writers
        .into_iter()
        .enumerate()
        .map(|(writer, batches)| {
            let tape = tape.clone();
            tokio::spawn(async move {
                for (batch, size) in batches.into_iter().enumerate() {
                    let tag = format!("{writer}/{batch}");
                    let entries =
                        (0..size).map(|_| NewEntry::chat("user", "x").with_meta("batch", json!(tag))).collect();
                    let stored = tape.append_all(entries).await.expect("append");
                    assert_eq!(stored.len(), size);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    let entries = tape.read(&TapeQuery::all()).await.expect("read");
    let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=total as u64).collect::<Vec<_>>());
    // Runs of equal batch tags must be whole batches: no tag appears in two runs.
    let mut seen = std::collections::HashSet::new();
    let mut previous = None;
    for entry in &entries {
        let tag = entry.meta["batch"].as_str().expect("tag").to_string();
        if previous.as_ref() != Some(&tag) {
            assert!(seen.insert(tag.clone()), "batch {tag} was interleaved with another");
            previous = Some(tag);
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn memory_ids_stay_gapless_under_concurrent_appends(writers in vec(vec(1usize..6, 1..8), 1..8)) {
        runtime().block_on(async { check(support::memory_store().await, writers).await });
    }

    #[test]
    fn sqlite_ids_stay_gapless_under_concurrent_appends(writers in vec(vec(1usize..6, 1..8), 1..8)) {
        runtime().block_on(async { check(support::sqlite_store().await, writers).await });
    }

    #[test]
    fn postgres_ids_stay_gapless_under_concurrent_appends(writers in vec(vec(1usize..6, 1..8), 1..8)) {
        runtime().block_on(async { check(support::postgres_store().await, writers).await });
    }
}

/// Two stores of one database append to one tape at once, 100 batches of
/// 1 to 3 entries each: ids stay gapless and every batch whole.
async fn two_stores_append_without_gaps(first: Arc<dyn TapeStore>, second: Arc<dyn TapeStore>) {
    let name = TapeName::new("shared").expect("name");
    let writers: Vec<_> = [first.clone(), second]
        .into_iter()
        .enumerate()
        .map(|(n, store)| {
            let tape = Tape::new(store, name.clone());
            tokio::spawn(async move {
                for i in 0..100 {
                    let batch = (0..1 + i % 3).map(|_| NewEntry::chat("user", format!("{n}"))).collect();
                    tape.append_all(batch).await.expect("append");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    let entries = Tape::new(first, name).read(&TapeQuery::all()).await.expect("read");
    let ids: Vec<u64> = entries.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    assert_eq!(ids.len(), 2 * (34 + 33 * 2 + 33 * 3));
}

/// Two stores on one file behave like two processes sharing a database (an
/// operator's `bub` beside the gateway): SQLite's lock keeps ids gapless.
#[test]
fn two_stores_on_one_file_append_without_gaps() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bub.db");
        let first = Arc::new(SqliteTapeStore::open(&path).await.expect("open"));
        let second = Arc::new(SqliteTapeStore::open(&path).await.expect("open again"));
        two_stores_append_without_gaps(first, second).await;
    });
}

/// Two pools on one PostgreSQL database, as two replicas: the tape's row
/// lock keeps ids gapless.
#[test]
fn two_stores_on_one_postgres_database_append_without_gaps() {
    runtime().block_on(async {
        let url = support::postgres::fresh_database().await;
        let first = Arc::new(PgTapeStore::connect(&url).await.expect("connect"));
        let second = Arc::new(PgTapeStore::connect(&url).await.expect("connect again"));
        two_stores_append_without_gaps(first, second).await;
    });
}
