//! The database layer: connections, migrations and the SQL of every table
//! bub keeps — the tapes and the gateway's inbox, outbox and pairing rows.
//!
//! # Layout
//! - this file, [`error`], [`durability`]: what is the same whatever the
//!   backend ([`DbError`], [`OpenError`], [`Durability`]), and [`open`].
//! - `home_store.rs`: [`HomeStore`], the one store a process keeps
//!   everything in, and [`StoreLocation`], where it is.
//! - [`gateway`]: what the gateway's stores need from a database
//!   ([`GatewayTables`]), with the rows that cross it.
//! - [`replicas`]: what several gateway replicas on one database need from
//!   it ([`ReplicaTables`]: liveness, leases, claims); PostgreSQL only.
//! - [`sqlite`]: the embedded backend, one file in WAL mode: opening and
//!   migrating ([`SqliteDb::open`]), the writing thread with group commit,
//!   the reader threads, checkpoints, and the SQLite statements of the tape
//!   store ([`SqliteTapeStore`]) and of the gateway tables.
//! - [`postgres`]: the shared backend ([`PgDb`], [`PgTapeStore`]): a pool,
//!   `migrations/postgres/`, the same tables and guarantees as SQLite's for
//!   any number of processes, and the replicas' tables.
//! - `sql.rs`: the SQL of tape reads both backends share.
//! - [`health`]: what `bub doctor` asks of a store without changing it
//!   (reachable, migrated, writable).
//!
//! # Where the SQL lives, and why the dependencies point this way
//! A table's statements live with their backend, not with the code that
//! gives the rows meaning: `tape/` owns entries, queries and the
//! [`TapeStore`](crate::tape::TapeStore) trait and knows nothing of SQL;
//! `gateway/store.rs` owns inbound messages, replies and the guarantees the
//! pipeline builds on, and holds a `dyn` [`GatewayTables`]. A second backend
//! is then new files here and nothing elsewhere. So `db` imports `tape` (its
//! tape store implements `tape`'s trait over `tape`'s entry types, the way a
//! driver implements an interface) and never `gateway`, `agent`, `tools` or
//! `policy`: the gateway's rows cross [`GatewayTables`] as JSON text, and
//! `gateway` imports `db`. Nothing in `tape` imports `db`.
//!
//! # sqlx's role
//! SQLite is rusqlite end to end, migrations included. The migrations are
//! the files of `migrations/sqlite/`, embedded in the binary; a small runner
//! (`sqlite/migrate.rs`) applies them and records them in the table sqlx's
//! migrator uses, `_sqlx_migrations`, with the same columns and checksums
//! (SHA-384 of the file's text), so a database created by an earlier bub
//! opens without being migrated again, and one that records a migration
//! this build does not know, or whose file changed, is refused. PostgreSQL
//! is sqlx's (`sqlx-core` + `sqlx-postgres`, not the facade, whose SQLite
//! driver cannot link beside rusqlite's): an async pool, row locks and
//! `SKIP LOCKED`, and its migrator running `migrations/postgres/` under an
//! advisory lock, so replicas that start together migrate once.
//!
//! Every caller opens its store through [`open`] with a [`StoreLocation`]
//! (chosen by `setup::store_location`: `BUB_DATABASE_URL`, else the config's
//! `[store]`, else the home's SQLite file) and holds a [`HomeStore`]. The
//! tape and gateway code is the same on both.

pub(crate) mod context_cache;
pub mod durability;
pub mod error;
pub mod gateway;
pub mod health;
mod home_store;
pub mod postgres;
pub mod replicas;
pub(crate) mod sql;
pub mod sqlite;

pub use durability::{Durability, Flush};
pub use error::{DbError, OpenError};
pub use gateway::GatewayTables;
pub use home_store::{HomeStore, StoreLocation};
pub use postgres::{PgDb, PgTapeStore};
pub use replicas::ReplicaTables;
pub use sqlite::{SqliteDb, SqliteTapeStore};

use crate::tape::TapeResult;

/// Opens (creating and migrating if needed) the store at `location`: the
/// one place that picks the backend. PostgreSQL ignores `durability`'s
/// SQLite meaning and maps it to `synchronous_commit` (see [`PgDb::connect`]).
pub async fn open(location: &StoreLocation, durability: Durability) -> TapeResult<HomeStore> {
    match location {
        StoreLocation::Sqlite(path) => Ok(HomeStore::Sqlite(SqliteTapeStore::open_with(path, durability).await?)),
        StoreLocation::Postgres(url) => Ok(HomeStore::Postgres(PgTapeStore::connect_with(url, durability).await?)),
    }
}
