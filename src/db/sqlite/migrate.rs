//! The SQLite schema's migrations: the files of `migrations/sqlite/`,
//! embedded in the binary, applied in order by rusqlite.
//!
//! The history is the table sqlx's migrator kept (bub migrated with sqlx
//! until the database layer became rusqlite only): `_sqlx_migrations`, with
//! its columns, a migration's description as sqlx derived it from the file
//! name (`0003_gateway.sql` → "gateway") and its checksum as sqlx computed it
//! (SHA-384 of the file's text). So a database an earlier bub created opens
//! unchanged and is not migrated again, and the refusals are sqlx's: a
//! database that records a migration this build does not know (a newer bub
//! wrote it), or whose recorded checksum differs from the file's (somebody
//! edited a migration or the database), or one left partly applied.
//!
//! A migration and its history row commit together. Migrations that are
//! due run inside one `BEGIN IMMEDIATE` transaction that first reads the
//! history again, so two processes opening a new database at once migrate
//! it once (the second waits on the busy timeout, then finds nothing due).

use rusqlite::{Connection, params};
use sha2::{Digest, Sha384};
use std::collections::HashMap;
use std::time::Instant;

/// The history table (sqlx's name, kept for the databases it created).
pub(super) const HISTORY: &str = "_sqlx_migrations";

/// One migration file.
struct Migration {
    version: i64,
    /// As sqlx derived it: the file name after the version, `_` as spaces.
    description: &'static str,
    sql: &'static str,
}

/// Every migration, in order. A file added to `migrations/sqlite/` must be
/// listed here (a test checks that the list and the directory agree). A
/// released file is never edited: its checksum is in every database it
/// migrated, which would then be refused; a change is a new file.
const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, description: "tapes", sql: include_str!("../../../migrations/sqlite/0001_tapes.sql") },
    Migration {
        version: 2,
        description: "count trigger",
        sql: include_str!("../../../migrations/sqlite/0002_count_trigger.sql"),
    },
    Migration { version: 3, description: "gateway", sql: include_str!("../../../migrations/sqlite/0003_gateway.sql") },
    Migration { version: 4, description: "pairing", sql: include_str!("../../../migrations/sqlite/0004_pairing.sql") },
    Migration {
        version: 5,
        description: "gateway files",
        sql: include_str!("../../../migrations/sqlite/0005_gateway_files.sql"),
    },
    Migration {
        version: 6,
        description: "live messages",
        sql: include_str!("../../../migrations/sqlite/0006_live_messages.sql"),
    },
    Migration {
        version: 7,
        description: "tape resets",
        sql: include_str!("../../../migrations/sqlite/0007_tape_resets.sql"),
    },
    Migration {
        version: 8,
        description: "pairing requested by",
        sql: include_str!("../../../migrations/sqlite/0008_pairing_requested_by.sql"),
    },
    Migration {
        version: 9,
        description: "admin audit",
        sql: include_str!("../../../migrations/sqlite/0009_admin_audit.sql"),
    },
    Migration {
        version: 10,
        description: "inbox sessions",
        sql: include_str!("../../../migrations/sqlite/0010_inbox_sessions.sql"),
    },
];

impl Migration {
    /// The checksum sqlx recorded: SHA-384 of the file's text.
    fn checksum(&self) -> Vec<u8> {
        Sha384::digest(self.sql.as_bytes()).to_vec()
    }
}

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub(super) enum MigrateError {
    #[error("the database was written by a newer bub (schema version {0} is unknown to this build); upgrade bub")]
    VersionMissing(i64),
    #[error("schema version {0} in the database differs from this build's; the file was edited")]
    VersionMismatch(i64),
    #[error("migration {0} is partially applied; fix and remove row from `_sqlx_migrations` table")]
    Dirty(i64),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// Brings the schema of `conn`'s database up to date, or says why it cannot.
pub(super) fn run(conn: &Connection) -> Result<(), MigrateError> {
    if due(conn)?.is_empty() {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let outcome = apply_due(conn).and_then(|()| Ok(conn.execute_batch("COMMIT")?));
    if outcome.is_err() && !conn.is_autocommit() {
        // A failed rollback leaves nothing to do but report the first error.
        let _ = conn.execute_batch("ROLLBACK");
    }
    outcome
}

/// How `conn`'s schema compares with this build's, changing nothing.
pub(super) fn status(conn: &Connection) -> Result<crate::db::health::Schema, rusqlite::Error> {
    use crate::db::health::Schema;
    let version = MIGRATIONS.last().map_or(0, |m| m.version);
    Ok(match due(conn) {
        Ok(due) if due.is_empty() => Schema::Current { version },
        Ok(due) => Schema::Behind { due: due.len(), version },
        Err(MigrateError::Sqlite(error)) => return Err(error),
        Err(refused) => Schema::Refused(refused.to_string()),
    })
}

/// Inside the write transaction: what is due now (another process may have
/// migrated meanwhile), each with its history row.
fn apply_due(conn: &Connection) -> Result<(), MigrateError> {
    let due = due(conn)?;
    if due.is_empty() {
        return Ok(());
    }
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {HISTORY} (
            version BIGINT PRIMARY KEY,
            description TEXT NOT NULL,
            installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
            success BOOLEAN NOT NULL,
            checksum BLOB NOT NULL,
            execution_time BIGINT NOT NULL
        )"
    ))?;
    for migration in due {
        let started = Instant::now();
        conn.execute_batch(migration.sql)?;
        let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        conn.execute(
            &format!(
                "INSERT INTO {HISTORY} (version, description, success, checksum, execution_time) \
                 VALUES (?1, ?2, TRUE, ?3, ?4)"
            ),
            params![migration.version, migration.description, migration.checksum(), nanos],
        )?;
    }
    Ok(())
}

