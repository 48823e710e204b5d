//! What `bub doctor` asks of a store ([`check`]), changing nothing: can it
//! be reached, is its schema this build's, can it be written. Unlike
//! [`super::open`] it never creates a database nor migrates one; the write
//! it tries (a tape row) is rolled back.

use super::StoreLocation;
use std::time::Duration;

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    /// No SQLite file yet: the gateway's first start or `bub db migrate`
    /// creates it.
    Missing,
    /// It cannot be opened, connected to or used as bub's; the text says why.
    Unusable(String),
    /// It answered.
    Open {
        schema: Schema,
        /// `Ok`, or why a write failed; `None`: not tried, the schema is
        /// not this build's.
        writable: Option<Result<(), String>>,
    },
}

/// How the schema compares with this build's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    /// Every migration this build has is applied; `version` is the last.
    Current { version: i64 },
    /// `due` of this build's migrations are not applied yet (all of them
    /// in an empty database); `version` is this build's last.
    Behind { due: usize, version: i64 },
    /// Refused as opening it would be (a newer bub's migration, an edited
    /// one, one left half applied); the text says why and what to do.
    Refused(String),
}

/// The name of the tape the write test inserts and rolls back.
pub(crate) const PROBE_TAPE: &str = "bub-doctor-write-check";

/// Checks the store at `location`; a PostgreSQL server gets `timeout` to
/// answer (SQLite waits at most that long for a writer's lock).
pub async fn check(location: &StoreLocation, timeout: Duration) -> StoreHealth {
    match location {
        StoreLocation::Sqlite(path) => {
            let path = path.clone();
            tokio::task::spawn_blocking(move || super::sqlite::health(&path, timeout))
                .await
                .unwrap_or_else(|error| StoreHealth::Unusable(format!("the check stopped: {error}")))
        }
        StoreLocation::Postgres(url) => match tokio::time::timeout(timeout, super::postgres::health(url)).await {
            Ok(health) => health,
            Err(_) => StoreHealth::Unusable(format!(
                "no answer within {timeout:?} (is the server up, are host and port right?)"
            )),
        },
    }
}
