//! The statements of the context cache (`db::context_cache`): loading a
//! tape's tail and asking for what was appended after it.

use super::select::{ENTRY_COLUMNS, Sql, kind_list, select_entries, select_from_last_anchor};
use super::tapes::Reading;
use crate::db::context_cache::{Position, Refresh, Sized, tail_start};
use crate::tape::error::TapeResult;
use crate::tape::query::{CONTEXT_KINDS, TapeQuery};
use rusqlite::{Connection, params, params_from_iter};

/// A tape's tail as one snapshot: its position, where the tail starts and
/// its entries; `None` when the tape has no anchor (nothing to cache).
pub(super) fn load(
    conn: &Connection,
    tape_id: i64,
    reading: &Reading,
) -> TapeResult<Option<(Position, u64, Vec<Sized>)>> {
    let failed = reading.failed();
    let snapshot = conn.unchecked_transaction().map_err(&failed)?;
    let position = conn
        .prepare_cached("SELECT resets, last_entry_id FROM tapes WHERE id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([tape_id], |row| Ok(Position { resets: row.get(0)?, last_id: row.get::<_, i64>(1)? as u64 }))
        })
        .map_err(&failed)?;
    let mut entries = sized(conn, reading, select_from_last_anchor(tape_id, &CONTEXT_KINDS))?;
    let Some(anchor) = entries.first() else { return Ok(None) };
    let (anchor_id, from) = (anchor.entry.id, tail_start(&anchor.entry));
    if from < anchor_id {
        // A compaction's kept turns, written before its anchor.
        let kept = TapeQuery::all().kinds(CONTEXT_KINDS);
        let mut before =
            sized(conn, reading, select_entries(tape_id, Some(from as i64), Some(anchor_id as i64), &kept))?;
        before.append(&mut entries);
        entries = before;
    }
    snapshot.commit().map_err(&failed)?;
    Ok(Some((position, from, entries)))
}

/// The tape's position and its context-kind entries after `last_id`, in
/// one statement (so one snapshot); `None` when the tape's row is gone.
pub(super) fn refresh(conn: &Connection, tape_id: i64, last_id: u64, reading: &Reading) -> TapeResult<Option<Refresh>> {
    let failed = reading.failed();
    let mut statement = conn.prepare_cached(refresh_select()).map_err(&failed)?;
    let mut rows = statement.query(params![tape_id, last_id as i64]).map_err(&failed)?;
    let mut found: Option<Refresh> = None;
    while let Some(row) = rows.next().map_err(&failed)? {
        let refresh = match &mut found {
            Some(refresh) => refresh,
            None => {
                let position = Position {
                    resets: row.get(0).map_err(&failed)?,
                    last_id: row.get::<_, i64>(1).map_err(&failed)? as u64,
                };
                found.insert(Refresh { position, entries: Vec::new() })
            }
        };
        if row.get::<_, Option<i64>>(2).map_err(&failed)?.is_some() {
            refresh.entries.push(Sized::new(reading.decode(row, 2)?));
        }
    }
    Ok(found)
}

/// The statement of [`refresh`]: the tape's row by its id, its entries by
/// the primary key from `?2` on (`?1` the tape's id). Built once: every
/// model call runs it.
pub(super) fn refresh_select() -> &'static str {
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let columns = ENTRY_COLUMNS.split(", ").map(|column| format!("e.{column}")).collect::<Vec<_>>().join(", ");
        format!(
            "SELECT t.resets, t.last_entry_id, {columns} FROM tapes t \
             LEFT JOIN tape_entries e ON e.tape_id = t.id AND e.entry_id > ?2 AND e.kind IN ({}) \
             WHERE t.id = ?1 ORDER BY e.entry_id",
            kind_list(&CONTEXT_KINDS)
        )
    });
    &TEXT
}

/// Every row of `select`, decoded with its size.
fn sized(conn: &Connection, reading: &Reading, select: Sql) -> TapeResult<Vec<Sized>> {
    let failed = reading.failed();
    let mut statement = conn.prepare_cached(&select.text).map_err(&failed)?;
    let mut rows = statement.query(params_from_iter(select.params.iter())).map_err(&failed)?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().map_err(&failed)? {
        found.push(Sized::new(reading.decode(row, 0)?));
    }
    Ok(found)
}
