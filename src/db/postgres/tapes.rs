//! The PostgreSQL tape store.
//!
//! An append is one statement: it creates the tape's row or locks it
//! (`INSERT … ON CONFLICT DO UPDATE`), moves its last id past the batch and
//! inserts the batch numbered from the old last id. The row lock is held
//! until the statement commits, so appends to one tape from any number of
//! connections and processes follow each other without gaps, and a batch
//! lands whole or not at all. A reset takes the same lock first. Reads that
//! need more than one statement (a scope bounded by named anchors) run in a
//! repeatable-read transaction, so they see one snapshot.

use super::{DbError, Durability, PgDb};
use crate::db::sql::{
    Dialect, LIST_SQL, Param, RowSource, Sql, anchor_not_found, last_anchor, latest_in_one_statement, latest_select,
    next_anchor, select_entries, select_from_last_anchor, stats_select, tape_stats, tape_summary,
};
use crate::tape::entry::{Entry, NewEntry, format_date};
use crate::tape::error::{TapeError, TapeResult};
use crate::tape::name::TapeName;
use crate::tape::query::{Scope, TapeQuery, TextMatcher};
use crate::tape::store::{TapeStats, TapeStore, TapeSummary, check_batch, latest_one_by_one};
use async_trait::async_trait;
use chrono::Utc;
use futures::TryStreamExt;
use parking_lot::Mutex;
use sqlx_core::executor::Executor;
use sqlx_core::query::{Query, query};
use sqlx_core::row::Row;
use sqlx_postgres::{PgArguments, PgRow, Postgres};
use std::collections::HashMap;
use std::sync::Arc;

/// The tapes of a PostgreSQL database.
#[derive(Clone)]
pub struct PgTapeStore {
    db: PgDb,
    /// Tape names to row ids, once seen (a tape's row is never deleted).
    known_tapes: Arc<Mutex<HashMap<TapeName, i64>>>,
}

