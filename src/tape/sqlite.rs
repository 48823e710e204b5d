//! The SQLite tape store: one database file, WAL mode, migrations embedded.
//!
//! All writes go through a single connection owned by one task (see
//! [`super::writer`]), which commits the writes that queue up while it is busy
//! in one transaction, so writes never race inside the process and never meet
//! `SQLITE_BUSY`; other processes (an operator's `bub` beside the gateway) wait
//! on the busy timeout. Reads use a separate pool and see a consistent
//! snapshot per query.
//!
//! Before migrating, the file is checked to be a SQLite database that is either
//! empty or already bub's, so pointing `BUB_HOME` at the wrong file never adds
//! tables to somebody else's database.

use super::entry::{Entry, EntryKind, JsonObject, NewEntry, format_date, parse_date};
use super::error::{TapeError, TapeResult};
use super::name::TapeName;
use super::query::{Scope, TapeQuery, TextMatcher};
use super::store::{TapeStats, TapeStore, TapeSummary, check_batch, latest_one_by_one};
use super::writer::{Work, Writer, atomically};
use async_trait::async_trait;
use chrono::Utc;
use futures_util::TryStreamExt;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Connection, QueryBuilder, Row, Sqlite, SqliteConnection, SqlitePool};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// Rows per INSERT statement (6 parameters each, well under SQLite's limit).
const INSERT_CHUNK: usize = 1000;

/// Inserts `entries` after the tape's last entry in ONE statement and returns
/// the id of the first. The base id is read in a materialized CTE, i.e. once,
/// before any row is inserted; the `tape_entries_advance` trigger then moves
/// `tapes.last_entry_id` forward row by row. The statement holds SQLite's write
/// lock from the read to the last insert, so concurrent appends — from this
/// process or another — can neither interleave nor leave gaps.
async fn insert_batch<'c>(
    executor: impl sqlx::Executor<'c, Database = Sqlite>,
    tape_id: i64,
    entries: &[EntryRow],
) -> Result<u64, sqlx::Error> {
    let mut insert =
        QueryBuilder::<Sqlite>::new("WITH base AS MATERIALIZED (SELECT last_entry_id AS last FROM tapes WHERE id = ");
    insert.push_bind(tape_id);
    insert.push("), batch (n, kind, name, payload, meta, date) AS (");
    insert.push_values(entries.iter().enumerate(), |mut row, (n, entry)| {
        row.push_bind(n as i64 + 1)
            .push_bind(entry.kind)
            .push_bind(entry.name.clone())
            .push_bind(entry.payload.clone())
            .push_bind(entry.meta.clone())
            .push_bind(entry.date.clone());
    });
    insert.push(
        ") INSERT INTO tape_entries (tape_id, entry_id, kind, name, payload, meta, date) \
         SELECT ",
    );
    insert.push_bind(tape_id);
    insert.push(
        ", base.last + batch.n, batch.kind, batch.name, batch.payload, batch.meta, batch.date \
         FROM base, batch ORDER BY batch.n RETURNING entry_id",
    );
    let ids: Vec<i64> = insert.build_query_scalar().fetch_all(executor).await?;
    let first = ids.iter().min().copied().unwrap_or(0);
    if ids.len() != entries.len() || first < 1 {
        return Err(sqlx::Error::Protocol(format!("append stored {} of {} entries", ids.len(), entries.len())));
    }
    Ok(first as u64)
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
async fn tape_id_for_append(conn: &mut SqliteConnection, tape: &TapeName) -> Result<i64, sqlx::Error> {
    let now = format_date(&Utc::now());
    // `DO UPDATE` of nothing, so `RETURNING` gives the id whether the row is new or not.
    sqlx::query_scalar(
        "INSERT INTO tapes (name, last_entry_id, created_at, updated_at) VALUES ($1, 0, $2, $2) \
         ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id",
    )
    .bind(tape.as_str())
    .bind(&now)
    .fetch_one(conn)
    .await
}

/// Gives a batch its ids, consecutive from `first`.
fn number(entries: Vec<NewEntry>, first: u64) -> Vec<Entry> {
    entries.into_iter().enumerate().map(|(i, e)| e.into_entry(first + i as u64)).collect()
}

/// How long a write waits for another process holding the database.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How durable a commit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is synced to disk before `append` returns (`synchronous=FULL`).
    #[default]
    Full,
    /// Commits survive a crash of the process but the last ones may be lost on
    /// power failure (`synchronous=NORMAL`); several times faster on slow disks.
    Normal,
}