/// The migrations not yet applied, in order, after checking the history
/// against this build's migrations.
fn due(conn: &Connection) -> Result<Vec<&'static Migration>, MigrateError> {
    let has_history: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [HISTORY],
        |row| row.get(0),
    )?;
    if !has_history {
        return Ok(MIGRATIONS.iter().collect());
    }
    let dirty: Option<i64> = conn
        .prepare(&format!("SELECT version FROM {HISTORY} WHERE success = false ORDER BY version LIMIT 1"))?
        .query_map([], |row| row.get(0))?
        .next()
        .transpose()?;
    if let Some(version) = dirty {
        return Err(MigrateError::Dirty(version));
    }
    let applied: HashMap<i64, Vec<u8>> = conn
        .prepare(&format!("SELECT version, checksum FROM {HISTORY} ORDER BY version"))?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut versions: Vec<i64> = applied.keys().copied().collect();
    versions.sort_unstable();
    if let Some(unknown) = versions.into_iter().find(|v| !MIGRATIONS.iter().any(|m| m.version == *v)) {
        return Err(MigrateError::VersionMissing(unknown));
    }
    let mut due = Vec::new();
    for migration in MIGRATIONS {
        match applied.get(&migration.version) {
            Some(checksum) if *checksum != migration.checksum() => {
                return Err(MigrateError::VersionMismatch(migration.version));
            }
            Some(_) => {}
            None => due.push(migration),
        }
    }
    Ok(due)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded list is the directory: every `NNNN_name.sql` file, in
    /// order, with sqlx's version and description.
    #[test]
    fn the_list_matches_the_migrations_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
        let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .map(|path| {
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                let (version, rest) = name.split_once('_').unwrap();
                let description = rest.trim_end_matches(".sql").replace('_', " ");
                (version.parse().unwrap(), description, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        files.sort();
        let listed: Vec<(i64, String, String)> =
            MIGRATIONS.iter().map(|m| (m.version, m.description.to_string(), m.sql.to_string())).collect();
        assert_eq!(listed, files);
    }

    /// Migrating twice changes nothing the second time.
    #[test]
    fn a_migrated_database_has_nothing_due() {
        let conn = Connection::open_in_memory().unwrap();
        run(&conn).unwrap();
        assert!(due(&conn).unwrap().is_empty());
        let rows: i64 = conn.query_row("SELECT count(*) FROM _sqlx_migrations", [], |row| row.get(0)).unwrap();
        assert_eq!(rows, MIGRATIONS.len() as i64);
        run(&conn).unwrap();
    }

    /// The status counts what is due and changes nothing.
    #[test]
    fn the_status_says_how_far_behind_and_migrates_nothing() {
        use crate::db::health::Schema;
        let conn = Connection::open_in_memory().unwrap();
        let version = MIGRATIONS.last().unwrap().version;
        assert_eq!(status(&conn).unwrap(), Schema::Behind { due: MIGRATIONS.len(), version });
        assert_eq!(status(&conn).unwrap(), Schema::Behind { due: MIGRATIONS.len(), version }, "nothing applied");
        run(&conn).unwrap();
        assert_eq!(status(&conn).unwrap(), Schema::Current { version });
        conn.execute("DELETE FROM _sqlx_migrations WHERE version = ?1", [version]).unwrap();
        assert_eq!(status(&conn).unwrap(), Schema::Behind { due: 1, version });
        conn.execute("UPDATE _sqlx_migrations SET success = FALSE WHERE version = 3", []).unwrap();
        assert!(matches!(status(&conn).unwrap(), Schema::Refused(why) if why.contains("partially applied")));
    }

    /// A history row left unsuccessful is refused as sqlx refused it.
    #[test]
    fn a_partly_applied_migration_is_refused() {
        let conn = Connection::open_in_memory().unwrap();
        run(&conn).unwrap();
        conn.execute("UPDATE _sqlx_migrations SET success = FALSE WHERE version = 3", []).unwrap();
        let error = run(&conn).unwrap_err();
        assert!(matches!(error, MigrateError::Dirty(3)), "{error}");
    }
}
