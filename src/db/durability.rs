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

/// When one write reaches the disk: before it returns (every write whose
/// loss in a power cut would lose or double something), or with the next
/// write that does. A deferred write is committed and visible at once and
/// survives a crash of the process, like every write; only a power cut
/// before the next synced write may take it (the log is synced whole, so
/// that write carries it to the disk too). Under [`Durability::Normal`]
/// every write is deferred anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flush {
    #[default]
    Now,
    /// For a write whose content can be rebuilt after a power cut (a
    /// turn's outcome when the turn's marker is on its tape and nobody
    /// waits on a queued reply).
    WithNext,
}
