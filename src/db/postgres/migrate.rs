//! The PostgreSQL schema's migrations: the files of `migrations/postgres/`,
//! embedded in the binary and applied by sqlx's migrator, which keeps its
//! history in `_sqlx_migrations` (a migration and its row commit together)
//! and holds an advisory lock while it runs, so replicas starting at once
//! migrate a new database once. A database that records a migration this
//! build does not know, or whose file changed, is refused.

use crate::db::health::Schema;
use sha2::{Digest, Sha384};
use sqlx_core::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx_core::query_as::query_as;
use sqlx_core::query_scalar::query_scalar;
use sqlx_postgres::{PgConnection, PgPool};
use std::borrow::Cow;

/// Every migration, in order: (version, description, SQL). A file added to
/// `migrations/postgres/` is listed here (a test checks the directory and
/// the list agree); a released file is never edited, a change is a new file.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "tapes", include_str!("../../../migrations/postgres/0001_tapes.sql")),
    (2, "gateway", include_str!("../../../migrations/postgres/0002_gateway.sql")),
    (3, "replicas", include_str!("../../../migrations/postgres/0003_replicas.sql")),
    (4, "admin audit", include_str!("../../../migrations/postgres/0004_admin_audit.sql")),
    (5, "inbox sessions", include_str!("../../../migrations/postgres/0005_inbox_sessions.sql")),
];

/// The embedded files as sqlx's migrator takes them.
#[derive(Debug)]
struct Embedded;

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> futures::future::BoxFuture<'static, Result<Vec<Migration>, sqlx_core::error::BoxDynError>> {
        let migrations = MIGRATIONS
            .iter()
            .map(|&(version, description, sql)| {
                Migration::new(version, Cow::Borrowed(description), MigrationType::Simple, Cow::Borrowed(sql), false)
            })
            .collect();
        Box::pin(async move { Ok(migrations) })
    }
}

/// Applies what is due; the error says what to do.
pub(super) async fn run(pool: &PgPool) -> Result<(), String> {
    let migrator = Migrator::new(Embedded).await.map_err(|e| format!("cannot read bub's migrations: {e}"))?;
    migrator.run(pool).await.map_err(|e| match e {
        sqlx_core::migrate::MigrateError::VersionMissing(version) => format!(
            "records migration {version}, which this bub does not have: a newer bub migrated it; run that version"
        ),
        sqlx_core::migrate::MigrateError::VersionMismatch(version) => format!(
            "migration {version} was applied from a different file than this bub's: restore the database or use \
             the bub that migrated it"
        ),
        other => format!("cannot migrate: {other}"),
    })
}

/// How the schema of `conn`'s database compares with this build's,
/// changing nothing: its history read and checked as the migrator checks it.
pub(super) async fn status(conn: &mut PgConnection) -> Result<Schema, sqlx_core::Error> {
    let version = MIGRATIONS.last().map_or(0, |(version, ..)| *version);
    let has_history: bool =
        query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL").fetch_one(&mut *conn).await?;
    if !has_history {
        return Ok(Schema::Behind { due: MIGRATIONS.len(), version });
    }
    let applied: Vec<(i64, Vec<u8>, bool)> =
        query_as("SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version").fetch_all(conn).await?;
    if let Some((dirty, ..)) = applied.iter().find(|(.., success)| !success) {
        return Ok(Schema::Refused(format!(
            "migration {dirty} is partially applied; fix it and remove its row from the `_sqlx_migrations` table"
        )));
    }
    for (applied, checksum, _) in &applied {
        match MIGRATIONS.iter().find(|(version, ..)| version == applied) {
            None => {
                return Ok(Schema::Refused(format!(
                    "records migration {applied}, which this bub does not have: a newer bub migrated it; run that version"
                )));
            }
            Some((_, _, sql)) if Sha384::digest(sql.as_bytes()).as_slice() != checksum.as_slice() => {
                return Ok(Schema::Refused(format!(
                    "migration {applied} was applied from a different file than this bub's: restore the database or \
                     use the bub that migrated it"
                )));
            }
            Some(_) => {}
        }
    }
    let due = MIGRATIONS.len() - applied.len();
    Ok(if due == 0 { Schema::Current { version } } else { Schema::Behind { due, version } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_listed_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres");
        let mut files: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS
            .iter()
            .map(|(version, description, _)| format!("{version:04}_{}.sql", description.replace(' ', "_")))
            .collect();
        assert_eq!(files, listed);
    }
}
