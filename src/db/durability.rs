//! How durable a commit is: the one knob a deployment turns between "every
//! acknowledged message survives a power cut" and "several times faster on a
//! slow disk". Each backend maps it to its own setting (SQLite's
//! `synchronous`; PostgreSQL's `synchronous_commit`).

/// How durable a commit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is synced to disk before `append` returns (`synchronous=FULL`).
    #[default]
    Full,
    /// Commits survive a crash of the process but the last ones may be lost on
    /// power failure (`synchronous=NORMAL`); several times faster on slow disks.
    Normal,
}
