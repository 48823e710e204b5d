//! The one way the gateway opens a file of a workspace: `AGENTS.md`, the
//! workspace's skills, the `fs.*` tools, `chat.send_file`, files people send.
//!
//! A workspace is hostile input: a sandboxed command (or a prompt-injected
//! model) writes it while the gateway, outside the sandbox and often root,
//! reads it. So the gateway reads it as it reads a stranger's message:
//!
//! - **Beneath the workspace.** Every path is resolved from the workspace's
//!   directory with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, or a
//!   component-by-component `O_NOFOLLOW` walk where the kernel has no
//!   `openat2` (before 5.6, or a seccomp profile refusing it). `..` above
//!   the workspace, absolute paths, and symlinks pointing out are refused
//!   whenever they appear, also when one is swapped in after a check. A
//!   relative symlink that stays inside (`AGENTS.md -> CLAUDE.md`) works.
//! - **Regular files only, decided on the open descriptor** (`fstat`, not
//!   the path): a FIFO, a socket, a device or a directory is refused. Opens
//!   are `O_NONBLOCK | O_NOCTTY`, so a FIFO cannot hold the open itself and
//!   a terminal cannot become the gateway's.
//! - **One name only.** A file with more than one hard link is refused
//!   ([`WorkspaceFileError::HardLinked`]): its other name may be a file
//!   outside the workspace (a sandbox cannot link across its mounts, but a
//!   session that once ran on the host could), and nothing tells which
//!   name is the real one. The price: a hard-linked file a user made on
//!   purpose (`cp -al`, a local `git clone`'s objects) is not read by the
//!   gateway; the shell still reads it.
//! - **A size cap**, checked on `fstat` and enforced while reading (a file
//!   can grow, and `/proc`-like files say 0).
//! - **Never on the runtime's threads.** [`off_runtime`] runs the blocking
//!   work on tokio's blocking pool under [`TIMEOUT`]; callers batch what a
//!   step needs into one such hop.
//!
//! An unconfined local environment is its user's own machine: its paths are
//! taken as they are ([`read_anywhere`], [`write_anywhere`]), still
//! non-blocking, regular files only and size-capped.
//!
//! - `beneath.rs`: the resolution (`openat2`, or the walk).
//! - `write.rs`: writing beneath, and giving a workspace to the sandbox's uid.

mod beneath;
mod write;

pub use write::{chown_tree, write_anywhere};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

/// How long [`off_runtime`] waits for a workspace's files. Opens never
/// block and files are capped, so only a hung file system takes this long;
/// the caller then goes on without the file.
pub const TIMEOUT: Duration = Duration::from_secs(30);

const READ_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::NONBLOCK).union(OFlags::NOCTTY).union(OFlags::CLOEXEC);

/// Why a file of a workspace was not read or written. The messages say what
/// was refused and why, for the model's tool results and the logs.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceFileError {
    #[error("no such file")]
    NotFound,
    #[error("it leaves the workspace (`..`, an absolute path, or a symlink pointing out)")]
    Escapes,
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("it has {0} hard links: another of its names may be a file outside the workspace")]
    HardLinked(u64),
    #[error("the file is {size} bytes; at most {max} can be read here")]
    TooLarge { size: u64, max: u64 },
    #[error("it is not UTF-8 text")]
    NotText,
    #[error("it took longer than {:?} to read", .0)]
    TimedOut(Duration),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl WorkspaceFileError {
    /// The file was there and was refused (a way out, not a regular file,
    /// another name, too big): a trap or a mistake worth a warning, unlike a
    /// missing file.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            WorkspaceFileError::Escapes
                | WorkspaceFileError::NotRegular(_)
                | WorkspaceFileError::HardLinked(_)
                | WorkspaceFileError::TooLarge { .. }
        )
    }

    fn from_errno(errno: Errno) -> WorkspaceFileError {
        match errno {
            Errno::NOENT => WorkspaceFileError::NotFound,
            // RESOLVE_BENEATH refused a step.
            Errno::XDEV => WorkspaceFileError::Escapes,
            // A FIFO without a reader, or a socket, opened non-blocking for writing.
            Errno::NXIO => WorkspaceFileError::NotRegular("a FIFO or a socket"),
            errno => WorkspaceFileError::Io(errno.into()),
        }
    }
}

/// A workspace's directory, held open: every path given to it is resolved
/// beneath it (see the module docs).
#[derive(Debug)]
pub struct WorkspaceDir {
    fd: OwnedFd,
}

/// A regular file of a workspace, open for reading, and its size then.
#[derive(Debug)]
pub struct CheckedFile {
    pub file: File,
    pub size: u64,
}

