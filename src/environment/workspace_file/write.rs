//! Writing into a workspace (`fs.write`, `fs.edit`, files people send),
//! and giving a workspace to the sandbox's uid, without following anything
//! a sandboxed command planted out of it.

use super::{WorkspaceDir, WorkspaceFileError, beneath, checked};
use rustix::fs::{AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// How deep [`chown_tree`] descends.
const MAX_DEPTH: usize = 64;
const FILE_FLAGS: OFlags =
    OFlags::WRONLY.union(OFlags::CREATE).union(OFlags::NONBLOCK).union(OFlags::NOCTTY).union(OFlags::CLOEXEC);

impl WorkspaceDir {
    /// Writes `content` to `relative`, creating missing parent directories,
    /// every step beneath the workspace (a parent that is a symlink out is
    /// refused, never written through). What is created goes to `owner`
    /// (uid and gid) when given. The file written must be a regular file
    /// with no other name ([`WorkspaceFileError::HardLinked`]): writing
    /// through another name could change a file outside the workspace.
    pub fn write(&self, relative: &Path, content: &[u8], owner: Option<u32>) -> Result<(), WorkspaceFileError> {
        let parts = plain_parts(relative)?;
        let Some((_, parents)) = parts.split_last() else {
            return Err(WorkspaceFileError::NotRegular("the workspace itself"));
        };
        let mode = Mode::from_raw_mode(0o644);
        let fd = match beneath::open(self.fd.as_fd(), relative, FILE_FLAGS, mode) {
            Err(WorkspaceFileError::NotFound) => {
                self.create_parents(parents, owner)?;
                beneath::open(self.fd.as_fd(), relative, FILE_FLAGS, mode)?
            }
            opened => opened?,
        };
        let mut file = checked(fd, u64::MAX, true)?.file;
        rustix::fs::ftruncate(&file, 0).map_err(WorkspaceFileError::from_errno)?;
        give(&file, owner)?;
        file.write_all(content)?;
        Ok(())
    }

    /// Creates each missing directory of `parents`, each resolved beneath
    /// the workspace from its parent's path.
    fn create_parents(&self, parents: &[&OsStr], owner: Option<u32>) -> Result<(), WorkspaceFileError> {
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let mut above = PathBuf::new();
        for part in parents {
            let parent = match above.as_os_str().is_empty() {
                true => None,
                false => Some(beneath::open(self.fd.as_fd(), &above, dir_flags, Mode::empty())?),
            };
            let parent_fd = parent.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
            above.push(part);
            match rustix::fs::mkdirat(parent_fd, *part, Mode::from_raw_mode(0o755)) {
                Ok(()) if owner.is_some() => {
                    let created = beneath::open(self.fd.as_fd(), &above, dir_flags, Mode::empty())?;
                    give(&created, owner)?;
                }
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(WorkspaceFileError::from_errno(errno)),
            }
        }
        Ok(())
    }
}

/// Writes `content` to `path` on the host as its user would (symlinks
/// followed, parents created), for an unconfined environment: only a
/// regular file is written, and opening never blocks (a FIFO is refused).
pub fn write_anywhere(path: &Path, content: &[u8]) -> Result<(), WorkspaceFileError> {
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let fd = rustix::fs::open(path, FILE_FLAGS, Mode::from_raw_mode(0o644)).map_err(WorkspaceFileError::from_errno)?;
    let mut file = checked(fd, u64::MAX, false)?.file;
    rustix::fs::ftruncate(&file, 0).map_err(WorkspaceFileError::from_errno)?;
    file.write_all(content)?;
    Ok(())
}

/// The names of a plain relative path; `..` and absolute paths are refused.
fn plain_parts(relative: &Path) -> Result<Vec<&OsStr>, WorkspaceFileError> {
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Err(WorkspaceFileError::Escapes),
        }
    }
    Ok(parts)
}

/// Gives the workspace `root` and everything in it to `owner` (the
/// sandbox's host uid and gid), never following a symlink and leaving a
/// file with other names (hard links) to its owner.
pub fn chown_tree(root: &Path, owner: u32) -> Result<(), WorkspaceFileError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let root = rustix::fs::open(root, flags, Mode::empty()).map_err(WorkspaceFileError::from_errno)?;
    give(&root, Some(owner))?;
    chown_below(&root, owner, 0)
}

fn chown_below(dir: &OwnedFd, owner: u32, depth: usize) -> Result<(), WorkspaceFileError> {
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let ids = (Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)));
    for entry in Dir::read_from(dir).map_err(WorkspaceFileError::from_errno)? {
        let entry = entry.map_err(WorkspaceFileError::from_errno)?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        if entry.file_type() == FileType::Directory {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(sub) = rustix::fs::openat(dir, name, flags, Mode::empty()) {
                give(&sub, Some(owner))?;
                chown_below(&sub, owner, depth + 1)?;
            }
        } else if !has_other_names(dir, name) {
            rustix::fs::chownat(dir, name, ids.0, ids.1, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(WorkspaceFileError::from_errno)?;
        }
    }
    Ok(())
}

/// A file with another name may be someone else's file (a hard link to
/// `/etc/shadow` planted while the session ran on the host): it keeps its owner.
fn has_other_names(dir: &OwnedFd, name: &std::ffi::CStr) -> bool {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if stat.st_nlink > 1 => {
            tracing::warn!(name = %name.to_string_lossy(), links = stat.st_nlink, "not giving a hard-linked file to the sandbox");
            true
        }
        Ok(_) => false,
        Err(_) => true,
    }
}

fn give(fd: &impl AsFd, owner: Option<u32>) -> Result<(), WorkspaceFileError> {
    if let Some(owner) = owner {
        rustix::fs::fchown(fd, Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)))
            .map_err(WorkspaceFileError::from_errno)?;
    }
    Ok(())
}
