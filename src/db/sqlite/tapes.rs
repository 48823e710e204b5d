//! The SQLite tape store: tapes and their entries in the bub database.
//!
//! A [`SqliteTapeStore`] is the tapes of a [`SqliteDb`]: appends go through
//! its writing thread (a batch is one write, so it lands whole or not at
//! all, and its ids follow the tape's last one without gaps, whichever
//! process appends), reads run on its reader threads. Each tape's row id is
//! cached once an append or a read has seen it. The statements of reads are
//! built in `select`.

use super::select::{Sql, decode, latest_select, select_entries, select_from_last_anchor};
use super::tails;
use super::writer::Work;
use super::{DbError, Durability, SqliteDb};
use crate::db::context_cache::{ContextCache, DEFAULT_BUDGET_BYTES, MIN_KEPT_ENTRIES};
use crate::db::sql::{
    Dialect, LIST_SQL, anchor_not_found, last_anchor, latest_in_one_statement, next_anchor, stats_select, tape_stats,
    tape_summary,
};
use crate::tape::entry::{Entry, NewEntry, format_date};
use crate::tape::error::{TapeError, TapeResult};
use crate::tape::name::TapeName;
use crate::tape::query::{Scope, TapeQuery, TextMatcher};
use crate::tape::store::{TapeStats, TapeStore, TapeSummary, check_batch, latest_one_by_one};
use async_trait::async_trait;
use chrono::Utc;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A tape store in one SQLite file.
#[derive(Clone)]
pub struct SqliteTapeStore {
    db: SqliteDb,
    location: Arc<str>,
    known_tapes: Arc<Mutex<HashMap<TapeName, i64>>>,
    /// Busy tapes' context entries, decoded (see `db::context_cache`).
    contexts: ContextCache,
}

impl SqliteTapeStore {
    /// Opens (creating if needed) the database at `path` with full durability.
    pub async fn open(path: impl AsRef<Path>) -> TapeResult<SqliteTapeStore> {
        SqliteTapeStore::open_with(path, Durability::Full).await
    }

    /// Opens the database at `path`, creating the file and its directory.
    pub async fn open_with(path: impl AsRef<Path>, durability: Durability) -> TapeResult<SqliteTapeStore> {
        let db = SqliteDb::open(path, durability)
            .await
            .map_err(|error| TapeError::Open { path: error.path, message: error.message })?;
        Ok(SqliteTapeStore::on(db))
    }

    /// The tapes of an open database.
    pub fn on(db: SqliteDb) -> SqliteTapeStore {
        SqliteTapeStore {
            location: format!("sqlite:{}", db.path().display()).into(),
            db,
            known_tapes: Arc::default(),
            contexts: ContextCache::new(DEFAULT_BUDGET_BYTES, MIN_KEPT_ENTRIES),
        }
    }

    /// The database the tapes are in (the gateway's tables are in it too).
    pub fn database(&self) -> &SqliteDb {
        &self.db
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    async fn write<T: Send + 'static>(&self, work: Work<T>) -> Result<T, DbError> {
        self.db.write(work).await
    }

    async fn on_reader<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> T + Send + 'static,
    ) -> Result<T, DbError> {
        self.db.read(work).await
    }

    /// Closes the database (see [`SqliteDb::close`]).
    pub async fn close(&self) {
        self.db.close().await;
    }

    fn backend_error(&self, tape: &TapeName, operation: &'static str) -> impl Fn(DbError) -> TapeError + use<> {
        backend_error(tape, operation, &self.location)
    }

    fn known_id(&self, tape: &TapeName) -> Option<i64> {
        self.known_tapes.lock().get(tape).copied()
    }

    fn remember_id(&self, tape: &TapeName, id: i64) {
        self.known_tapes.lock().insert(tape.clone(), id);
    }

    /// Runs `work` on a reader with the tape's row id (cached, or looked up
    /// on the reader, then cached); `None` while the tape has no row.
    async fn read_tape<T: Send + 'static>(
        &self,
        tape: &TapeName,
        operation: &'static str,
        work: impl FnOnce(&Connection, i64, &Reading) -> TapeResult<T> + Send + 'static,
    ) -> TapeResult<Option<T>> {
        let known = self.known_id(tape);
        let reading = Reading { tape: tape.clone(), location: self.location.clone(), operation };
        let (id, output) = self
            .on_reader(move |conn| -> TapeResult<(Option<i64>, Option<T>)> {
                let id = match known {
                    Some(id) => id,
                    None => match tape_id(conn, &reading.tape).map_err(reading.failed())? {
                        Some(id) => id,
                        None => return Ok((None, None)),
                    },
                };
                Ok((Some(id), Some(work(conn, id, &reading)?)))
            })
            .await
            .map_err(self.backend_error(tape, operation))??;
        if let (None, Some(id)) = (known, id) {
            self.remember_id(tape, id);
        }
        Ok(output)
    }
}

