//! The embedded backend: one SQLite file in WAL mode, migrations embedded.
//!
//! SQLite is a library, not a server: each connection here belongs to a
//! thread of its own and runs its statements synchronously there. All writes
//! go through the one writing connection (`writer`), which commits the
//! writes that queue up while it is busy in one transaction, so writes never
//! race inside the process and never meet `SQLITE_BUSY`; other processes (an
//! operator's `bub` beside the gateway) wait on the busy timeout. Reads run on
//! a few read-only connections (`readers`), each statement a consistent
//! snapshot. A read or a write is one hand-off to a thread and back, whatever
//! it does there.
//!
//! Before migrating, the file is checked to be a SQLite database that is either
//! empty or already bub's, so pointing `BUB_HOME` at the wrong file never adds
//! tables to somebody else's database (`open`); `migrate` applies the
//! embedded migrations.
//!
//! [`SqliteDb`] is the open database; the tape store (`tapes`, with its
//! statements in `select`) and the gateway's tables (`gateway`, `pairing`,
//! `audit`) are built on it and share its writer, so they never contend.

mod audit;
mod checkpoint;
mod gateway;
mod migrate;
mod open;
mod pairing;
mod readers;
mod select;
mod tails;
mod tapes;
mod writer;

pub(crate) use open::health;
pub use tapes::SqliteTapeStore;

use super::{DbError, Durability, Flush, GatewayTables, OpenError};
use readers::Readers;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use writer::{Work, Writer};

/// Read-only connections (and threads): one more than the cores, at least 3
/// (measured on 2 cores) and at most 8. Reads are short; more threads than
/// cores only keeps one ready while another waits for the disk.
fn reader_count() -> usize {
    std::thread::available_parallelism().map_or(2, |cores| cores.get()).saturating_add(1).clamp(3, 8)
}

/// An open bub database in one SQLite file: its writing thread and its
/// reader threads. Cheap to clone; every clone uses the same threads.
#[derive(Clone)]
pub struct SqliteDb {
    path: Arc<Path>,
    writer: Writer,
    readers: Readers,
}

impl SqliteDb {
    /// Opens the database at `path`, creating the file and its directory,
    /// after checking it is bub's (or empty) and migrating it.
    pub async fn open(path: impl AsRef<Path>, durability: Durability) -> Result<SqliteDb, OpenError> {
        let path = path.as_ref().to_path_buf();
        // File I/O and the migrations are blocking work: off the runtime.
        let opening = path.clone();
        tokio::task::spawn_blocking(move || SqliteDb::open_blocking(opening, durability))
            .await
            .map_err(|e| OpenError { path, message: format!("opening the database stopped: {e}") })?
    }

    fn open_blocking(path: PathBuf, durability: Durability) -> Result<SqliteDb, OpenError> {
        let open_error = |message: String| OpenError { path: path.clone(), message };
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| open_error(format!("cannot create directory {}: {e}", dir.display())))?;
        }
        open::prepare(&path).map_err(open_error)?;
        let writer = open::connect(&path, Some(durability)).map_err(open_error)?;
        let readers = (0..reader_count()).map(|_| open::connect(&path, None)).collect::<Result<Vec<_>, _>>();
        let thread_error = |e: std::io::Error| open_error(format!("cannot start a database thread: {e}"));
        Ok(SqliteDb {
            writer: Writer::spawn(writer).map_err(thread_error)?,
            readers: Readers::spawn(readers.map_err(open_error)?).map_err(thread_error)?,
            path: path.into(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `work` on the one writing connection, inside a transaction,
    /// perhaps together with other writes (the tapes and the gateway's
    /// tables share it, so writes never contend). `work` may run more than
    /// once; its effects are committed exactly when this returns `Ok`.
    async fn write<T: Send + 'static>(&self, work: Work<T>) -> Result<T, DbError> {
        self.writer.write(work).await
    }

    /// [`SqliteDb::write`] whose sync to disk may wait for the next write
    /// that syncs (see [`Flush`]).
    async fn write_with<T: Send + 'static>(&self, work: Work<T>, flush: Flush) -> Result<T, DbError> {
        self.writer.write_with(work, flush).await
    }

    /// Runs `work` on a read-only connection.
    async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> T + Send + 'static,
    ) -> Result<T, DbError> {
        self.readers.read(work).await
    }

    /// Closes the read connections after the reads already queued, then the
    /// writing one after the writes already queued. When no other process has
    /// the file open, the write-ahead log is then folded into it and removed,
    /// so a stopped gateway leaves `bub.db` complete on its own.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

impl From<SqliteDb> for Arc<dyn GatewayTables> {
    fn from(db: SqliteDb) -> Arc<dyn GatewayTables> {
        Arc::new(db)
    }
}

/// The gateway's tables of the database the tape store is in.
impl From<SqliteTapeStore> for Arc<dyn GatewayTables> {
    fn from(tapes: SqliteTapeStore) -> Arc<dyn GatewayTables> {
        Arc::new(tapes.database().clone())
    }
}
