//! [`HomeStore`]: the one store a bub process keeps everything in, SQLite or
//! PostgreSQL, chosen once by [`StoreLocation`] ([`open`](super::open)).
//!
//! An enum rather than `dyn TapeStore`: callers also need what is not a
//! tape's (the gateway's tables, `close`, `ping`, the replica coordination
//! only PostgreSQL offers), and the set of backends is closed.

use super::postgres::{PgDb, PgTapeStore};
use super::sqlite::{SqliteDb, SqliteTapeStore};
use super::{DbError, GatewayTables};
use crate::tape::{Entry, NewEntry, TapeName, TapeQuery, TapeResult, TapeStats, TapeStore, TapeSummary};
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a process keeps its store.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded SQLite file (one process at a time).
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgres://…`), which several gateway
    /// replicas may share.
    Postgres(String),
}

impl std::fmt::Debug for StoreLocation {
    /// The URL may carry a password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            StoreLocation::Postgres(url) => f.debug_tuple("Postgres").field(&super::postgres::redacted(url)).finish(),
        }
    }
}

/// The tapes and gateway tables of one database.
#[derive(Clone)]
pub enum HomeStore {
    Sqlite(SqliteTapeStore),
    Postgres(PgTapeStore),
}

impl HomeStore {
    /// The gateway's tables in the same database.
    pub fn gateway_tables(&self) -> Arc<dyn GatewayTables> {
        match self {
            HomeStore::Sqlite(store) => Arc::new(store.database().clone()),
            HomeStore::Postgres(store) => Arc::new(store.database().clone()),
        }
    }

    /// The PostgreSQL database, when the store is one (replicas coordinate
    /// through it).
    pub fn postgres(&self) -> Option<&PgDb> {
        match self {
            HomeStore::Sqlite(_) => None,
            HomeStore::Postgres(store) => Some(store.database()),
        }
    }

    /// The SQLite database, when the store is one.
    pub fn sqlite(&self) -> Option<&SqliteDb> {
        match self {
            HomeStore::Sqlite(store) => Some(store.database()),
            HomeStore::Postgres(_) => None,
        }
    }

    /// Closes the database (pending writes land first).
    pub async fn close(&self) {
        match self {
            HomeStore::Sqlite(store) => store.close().await,
            HomeStore::Postgres(store) => store.close().await,
        }
    }

    /// The database answers.
    pub async fn ping(&self) -> Result<(), DbError> {
        self.gateway_tables().ping().await
    }
}

impl From<HomeStore> for Arc<dyn GatewayTables> {
    fn from(store: HomeStore) -> Arc<dyn GatewayTables> {
        store.gateway_tables()
    }
}

/// Every call goes to the backend's own store.
macro_rules! delegate {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            HomeStore::Sqlite($store) => $call,
            HomeStore::Postgres($store) => $call,
        }
    };
}

#[async_trait]
impl TapeStore for HomeStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        delegate!(self, store => store.append(tape, entries).await)
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        delegate!(self, store => store.read(tape, query).await)
    }

    async fn read_shared(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Arc<Entry>>> {
        delegate!(self, store => store.read_shared(tape, query).await)
    }

    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        delegate!(self, store => store.latest(tape, queries).await)
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        delegate!(self, store => store.stats(tape).await)
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        delegate!(self, store => store.list().await)
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        delegate!(self, store => store.reset(tape).await)
    }

    fn location(&self) -> String {
        delegate!(self, store => store.location())
    }
}

impl From<SqliteTapeStore> for HomeStore {
    fn from(store: SqliteTapeStore) -> HomeStore {
        HomeStore::Sqlite(store)
    }
}

impl From<PgTapeStore> for HomeStore {
    fn from(store: PgTapeStore) -> HomeStore {
        HomeStore::Postgres(store)
    }
}