impl SqliteTapeStore {
    /// A read of the database, whatever the cache holds.
    async fn read_database(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        let owned = query.clone();
        let found = self
            .read_tape(tape, "read", move |conn, tape_id, reading| {
                let query = owned;
                if query.scope == Scope::All {
                    // One statement is consistent on its own: no transaction.
                    return reading.entries(conn, &query, select_entries(tape_id, None, None, &query)).map(Some);
                }
                if query.scope == Scope::LastAnchor && query.keeps_its_anchor() {
                    // Every model call reads this: one statement, the anchor found by a
                    // subquery. The anchor is its first row, so no rows means no anchor.
                    let rows = reading.entries(conn, &query, select_from_last_anchor(tape_id, &query.kinds))?;
                    return Ok((!rows.is_empty()).then_some(rows));
                }
                // The scope's bounds and the entries between them, from one snapshot.
                let snapshot = conn.unchecked_transaction().map_err(reading.failed())?;
                let Some((from, to)) = resolve_scope(conn, tape_id, &query.scope).map_err(reading.failed())? else {
                    return Ok(None);
                };
                let rows = reading.entries(conn, &query, select_entries(tape_id, from, to, &query))?;
                snapshot.commit().map_err(reading.failed())?;
                Ok(Some(rows))
            })
            .await?;
        match found {
            Some(Some(rows)) => Ok(rows),
            // An empty tape: anchor scopes fail the same way as on a tape without anchors.
            None => query.apply(tape, &[]),
            Some(None) => Err(anchor_not_found(tape, &query.scope)),
        }
    }

    /// A context read ([`ContextCache::answers`]) from the tape's cached
    /// tail, brought up to date first with one read of what was appended
    /// since (or loaded whole the first time). `None` when the cache cannot
    /// answer (no anchor yet, a query reaching before the tail): the caller
    /// reads the database.
    async fn read_through_cache(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Option<Vec<Arc<Entry>>>> {
        // Twice at most: a refresh the tail cannot take (a reset, a race
        // with another read) drops it, and the second pass loads it anew.
        for _ in 0..2 {
            match self.contexts.position(tape) {
                Some(base) => {
                    let refresh = self.read_tape(tape, "read", move |conn, id, reading| {
                        tails::refresh(conn, id, base.last_id, reading)
                    });
                    let Some(refresh) = refresh.await?.flatten() else {
                        self.contexts.forget(tape);
                        return Ok(None);
                    };
                    if !self.contexts.extend(tape, base, refresh) {
                        continue;
                    }
                }
                None => match self.read_tape(tape, "read", tails::load).await?.flatten() {
                    Some((position, from, entries)) => self.contexts.install(tape, position, from, entries),
                    None => return Ok(None),
                },
            }
            let Some(found) = self.contexts.read(tape, query) else { return Ok(None) };
            return found.map(Some);
        }
        Ok(None)
    }
}

fn backend_error(tape: &TapeName, operation: &'static str, location: &str) -> impl Fn(DbError) -> TapeError + use<> {
    let (tape, location) = (tape.to_string(), location.to_string());
    move |source| TapeError::Backend {
        tape: tape.clone(),
        operation,
        location: location.clone(),
        source: Box::new(source),
    }
}

/// What a read on a reader thread needs to report errors and decode rows.
pub(super) struct Reading {
    tape: TapeName,
    location: Arc<str>,
    operation: &'static str,
}

impl Reading {
    pub(super) fn failed(&self) -> impl Fn(rusqlite::Error) -> TapeError + use<> {
        let to_tape = backend_error(&self.tape, self.operation, &self.location);
        move |error| to_tape(DbError::Sqlite(error))
    }