/// A tape store in one SQLite file.
#[derive(Clone)]
pub struct SqliteTapeStore {
    path: PathBuf,
    writer: Writer,
    reader: SqlitePool,
    known_tapes: Arc<Mutex<HashMap<TapeName, i64>>>,
}

impl SqliteTapeStore {
    /// Opens (creating if needed) the database at `path` with full durability.
    pub async fn open(path: impl AsRef<Path>) -> TapeResult<SqliteTapeStore> {
        SqliteTapeStore::open_with(path, Durability::Full).await
    }

    /// Opens the database at `path`, creating the file and its directory.
    pub async fn open_with(path: impl AsRef<Path>, durability: Durability) -> TapeResult<SqliteTapeStore> {
        let path = path.as_ref().to_path_buf();
        let open_error = |message: String| TapeError::Open { path: path.clone(), message };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| open_error(format!("cannot create directory {}: {e}", dir.display())))?;
        }
        check_file_header(&path).map_err(open_error)?;

        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match durability {
                Durability::Full => SqliteSynchronous::Full,
                Durability::Normal => SqliteSynchronous::Normal,
            })
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let mut writer =
            SqliteConnection::connect_with(&options).await.map_err(|e| open_error(describe_open_error(&e)))?;
        check_schema_owner(&mut writer).await.map_err(open_error)?;
        MIGRATOR.run(&mut writer).await.map_err(|e| open_error(describe_migrate_error(&e)))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            // A ping per acquire would double every read's trips to SQLite's
            // thread; a broken connection fails its statement anyway.
            .test_before_acquire(false)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options.read_only(true))
            .await
            .map_err(|e| open_error(describe_open_error(&e)))?;
        Ok(SqliteTapeStore { path, writer: Writer::spawn(writer), reader, known_tapes: Arc::default() })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the one writing connection, perhaps in one transaction
    /// with other writes (the gateway's inbox and outbox live in the same file
    /// and share it, so writes never contend). `work` may run more than once;
    /// its effects are committed exactly when this returns `Ok`.
    pub(crate) async fn write<T: Send + 'static>(&self, work: Work<T>) -> Result<T, sqlx::Error> {
        self.writer.write(work).await
    }

    /// The read-only connections.
    pub(crate) fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    /// Closes both connections, after the writes already queued.
    pub async fn close(&self) {
        self.reader.close().await;
        self.writer.close().await;
    }

    fn backend_error(&self, tape: &TapeName, operation: &'static str) -> impl Fn(sqlx::Error) -> TapeError + '_ {
        let tape = tape.to_string();
        move |source| TapeError::Backend {
            tape: tape.clone(),
            operation,
            location: self.location(),
            source: Box::new(source),
        }
    }

    /// The row id of `tape`, from the cache or the database (then cached);
    /// `None` while the tape has no entries.
    async fn cached_tape_id(&self, tape: &TapeName) -> Result<Option<i64>, sqlx::Error> {
        if let Some(id) = self.known_tapes.lock().unwrap_or_else(|p| p.into_inner()).get(tape) {
            return Ok(Some(*id));
        }
        let mut conn = self.reader.acquire().await?;
        let id = tape_id(&mut conn, tape).await?;
        if let Some(id) = id {
            self.known_tapes.lock().unwrap_or_else(|p| p.into_inner()).insert(tape.clone(), id);
        }
        Ok(id)
    }

    /// Runs a built `SELECT` of entries and decodes the rows, applying the
    /// query's text filter (in Rust, so every store folds case alike) and limit.
    async fn fetch_entries<'c, E>(
        &self,
        tape: &TapeName,
        query: &TapeQuery,
        mut select: QueryBuilder<Sqlite>,
        executor: E,
    ) -> TapeResult<Vec<Entry>>
    where
        E: sqlx::Executor<'c, Database = Sqlite>,
    {
        let failed = self.backend_error(tape, "read");
        let limit = query.limit.unwrap_or(usize::MAX);
        let mut found = Vec::new();
        match query.text.as_deref() {
            // Rows stream, so memory stays at `limit` entries.
            Some(text) => {
                let matcher = TextMatcher::new(text);
                let mut rows = select.build().fetch(executor);
                while found.len() < limit {
                    let Some(row) = rows.try_next().await.map_err(&failed)? else {
                        break;
                    };
                    let entry = self.decode(tape, &row)?;
                    if matcher.matches(&entry) {
                        found.push(entry);
                    }
                }
            }
            None => {
                if let Some(limit) = query.limit {
                    select.push(" LIMIT ").push_bind(limit as i64);
                }
                for row in select.build().fetch_all(executor).await.map_err(&failed)? {
                    found.push(self.decode(tape, &row)?);
                }
            }
        }
        Ok(found)
    }

    fn decode(&self, tape: &TapeName, row: &SqliteRow) -> TapeResult<Entry> {
        let id: i64 = row.get("entry_id");
        let corrupt = |reason: String| TapeError::Corrupt {
            tape: tape.clone(),
            id: id as u64,
            location: self.location(),
            reason,
        };
        let kind_text: String = row.get("kind");
        let kind = EntryKind::parse(&kind_text).ok_or_else(|| corrupt(format!("unknown kind {kind_text:?}")))?;
        let object = |column: &str| -> TapeResult<JsonObject> {
            let text: String = row.get(column);
            serde_json::from_str(&text).map_err(|e| corrupt(format!("{column} is not a JSON object: {e}")))
        };
        let date_text: String = row.get("date");
        let date = parse_date(&date_text).ok_or_else(|| corrupt(format!("date {date_text:?} is not RFC 3339")))?;
        Ok(Entry { id: id as u64, kind, payload: object("payload")?, meta: object("meta")?, date })
    }
}

