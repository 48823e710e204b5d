//! Heap used while building a model context, for a short and a long tape.
//!
//! Target: the memory `tape.context()` needs does not grow with the length of
//! the tape. Both tapes (100 and 1,000,000 entries, from the cached databases
//! of `support`) have their last anchor 50 entries back, so the peak heap growth
//! during one call should be about the same for both (ratio near 1).
//!
//! A counting global allocator tracks live and peak bytes of the Rust heap (all
//! threads, so the database threads count); SQLite's own allocations (page
//! cache, statements) come from its `sqlite3_memory_highwater` counter.
//!
//! Run: `cargo bench --bench tape_memory`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

mod support;

use bub::tape::Tape;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use tokio::runtime::Runtime;

/// Calls measured per tape after the first two; the median is reported.
const RUNS: usize = 7;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
#[expect(unsafe_code, reason = "a global allocator is an unsafe trait; this one counts what it forwards")]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's promises for `alloc`, passed on unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's promises for `alloc_zeroed`, passed on unchanged.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator, with this layout.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from `System` through this allocator; the caller's promises for `realloc`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            match new_size.checked_sub(layout.size()) {
                Some(more) => grew(more),
                None => {
                    CURRENT.fetch_sub(layout.size() - new_size, Relaxed);
                }
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// SQLite's own heap: it allocates with the C `malloc`, which the allocator
/// above never sees. Returns (live bytes, high-water mark), resetting the mark
/// to the live bytes when `reset`.
#[expect(unsafe_code, reason = "libsqlite3-sys offers these counters only as raw C functions")]
fn sqlite_heap(reset: bool) -> (usize, usize) {
    // SAFETY: both are thread-safe counters of the SQLite library rusqlite links.
    let (used, high) =
        unsafe { (libsqlite3_sys::sqlite3_memory_used(), libsqlite3_sys::sqlite3_memory_highwater(i32::from(reset))) };
    (used as usize, high as usize)
}

struct Measured {
    heap_peak: usize,
    sqlite_peak: usize,
    messages: usize,
}

/// Peak growth of the Rust heap and of SQLite's heap over what was live
/// before one `context()` call.
fn measure(rt: &Runtime, tape: &Tape) -> Measured {
    let (sqlite_before, _) = sqlite_heap(true);
    let before = CURRENT.load(Relaxed);
    PEAK.store(before, Relaxed);
    let context = rt.block_on(tape.context()).expect("context");
    let heap_peak = PEAK.load(Relaxed).saturating_sub(before);
    let (_, sqlite_high) = sqlite_heap(false);
    Measured { heap_peak, sqlite_peak: sqlite_high.saturating_sub(sqlite_before), messages: context.len() }
}

fn median(mut values: Vec<usize>) -> usize {
    values.sort_unstable();
    values[values.len() / 2]
}

fn main() {
    // A current-thread runtime keeps tokio's own threads out of the counts.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let mut rows = Vec::new();
    for len in [100u64, 1_000_000] {
        let tape = rt.block_on(support::cached_tape(len));
        let first = measure(&rt, &tape);
        measure(&rt, &tape); // a second warm-up: statement and page caches settle
        let runs: Vec<Measured> = (0..RUNS).map(|_| measure(&rt, &tape)).collect();
        let heap = median(runs.iter().map(|m| m.heap_peak).collect());
        let sqlite = median(runs.iter().map(|m| m.sqlite_peak).collect());
        rows.push((len, first, heap, sqlite));
    }

    println!("\npeak heap growth during one tape.context(), in bytes");
    println!("(first call on the open store, then the median of {RUNS} later calls)\n");
    println!(
        "{:>11}  {:>8}  {:>12}  {:>12}  {:>12}  {:>12}",
        "tape length", "messages", "Rust, first", "Rust", "SQLite, first", "SQLite"
    );
    for (len, first, heap, sqlite) in &rows {
        println!(
            "{len:>11}  {:>8}  {:>12}  {heap:>12}  {:>12}  {sqlite:>12}",
            first.messages, first.heap_peak, first.sqlite_peak
        );
    }
    let ratio =
        |pick: fn(&(u64, Measured, usize, usize)) -> usize| pick(&rows[1]) as f64 / pick(&rows[0]).max(1) as f64;
    println!(
        "\nratio 1,000,000 / 100 entries: Rust heap {:.2}, SQLite heap {:.2}, \
         first-call Rust heap {:.2} (target: about 1)",
        ratio(|row| row.2),
        ratio(|row| row.3),
        ratio(|row| row.1.heap_peak),
    );
}
