//! When the writing thread checkpoints the write-ahead log.
//!
//! In WAL mode every commit appends its pages to the log, and a checkpoint
//! copies them back into the database file so the log can start over.
//! SQLite's default runs the checkpoint inside the commit that takes the log
//! past 1,000 pages, so the writes of that commit, and every write queued
//! behind it, wait for megabytes to be copied and the database file to be
//! synced (measured under load: 10–17 ms stalls). Here the writing thread
//! watches the log's size after each commit (SQLite's WAL hook) and
//! checkpoints between groups instead: once the log passes [`PAGES`], at the
//! first moment no write is queued, or regardless once it passes
//! [`FORCED_PAGES`]. The writes just committed are answered before it starts.
//!
//! A checkpointing thread of its own does not work: under steady writes the
//! log is never wholly copied at the moment a write begins, so it never
//! starts over and grows until some commit copies all of it. On the writing
//! thread no write runs during the checkpoint, so the next one restarts the
//! log.

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use std::cell::Cell;
use std::ffi::c_int;

/// Log pages after which a checkpoint runs when the writer is idle: small
/// checkpoints are short stalls. Measured at 1,000 turns/s after ~20 turns
/// per session (gateway time p99): 13 ms with SQLite's 1,000-page
/// checkpoints inside commits; between groups, 8.5–11 ms at 500 pages,
/// 7–8.5 ms at 100, and no better at 50 (with 10% less throughput).
pub(super) const PAGES: i32 = 100;

/// Log pages after which a checkpoint runs even with writes queued, so a
/// writer that is never idle still keeps its log short.
pub(super) const FORCED_PAGES: i32 = 4 * PAGES;

thread_local! {
    /// Pages in the log after the last commit on this thread's connection.
    static LOG_PAGES: Cell<i32> = const { Cell::new(0) };
}

fn note_log_pages(_: &Wal, pages: c_int) -> rusqlite::Result<()> {
    LOG_PAGES.set(pages);
    Ok(())
}

/// Makes `conn`'s commits report the log's size to this thread, instead of
/// checkpointing by themselves. Call on the thread that will commit.
pub(super) fn watch(conn: &Connection) {
    conn.wal_hook(Some(note_log_pages));
}

/// Whether the log is long enough for a checkpoint: `Some(forced)`.
pub(super) fn due() -> Option<bool> {
    let pages = LOG_PAGES.get();
    (pages >= PAGES).then_some(pages >= FORCED_PAGES)
}

/// Copies the log into the database file; the next write starts it over.
pub(super) fn run(conn: &Connection) {
    let outcome =
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?)));
    match outcome {
        Ok((log, copied)) => {
            tracing::trace!(log, copied, "checkpointed the write-ahead log");
            LOG_PAGES.set(0);
        }
        // The log keeps growing and the next idle moment tries again.
        Err(error) => tracing::warn!(%error, "checkpointing the write-ahead log failed"),
    }
}