#[async_trait]
impl TapeStore for SqliteTapeStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        check_batch(tape, &entries)?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let failed = self.backend_error(tape, "append");
        let known = self.known_tapes.lock().unwrap_or_else(|p| p.into_inner()).get(tape).copied();
        let rows: Arc<Vec<EntryRow>> = Arc::new(entries.iter().map(EntryRow::new).collect());
        let name = tape.clone();
        let (tape_id, first) = self
            .write(Box::new(move |conn| {
                let (rows, name) = (rows.clone(), name.clone());
                Box::pin(async move {
                    let tape_id = match known {
                        Some(id) => id,
                        None => tape_id_for_append(&mut *conn, &name).await?,
                    };
                    if rows.len() <= INSERT_CHUNK {
                        // One statement: atomic by itself.
                        return Ok((tape_id, insert_batch(&mut *conn, tape_id, &rows).await?));
                    }
                    atomically(conn, async |conn| {
                        let mut first = None;
                        for chunk in rows.chunks(INSERT_CHUNK) {
                            let id = insert_batch(&mut *conn, tape_id, chunk).await?;
                            first.get_or_insert(id);
                        }
                        Ok((tape_id, first.unwrap_or(1)))
                    })
                    .await
                })
            }))
            .await
            .map_err(&failed)?;
        // Cached only now: a rolled-back write must not leave an id behind.
        self.known_tapes.lock().unwrap_or_else(|p| p.into_inner()).insert(tape.clone(), tape_id);
        Ok(number(entries, first))
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        let failed = self.backend_error(tape, "read");
        if query.scope == Scope::All {
            // One statement is consistent on its own: no transaction, and the
            // tape's id usually comes from the cache, so this is one round trip.
            let Some(tape_id) = self.cached_tape_id(tape).await.map_err(&failed)? else {
                return query.apply(tape, &[]);
            };
            return self.fetch_entries(tape, query, select_entries(tape_id, None, None, query), &self.reader).await;
        }
        // Ids never change, so the cached one is right even outside the transaction.
        let Some(tape_id) = self.cached_tape_id(tape).await.map_err(&failed)? else {
            // An empty tape: anchor scopes fail the same way as on a tape without anchors.
            return query.apply(tape, &[]);
        };
        if query.scope == Scope::LastAnchor && query.keeps_its_anchor() {
            // Every model call reads this: one statement, the anchor found by a
            // subquery. The anchor is its first row, so no rows means no anchor.
            let select = select_from_last_anchor(tape_id, &query.kinds);
            let rows = self.fetch_entries(tape, query, select, &self.reader).await?;
            if rows.is_empty() {
                return Err(TapeError::AnchorNotFound { tape: tape.clone(), anchor: None });
            }
            return Ok(rows);
        }
        let mut tx = self.reader.begin().await.map_err(&failed)?;
        let (from, to) = resolve_scope(&mut tx, tape, tape_id, &query.scope).await?;
        self.fetch_entries(tape, query, select_entries(tape_id, from, to, query), &mut *tx).await
    }

    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        let simple = |q: &TapeQuery| {
            let bare = TapeQuery { kinds: q.kinds.clone(), name: q.name.clone(), ..TapeQuery::all() };
            TapeQuery { newest_first: false, limit: None, ..q.clone() } == bare
        };
        if queries.is_empty() || !queries.iter().all(simple) {
            return latest_one_by_one(self, tape, queries).await;
        }
        let failed = self.backend_error(tape, "read");
        let mut found = vec![None; queries.len()];
        let Some(tape_id) = self.cached_tape_id(tape).await.map_err(&failed)? else {
            return Ok(found);
        };
        let rows = latest_select(tape_id, queries).build().fetch_all(&self.reader).await.map_err(&failed)?;
        for row in rows {
            let slot: i64 = row.get("slot");
            if let Some(place) = found.get_mut(slot as usize) {
                *place = Some(self.decode(tape, &row)?);
            }
        }
        Ok(found)
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        let failed = self.backend_error(tape, "stats");
        // One statement (a consistent snapshot without a transaction): every
        // turn asks, twice.
        let row = sqlx::query(
            "SELECT t.last_entry_id AS last_id, \
                    (SELECT count(*) FROM tape_entries c WHERE c.tape_id = t.id AND c.kind = 'anchor') AS anchors, \
                    a.entry_id, a.kind, a.payload, a.meta, a.date \
             FROM tapes t LEFT JOIN tape_entries a ON a.tape_id = t.id AND a.kind = 'anchor' AND a.entry_id = \
                (SELECT max(m.entry_id) FROM tape_entries m WHERE m.tape_id = t.id AND m.kind = 'anchor') \
             WHERE t.name = $1",
        )
        .bind(tape.as_str())
        .fetch_optional(&self.reader)
        .await
        .map_err(&failed)?;
        let Some(row) = row else {
            return Ok(TapeStats::default());
        };
        let last_id: i64 = row.get("last_id");
        let anchors: i64 = row.get("anchors");
        let anchor_id: Option<i64> = row.get("entry_id");
        Ok(TapeStats {
            // ids are gapless from 1, so the last id is the count
            entries: last_id as u64,
            anchors: anchors as u64,
            last_id: last_id as u64,
            last_anchor: anchor_id.map(|_| self.decode(tape, &row)).transpose()?,
        })
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        let rows: Vec<(String, i64, String)> =
            sqlx::query_as("SELECT name, last_entry_id, updated_at FROM tapes ORDER BY name")
                .fetch_all(&self.reader)
                .await
                .map_err(|source| TapeError::Backend {
                    tape: "*".into(),
                    operation: "list",
                    location: self.location(),
                    source: Box::new(source),
                })?;
        Ok(rows
            .into_iter()
            .map(|(name, entries, updated)| TapeSummary {
                name,
                entries: entries as u64,
                updated: if entries > 0 { parse_date(&updated) } else { None },
            })
            .collect())
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        let failed = self.backend_error(tape, "reset");
        let name = tape.clone();
        self.write(Box::new(move |conn| {
            let name = name.clone();
            Box::pin(async move {
                atomically(conn, async |conn| {
                    if let Some(tape_id) = tape_id(&mut *conn, &name).await? {
                        sqlx::query("DELETE FROM tape_entries WHERE tape_id = $1")
                            .bind(tape_id)
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("UPDATE tapes SET last_entry_id = 0, updated_at = $1 WHERE id = $2")
                            .bind(format_date(&Utc::now()))
                            .bind(tape_id)
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
                .await
            })
        }))
        .await
        .map_err(&failed)
    }

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }
}

