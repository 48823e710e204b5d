//! The PostgreSQL backend: the store several gateway replicas share.
//!
//! - [`PgDb`]: a connection pool, opened from a `postgres://` URL, with the
//!   schema of `migrations/postgres/` applied (`migrate`);
//! - [`PgTapeStore`]: the tapes, with the guarantees of every
//!   [`TapeStore`](crate::tape::TapeStore) (checked by the same conformance
//!   suite as SQLite's). Appends from any number of processes serialize on
//!   their tape's row: one statement locks it, numbers the batch after its
//!   last id and inserts it.
//! - the gateway's tables ([`GatewayTables`] for [`PgDb`]: `gateway`, with
//!   the pairing table in `pairing` and the admin audit log in `audit`), the same tables and guarantees as
//!   SQLite's, for any number of processes at once: a message or a reply
//!   key is stored once whoever stores it, and a channel's pairing requests
//!   take turns so no replica passes its caps.
//!
//! Statements are sqlx's (`sqlx-core` and `sqlx-postgres`: the `sqlx` facade
//! would bring `sqlx-sqlite`, whose SQLite cannot be linked beside
//! rusqlite's). The SQL of reads is shared with SQLite (`db::sql`).

mod audit;
mod gateway;
mod migrate;
mod pairing;
mod replicas;
mod tapes;

pub use tapes::PgTapeStore;

use super::health::StoreHealth;
use super::{DbError, Durability, GatewayTables, OpenError};
use sqlx_core::connection::{ConnectOptions, Connection};
use sqlx_postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Connections at most per process: a turn holds one for a statement at a
/// time, and PostgreSQL's default limit is 100 for every replica together.
const MAX_CONNECTIONS: u32 = 16;

/// How long a statement waits for a free connection before it fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// An open PostgreSQL database, migrated; cheap to clone.
#[derive(Clone)]
pub struct PgDb {
    pool: PgPool,
    /// The URL without its password, for messages.
    location: Arc<str>,
    /// The replica incarnation this process runs as, once registered: a
    /// turn's outcome is stored only on rows it still claims.
    holder: Arc<std::sync::OnceLock<String>>,
}

impl PgDb {
    /// Connects to `url` (`postgres://user:password@host:port/database`),
    /// then applies the migrations this build has and the database lacks.
    /// [`Durability::Normal`] commits with `synchronous_commit = off`.
    pub async fn connect(url: &str, durability: Durability) -> Result<PgDb, OpenError> {
        let refused = |message: String| OpenError { path: redacted(url).into(), message };
        let not_a_url =
            |why: String| refused(format!("is not a PostgreSQL URL (postgres://user@host:port/database): {why}"));
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(not_a_url("it must start with postgres://".into()));
        }
        let mut options =
            PgConnectOptions::from_str(url).map_err(|e| not_a_url(e.to_string()))?.application_name("bub");
        if durability == Durability::Normal {
            options = options.options([("synchronous_commit", "off")]);
        }
        // One connection first, for its own error: the pool's would only say
        // that it timed out, not that the server refused or the password is wrong.
        let first = tokio::time::timeout(ACQUIRE_TIMEOUT, options.connect())
            .await
            .map_err(|_| {
                refused(format!(
                    "cannot connect: no answer within {ACQUIRE_TIMEOUT:?} (is the server up, are host and port right?)"
                ))
            })?
            .map_err(|e| refused(format!("cannot connect: {e}")))?;
        let _ = first.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(|e| refused(format!("cannot connect: {e}")))?;
        migrate::run(&pool).await.map_err(refused)?;
        Ok(PgDb { pool, location: format!("postgres:{}", redacted(url)).into(), holder: Arc::default() })
    }

    /// Where the database is, for messages (`postgres:postgres://bub@db:5432/bub`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Closes every connection, waiting for the statements that run.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// One round trip: the database answers.
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx_core::query::query::<sqlx_postgres::Postgres>("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Runs as replica incarnation `id` from now on (see `gateway::replica`):
    /// finishing a turn then requires its rows to be claimed by `id`, and
    /// the replies it stores are `id`'s to deliver.
    pub fn act_as(&self, id: &str) {
        let _ = self.holder.set(id.to_string());
    }

    /// The replica incarnation this process runs as, if any.
    pub(crate) fn holder(&self) -> Option<&str> {
        self.holder.get().map(String::as_str)
    }

    fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl From<PgDb> for Arc<dyn GatewayTables> {
    fn from(db: PgDb) -> Arc<dyn GatewayTables> {
        Arc::new(db)
    }
}

/// The gateway's tables of the database the tape store is in.
impl From<PgTapeStore> for Arc<dyn GatewayTables> {
    fn from(tapes: PgTapeStore) -> Arc<dyn GatewayTables> {
        Arc::new(tapes.database().clone())
    }
}

/// `url` without the password it may hold.
/// [`crate::db::health::check`] on the database at `url`: one connection,
/// its schema compared, a tape row inserted and rolled back. The caller
/// bounds how long it takes.
pub(crate) async fn health(url: &str) -> StoreHealth {
    let options = match PgConnectOptions::from_str(url) {
        Ok(options) => options.application_name("bub doctor"),
        Err(error) => return StoreHealth::Unusable(format!("{} is not a PostgreSQL URL: {error}", redacted(url))),
    };
    let mut conn = match options.connect().await {
        Ok(conn) => conn,
        Err(error) => return StoreHealth::Unusable(format!("cannot connect to {}: {error}", redacted(url))),
    };
    let schema = match migrate::status(&mut conn).await {
        Ok(schema) => schema,
        Err(error) => return StoreHealth::Unusable(format!("cannot read the schema's history: {error}")),
    };
    let writable = match schema {
        crate::db::health::Schema::Current { .. } => Some(write_and_roll_back(&mut conn).await),
        _ => None,
    };
    let _ = conn.close().await;
    StoreHealth::Open { schema, writable }
}

async fn write_and_roll_back(conn: &mut sqlx_postgres::PgConnection) -> Result<(), String> {
    use sqlx_core::query::query;
    let mut transaction = conn.begin().await.map_err(|e| e.to_string())?;
    let wrote = query("INSERT INTO tapes (name, created_at, updated_at) VALUES ($1, '', '')")
        .bind(crate::db::health::PROBE_TAPE)
        .execute(&mut *transaction)
        .await;
    transaction.rollback().await.map_err(|e| e.to_string())?;
    wrote.map(|_| ()).map_err(|e| e.to_string())
}

pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    match rest.split_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_show_the_password() {
        assert_eq!(redacted("postgres://bub:s3cret@db:5432/bub"), "postgres://bub@db:5432/bub");
        assert_eq!(redacted("postgres://db/bub"), "postgres://db/bub");
    }

    #[tokio::test]
    async fn a_bad_url_says_what_a_url_looks_like() {
        let error = PgDb::connect("mysql://x", Durability::Full).await.err().expect("refused");
        assert!(error.to_string().contains("postgres://user@host:port/database"), "{error}");
    }
}
