//! The host side's file access to a sandboxed workspace (`fs.*` tools), and
//! to any workspace a file leaves from (`chat.send_file`).
//!
//! A sandboxed command can write the workspace while the host reads it, so a
//! path checked once could be swapped for a symlink before it is opened.
//! Every open therefore goes through `openat2` from the workspace's directory
//! with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: the
//! kernel refuses any step that leaves the workspace, whatever changed since
//! [`crate::environment::path::resolve_path`] looked. Opens are non-blocking
//! and anything but a regular file is refused, so a FIFO planted under a
//! file's name cannot hang the host. When the gateway runs as
//! root, what it creates is given to the sandbox's host uid so the command
//! can change it too.

use rustix::fs::{AtFlags, Dir, FileType, Gid, Mode, OFlags, ResolveFlags, Uid};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path};

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_MAGICLINKS);
/// How deep [`chown_tree`] descends.
const MAX_DEPTH: usize = 64;

/// Reads the file at `relative` (inside the workspace `root`) as UTF-8.
pub fn read(root: &Path, relative: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    open_beneath(root, relative)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Reads the file at `relative` (inside the workspace `root`), refusing one
/// bigger than `max_bytes` ([`std::io::ErrorKind::FileTooLarge`]) before
/// reading it, or that grew past it while being read.
pub fn read_bytes(root: &Path, relative: &Path, max_bytes: u64) -> std::io::Result<Vec<u8>> {
    let file = open_beneath(root, relative)?;
    let size = file.metadata()?.len();
    let too_large = |size: u64| {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the file is {size} bytes; at most {max_bytes} can be sent here"),
        )
    };
    if size > max_bytes {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Opens the regular file at `relative` for reading, never leaving `root`.
fn open_beneath(root: &Path, relative: &Path) -> std::io::Result<File> {
    let root = open_root(root)?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat2(&root, relative, flags, Mode::empty(), RESOLVE)?;
    regular(&fd)?;
    Ok(File::from(fd))
}

/// Writes `content` to `relative`, creating parent directories; created and
/// written entries go to `owner` when given.
pub fn write(root: &Path, relative: &Path, content: &[u8], owner: Option<u32>) -> std::io::Result<()> {
    let mut dir = open_root(root)?;
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            _ => return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a plain relative path")),
        }
    }
    let Some((name, parents)) = parts.split_last() else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"));
    };
    for part in parents {
        let created = match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o755)) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(error) => return Err(error.into()),
        };
        let next = rustix::fs::openat2(
            &dir,
            *part,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        )?;
        if created {
            give(&next, owner)?;
        }
        dir = next;
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat2(&dir, *name, flags, Mode::from_raw_mode(0o644), RESOLVE)?;
    regular(&fd)?;
    rustix::fs::ftruncate(&fd, 0)?;
    give(&fd, owner)?;
    File::from(fd).write_all(content)
}

/// Gives the workspace and everything in it to `owner` (the sandbox's host
/// uid and gid), never following a symlink.
pub fn chown_tree(root: &Path, owner: u32) -> std::io::Result<()> {
    let root = open_root(root)?;
    give(&root, Some(owner))?;
    chown_below(&root, owner, 0)
}

fn chown_below(dir: &OwnedFd, owner: u32, depth: usize) -> std::io::Result<()> {
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let ids = (Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)));
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
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
        } else {
            rustix::fs::chownat(dir, name, ids.0, ids.1, AtFlags::SYMLINK_NOFOLLOW)?;
        }
    }
    Ok(())
}

/// Refuses what is not a regular file (a FIFO, a socket, a directory).
fn regular(fd: &OwnedFd) -> std::io::Result<()> {
    let stat = rustix::fs::fstat(fd)?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile {
        Ok(())
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"))
    }
}

fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?)
}

fn give(fd: &impl AsFd, owner: Option<u32>) -> std::io::Result<()> {
    if let Some(owner) = owner {
        rustix::fs::fchown(fd, Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_swapped_in_after_the_check_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "token").unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join("sub")).unwrap();
        std::os::unix::fs::symlink(&secret, workspace.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), workspace.join("up")).unwrap();
        assert!(read(&workspace, Path::new("link")).is_err());
        assert!(read(&workspace, Path::new("up/secret")).is_err());
        assert!(write(&workspace, Path::new("up/new"), b"x", None).is_err());
        assert!(!dir.path().join("new").exists());
        write(&workspace, Path::new("sub/deeper/file.txt"), b"hello", None).unwrap();
        write(&workspace, Path::new("sub/deeper/file.txt"), b"hi", None).unwrap();
        assert_eq!(read(&workspace, Path::new("sub/deeper/file.txt")).unwrap(), "hi", "rewritten, not appended");
    }

    #[test]
    fn a_fifo_under_a_files_name_is_refused_without_blocking() {
        let workspace = tempfile::tempdir().unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            workspace.path().join("pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(read(workspace.path(), Path::new("pipe")).is_err());
        assert!(write(workspace.path(), Path::new("pipe"), b"x", None).is_err());
    }
}
