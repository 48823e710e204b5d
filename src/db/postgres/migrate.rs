//! The PostgreSQL schema's migrations: the files of `migrations/postgres/`,
//! embedded in the binary and applied by sqlx's migrator, which keeps its
//! history in `_sqlx_migrations` (a migration and its row commit together)
//! and holds an advisory lock while it runs, so replicas starting at once
//! migrate a new database once. A database that records a migration this
//! build does not know, or whose file changed, is refused.

use sqlx_core::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx_postgres::PgPool;
use std::borrow::Cow;

/// Every migration, in order: (version, description, SQL). A file added to
/// `migrations/postgres/` is listed here (a test checks the directory and
/// the list agree); a released file is never edited, a change is a new file.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "tapes", include_str!("../../../migrations/postgres/0001_tapes.sql")),
    (2, "gateway", include_str!("../../../migrations/postgres/0002_gateway.sql")),
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
