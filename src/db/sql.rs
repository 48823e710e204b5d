//! The SQL of tape reads, for every backend: a [`TapeQuery`] becomes one
//! statement text with its values beside it, and a row's columns become an
//! [`Entry`] again.
//!
//! Both backends keep the same two tables (`migrations/*/0001_tapes.sql`),
//! so a query means the same statement on each; what differs is a
//! [`Dialect`]'s placeholders (`?` or `$n`) and SQLite's index hints.
//! Statements keep constant parts (kinds, index hints) literal and bind only
//! what varies per call, so each distinct text is compiled once per
//! connection (SQLite's statement cache, PostgreSQL's prepared statements).

use crate::tape::entry::{Entry, EntryKind, JsonObject, format_date, parse_date};
use crate::tape::error::{TapeError, TapeResult};
use crate::tape::name::TapeName;
use crate::tape::query::{Scope, TapeQuery};
use crate::tape::store::{TapeStats, TapeSummary};

/// Which database a statement is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Int(i64),
    Text(String),
}

impl From<i64> for Param {
    fn from(value: i64) -> Param {
        Param::Int(value)
    }
}

impl From<String> for Param {
    fn from(value: String) -> Param {
        Param::Text(value)
    }
}

/// A statement's text and the values of its placeholders, in order.
#[derive(Debug)]
pub(crate) struct Sql {
    pub text: String,
    pub params: Vec<Param>,
    dialect: Dialect,
}

impl Sql {
    pub(crate) fn new(dialect: Dialect, text: impl Into<String>) -> Sql {
        Sql { text: text.into(), params: Vec::new(), dialect }
    }

    pub(crate) fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for `value`.
    pub(crate) fn bind(&mut self, value: impl Into<Param>) -> &mut Sql {
        self.params.push(value.into());
        match self.dialect {
            Dialect::Sqlite => self.text.push('?'),
            Dialect::Postgres => {
                self.text.push('$');
                self.text.push_str(&self.params.len().to_string());
            }
        }
        self
    }
}

/// The columns every entry read selects, in [`decode_entry`]'s order.
pub(crate) const ENTRY_COLUMNS: &str = "entry_id, kind, payload, meta, date";

/// `SELECT` of a tape's entries in `[from, to)` matching the query's filters
/// and order (text and limit are applied by the caller).
pub(crate) fn select_entries(
    dialect: Dialect,
    tape_id: i64,
    from: Option<i64>,
    to: Option<i64>,
    query: &TapeQuery,
) -> Sql {
    let hint = index_hint(dialect, query);
    let mut select = Sql::new(dialect, format!("SELECT {ENTRY_COLUMNS} FROM tape_entries{hint} WHERE tape_id = "));
    select.bind(tape_id);
    if let Some(from) = from {
        select.push(" AND entry_id >= ").bind(from);
    }
    if let Some(to) = to {
        select.push(" AND entry_id < ").bind(to);
    }
    if let Some(after) = query.after_id {
        // Ids are stored as signed 64-bit: one past the largest is no entry.
        select.push(" AND entry_id > ").bind(i64::try_from(after).unwrap_or(i64::MAX));
    }
    if let Some(before) = query.before_id {
        select.push(" AND entry_id < ").bind(i64::try_from(before).unwrap_or(i64::MAX));
    }
    if !query.kinds.is_empty() {
        select.push(" AND kind IN (").push(&kind_list(&query.kinds)).push(")");
    }
    if let Some(name) = &query.name {
        select.push(" AND name = ").bind(name.clone());
    }
    if let Some(since) = &query.since {
        select.push(" AND date >= ").bind(format_date(since));
    }
    if let Some(until) = &query.until {
        select.push(" AND date < ").bind(format_date(until));
    }
    select.push(if query.newest_first { " ORDER BY entry_id DESC" } else { " ORDER BY entry_id ASC" });
    select
}

/// The kinds as a list of SQL literals: the kinds are ours, and the statement
/// stays one cached text.
pub(crate) fn kind_list(kinds: &[EntryKind]) -> String {
    kinds.iter().map(|kind| format!("'{}'", kind.as_str())).collect::<Vec<_>>().join(", ")
}

/// The index a filtered read should walk, on SQLite. Without table
/// statistics SQLite prefers the primary key for `ORDER BY entry_id`, which
/// for a rare name or kind reads the whole tape; these indexes are ordered
/// by `entry_id` within a name or a kind, so they serve the same order with
/// only matching rows. PostgreSQL's planner has statistics (and no hints).
fn index_hint(dialect: Dialect, query: &TapeQuery) -> &'static str {
    if dialect != Dialect::Sqlite {
        return "";
    }
    match (&query.name, query.kinds.len()) {
        (Some(_), _) => " INDEXED BY tape_entries_by_name",
        (None, 1) => " INDEXED BY tape_entries_by_kind",
        _ => "",
    }
}