impl WorkspaceDir {
    /// Opens the workspace's directory (the path itself is the gateway's,
    /// not the workspace's: it is taken as it is).
    pub fn open(workspace: &Path) -> Result<WorkspaceDir, WorkspaceFileError> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(workspace, flags, Mode::empty()).map_err(WorkspaceFileError::from_errno)?;
        Ok(WorkspaceDir { fd })
    }

    /// Opens the regular file at `relative` for reading, beneath the
    /// workspace, with one name and at most `max_bytes` (see the module
    /// docs for each refusal).
    pub fn open_file(&self, relative: &Path, max_bytes: u64) -> Result<CheckedFile, WorkspaceFileError> {
        let fd = beneath::open(self.fd.as_fd(), relative, READ_FLAGS, Mode::empty())?;
        checked(fd, max_bytes, true)
    }

    /// The bytes of the file at `relative` (see [`WorkspaceDir::open_file`]).
    pub fn read(&self, relative: &Path, max_bytes: u64) -> Result<Vec<u8>, WorkspaceFileError> {
        read_capped(self.open_file(relative, max_bytes)?, max_bytes)
    }

    /// The file at `relative` as UTF-8 text (see [`WorkspaceDir::open_file`]).
    pub fn read_text(&self, relative: &Path, max_bytes: u64) -> Result<String, WorkspaceFileError> {
        String::from_utf8(self.read(relative, max_bytes)?).map_err(|_| WorkspaceFileError::NotText)
    }

    /// The names in the directory at `relative` beneath the workspace (not
    /// `.` and `..`), at most `max_entries` of them, in the directory's order.
    pub fn list(&self, relative: &Path, max_entries: usize) -> Result<Vec<OsString>, WorkspaceFileError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK;
        let fd = beneath::open(self.fd.as_fd(), relative, flags, Mode::empty())?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(fd).map_err(WorkspaceFileError::from_errno)? {
            let entry = entry.map_err(WorkspaceFileError::from_errno)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() == max_entries {
                tracing::warn!(dir = %relative.display(), max_entries, "directory has more entries than are read");
                break;
            }
            names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
        Ok(names)
    }
}

/// Reads the file at `path` on the host as its user would (symlinks
/// followed, any path), for an unconfined environment: still a regular file
/// only, opened without blocking, at most `max_bytes`.
pub fn read_anywhere(path: &Path, max_bytes: u64) -> Result<Vec<u8>, WorkspaceFileError> {
    let fd = rustix::fs::open(path, READ_FLAGS, Mode::empty()).map_err(WorkspaceFileError::from_errno)?;
    read_capped(checked(fd, max_bytes, false)?, max_bytes)
}

/// Runs `work` (blocking file work) on tokio's blocking pool, waiting at
/// most [`TIMEOUT`]: nothing of it runs on the async runtime's threads.
pub async fn off_runtime<T, F>(work: F) -> Result<T, WorkspaceFileError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, WorkspaceFileError> + Send + 'static,
{
    within(TIMEOUT, work).await
}

/// [`off_runtime`] with another timeout. The work itself cannot be stopped:
/// its thread is left to finish while the caller goes on.
async fn within<T, F>(timeout: Duration, work: F) -> Result<T, WorkspaceFileError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, WorkspaceFileError> + Send + 'static,
{
    // What the work logs (a directory read short, a hard link refused) stays in the caller's span.
    let span = tracing::Span::current();
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(move || span.in_scope(work))).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(WorkspaceFileError::Io(std::io::Error::other(join))),
        Err(_) => Err(WorkspaceFileError::TimedOut(timeout)),
    }
}

/// The checks made on the open descriptor: a regular file, with one name
/// when `one_name`, at most `max_bytes` now.
fn checked(fd: OwnedFd, max_bytes: u64, one_name: bool) -> Result<CheckedFile, WorkspaceFileError> {
    let file = File::from(fd);
    let metadata = file.metadata()?;
    let kind = metadata.file_type();
    let not_regular = |what| Err(WorkspaceFileError::NotRegular(what));
    if kind.is_dir() {
        return not_regular("a directory");
    } else if kind.is_fifo() {
        return not_regular("a FIFO");
    } else if kind.is_socket() {
        return not_regular("a socket");
    } else if kind.is_char_device() || kind.is_block_device() {
        return not_regular("a device");
    } else if !kind.is_file() {
        return not_regular("an unknown kind of file");
    }
    if one_name && metadata.nlink() > 1 {
        return Err(WorkspaceFileError::HardLinked(metadata.nlink()));
    }
    let size = metadata.len();
    if size > max_bytes {
        return Err(WorkspaceFileError::TooLarge { size, max: max_bytes });
    }
    Ok(CheckedFile { file, size })
}

/// Reads `checked` to its end, refusing it when it grew past `max_bytes`.
fn read_capped(checked: CheckedFile, max_bytes: u64) -> Result<Vec<u8>, WorkspaceFileError> {
    let mut bytes = Vec::with_capacity(usize::try_from(checked.size).unwrap_or(0));
    checked.file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
    let read = bytes.len() as u64;
    if read > max_bytes {
        return Err(WorkspaceFileError::TooLarge { size: read, max: max_bytes });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