/// `SELECT` of a tape's entries in `[from, to)` matching the query's filters
/// and order (text and limit are applied by the caller).
fn select_entries(tape_id: i64, from: Option<i64>, to: Option<i64>, query: &TapeQuery) -> QueryBuilder<Sqlite> {
    let mut select = QueryBuilder::<Sqlite>::new(format!(
        "SELECT entry_id, kind, payload, meta, date FROM tape_entries{} WHERE tape_id = ",
        index_hint(query)
    ));
    select.push_bind(tape_id);
    if let Some(from) = from {
        select.push(" AND entry_id >= ").push_bind(from);
    }
    if let Some(to) = to {
        select.push(" AND entry_id < ").push_bind(to);
    }
    if let Some(after) = query.after_id {
        select.push(" AND entry_id > ").push_bind(after as i64);
    }
    if !query.kinds.is_empty() {
        select.push(" AND kind IN (");
        let mut kinds = select.separated(", ");
        for kind in &query.kinds {
            kinds.push_bind(kind.as_str());
        }
        select.push(")");
    }
    if let Some(name) = &query.name {
        select.push(" AND name = ").push_bind(name.clone());
    }
    if let Some(since) = &query.since {
        select.push(" AND date >= ").push_bind(format_date(since));
    }
    if let Some(until) = &query.until {
        select.push(" AND date < ").push_bind(format_date(until));
    }
    select.push(if query.newest_first { " ORDER BY entry_id DESC" } else { " ORDER BY entry_id ASC" });
    select
}

