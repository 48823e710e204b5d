//! Tape layer speed on the SQLite store.
//!
//! - `context_build/{100,1000000}`: `tape.context()` on tapes of 100 and
//!   1,000,000 entries whose last anchor is 50 entries back. Target: the long
//!   tape costs at most 2x the short one (anchor-scoped reads must not depend
//!   on the tape's length).
//! - `console_page/{newest,middle}/{100,1000000}`: what the admin console
//!   reads to show a page of 100 entries of a tape (`GET /admin/api/tape`:
//!   the tape's stats, then one id range), the newest page and one in the
//!   middle. Target: a 1,000,000-entry tape opens as fast as a short one.
//! - `append/{full,normal}/{1_writer,8_writers}`: appends of one entry per
//!   call, each awaited; criterion reports entries/s. Target: at least 5,000/s
//!   from one writer with `Durability::Full` (the default). Eight writers run as
//!   tokio tasks on eight tapes of one store; `Normal` is there for comparison.
//! - `append_postgres/{full,normal}/{1_writer,8_writers}`: the same appends on
//!   the PostgreSQL store (`PgTapeStore`, one pool), on a throwaway local
//!   cluster with `fsync` on (`tests/it/support/postgres.rs`: PostgreSQL 15's
//!   server binaries, from `pg_config --bindir` or `BUB_PG_BINDIR`; run as
//!   the `postgres` user when root). `full` waits for the commit's WAL flush;
//!   `normal` is `synchronous_commit = off`.
//!
//! Run: `cargo bench --bench tape` (`-- append` for the appends alone). The
//! 1,000,000-entry database is built once into `target/bench-data/` (see
//! `support`) and reused afterwards.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

mod support;

#[allow(dead_code)]
#[path = "../tests/it/support/postgres.rs"]
mod postgres;

use bub::db::{Durability, PgTapeStore, SqliteTapeStore};
use bub::tape::{NewEntry, Tape, TapeName, TapeQuery, TapeStore};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime")
}

fn context_build(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("context_build");
    group.sample_size(20).measurement_time(Duration::from_secs(5));
    for len in [100, 1_000_000] {
        let tape = rt.block_on(support::cached_tape(len));
        let context = rt.block_on(tape.context()).expect("context");
        // anchor note + 4 of every 5 turn entries (run events stay out)
        assert!((40..=support::ANCHOR_BACK as usize).contains(&context.len()));
        group.bench_with_input(BenchmarkId::from_parameter(len), &tape, |b, tape| {
            b.to_async(&rt).iter(|| async { black_box(tape.context().await.expect("context")) });
        });
    }
    group.finish();
}

/// The two reads of the console's tape page (`admin::tape_view::page`):
/// stats, then the ids `[end - 100, end)`.
async fn console_page(tape: &Tape, middle: bool) -> usize {
    let store = tape.store();
    let total = store.stats(tape.name()).await.expect("stats").last_id;
    let end = if middle { total / 2 } else { total + 1 };
    let start = end.saturating_sub(100).max(1);
    let query = TapeQuery::all().after_id(start - 1).before_id(end).limit((end - start) as usize);
    store.read(tape.name(), &query).await.expect("a page").len()
}

fn console_pages(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("console_page");
    group.sample_size(50).measurement_time(Duration::from_secs(5));
    for len in [100, 1_000_000] {
        let tape = rt.block_on(support::cached_tape(len));
        for (which, middle) in [("newest", false), ("middle", true)] {
            let read = rt.block_on(console_page(&tape, middle));
            assert!(read >= 49, "a page of entries: {read}");
            group.bench_with_input(BenchmarkId::new(which, len), &tape, |b, tape| {
                b.to_async(&rt).iter(|| async { black_box(console_page(tape, middle).await) });
            });
        }
    }
    group.finish();
}

/// Appends `per_writer` entries from each of `writers` tasks, one awaited call each.
async fn append_from(tapes: &[Tape], per_writer: u64) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = tapes
        .iter()
        .cloned()
        .map(|tape| {
            tokio::spawn(async move {
                for id in 0..per_writer {
                    let entry = NewEntry::chat("user", support::text(id, 200));
                    tape.append(entry).await.expect("append");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer task");
    }
    started.elapsed()
}

/// The `group` of one-writer and eight-writer appends on `store`.
fn appends_on(c: &mut Criterion, rt: &Runtime, group: &str, store: Arc<dyn TapeStore>) {
    let mut group = c.benchmark_group(group);
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    for writers in [1, 8] {
        let tapes: Vec<Tape> = (0..writers)
            .map(|n| {
                let name = TapeName::new(format!("writer-{n}")).expect("tape name");
                Tape::new(store.clone(), name)
            })
            .collect();
        group.throughput(Throughput::Elements(writers));
        let id = if writers == 1 { "1_writer" } else { "8_writers" };
        group.bench_function(id, |b| {
            b.to_async(rt).iter_custom(|iters| append_from(&tapes, iters));
        });
    }
    group.finish();
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    std::fs::create_dir_all(support::data_dir()).expect("bench data directory");
    for (label, durability) in [("full", Durability::Full), ("normal", Durability::Normal)] {
        let dir = tempfile::tempdir_in(support::data_dir()).expect("scratch directory");
        let store = rt
            .block_on(SqliteTapeStore::open_with(dir.path().join("append.db"), durability))
            .expect("open a scratch store");
        appends_on(c, &rt, &format!("append/{label}"), Arc::new(store.clone()));
        rt.block_on(store.close());
    }
}

fn append_postgres(c: &mut Criterion) {
    let rt = runtime();
    let cluster = postgres::PgCluster::start_durable();
    for (label, durability) in [("full", Durability::Full), ("normal", Durability::Normal)] {
        let url = rt.block_on(cluster.database());
        let store = rt.block_on(PgTapeStore::connect_with(&url, durability)).expect("connect to the scratch database");
        appends_on(c, &rt, &format!("append_postgres/{label}"), Arc::new(store.clone()));
        rt.block_on(store.close());
    }
    cluster.stop();
}

criterion_group!(benches, context_build, console_pages, append, append_postgres);
criterion_main!(benches);
