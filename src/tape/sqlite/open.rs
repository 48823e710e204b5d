//! Opening a bub database: refuse files that are not ours, migrate, then open
//! the connections the store works with.
//!
//! Migrations run through sqlx's migrator (the schema history stays in
//! `_sqlx_migrations`, as it always was, and PostgreSQL will share the
//! mechanism); the working connections are plain SQLite connections that the
//! writer and reader threads own.

use super::Durability;
use rusqlite::{Connection, OpenFlags};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{Connection as _, SqliteConnection};
use std::path::Path;
use std::time::Duration;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// How long a write waits for another process holding the database.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Compiled statements kept per connection: every distinct statement text a
/// turn uses, with room to spare.
const STATEMENT_CACHE: usize = 64;

/// Checks the file, creates or migrates its schema; the error says what to fix.
pub(super) async fn prepare(path: &Path) -> Result<(), String> {
    check_file_header(path)?;
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .foreign_keys(true)
        .busy_timeout(BUSY_TIMEOUT);
    let mut conn = SqliteConnection::connect_with(&options).await.map_err(|e| describe_open_error(&e))?;
    check_schema_owner(&mut conn).await?;
    MIGRATOR.run(&mut conn).await.map_err(|e| describe_migrate_error(&e))?;
    conn.close().await.map_err(|e| describe_open_error(&e))
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
async fn check_schema_owner(conn: &mut SqliteConnection) -> Result<(), String> {
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            .fetch_all(conn)
            .await
            .map_err(|e| describe_open_error(&e))?;
    let ours = ["_sqlx_migrations", "tapes", "tape_entries", "gateway_inbox", "gateway_outbox", "gateway_pairing"];
    if tables.is_empty() || tables.iter().any(|t| t == "tapes") && tables.iter().all(|t| ours.contains(&t.as_str())) {
        return Ok(());
    }
    Err(format!(
        "this SQLite database belongs to another program (it has tables {}); bub will not change it — \
         point BUB_HOME elsewhere",
        tables.join(", ")
    ))
}

fn describe_open_error(error: &dyn std::fmt::Display) -> String {
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