    pub(super) fn decode(&self, row: &rusqlite::Row<'_>, first: usize) -> TapeResult<Entry> {
        decode(&self.tape, &self.location, row, first)
    }

    /// Runs `select` and decodes its rows, applying the query's text filter
    /// (in Rust, so every store folds case alike) and limit; rows are read
    /// one at a time, so a filtered read holds at most `limit` entries.
    fn entries(&self, conn: &Connection, query: &TapeQuery, mut select: Sql) -> TapeResult<Vec<Entry>> {
        let failed = self.failed();
        let limit = query.limit.unwrap_or(usize::MAX);
        let matcher = query.text.as_deref().map(TextMatcher::new);
        if matcher.is_none()
            && let Some(limit) = query.limit
        {
            select.text.push_str(" LIMIT ?");
            select.params.push((limit as i64).into());
        }
        let mut statement = conn.prepare_cached(&select.text).map_err(&failed)?;
        let mut rows = statement.query(params_from_iter(select.params.iter())).map_err(&failed)?;
        let mut found = Vec::new();
        while found.len() < limit {
            let Some(row) = rows.next().map_err(&failed)? else { break };
            let entry = self.decode(row, 0)?;
            if matcher.as_ref().is_none_or(|m| m.matches(&entry)) {
                found.push(entry);
            }
        }
        Ok(found)
    }
}

/// An entry as its row's columns, encoded once (a write may run twice).
struct EntryRow {
    kind: &'static str,
    name: Option<String>,
    payload: String,
    meta: String,
    date: String,
}

impl EntryRow {
    fn new(entry: &NewEntry) -> EntryRow {
        EntryRow {
            kind: entry.kind.as_str(),
            name: entry.name().map(str::to_string),
            payload: serde_json::to_string(&entry.payload).unwrap_or_else(|_| "{}".into()),
            meta: serde_json::to_string(&entry.meta).unwrap_or_else(|_| "{}".into()),
            date: format_date(&entry.date),
        }
    }
}

/// The row id of `tape`, creating the row on its first append (in the
/// caller's transaction: the id is only cached once that committed).
fn tape_id_for_append(conn: &Connection, tape: &TapeName) -> rusqlite::Result<i64> {
    let now = format_date(&Utc::now());
    // `DO UPDATE` of nothing, so `RETURNING` gives the id whether the row is new or not.
    conn.prepare_cached(
        "INSERT INTO tapes (name, last_entry_id, created_at, updated_at) VALUES (?1, 0, ?2, ?2) \
         ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id",
    )?
    .query_row(params![tape.as_str(), now], |row| row.get(0))
}

/// Inserts `rows` after the tape's last entry and returns the id of the
/// first. Runs inside the writer's transaction, which holds SQLite's write
/// lock from the read of the last id to the last insert, so appends — from
/// this process or another — neither interleave nor leave gaps; the
/// `tape_entries_advance` trigger moves `tapes.last_entry_id` along.
fn insert_entries(conn: &Connection, tape_id: i64, rows: &[EntryRow]) -> rusqlite::Result<u64> {
    let last: i64 =
        conn.prepare_cached("SELECT last_entry_id FROM tapes WHERE id = ?1")?.query_row([tape_id], |row| row.get(0))?;
    let mut insert = conn.prepare_cached(
        "INSERT INTO tape_entries (tape_id, entry_id, kind, name, payload, meta, date) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (n, row) in rows.iter().enumerate() {
        insert.execute(params![tape_id, last + 1 + n as i64, row.kind, row.name, row.payload, row.meta, row.date])?;
    }
    Ok(last as u64 + 1)
}

/// Gives a batch its ids, consecutive from `first`.
fn number(entries: Vec<NewEntry>, first: u64) -> Vec<Entry> {
    entries.into_iter().enumerate().map(|(i, e)| e.into_entry(first + i as u64)).collect()
}

#[async_trait]
impl TapeStore for SqliteTapeStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        check_batch(tape, &entries)?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let known = self.known_id(tape);
        let rows: Vec<EntryRow> = entries.iter().map(EntryRow::new).collect();
        let name = tape.clone();
        let (tape_id, first) = self
            .write(Box::new(move |conn| {
                let tape_id = match known {
                    Some(id) => id,
                    None => tape_id_for_append(conn, &name)?,
                };
                Ok((tape_id, insert_entries(conn, tape_id, &rows)?))
            }))
            .await
            .map_err(self.backend_error(tape, "append"))?;
        // Cached only now: a rolled-back write must not leave an id behind.
        self.remember_id(tape, tape_id);
        Ok(number(entries, first))
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        if ContextCache::answers(query)
            && let Some(found) = self.read_through_cache(tape, query).await?
        {
            // The cache keeps its entries; the caller gets its own copies.
            return Ok(found.iter().map(|entry| Entry::clone(entry)).collect());
        }
        self.read_database(tape, query).await
    }

    async fn read_shared(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Arc<Entry>>> {
        if ContextCache::answers(query)
            && let Some(found) = self.read_through_cache(tape, query).await?
        {
            return Ok(found);
        }
        Ok(self.read_database(tape, query).await?.into_iter().map(Arc::new).collect())
    }

    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        if !latest_in_one_statement(queries) {
            return latest_one_by_one(self, tape, queries).await;
        }
        let slots = queries.len();
        let queries = queries.to_vec();
        let found = self
            .read_tape(tape, "read", move |conn, tape_id, reading| {
                let select = latest_select(tape_id, &queries);
                let failed = reading.failed();
                let mut statement = conn.prepare_cached(&select.text).map_err(&failed)?;
                let mut rows = statement.query(params_from_iter(select.params.iter())).map_err(&failed)?;
                let mut found = vec![None; queries.len()];
                while let Some(row) = rows.next().map_err(&failed)? {
                    let slot: i64 = row.get(0).map_err(&failed)?;
                    if let Some(place) = found.get_mut(slot as usize) {
                        *place = Some(reading.decode(row, 1)?);
                    }
                }
                Ok(found)
            })
            .await?;
        Ok(found.unwrap_or_else(|| vec![None; slots]))
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        let reading = Reading { tape: tape.clone(), location: self.location.clone(), operation: "stats" };
        self.on_reader(move |conn| -> TapeResult<TapeStats> {
            let failed = reading.failed();
            // One statement: a consistent snapshot without a transaction.
            let select = stats_select(Dialect::Sqlite, &reading.tape);
            let mut statement = conn.prepare_cached(&select.text).map_err(&failed)?;
            let mut rows = statement.query(params_from_iter(select.params.iter())).map_err(&failed)?;
            let Some(row) = rows.next().map_err(&failed)? else {
                return Ok(TapeStats::default());
            };
            let last_id: i64 = row.get(0).map_err(&failed)?;
            let anchors: i64 = row.get(1).map_err(&failed)?;
            let anchor_id: Option<i64> = row.get(2).map_err(&failed)?;
            Ok(tape_stats(last_id, anchors, anchor_id.map(|_| reading.decode(row, 2)).transpose()?))
        })
        .await
        .map_err(self.backend_error(tape, "stats"))?
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        let failed = |source: DbError| TapeError::Backend {
            tape: "*".into(),
            operation: "list",
            location: self.location(),
            source: Box::new(source),
        };
        let rows = self
            .on_reader(|conn| -> rusqlite::Result<Vec<(String, i64, String)>> {
                let mut statement = conn.prepare_cached(LIST_SQL)?;
                statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?.collect()
            })
            .await
            .map_err(failed)?
            .map_err(|e| failed(DbError::Sqlite(e)))?;
        Ok(rows.into_iter().map(|(name, entries, updated)| tape_summary(name, entries, &updated)).collect())
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        let name = tape.clone();
        self.write(Box::new(move |conn| {
            if let Some(tape_id) = tape_id(conn, &name)? {
                conn.prepare_cached("DELETE FROM tape_entries WHERE tape_id = ?1")?.execute([tape_id])?;
                conn.prepare_cached(
                    "UPDATE tapes SET last_entry_id = 0, resets = resets + 1, updated_at = ?1 WHERE id = ?2",
                )?
                .execute(params![format_date(&Utc::now()), tape_id])?;
            }
            Ok(())
        }))
        .await
        .map_err(self.backend_error(tape, "reset"))?;
        self.contexts.forget(tape);
        Ok(())
    }

    fn location(&self) -> String {
        self.location.to_string()
    }
}

