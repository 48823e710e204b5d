//! Opening a bub database: refuse files that are not ours, migrate, then open
//! the connections the database works with.
//!
//! SQLite's errors are told apart by their codes (`SQLITE_NOTADB`,
//! `SQLITE_CANTOPEN`, …), never by their text, so the messages here do not
//! depend on how a SQLite version words its own.

use super::Durability;
use super::migrate;
use crate::db::health::{Schema, StoreHealth};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::path::Path;
use std::time::Duration;

/// How long a write waits for another process holding the database.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Compiled statements kept per connection: every distinct statement text a
/// turn uses, with room to spare.
const STATEMENT_CACHE: usize = 64;

/// The tables of bub's schema (all migrations applied), and the one that
/// records them. A database holding any other table is somebody else's.
const OUR_TABLES: [&str; 9] = [
    migrate::HISTORY,
    "tapes",
    "tape_entries",
    "gateway_inbox",
    "gateway_outbox",
    "gateway_pairing",
    "gateway_files",
    "gateway_live",
    "admin_audit",
];

/// Checks the file, creates or migrates its schema; the error says what to
/// fix. Blocking.
pub(super) fn prepare(path: &Path) -> Result<(), String> {
    check_file_header(path)?;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| describe_open_error(&e))?;
    let configure = || -> rusqlite::Result<()> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
        conn.pragma_update(None, "foreign_keys", true)
    };
    configure().map_err(|e| describe_open_error(&e))?;
    check_schema_owner(&conn)?;
    migrate::run(&conn).map_err(|e| match e {
        migrate::MigrateError::Sqlite(e) => describe_open_error(&e),
        other => other.to_string(),
    })?;
    conn.close().map_err(|(_, e)| describe_open_error(&e))
}

/// [`crate::db::health::check`] on the file at `path`: opened without
/// creating it, its schema compared, a tape row inserted and rolled back
/// (waiting at most `wait` for a running gateway's write). Blocking.
pub(crate) fn health(path: &Path, wait: Duration) -> StoreHealth {
    if !path.exists() {
        return StoreHealth::Missing;
    }
    if let Err(why) = check_file_header(path) {
        return StoreHealth::Unusable(why);
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = match Connection::open_with_flags(path, flags) {
        Ok(conn) => conn,
        Err(error) => return StoreHealth::Unusable(describe_open_error(&error)),
    };
    if let Err(why) =
        conn.busy_timeout(wait).map_err(|e| describe_open_error(&e)).and_then(|()| check_schema_owner(&conn))
    {
        return StoreHealth::Unusable(why);
    }
    let schema = match migrate::status(&conn) {
        Ok(schema) => schema,
        Err(error) => return StoreHealth::Unusable(describe_open_error(&error)),
    };
    let writable = matches!(schema, Schema::Current { .. }).then(|| {
        let write = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            conn.execute(
                "INSERT INTO tapes (name, created_at, updated_at) VALUES (?1, '', '')",
                [crate::db::health::PROBE_TAPE],
            )?;
            Ok(())
        };
        let wrote = write().map_err(|error| describe_open_error(&error));
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        wrote
    });
    StoreHealth::Open { schema, writable }
}

/// A working connection to the (prepared) database at `path`: the writing
/// one with the durability asked for, or a read-only one.
pub(super) fn connect(path: &Path, durability: Option<Durability>) -> Result<Connection, String> {
    let flags = match durability {
        Some(_) => OpenFlags::SQLITE_OPEN_READ_WRITE,
        None => OpenFlags::SQLITE_OPEN_READ_ONLY,
    } | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| describe_open_error(&e))?;
    let configure = || -> rusqlite::Result<()> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        if let Some(durability) = durability {
            let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
            let level = match durability {
                Durability::Full => "FULL",
                Durability::Normal => "NORMAL",
            };
            conn.pragma_update(None, "synchronous", level)?;
        }
        Ok(())
    };
    configure().map_err(|e| describe_open_error(&e))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

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
fn check_schema_owner(conn: &Connection) -> Result<(), String> {
    let tables = || -> rusqlite::Result<Vec<String>> {
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")?
            .query_map([], |row| row.get(0))?
            .collect()
    };
    let tables = tables().map_err(|e| describe_open_error(&e))?;
    if tables.is_empty()
        || tables.iter().any(|t| t == "tapes") && tables.iter().all(|t| OUR_TABLES.contains(&t.as_str()))
    {
        return Ok(());
    }
    Err(format!(
        "this SQLite database belongs to another program (it has tables {}); bub will not change it — \
         point BUB_HOME elsewhere",
        tables.join(", ")
    ))
}

/// What a SQLite error at open means for the user, by its code.
fn describe_open_error(error: &rusqlite::Error) -> String {
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            "this file is not a usable SQLite database (corrupt, or another program's file)".to_string()
        }
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => {
            format!("cannot open the database for writing ({error}); check the directory's permissions")
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors are told by SQLite's code: a file that passes the header check
    /// but is no database is named as such, whatever SQLite's wording.
    #[test]
    fn a_damaged_file_is_told_by_its_code() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bub.db");
        let mut bytes = b"SQLite format 3\0".to_vec();
        bytes.extend(std::iter::repeat_n(0xA5u8, 4096));
        std::fs::write(&path, &bytes).unwrap();
        let message = prepare(&path).unwrap_err();
        assert_eq!(message, "this file is not a usable SQLite database (corrupt, or another program's file)");
    }

    /// A directory that cannot be written is named as a permission problem.
    #[test]
    fn a_file_that_cannot_be_opened_is_a_permission_problem() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: SQLite cannot open it.
        let path = dir.path().join("bub.db");
        std::fs::create_dir(&path).unwrap();
        let error = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE).unwrap_err();
        assert!(describe_open_error(&error).starts_with("cannot open the database for writing"), "{error}");
    }
}