/// The index a filtered read should walk. Without table statistics SQLite
/// prefers the primary key for `ORDER BY entry_id`, which for a rare name or
/// kind reads the whole tape; these indexes are ordered by `entry_id` within
/// a name or a kind, so they serve the same order with only matching rows.
fn index_hint(query: &TapeQuery) -> &'static str {
    match (&query.name, query.kinds.len()) {
        (Some(_), _) => " INDEXED BY tape_entries_by_name",
        (None, 1) => " INDEXED BY tape_entries_by_kind",
        _ => "",
    }
}

/// One statement for [`TapeStore::latest`]: a UNION of index probes (see
/// [`index_hint`]), each row tagged with its query's position.
fn latest_select(tape_id: i64, queries: &[TapeQuery]) -> QueryBuilder<Sqlite> {
    let mut select = QueryBuilder::<Sqlite>::new("");
    for (slot, query) in queries.iter().enumerate() {
        if slot > 0 {
            select.push(" UNION ALL ");
        }
        let index = index_hint(query);
        select.push(format_args!(
            "SELECT {slot} AS slot, * FROM (SELECT entry_id, kind, payload, meta, date FROM tape_entries{index} \
             WHERE tape_id = "
        ));
        select.push_bind(tape_id);
        if let Some(name) = &query.name {
            select.push(" AND name = ").push_bind(name.clone());
        }
        // Literals, not binds: the kinds are ours, and the statement stays one cached text.
        match query.kinds.as_slice() {
            [] => {}
            [kind] => {
                select.push(format_args!(" AND kind = '{}'", kind.as_str()));
            }
            kinds => {
                let list: Vec<String> = kinds.iter().map(|kind| format!("'{}'", kind.as_str())).collect();
                select.push(format_args!(" AND kind IN ({})", list.join(", ")));
            }
        }
        select.push(" ORDER BY entry_id DESC LIMIT 1)");
    }
    select
}

