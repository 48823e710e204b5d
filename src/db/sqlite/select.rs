//! The SQLite side of tape reads: the shared statements of `db::sql` with
//! SQLite's placeholders and index hints, their values bound, and rows back
//! into entries.

use crate::db::sql::{self, Dialect, Param, RowSource};
use crate::tape::entry::{Entry, EntryKind};
use crate::tape::error::TapeResult;
use crate::tape::name::TapeName;
use crate::tape::query::TapeQuery;
use rusqlite::ToSql;
use rusqlite::types::ToSqlOutput;

pub(super) use crate::db::sql::{ENTRY_COLUMNS, Sql, kind_list};

impl ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Param::Int(value) => value.to_sql(),
            Param::Text(value) => value.to_sql(),
        }
    }
}

/// [`sql::select_entries`] for SQLite.
pub(super) fn select_entries(tape_id: i64, from: Option<i64>, to: Option<i64>, query: &TapeQuery) -> Sql {
    sql::select_entries(Dialect::Sqlite, tape_id, from, to, query)
}

/// [`sql::latest_select`] for SQLite.
pub(super) fn latest_select(tape_id: i64, queries: &[TapeQuery]) -> Sql {
    sql::latest_select(Dialect::Sqlite, tape_id, queries)
}

/// [`sql::select_from_last_anchor`] for SQLite.
pub(super) fn select_from_last_anchor(tape_id: i64, kinds: &[EntryKind]) -> Sql {
    sql::select_from_last_anchor(Dialect::Sqlite, tape_id, kinds)
}

/// The entry in `row`, whose columns start at `first` in [`ENTRY_COLUMNS`]'
/// order; a row that does not decode is reported as
/// [`TapeError::Corrupt`](crate::tape::TapeError::Corrupt).
pub(super) fn decode(tape: &TapeName, location: &str, row: &rusqlite::Row<'_>, first: usize) -> TapeResult<Entry> {
    let id: i64 = row.get(first).unwrap_or(0);
    RowSource { tape, location }
        .decode(id, |offset| -> rusqlite::Result<&str> { row.get_ref(first + offset)?.as_str().map_err(Into::into) })
}
