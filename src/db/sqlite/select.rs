//! The SQL of tape reads, and rows back into entries.
//!
//! Statements are built as text with `?` placeholders and their values beside
//! them; SQLite caches each distinct text's compiled statement per connection,
//! so a builder keeps constant parts (kinds, index hints) literal and binds
//! only what varies per call.

use crate::tape::entry::{Entry, EntryKind, JsonObject, format_date, parse_date};
use crate::tape::error::{TapeError, TapeResult};
use crate::tape::name::TapeName;
use crate::tape::query::TapeQuery;
use rusqlite::types::Value;

/// A statement's text and the values of its placeholders, in order.
#[derive(Debug, Default)]
pub(super) struct Sql {
    pub text: String,
    pub params: Vec<Value>,
}

impl Sql {
    fn new(text: impl Into<String>) -> Sql {
        Sql { text: text.into(), params: Vec::new() }
    }

    fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    fn bind(&mut self, value: impl Into<Value>) -> &mut Sql {
        self.text.push('?');
        self.params.push(value.into());
        self
    }
}

/// The columns every entry read selects, in [`decode`]'s order.
pub(super) const ENTRY_COLUMNS: &str = "entry_id, kind, payload, meta, date";

/// `SELECT` of a tape's entries in `[from, to)` matching the query's filters
/// and order (text and limit are applied by the caller).
pub(super) fn select_entries(tape_id: i64, from: Option<i64>, to: Option<i64>, query: &TapeQuery) -> Sql {
    let mut select =
        Sql::new(format!("SELECT {ENTRY_COLUMNS} FROM tape_entries{} WHERE tape_id = ", index_hint(query)));
    select.bind(tape_id);
    if let Some(from) = from {
        select.push(" AND entry_id >= ").bind(from);
    }
    if let Some(to) = to {
        select.push(" AND entry_id < ").bind(to);
    }
    if let Some(after) = query.after_id {
        select.push(" AND entry_id > ").bind(after as i64);
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
pub(super) fn kind_list(kinds: &[EntryKind]) -> String {
    kinds.iter().map(|kind| format!("'{}'", kind.as_str())).collect::<Vec<_>>().join(", ")
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

/// One statement for `TapeStore::latest`: a UNION of index probes (see
/// [`index_hint`]), each row tagged with its query's position (`slot`, the
/// first column, before [`ENTRY_COLUMNS`]).
pub(super) fn latest_select(tape_id: i64, queries: &[TapeQuery]) -> Sql {
    let mut select = Sql::default();
    for (slot, query) in queries.iter().enumerate() {
        if slot > 0 {
            select.push(" UNION ALL ");
        }
        let index = index_hint(query);
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
        select.push(" ORDER BY entry_id DESC LIMIT 1)");
    }
    select
}

/// Every entry from the tape's last anchor on (of `kinds`, when given), oldest first.
pub(super) fn select_from_last_anchor(tape_id: i64, kinds: &[EntryKind]) -> Sql {
    let mut select = Sql::new(format!("SELECT {ENTRY_COLUMNS} FROM tape_entries WHERE tape_id = "));
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

pub(super) const LAST_ANCHOR_SQL: &str =
    "SELECT entry_id FROM tape_entries WHERE tape_id = ?1 AND kind = 'anchor' ORDER BY entry_id DESC LIMIT 1";

/// The entry in `row`, whose columns start at `first` in [`ENTRY_COLUMNS`]'
/// order; a row that does not decode is reported as [`TapeError::Corrupt`].
pub(super) fn decode(tape: &TapeName, location: &str, row: &rusqlite::Row<'_>, first: usize) -> TapeResult<Entry> {
    let id: i64 = row.get(first).unwrap_or(0);
    let corrupt = |reason: String| TapeError::Corrupt {
        tape: tape.clone(),
        id: id as u64,
        location: location.to_string(),
        reason,
    };
    // Borrowed from the row: no copy of each column before it is parsed
    // (every model call decodes its whole context).
    let text = |offset: usize, column: &str| -> TapeResult<&str> {
        row.get_ref(first + offset)
            .map_err(|e| corrupt(format!("{column} is not text: {e}")))?
            .as_str()
            .map_err(|e| corrupt(format!("{column} is not text: {e}")))
    };
    let kind_text = text(1, "kind")?;
    let kind = EntryKind::parse(kind_text).ok_or_else(|| corrupt(format!("unknown kind {kind_text:?}")))?;
    let object = |offset: usize, column: &str| -> TapeResult<JsonObject> {
        match text(offset, column)? {
            "{}" => Ok(JsonObject::new()),
            json => serde_json::from_str(json).map_err(|e| corrupt(format!("{column} is not a JSON object: {e}"))),
        }
    };
    let date_text = text(4, "date")?;
    let date = parse_date(date_text).ok_or_else(|| corrupt(format!("date {date_text:?} is not RFC 3339")))?;
    Ok(Entry { id: id as u64, kind, payload: object(2, "payload")?, meta: object(3, "meta")?, date })
}