/// Every entry from the tape's last anchor on (of `kinds`, when given), oldest first.
fn select_from_last_anchor(tape_id: i64, kinds: &[EntryKind]) -> QueryBuilder<Sqlite> {
    let mut select =
        QueryBuilder::<Sqlite>::new("SELECT entry_id, kind, payload, meta, date FROM tape_entries WHERE tape_id = ");
    select.push_bind(tape_id);
    select.push(" AND entry_id >= (SELECT entry_id FROM tape_entries WHERE tape_id = ");
    select.push_bind(tape_id);
    select.push(" AND kind = 'anchor' ORDER BY entry_id DESC LIMIT 1)");
    if !kinds.is_empty() {
        // Literals, not binds: the kinds are ours, and the statement stays one cached text.
        let list: Vec<String> = kinds.iter().map(|kind| format!("'{}'", kind.as_str())).collect();
        select.push(format_args!(" AND kind IN ({})", list.join(", ")));
    }
    select.push(" ORDER BY entry_id ASC");
    select
}

async fn tape_id(conn: &mut SqliteConnection, tape: &TapeName) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM tapes WHERE name = $1").bind(tape.as_str()).fetch_optional(conn).await
}

/// The id range `[from, to)` a scope covers, found with index probes only.
async fn resolve_scope(
    conn: &mut SqliteConnection,
    tape: &TapeName,
    tape_id: i64,
    scope: &Scope,
) -> TapeResult<(Option<i64>, Option<i64>)> {
    let not_found =
        |anchor: Option<&str>| TapeError::AnchorNotFound { tape: tape.clone(), anchor: anchor.map(str::to_string) };
    let failed = |source: sqlx::Error| TapeError::Backend {
        tape: tape.to_string(),
        operation: "read",
        location: "sqlite".into(),
        source: Box::new(source),
    };
    let last_named = async |conn: &mut SqliteConnection, name: &str| {
        sqlx::query_scalar::<_, i64>(
            "SELECT entry_id FROM tape_entries WHERE tape_id = $1 AND name = $2 AND kind = 'anchor' \
             ORDER BY entry_id DESC LIMIT 1",
        )
        .bind(tape_id)
        .bind(name)
        .fetch_optional(conn)
        .await
    };
    match scope {
        Scope::All => Ok((None, None)),
        Scope::LastAnchor => {
            let from = last_anchor_id(conn, tape_id).await.map_err(failed)?.ok_or_else(|| not_found(None))?;
            Ok((Some(from), None))
        }
        Scope::AfterAnchor(name) => {
            let from = last_named(conn, name).await.map_err(failed)?.ok_or_else(|| not_found(Some(name)))?;
            Ok((Some(from), None))
        }
        Scope::BetweenAnchors { start, end } => {
            let from = last_named(conn, start).await.map_err(failed)?.ok_or_else(|| not_found(Some(start)))?;
            let to: Option<i64> = sqlx::query_scalar(
                "SELECT entry_id FROM tape_entries WHERE tape_id = $1 AND name = $2 AND kind = 'anchor' \
                 AND entry_id > $3 ORDER BY entry_id ASC LIMIT 1",
            )
            .bind(tape_id)
            .bind(end)
            .bind(from)
            .fetch_optional(conn)
            .await
            .map_err(failed)?;
            Ok((Some(from), to))
        }
    }
}

/// The id of the tape's last anchor: one probe of `tape_entries_by_kind`.
pub(crate) async fn last_anchor_id(conn: &mut SqliteConnection, tape_id: i64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(LAST_ANCHOR_SQL).bind(tape_id).fetch_optional(conn).await
}