fn tape_id(conn: &Connection, tape: &TapeName) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT id FROM tapes WHERE name = ?1")?.query_row([tape.as_str()], |row| row.get(0)).optional()
}

/// The id range `[from, to)` a scope covers, found with index probes only;
/// `None` when its anchor is missing.
fn resolve_scope(
    conn: &Connection,
    tape_id: i64,
    scope: &Scope,
) -> rusqlite::Result<Option<(Option<i64>, Option<i64>)>> {
    let probe = |select: Sql| -> rusqlite::Result<Option<i64>> {
        conn.prepare_cached(&select.text)?
            .query_row(params_from_iter(select.params.iter()), |row| row.get(0))
            .optional()
    };
    Ok(match scope {
        Scope::All => Some((None, None)),
        Scope::LastAnchor => probe(last_anchor(Dialect::Sqlite, tape_id, None))?.map(|from| (Some(from), None)),
        Scope::AfterAnchor(name) => {
            probe(last_anchor(Dialect::Sqlite, tape_id, Some(name)))?.map(|from| (Some(from), None))
        }
        Scope::BetweenAnchors { start, end } => match probe(last_anchor(Dialect::Sqlite, tape_id, Some(start)))? {
            None => None,
            Some(from) => Some((Some(from), probe(next_anchor(Dialect::Sqlite, tape_id, end, from))?)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::reader_count;
    use super::*;
    use crate::tape::EntryKind;

    /// SQLite's plan for `sql` with `binds` (integers), its steps joined by "; ".
    async fn plan_of(store: &SqliteTapeStore, sql: &str, binds: &[i64]) -> String {
        let (sql, binds) = (format!("EXPLAIN QUERY PLAN {sql}"), binds.to_vec());
        let steps = store
            .on_reader(move |conn| -> rusqlite::Result<Vec<String>> {
                let mut explain = conn.prepare(&sql)?;
                explain.query_map(params_from_iter(binds), |row| row.get("detail"))?.collect()
            })
            .await
            .unwrap()
            .unwrap();
        steps.join("; ")
    }

    /// After `close`, the database file holds everything on its own: the
    /// write-ahead log was folded in and removed, and reads are refused.
    #[tokio::test]
    async fn a_closed_store_leaves_a_complete_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bub.db");
        let store = SqliteTapeStore::open(&path).await.unwrap();
        let tape = TapeName::new("t").unwrap();
        store.append(&tape, vec![NewEntry::chat("user", "kept")]).await.unwrap();
        // The readers have the log open.
        let all = TapeQuery::all();
        let reads = (0..reader_count()).map(|_| store.read(&tape, &all));
        for read in futures::future::join_all(reads).await {
            assert_eq!(read.unwrap().len(), 1);
        }
        store.close().await;
        assert!(!dir.path().join("bub.db-wal").exists(), "the log is still there");
        assert!(store.read(&tape, &TapeQuery::all()).await.is_err(), "a closed store still reads");
        let copy = dir.path().join("copy.db");
        std::fs::copy(&path, &copy).unwrap();
        let reopened = SqliteTapeStore::open(&copy).await.unwrap();
        assert_eq!(reopened.read(&tape, &TapeQuery::all()).await.unwrap().len(), 1);
    }

    /// A read that panics fails alone; the reader threads go on serving.
    #[tokio::test]
    async fn a_panicking_read_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        for _ in 0..reader_count() + 1 {
            let failed = store.on_reader(|_| -> i64 { panic!("a bug") }).await;
            assert!(matches!(failed, Err(DbError::Lost(_))), "{failed:?}");
        }
        let one: i64 = store.on_reader(|conn| conn.query_row("SELECT 1", [], |row| row.get(0))).await.unwrap().unwrap();
        assert_eq!(one, 1);
    }

    /// The last-anchor lookup must be an index probe, never a scan of the tape.
    #[tokio::test]
    async fn last_anchor_lookup_uses_the_kind_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        let plan = plan_of(&store, &last_anchor(Dialect::Sqlite, 1, None).text, &[1]).await;
        assert!(plan.contains("USING COVERING INDEX tape_entries_by_kind"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "plan sorts: {plan}");
    }

    /// The context read is index probes too: the anchor by the kind index,
    /// the entries after it by the primary key, no sort.
    #[tokio::test]
    async fn reading_from_the_last_anchor_uses_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        let select = select_from_last_anchor(1, &crate::tape::query::CONTEXT_KINDS);
        let plan = plan_of(&store, &select.text, &[1, 1]).await;
        assert!(plan.contains("USING COVERING INDEX tape_entries_by_kind"), "plan: {plan}");
        assert!(plan.contains("entry_id>?"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE") && !plan.contains("SCAN"), "plan: {plan}");
    }

    /// The context cache's refresh reads the entries after an id by the
    /// primary key: its cost is what was appended, not the tape's length.
    #[tokio::test]
    async fn the_context_refresh_reads_by_the_primary_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        let plan = plan_of(&store, tails::refresh_select(), &[1, 1]).await;
        assert!(plan.contains("SEARCH t USING INTEGER PRIMARY KEY (rowid=?)"), "plan: {plan}");
        assert!(plan.contains("SEARCH e USING PRIMARY KEY (tape_id=? AND entry_id>?)"), "plan: {plan}");
        assert!(!plan.contains("SCAN") && !plan.contains("TEMP B-TREE"), "plan: {plan}");
    }

    /// `latest` probes an index per query, whatever is on the tape.
    #[tokio::test]
    async fn latest_probes_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        let queries = [
            TapeQuery::all().kinds([EntryKind::Event]).named("model_switch"),
            TapeQuery::all().kinds([EntryKind::System]),
            TapeQuery::all(),
        ];
        let select = latest_select(1, &queries);
        // The name is bound as a number here: plans do not depend on bound values.
        let plan = plan_of(&store, &select.text, &[1, 0, 1, 1]).await;
        assert!(plan.contains("USING INDEX tape_entries_by_name (tape_id=? AND name=?)"), "plan: {plan}");
        assert!(plan.contains("USING INDEX tape_entries_by_kind (tape_id=? AND kind=?)"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "plan sorts: {plan}");
    }

    /// A filtered read walks the name or kind index, not the whole tape.
    #[tokio::test]
    async fn filtered_reads_walk_the_name_or_kind_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        let named = TapeQuery::all().kinds([EntryKind::Event]).named("run").newest_first().limit(1);
        let select = select_entries(1, None, None, &named);
        let plan = plan_of(&store, &select.text, &[1, 0]).await;
        assert!(plan.contains("USING INDEX tape_entries_by_name (tape_id=? AND name=?)"), "plan: {plan}");
        let kind = TapeQuery::all().kinds([EntryKind::Anchor]).newest_first();
        let select = select_entries(1, None, None, &kind);
        let plan = plan_of(&store, &select.text, &[1]).await;
        assert!(plan.contains("tape_entries_by_kind (tape_id=? AND kind=?)"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "plan sorts: {plan}");
    }
}
