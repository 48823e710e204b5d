//! The SQLite database across versions: a file that bub migrated with sqlx
//! opens unchanged under the rusqlite migrator, and the refusals (an edited
//! migration, a newer bub's database, a file that is no database) keep their
//! words.
//!
//! `tests/fixtures/sqlx-migrated.db` was written by bub before the change:
//! all four migrations applied by sqlx, and a tape `fixture` of two entries.

use bub::db::SqliteTapeStore;
use bub::tape::{TapeName, TapeQuery, TapeStore};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// A copy of the fixture in a fresh directory.
fn fixture_copy(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("bub.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sqlx-migrated.db");
    std::fs::copy(fixture, &path).unwrap();
    path
}

type HistoryRow = (i64, String, String, bool, Vec<u8>, i64);

/// Every row of `_sqlx_migrations`, as stored.
fn history(path: &Path) -> Vec<HistoryRow> {
    let conn = Connection::open(path).unwrap();
    let mut select = conn
        .prepare(
            "SELECT version, description, installed_on, success, checksum, execution_time \
             FROM _sqlx_migrations ORDER BY version",
        )
        .unwrap();
    select
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn sql(path: &Path, statement: &str) {
    Connection::open(path).unwrap().execute_batch(statement).unwrap();
}

#[tokio::test]
async fn a_database_migrated_by_sqlx_opens_and_is_not_migrated_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    let before = history(&path);
    assert_eq!(before.len(), 4, "the fixture records four migrations: {before:?}");

    let store = SqliteTapeStore::open(&path).await.unwrap();
    let entries = store.read(&TapeName::new("fixture").unwrap(), &TapeQuery::all()).await.unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].payload["content"], "written by bub before the rusqlite migrator");
    store.close().await;

    // What sqlx applied is untouched (nothing ran again); only migrations added since run.
    let after = history(&path);
    assert_eq!(after[..before.len()], before[..], "the history is untouched: nothing ran again");
    assert!(after[before.len()..].iter().all(|row| row.0 > 4 && row.3), "only newer migrations ran: {after:?}");
}

#[tokio::test]
async fn a_new_database_records_what_sqlx_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = fixture_copy(&dir);
    let path = dir.path().join("new.db");
    SqliteTapeStore::open(&path).await.unwrap().close().await;
    // Version, description, success and checksum; not the time it ran.
    let essentials = |rows: Vec<HistoryRow>| -> Vec<(i64, String, bool, Vec<u8>)> {
        rows.into_iter()
            .map(|(version, description, _, success, checksum, _)| (version, description, success, checksum))
            .collect()
    };
    // The rows sqlx wrote, then those of the migrations added since.
    let (new, sqlx) = (essentials(history(&path)), essentials(history(&fixture)));
    assert_eq!(new[..sqlx.len()], sqlx[..]);
}

#[tokio::test]
async fn a_changed_checksum_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    sql(&path, "UPDATE _sqlx_migrations SET checksum = zeroblob(48) WHERE version = 2");
    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert_eq!(
        message,
        format!(
            "tape store {}: schema version 2 in the database differs from this build's; the file was edited",
            path.display()
        )
    );
}

#[tokio::test]
async fn a_migration_this_build_does_not_know_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    sql(
        &path,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99, 'from the future', TRUE, zeroblob(48), 1)",
    );
    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert_eq!(
        message,
        format!(
            "tape store {}: the database was written by a newer bub (schema version 99 is unknown to this build); \
             upgrade bub",
            path.display()
        )
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_with_the_same_words() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    std::fs::write(&path, "name,total\nA123,12.50\n").unwrap();
    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert_eq!(
        message,
        format!(
            "tape store {}: this file is not a SQLite database (it is corrupt or belongs to another program); \
             move it away or point BUB_HOME elsewhere",
            path.display()
        )
    );

    // A SQLite header over garbage: SQLite's own code (SQLITE_NOTADB) tells it.
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5u8, 4096));
    std::fs::write(&path, &bytes).unwrap();
    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert_eq!(
        message,
        format!(
            "tape store {}: this file is not a usable SQLite database (corrupt, or another program's file)",
            path.display()
        )
    );
}