const LAST_ANCHOR_SQL: &str =
    "SELECT entry_id FROM tape_entries WHERE tape_id = $1 AND kind = 'anchor' ORDER BY entry_id DESC LIMIT 1";

/// Refuses files that are not SQLite databases before SQLite gets to them, with
/// a message that says what the file seems to be.
fn check_file_header(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut header = [0u8; 16];
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot read the database file: {e}")),
    };
    let read = file.read(&mut header).map_err(|e| format!("cannot read the database file: {e}"))?;
    if read == 0 || header == *b"SQLite format 3\0" {
        return Ok(());
    }
    Err("this file is not a SQLite database (it is corrupt or belongs to another program); \
         move it away or point BUB_HOME elsewhere"
        .to_string())
}

/// Refuses a SQLite database that holds tables but not bub's.
async fn check_schema_owner(conn: &mut SqliteConnection) -> Result<(), String> {
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            .fetch_all(conn)
            .await
            .map_err(|e| describe_open_error(&e))?;
    let ours = ["_sqlx_migrations", "tapes", "tape_entries", "gateway_inbox", "gateway_outbox"];
    if tables.is_empty() || tables.iter().any(|t| t == "tapes") && tables.iter().all(|t| ours.contains(&t.as_str())) {
        return Ok(());
    }
    Err(format!(
        "this SQLite database belongs to another program (it has tables {}); bub will not change it — \
         point BUB_HOME elsewhere",
        tables.join(", ")
    ))
}

fn describe_open_error(error: &sqlx::Error) -> String {
    let text = error.to_string();
    if text.contains("not a database") || text.contains("malformed") {
        "this file is not a usable SQLite database (corrupt, or another program's file)".to_string()
    } else if text.contains("unable to open") || text.contains("readonly") || text.contains("read-only") {
        format!("cannot open the database for writing ({text}); check the directory's permissions")
    } else {
        text
    }
}

fn describe_migrate_error(error: &sqlx::migrate::MigrateError) -> String {
    use sqlx::migrate::MigrateError;
    match error {
        MigrateError::VersionMissing(version) => format!(
            "the database was written by a newer bub (schema version {version} is unknown to this build); \
             upgrade bub"
        ),
        MigrateError::VersionMismatch(version) => {
            format!("schema version {version} in the database differs from this build's; the file was edited")
        }
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => describe_open_error(e),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for `sql` with `binds` (integers), its steps joined by "; ".
    async fn plan_of(store: &SqliteTapeStore, sql: &str, binds: &[i64]) -> String {
        let mut explain = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
        for bind in binds {
            explain = explain.bind(*bind);
        }
        let rows = explain.fetch_all(&store.reader).await.unwrap();
        rows.iter().map(|row| row.get::<String, _>("detail")).collect::<Vec<_>>().join("; ")
    }

    /// The last-anchor lookup must be an index probe, never a scan of the tape.
    #[tokio::test]
    async fn last_anchor_lookup_uses_the_kind_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.unwrap();
        let plan = plan_of(&store, LAST_ANCHOR_SQL, &[1]).await;
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
        let plan = plan_of(&store, select.sql().as_str(), &[1, 1]).await;
        assert!(plan.contains("USING COVERING INDEX tape_entries_by_kind"), "plan: {plan}");
        assert!(plan.contains("entry_id>?"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE") && !plan.contains("SCAN"), "plan: {plan}");
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
        let plan = plan_of(&store, select.sql().as_str(), &[1, 0, 1, 1]).await;
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
        let plan = plan_of(&store, select.sql().as_str(), &[1, 0]).await;
        assert!(plan.contains("USING INDEX tape_entries_by_name (tape_id=? AND name=?)"), "plan: {plan}");
        let kind = TapeQuery::all().kinds([EntryKind::Anchor]).newest_first();
        let select = select_entries(1, None, None, &kind);
        let plan = plan_of(&store, select.sql().as_str(), &[1]).await;
        assert!(plan.contains("tape_entries_by_kind (tape_id=? AND kind=?)"), "plan: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "plan sorts: {plan}");
    }
}