/// One statement for `TapeStore::latest`: a UNION of index probes (see
/// [`index_hint`]), each row tagged with its query's position (`slot`, the
/// first column, before [`ENTRY_COLUMNS`]).
pub(crate) fn latest_select(dialect: Dialect, tape_id: i64, queries: &[TapeQuery]) -> Sql {
    let mut select = Sql::new(dialect, "");
    for (slot, query) in queries.iter().enumerate() {
        if slot > 0 {
            select.push(" UNION ALL ");
        }
        let index = index_hint(dialect, query);
        select.push(&format!(
            "SELECT {slot} AS slot, * FROM (SELECT {ENTRY_COLUMNS} FROM tape_entries{index} WHERE tape_id = "
        ));
        select.bind(tape_id);
        if let Some(name) = &query.name {
            select.push(" AND name = ").bind(name.clone());
        }
        match query.kinds.as_slice() {
            [] => {}
            [kind] => {
                select.push(&format!(" AND kind = '{}'", kind.as_str()));
            }
            kinds => {
                select.push(" AND kind IN (").push(&kind_list(kinds)).push(")");
            }
        }
        // PostgreSQL 15 wants every subquery in FROM named.
        select.push(&format!(" ORDER BY entry_id DESC LIMIT 1) AS probe{slot}"));
    }
    select
}

/// Every entry from the tape's last anchor on (of `kinds`, when given), oldest first.
pub(crate) fn select_from_last_anchor(dialect: Dialect, tape_id: i64, kinds: &[EntryKind]) -> Sql {
    let mut select = Sql::new(dialect, format!("SELECT {ENTRY_COLUMNS} FROM tape_entries WHERE tape_id = "));
    select.bind(tape_id);
    select.push(" AND entry_id >= (SELECT entry_id FROM tape_entries WHERE tape_id = ");
    select.bind(tape_id);
    select.push(" AND kind = 'anchor' ORDER BY entry_id DESC LIMIT 1)");
    if !kinds.is_empty() {
        select.push(" AND kind IN (").push(&kind_list(kinds)).push(")");
    }
    select.push(" ORDER BY entry_id ASC");
    select
}

/// The id of the tape's newest anchor named `name`, or its newest anchor of
/// any name: one probe of an index.
pub(crate) fn last_anchor(dialect: Dialect, tape_id: i64, name: Option<&str>) -> Sql {
    let mut select = Sql::new(dialect, "SELECT entry_id FROM tape_entries WHERE tape_id = ");
    select.bind(tape_id);
    if let Some(name) = name {
        select.push(" AND name = ").bind(name.to_string());
    }
    select.push(" AND kind = 'anchor' ORDER BY entry_id DESC LIMIT 1");
    select
}

/// The id of the first anchor named `name` after entry `after`.
pub(crate) fn next_anchor(dialect: Dialect, tape_id: i64, name: &str, after: i64) -> Sql {
    let mut select = Sql::new(dialect, "SELECT entry_id FROM tape_entries WHERE tape_id = ");
    select.bind(tape_id).push(" AND name = ").bind(name.to_string());
    select.push(" AND kind = 'anchor' AND entry_id > ").bind(after).push(" ORDER BY entry_id ASC LIMIT 1");
    select
}

/// The statement of `TapeStore::stats`: the tape's last id, its anchor
/// count and its last anchor (entry columns from the fourth on), in one
/// snapshot; no row for a tape that has none.
pub(crate) fn stats_select(dialect: Dialect, tape: &TapeName) -> Sql {
    let mut select = Sql::new(
        dialect,
        "SELECT t.last_entry_id, \
            (SELECT count(*) FROM tape_entries c WHERE c.tape_id = t.id AND c.kind = 'anchor'), \
            a.entry_id, a.kind, a.payload, a.meta, a.date \
         FROM tapes t LEFT JOIN tape_entries a ON a.tape_id = t.id AND a.kind = 'anchor' \
            AND a.entry_id = (SELECT max(m.entry_id) FROM tape_entries m \
                              WHERE m.tape_id = t.id AND m.kind = 'anchor') \
         WHERE t.name = ",
    );
    select.bind(tape.as_str().to_string());
    select
}

/// The statement of `TapeStore::list`.
pub(crate) const LIST_SQL: &str = "SELECT name, last_entry_id, updated_at FROM tapes ORDER BY name";

