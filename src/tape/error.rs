//! The one error type of the tape layer. Every variant names the tape or the
//! file it is about, so a message read in a log or a chat says what to fix.

use super::entry::EntryShapeError;
use super::name::{InvalidTapeName, TapeName};
use std::path::PathBuf;

/// A boxed error from a storage backend (kept opaque so the `TapeStore` trait
/// carries no backend's types).
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    #[error(transparent)]
    InvalidName(#[from] InvalidTapeName),

    #[error("tape {tape}: {source}")]
    InvalidEntry { tape: TapeName, source: EntryShapeError },

    #[error("tape {tape}: {}", match .anchor { Some(name) => format!("no anchor named {name:?}"), None => "no anchor yet".to_string() })]
    AnchorNotFound { tape: TapeName, anchor: Option<String> },

    /// The database could not be opened or is not one of ours.
    #[error("tape store {}: {message}", .path.display())]
    Open { path: PathBuf, message: String },

    /// A read or write failed in the backend.
    #[error("tape {tape}: {operation} failed in {location}: {source}")]
    Backend { tape: String, operation: &'static str, location: String, source: BackendError },

    /// A stored row could not be decoded (edited or damaged database).
    #[error("tape {tape}: entry {id} in {location} is unreadable: {reason}")]
    Corrupt { tape: TapeName, id: u64, location: String, reason: String },

    /// Writing an archive failed; the tape was left as it was.
    #[error("tape {tape}: cannot write archive {}: {source}", .path.display())]
    Archive { tape: TapeName, path: PathBuf, source: std::io::Error },

    /// An archive was asked for, but the settings name no directory for it
    /// ([`TapeSettings::archive_dir`](super::TapeSettings::archive_dir)); the tape was left as it was.
    #[error("tape {tape}: cannot archive: no archive directory is set")]
    NoArchiveDir { tape: TapeName },

    /// A store answered against the [`TapeStore`](super::TapeStore)
    /// contract (an append that returned another number of entries than it
    /// was given, say): a store written elsewhere fails the run, never panics it.
    #[error("tape {tape}: the tape store broke its contract: {message}")]
    StoreContract { tape: TapeName, message: String },

    /// A fork was used after it was merged or discarded.
    #[error("tape {tape}: the fork was already {state}; open a new one")]
    ForkClosed { tape: TapeName, state: &'static str },
}

pub type TapeResult<T> = Result<T, TapeError>;