/// Creates or locks the tape's row and moves its last id past the batch
/// (`$2` entries), then inserts the batch from the arrays `$4`…`$8`
/// numbered after the old last id; answers whether it was allowed, the
/// tape's id and the batch's first id. Among replicas (`$9`, this process's
/// incarnation) only while the incarnation is alive: a replica taken for
/// dead, whose sessions another runs now, must not add its turn to them.
const APPEND_SQL: &str = "\
WITH alive AS (
    SELECT $9::text IS NULL
        OR EXISTS (SELECT 1 FROM gateway_replicas WHERE id = $9 AND expires_at > now()) AS ok
), tape AS (
    INSERT INTO tapes AS t (name, last_entry_id, created_at, updated_at)
    SELECT $1, $2, $3, $3 WHERE (SELECT ok FROM alive)
    ON CONFLICT (name) DO UPDATE SET last_entry_id = t.last_entry_id + EXCLUDED.last_entry_id,
                                     updated_at = EXCLUDED.updated_at
    RETURNING t.id, t.last_entry_id - $2 AS before
), inserted AS (
    INSERT INTO tape_entries (tape_id, entry_id, kind, name, payload, meta, date)
    SELECT tape.id, tape.before + batch.n, batch.kind, batch.name, batch.payload, batch.meta, batch.date
    FROM tape, UNNEST($4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
         WITH ORDINALITY AS batch (kind, name, payload, meta, date, n)
    RETURNING entry_id
)
SELECT (SELECT ok FROM alive), (SELECT id FROM tape), (SELECT before FROM tape) + 1, (SELECT count(*) FROM inserted)";

impl PgTapeStore {
    /// Connects to `url` with full durability (see [`PgDb::connect`]).
    pub async fn connect(url: &str) -> TapeResult<PgTapeStore> {
        PgTapeStore::connect_with(url, Durability::Full).await
    }

    /// Connects to `url` and migrates it.
    pub async fn connect_with(url: &str, durability: Durability) -> TapeResult<PgTapeStore> {
        let db = PgDb::connect(url, durability)
            .await
            .map_err(|error| TapeError::Open { path: error.path, message: error.message })?;
        Ok(PgTapeStore::on(db))
    }

    /// The tapes of a connected database.
    pub fn on(db: PgDb) -> PgTapeStore {
        PgTapeStore { db, known_tapes: Arc::default() }
    }

    /// The database the tapes are in.
    pub fn database(&self) -> &PgDb {
        &self.db
    }

    /// Closes the pool (see [`PgDb::close`]).
    pub async fn close(&self) {
        self.db.close().await;
    }

    fn failed(&self, tape: &TapeName, operation: &'static str) -> impl Fn(sqlx_core::Error) -> TapeError + use<> {
        let (tape, location) = (tape.to_string(), self.db.location().to_string());
        move |error| TapeError::Backend {
            tape: tape.clone(),
            operation,
            location: location.clone(),
            source: Box::new(DbError::Postgres(error)),
        }
    }

    fn known_id(&self, tape: &TapeName) -> Option<i64> {
        self.known_tapes.lock().get(tape).copied()
    }

    /// The tape's row id (cached once seen); `None` while it has no row.
    async fn tape_id(&self, tape: &TapeName) -> TapeResult<Option<i64>> {
        if let Some(id) = self.known_id(tape) {
            return Ok(Some(id));
        }
        let id: Option<i64> = query::<Postgres>("SELECT id FROM tapes WHERE name = $1")
            .bind(tape.as_str())
            .fetch_optional(self.db.pool())
            .await
            .map_err(self.failed(tape, "read"))?
            .map(|row| row.try_get(0))
            .transpose()
            .map_err(self.failed(tape, "read"))?;
        if let Some(id) = id {
            self.known_tapes.lock().insert(tape.clone(), id);
        }
        Ok(id)
    }

    /// The entry in `row`, its columns from `first` on.
    fn decode(&self, tape: &TapeName, row: &PgRow, first: usize) -> TapeResult<Entry> {
        let id: i64 = row.try_get(first).unwrap_or(0);
        RowSource { tape, location: self.db.location() }.decode(id, |offset| row.try_get::<&str, _>(first + offset))
    }

    /// Runs `select` on `executor` and decodes its rows, applying the
    /// query's text filter (in Rust, so every store folds case alike) and
    /// limit; rows stream, so a filtered read holds at most `limit` entries.
    async fn entries<'c, E>(
        &self,
        executor: E,
        tape: &TapeName,
        query: &TapeQuery,
        mut select: Sql,
    ) -> TapeResult<Vec<Entry>>
    where
        E: Executor<'c, Database = Postgres>,
    {
        let failed = self.failed(tape, "read");
        let limit = query.limit.unwrap_or(usize::MAX);
        let matcher = query.text.as_deref().map(TextMatcher::new);
        if matcher.is_none()
            && let Some(limit) = query.limit
        {
            select.push(" LIMIT ").bind(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        let mut rows = bound(&select).fetch(executor);
        let mut found = Vec::new();
        while found.len() < limit {
            let Some(row) = rows.try_next().await.map_err(&failed)? else { break };
            let entry = self.decode(tape, &row, 0)?;
            if matcher.as_ref().is_none_or(|m| m.matches(&entry)) {
                found.push(entry);
            }
        }
        Ok(found)
    }

    /// A read whose scope needs its bounds found first, in one snapshot;
    /// `None` when the scope's anchor is missing.
    async fn read_scoped(&self, tape: &TapeName, tape_id: i64, query: &TapeQuery) -> TapeResult<Option<Vec<Entry>>> {
        let failed = self.failed(tape, "read");
        let mut snapshot = self.db.pool().begin().await.map_err(&failed)?;
        snapshot.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY").await.map_err(&failed)?;
        let mut probe = async |select: Sql| -> TapeResult<Option<i64>> {
            let row = bound(&select).fetch_optional(&mut *snapshot).await.map_err(&failed)?;
            row.map(|row| row.try_get(0)).transpose().map_err(&failed)
        };
        let bounds = match &query.scope {
            Scope::All => Some((None, None)),
            Scope::LastAnchor => {
                probe(last_anchor(Dialect::Postgres, tape_id, None)).await?.map(|from| (Some(from), None))
            }
            Scope::AfterAnchor(name) => {
                probe(last_anchor(Dialect::Postgres, tape_id, Some(name))).await?.map(|from| (Some(from), None))
            }
            Scope::BetweenAnchors { start, end } => {
                match probe(last_anchor(Dialect::Postgres, tape_id, Some(start))).await? {
                    None => None,
                    Some(from) => Some((Some(from), probe(next_anchor(Dialect::Postgres, tape_id, end, from)).await?)),
                }
            }
        };
        let Some((from, to)) = bounds else { return Ok(None) };
        let select = select_entries(Dialect::Postgres, tape_id, from, to, query);
        let rows = self.entries(&mut *snapshot, tape, query, select).await?;
        snapshot.commit().await.map_err(&failed)?;
        Ok(Some(rows))
    }
}

/// `select`'s text with its values bound.
fn bound(select: &Sql) -> Query<'_, Postgres, PgArguments> {
    select.params.iter().fold(query::<Postgres>(&select.text), |statement, param| match param {
        Param::Int(value) => statement.bind(*value),
        Param::Text(value) => statement.bind(value.as_str()),
    })
}

/// A batch as the arrays of [`APPEND_SQL`], encoded once.
#[derive(Default)]
struct Columns {
    kinds: Vec<&'static str>,
    names: Vec<Option<String>>,
    payloads: Vec<String>,
    metas: Vec<String>,
    dates: Vec<String>,
}

impl Columns {
    fn of(entries: &[NewEntry]) -> Columns {
        let mut columns = Columns::default();
        for entry in entries {
            columns.kinds.push(entry.kind.as_str());
            columns.names.push(entry.name().map(str::to_string));
            columns.payloads.push(serde_json::to_string(&entry.payload).unwrap_or_else(|_| "{}".into()));
            columns.metas.push(serde_json::to_string(&entry.meta).unwrap_or_else(|_| "{}".into()));
            columns.dates.push(format_date(&entry.date));
        }
        columns
    }
}

#[async_trait]
impl TapeStore for PgTapeStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        check_batch(tape, &entries)?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let failed = self.failed(tape, "append");
        let columns = Columns::of(&entries);
        let updated = columns.dates.last().cloned().unwrap_or_else(|| format_date(&Utc::now()));
        let row = query::<Postgres>(APPEND_SQL)
            .bind(tape.as_str())
            .bind(entries.len() as i64)
            .bind(updated)
            .bind(&columns.kinds)
            .bind(&columns.names)
            .bind(&columns.payloads)
            .bind(&columns.metas)
            .bind(&columns.dates)
            .bind(self.db.holder())
            .fetch_one(self.db.pool())
            .await
            .map_err(&failed)?;
        let allowed: bool = row.try_get(0).map_err(&failed)?;
        if !allowed {
            return Err(TapeError::Backend {
                tape: tape.to_string(),
                operation: "append",
                location: self.db.location().to_string(),
                source: Box::new(DbError::NotClaimed),
            });
        }
        let (tape_id, first, inserted): (i64, i64, i64) =
            (row.try_get(1).map_err(&failed)?, row.try_get(2).map_err(&failed)?, row.try_get(3).map_err(&failed)?);
        if inserted != entries.len() as i64 {
            let message = format!("an append of {} entries inserted {inserted}", entries.len());
            return Err(TapeError::StoreContract { tape: tape.clone(), message });
        }
        self.known_tapes.lock().insert(tape.clone(), tape_id);
        Ok(entries.into_iter().enumerate().map(|(i, e)| e.into_entry(first as u64 + i as u64)).collect())
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        let Some(tape_id) = self.tape_id(tape).await? else {
            // A tape without a row: anchor scopes fail as on a tape without anchors.
            return query.apply(tape, &[]);
        };
        let found = match &query.scope {
            // One statement is consistent on its own: no transaction.
            Scope::All => {
                let select = select_entries(Dialect::Postgres, tape_id, None, None, query);
                Some(self.entries(self.db.pool(), tape, query, select).await?)
            }
            Scope::LastAnchor if query.keeps_its_anchor() => {
                // Every model call reads this: the anchor is the first row, so no rows means no anchor.
                let select = select_from_last_anchor(Dialect::Postgres, tape_id, &query.kinds);
                let rows = self.entries(self.db.pool(), tape, query, select).await?;
                (!rows.is_empty()).then_some(rows)
            }
            _ => self.read_scoped(tape, tape_id, query).await?,
        };
        found.ok_or_else(|| anchor_not_found(tape, &query.scope))
    }

    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        if !latest_in_one_statement(queries) {
            return latest_one_by_one(self, tape, queries).await;
        }
        let mut found = vec![None; queries.len()];
        let Some(tape_id) = self.tape_id(tape).await? else { return Ok(found) };
        let failed = self.failed(tape, "read");
        let select = latest_select(Dialect::Postgres, tape_id, queries);
        for row in bound(&select).fetch_all(self.db.pool()).await.map_err(&failed)? {
            let slot: i32 = row.try_get(0).map_err(&failed)?;
            if let Some(place) = usize::try_from(slot).ok().and_then(|slot| found.get_mut(slot)) {
                *place = Some(self.decode(tape, &row, 1)?);
            }
        }
        Ok(found)
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        let failed = self.failed(tape, "stats");
        let select = stats_select(Dialect::Postgres, tape);
        let Some(row) = bound(&select).fetch_optional(self.db.pool()).await.map_err(&failed)? else {
            return Ok(TapeStats::default());
        };
        let last_id: i64 = row.try_get(0).map_err(&failed)?;
        let anchors: i64 = row.try_get(1).map_err(&failed)?;
        let anchor_id: Option<i64> = row.try_get(2).map_err(&failed)?;
        Ok(tape_stats(last_id, anchors, anchor_id.map(|_| self.decode(tape, &row, 2)).transpose()?))
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        let location = self.db.location().to_string();
        let failed = |error: sqlx_core::Error| TapeError::Backend {
            tape: "*".into(),
            operation: "list",
            location: location.clone(),
            source: Box::new(DbError::Postgres(error)),
        };
        let rows = query::<Postgres>(LIST_SQL).fetch_all(self.db.pool()).await.map_err(failed)?;
        rows.iter()
            .map(|row| Ok(tape_summary(row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
            .collect::<Result<_, sqlx_core::Error>>()
            .map_err(failed)
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        let failed = self.failed(tape, "reset");
        let mut transaction = self.db.pool().begin().await.map_err(&failed)?;
        // Each statement of a read-committed transaction sees what committed
        // before it: once the lock is held, the delete sees every append.
        let locked = query::<Postgres>("SELECT id FROM tapes WHERE name = $1 FOR UPDATE")
            .bind(tape.as_str())
            .fetch_optional(&mut *transaction)
            .await
            .map_err(&failed)?;
        if let Some(row) = locked {
            let tape_id: i64 = row.try_get(0).map_err(&failed)?;
            query::<Postgres>("DELETE FROM tape_entries WHERE tape_id = $1")
                .bind(tape_id)
                .execute(&mut *transaction)
                .await
                .map_err(&failed)?;
            query::<Postgres>("UPDATE tapes SET last_entry_id = 0, resets = resets + 1, updated_at = $1 WHERE id = $2")
                .bind(format_date(&Utc::now()))
                .bind(tape_id)
                .execute(&mut *transaction)
                .await
                .map_err(&failed)?;
        }
        transaction.commit().await.map_err(&failed)
    }

    fn location(&self) -> String {
        self.db.location().to_string()
    }
}