/// The error of a read whose scope's anchor is not on the tape.
pub(crate) fn anchor_not_found(tape: &TapeName, scope: &Scope) -> TapeError {
    let anchor = match scope {
        Scope::AfterAnchor(name) => Some(name.clone()),
        Scope::BetweenAnchors { start, .. } => Some(start.clone()),
        Scope::All | Scope::LastAnchor => None,
    };
    TapeError::AnchorNotFound { tape: tape.clone(), anchor }
}

/// Where a row came from, for the error that it does not decode.
pub(crate) struct RowSource<'a> {
    pub tape: &'a TapeName,
    pub location: &'a str,
}

impl RowSource<'_> {
    /// [`TapeError::Corrupt`] for entry `id`.
    fn corrupt(&self, id: i64, reason: String) -> TapeError {
        TapeError::Corrupt { tape: self.tape.clone(), id: id as u64, location: self.location.to_string(), reason }
    }

    /// The entry of row `id` whose text columns (kind, payload, meta, date:
    /// [`ENTRY_COLUMNS`] after the id, numbered from 1) `column` gives,
    /// borrowed from the row (no copy of each column before it is parsed:
    /// every model call decodes its whole context); one that does not
    /// decode is [`TapeError::Corrupt`].
    pub(crate) fn decode<'row, E: std::fmt::Display>(
        &self,
        id: i64,
        column: impl Fn(usize) -> Result<&'row str, E>,
    ) -> TapeResult<Entry> {
        let corrupt = |reason: String| self.corrupt(id, reason);
        let text = |offset: usize, name: &str| column(offset).map_err(|e| corrupt(format!("{name} is not text: {e}")));
        let kind_text = text(1, "kind")?;
        let kind = EntryKind::parse(kind_text).ok_or_else(|| corrupt(format!("unknown kind {kind_text:?}")))?;
        let object = |offset: usize, name: &str| -> TapeResult<JsonObject> {
            match text(offset, name)? {
                "{}" => Ok(JsonObject::new()),
                json => serde_json::from_str(json).map_err(|e| corrupt(format!("{name} is not a JSON object: {e}"))),
            }
        };
        let date_text = text(4, "date")?;
        let date = parse_date(date_text).ok_or_else(|| corrupt(format!("date {date_text:?} is not RFC 3339")))?;
        Ok(Entry { id: id as u64, kind, payload: object(2, "payload")?, meta: object(3, "meta")?, date })
    }
}

/// Whether `TapeStore::latest` can answer `queries` with [`latest_select`]
/// (each a bare kind and name filter), or must read them one by one.
pub(crate) fn latest_in_one_statement(queries: &[TapeQuery]) -> bool {
    let simple = |q: &TapeQuery| {
        let bare = TapeQuery { kinds: q.kinds.clone(), name: q.name.clone(), ..TapeQuery::all() };
        TapeQuery { newest_first: false, limit: None, ..q.clone() } == bare
    };
    !queries.is_empty() && queries.iter().all(simple)
}

/// The stats of [`stats_select`]'s row.
pub(crate) fn tape_stats(last_id: i64, anchors: i64, last_anchor: Option<Entry>) -> TapeStats {
    // ids are gapless from 1, so the last id is the count
    TapeStats { entries: last_id as u64, anchors: anchors as u64, last_id: last_id as u64, last_anchor }
}

/// A row of [`LIST_SQL`].
pub(crate) fn tape_summary(name: String, last_id: i64, updated: &str) -> TapeSummary {
    TapeSummary { name, entries: last_id as u64, updated: if last_id > 0 { parse_date(updated) } else { None } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_follow_the_dialect() {
        let query = TapeQuery::all().named("x");
        let sqlite = select_entries(Dialect::Sqlite, 7, Some(2), None, &query);
        assert!(sqlite.text.contains("tape_id = ? AND entry_id >= ? AND name = ?"), "{}", sqlite.text);
        assert!(sqlite.text.contains("INDEXED BY tape_entries_by_name"));
        let postgres = select_entries(Dialect::Postgres, 7, Some(2), None, &query);
        assert!(postgres.text.contains("tape_id = $1 AND entry_id >= $2 AND name = $3"), "{}", postgres.text);
        assert!(!postgres.text.contains("INDEXED BY"));
        assert_eq!(postgres.params, vec![Param::Int(7), Param::Int(2), Param::Text("x".into())]);
    }

    #[test]
    fn an_id_past_the_largest_is_bound_as_the_largest() {
        let select = select_entries(Dialect::Postgres, 1, None, None, &TapeQuery::all().after_id(u64::MAX));
        assert_eq!(select.params[1], Param::Int(i64::MAX));
    }
}
