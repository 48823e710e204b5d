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
