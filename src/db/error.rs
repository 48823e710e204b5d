//! What the database layer reports: one error for a statement that failed or
//! a database that went away ([`DbError`]), one for a database that could not
//! be opened ([`OpenError`]). The stores built on the layer wrap them in
//! their own errors (a tape's name, a gateway operation), so a user sees what
//! was being done as well as what failed.

use std::path::PathBuf;

/// A read or a write that did not happen (or whose outcome is unknown).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// SQLite refused a statement; its own message, as SQLite words it.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL (or the connection to it) refused or lost a statement.
    #[error(transparent)]
    Postgres(#[from] sqlx_core::Error),
    /// Among replicas: this replica was taken for dead and another runs its
    /// sessions now (its rows are claimed by another, or its registration
    /// expired); nothing was written.
    #[error("another gateway replica has taken this work over (this one was taken for dead); nothing was stored")]
    NotClaimed,
    /// The database was closed (the process is stopping).
    #[error("the database is closed")]
    Closed,
    /// The work was lost on the way (a bug: a read or a write panicked).
    #[error("{0}")]
    Lost(&'static str),
}

impl DbError {
    /// Whether the same statement may pass later: the database or the way
    /// to it failed, rather than refused the statement for good.
    pub fn may_pass_later(&self) -> bool {
        match self {
            // One process on its own file: only another holder of its lock passes.
            DbError::Sqlite(error) => matches!(
                error.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            ),
            // A lost connection, a server restart (57P), too many clients
            // (53), a serialization failure or deadlock (40001, 40P01). A
            // refused statement (a constraint, a trigger) fails the same
            // next time.
            DbError::Postgres(error) => match error {
                sqlx_core::Error::Io(_)
                | sqlx_core::Error::Tls(_)
                | sqlx_core::Error::Protocol(_)
                | sqlx_core::Error::PoolTimedOut => true,
                sqlx_core::Error::Database(error) => error.code().is_some_and(|code| {
                    code.starts_with("08")
                        || code.starts_with("57P")
                        || code.starts_with("53")
                        || code == "40001"
                        || code == "40P01"
                }),
                _ => false,
            },
            // Another replica's rows now, the database closed for a stop, a bug.
            DbError::NotClaimed | DbError::Closed | DbError::Lost(_) => false,
        }
    }
}

/// A database that could not be opened, or that is not bub's: the message
/// says what to fix (move the file away, fix a permission, upgrade bub).
#[derive(Debug, thiserror::Error)]
#[error("database {}: {message}", .path.display())]
pub struct OpenError {
    /// The file (or, for a server, the address) that was opened.
    pub path: PathBuf,
    /// What went wrong and what to do about it.
    pub message: String,
}
