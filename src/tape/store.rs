//! The storage contract every tape backend fulfils.
//!
//! Guarantees a caller may rely on, checked by the conformance suite
//! (`tests/it/tape_conformance.rs`) for every store:
//! - ids are assigned per tape, start at 1 and have no gaps, also under
//!   concurrent appends from many tasks;
//! - one [`TapeStore::append`] call is atomic: all of its entries land with
//!   consecutive ids and no other append interleaves, or none land;
//! - entries are never changed; only [`TapeStore::reset`] removes them, and
//!   ids start again at 1 after it;
//! - anchor-scoped reads cost in proportion to the entries read, not to the
//!   length of the tape.

use super::entry::{Entry, NewEntry};
use super::error::{TapeError, TapeResult};
use super::name::TapeName;
use super::query::TapeQuery;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// One tape as a listing shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TapeSummary {
    pub name: String,
    pub entries: u64,
    /// When the last entry was appended (`None` for a tape that was reset to empty).
    pub updated: Option<DateTime<Utc>>,
}

/// Counts for `tape.info`, each answered without reading the whole tape.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TapeStats {
    pub entries: u64,
    pub anchors: u64,
    /// The id of the newest entry (0 for an empty tape).
    pub last_id: u64,
    pub last_anchor: Option<Entry>,
}

/// An async, shareable tape backend (`Arc<dyn TapeStore>`).
#[async_trait]
pub trait TapeStore: Send + Sync + 'static {
    /// Appends `entries` atomically and returns them with their ids.
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>>;

    /// Reads the entries the query selects.
    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>>;

    /// [`TapeStore::read`] as shared entries: a store that keeps entries
    /// (the SQLite store's context cache) hands out its own instead of
    /// copies; every model call reads its context this way. The default
    /// wraps what `read` returns.
    async fn read_shared(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Arc<Entry>>> {
        Ok(self.read(tape, query).await?.into_iter().map(Arc::new).collect())
    }

    /// The newest entry each query selects (each read as `newest_first`,
    /// `limit 1`), in the queries' order: a run's settings (model and
    /// code-mode switches, the last system prompt) in one round trip where
    /// the store can. The default reads them one by one.
    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        latest_one_by_one(self, tape, queries).await
    }

    /// Entry and anchor counts, the last id and the last anchor.
    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats>;

    /// Every tape that has ever been written to, sidecars included, by name.
    async fn list(&self) -> TapeResult<Vec<TapeSummary>>;

    /// Removes every entry of the tape; the next append gets id 1.
    async fn reset(&self, tape: &TapeName) -> TapeResult<()>;

    /// Where the entries live, for messages (`sqlite:/home/me/.bub/bub.db`).
    fn location(&self) -> String;
}

/// `found`, a store's answer to [`TapeStore::latest`] for `asked` queries,
/// or the error that it has another number of answers (a store written
/// elsewhere must not be able to make its callers index past the end).
pub(crate) fn checked_latest(
    tape: &TapeName,
    asked: usize,
    found: Vec<Option<Entry>>,
) -> TapeResult<Vec<Option<Entry>>> {
    if found.len() == asked {
        return Ok(found);
    }
    let message = format!("`latest` of {asked} queries returned {} answers", found.len());
    Err(TapeError::StoreContract { tape: tape.clone(), message })
}

/// [`TapeStore::latest`] as one read per query.
pub async fn latest_one_by_one<S: TapeStore + ?Sized>(
    store: &S,
    tape: &TapeName,
    queries: &[TapeQuery],
) -> TapeResult<Vec<Option<Entry>>> {
    let mut found = Vec::with_capacity(queries.len());
    for query in queries {
        let newest = TapeQuery { newest_first: true, limit: Some(1), ..query.clone() };
        found.push(store.read(tape, &newest).await?.into_iter().next());
    }
    Ok(found)
}

/// Checks every entry of a batch before anything is written, so a bad entry in
/// the middle of a batch writes nothing.
pub fn check_batch(tape: &TapeName, entries: &[NewEntry]) -> TapeResult<()> {
    for entry in entries {
        entry.check_shape().map_err(|source| TapeError::InvalidEntry { tape: tape.clone(), source })?;
    }
    Ok(())
}
