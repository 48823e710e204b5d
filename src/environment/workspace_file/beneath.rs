//! Resolving a path beneath a directory the kernel's way or, where the
//! kernel has no `openat2`, by a walk that gives the same guarantee.
//!
//! Both accept relative symlinks whose targets stay beneath the directory
//! (`AGENTS.md -> CLAUDE.md`, `.agents/skills/x -> ../../tools/x`) and
//! refuse, whenever it happens during resolution, `..` above the directory,
//! an absolute path, an absolute symlink and a symlink whose target climbs
//! out. No path is checked first and opened later: each step is taken from
//! a file descriptor already held, so nothing swapped in meanwhile can lead
//! the open elsewhere.

use super::WorkspaceFileError;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::OnceLock;

/// Beneath the directory, and never through a `/proc` magic link (which
/// names a file by what it is, not where it is). Symlinks themselves are
/// allowed: `RESOLVE_BENEATH` already holds every step of their resolution
/// to the directory, atomically, so refusing them all (`RESOLVE_NO_SYMLINKS`)
/// would add no containment and break repositories that link `AGENTS.md`
/// to `CLAUDE.md`.
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Symlinks followed in one resolution before giving up, as the kernel does.
const MAX_LINKS: usize = 40;
/// `openat2` answers `EAGAIN` when a rename raced a `..` step; it is tried
/// again this many times.
const RETRIES: usize = 8;

/// Opens `relative` beneath the directory `root` with `flags` (and `mode`
/// when creating): `openat2` where the kernel has it, else [`walk`].
pub(super) fn open(
    root: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, WorkspaceFileError> {
    if relative.is_absolute() {
        return Err(WorkspaceFileError::Escapes);
    }
    if !openat2_works() {
        return walk(root, relative, flags, mode);
    }
    let flags = flags | OFlags::CLOEXEC;
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root, relative, flags, mode, RESOLVE) {
            Err(Errno::AGAIN) if tries < RETRIES => tries += 1,
            result => return result.map_err(WorkspaceFileError::from_errno),
        }
    }
}

/// Whether `openat2` can be used here: not on kernels before 5.6 (`ENOSYS`)
/// nor in containers whose seccomp profile predates it (`EPERM`). Probed
/// once, on the first workspace file.
fn openat2_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat2(rustix::fs::CWD, ".", flags, Mode::empty(), RESOLVE) {
            Err(errno @ (Errno::NOSYS | Errno::PERM)) => {
                tracing::info!(%errno, "openat2 is not available: workspace files are opened one path component at a time");
                false
            }
            _ => true,
        }
    })
}

/// The fallback of [`open`]: one `openat` per component from a descriptor
/// already held, each with `O_NOFOLLOW`. A symlink met on the way is read
/// and its target's components take its place (an absolute target is
/// refused); `..` returns to the directory the walk came from, popped from
/// its own stack, and is refused at `root`: the kernel never resolves a
/// `..` here, so a directory renamed meanwhile cannot lead out.
pub(super) fn walk(
    root: BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, WorkspaceFileError> {
    let mut pending = components(relative)?;
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop_front() {
        let dir = stack.last().map_or(root, |fd| fd.as_fd());
        if part == ".." {
            stack.pop().ok_or(WorkspaceFileError::Escapes)?;
            continue;
        }
        let last = pending.is_empty();
        let step = match last {
            true => flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            false => OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        };
        match rustix::fs::openat(dir, part.as_os_str(), step, mode) {
            Ok(fd) if last => return Ok(fd),
            Ok(fd) => stack.push(fd),
            // `O_NOFOLLOW` met a symlink (ELOOP), or a directory was asked
            // for and a symlink found (ENOTDIR): follow it by hand.
            Err(errno @ (Errno::LOOP | Errno::NOTDIR)) => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(WorkspaceFileError::from_errno(Errno::LOOP));
                }
                let target = match rustix::fs::readlinkat(dir, part.as_os_str(), Vec::new()) {
                    Ok(target) => target,
                    // No longer a symlink: swapped back meanwhile; take the name again.
                    Err(Errno::INVAL) if errno == Errno::LOOP => {
                        pending.push_front(part);
                        continue;
                    }
                    // Not a symlink: a file where a directory was needed.
                    Err(Errno::INVAL) => return Err(WorkspaceFileError::from_errno(errno)),
                    Err(other) => return Err(WorkspaceFileError::from_errno(other)),
                };
                let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    return Err(WorkspaceFileError::Escapes);
                }
                let mut expanded = components(target)?;
                expanded.extend(pending.drain(..));
                pending = expanded;
            }
            Err(errno) => return Err(WorkspaceFileError::from_errno(errno)),
        }
    }
    // The path ended at a directory (`sub/..`, a link to `.`): open it.
    let dir = stack.last().map_or(root, |fd| fd.as_fd());
    rustix::fs::openat(dir, ".", flags | OFlags::CLOEXEC, mode).map_err(WorkspaceFileError::from_errno)
}

/// The names and `..`s of a relative path (`.` dropped); an absolute one escapes.
fn components(path: &Path) -> Result<VecDeque<OsString>, WorkspaceFileError> {
    let mut parts = VecDeque::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => parts.push_back(name.to_os_string()),
            Component::ParentDir => parts.push_back(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(WorkspaceFileError::Escapes),
        }
    }
    Ok(parts)
}
