//! The workspace's disk: a quota per workspace
//! ([`SandboxLimits::workspace_bytes`]) and a reserve of free space that
//! sandboxed commands leave to the gateway, whose database lives on the same
//! disk ([`SandboxLimits::disk_reserve_bytes`]).
//!
//! Measured, not enforced by the file system: the kernel offers no quota on
//! a directory without project quotas (a mount option bub cannot assume),
//! and a size-limited file system over the workspace (a loop image) would
//! need root and would hide the files from the host side's tools. So:
//! - before each command, the room left is measured ([`room`]): the lesser
//!   of what the quota and the reserve leave. The command's files may grow
//!   to at most that (`RLIMIT_FSIZE`, per file); with no room left, no file
//!   may grow at all (deleting still works), and its output begins with why;
//! - while it runs, [`watch`] looks every [`WATCH_EVERY`]: the disk's free
//!   space (one `statvfs`) and, when the disk has filled by more than the
//!   room that was left, the workspace itself (a walk). Past either limit the
//!   command's whole tree is killed and its output ends with why;
//! - the host side's writes into the workspace (`fs.write`) are refused when
//!   they do not fit.
//!
//! The guarantee is therefore bounded, not exact: one command can pass the
//! limits by what it writes in one watch interval (with `RLIMIT_FSIZE`
//! capping each file at the room left when it started); a command started
//! over a limit cannot make a file grow. A workspace too deep to measure
//! counts as full.

use super::settings::SandboxLimits;
use crate::environment::process_group::signal_group;
use parking_lot::Mutex;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::process::{Pid, Signal};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often a running command's disk use is looked at.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);
/// What a command started without room may still take of the disk
/// (directories, empty files) before it is stopped.
const SLACK: u64 = 16 * 1024 * 1024;
/// How deep a workspace is walked; deeper counts as full.
const MAX_DEPTH: usize = 256;
const MIB: u64 = 1024 * 1024;

/// What a command may still write, and why not more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    pub bytes: u64,
    /// Set when there is no room: why, as a sentence for the chat.
    pub full: Option<String>,
    /// The workspace's size, and the disk's used and free bytes, when measured.
    pub used: u64,
    pub disk_used: u64,
    pub disk_free: u64,
}

/// The room left in `workspace` under `limits`. Blocking: it walks the workspace.
pub fn room(workspace: &Path, limits: &SandboxLimits) -> Room {
    // A workspace that cannot be measured (too deep) counts as full.
    let used = usage(workspace).ok();
    let disk = Disk::of(workspace);
    let quota_left = used.map_or(0, |used| limits.workspace_bytes.saturating_sub(used));
    let disk_left = disk.free.saturating_sub(limits.disk_reserve_bytes);
    let full = match (quota_left, disk_left) {
        (0, _) => Some(over_quota(used, limits)),
        (_, 0) => Some(disk_full(disk.free, limits)),
        _ => None,
    };
    Room {
        bytes: quota_left.min(disk_left),
        full,
        used: used.unwrap_or(u64::MAX),
        disk_used: disk.used,
        disk_free: disk.free,
    }
}

fn over_quota(used: Option<u64>, limits: &SandboxLimits) -> String {
    let quota = limits.workspace_bytes / MIB;
    match used {
        Some(used) => format!(
            "the workspace holds {} MiB, its quota is {quota} MiB: files cannot grow until some are deleted",
            used / MIB
        ),
        None => format!("the workspace is too deep to measure against its quota of {quota} MiB: it counts as full"),
    }
}

fn disk_full(free: u64, limits: &SandboxLimits) -> String {
    format!(
        "the disk holding the workspace has {} MiB free and {} MiB are kept for the gateway: files cannot grow",
        free / MIB,
        limits.disk_reserve_bytes / MIB
    )
}

/// The free and used bytes of the file system holding a path (both 0 when
/// it cannot be asked, which leaves no room: fail closed).
#[derive(Debug, Clone, Copy)]
struct Disk {
    free: u64,
    used: u64,
}

impl Disk {
    fn of(path: &Path) -> Disk {
        match rustix::fs::statvfs(path) {
            Ok(stat) => Disk {
                free: stat.f_bavail.saturating_mul(stat.f_frsize),
                used: stat.f_blocks.saturating_sub(stat.f_bfree).saturating_mul(stat.f_frsize),
            },
            Err(_) => Disk { free: 0, used: 0 },
        }
    }
}

/// Whether `bytes` more fit in `workspace`; the reason when they do not.
/// Blocking: it walks the workspace.
pub fn fits(workspace: &Path, limits: &SandboxLimits, bytes: u64) -> Result<(), String> {
    let room = room(workspace, limits);
    match room.full {
        Some(full) => Err(full),
        None if bytes > room.bytes => Err(format!(
            "{bytes} bytes do not fit: the workspace's quota and the disk's reserve leave {} MiB",
            room.bytes / MIB
        )),
        None => Ok(()),
    }
}

/// Watches a running command (process group `pgid`) until its group is
/// gone, killing it when the workspace passes its quota or the disk its
/// reserve; `note` then gets why (its output ends with it).
///
/// A command started without room (files cannot grow: deleting is what it
/// is for) is stopped only if the disk still loses [`SLACK`] more.
pub async fn watch(
    workspace: PathBuf,
    limits: SandboxLimits,
    pgid: Pid,
    start: Room,
    note: Arc<Mutex<Option<String>>>,
) {
    let floor = limits.disk_reserve_bytes.min(start.disk_free.saturating_sub(SLACK));
    let (mut used, mut disk_used) = (start.used, start.disk_used);
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if matches!(rustix::process::test_kill_process_group(pgid), Err(rustix::io::Errno::SRCH)) {
            return;
        }
        let disk = Disk::of(&workspace);
        let grown = used.saturating_add(disk.used.saturating_sub(disk_used));
        let why = if disk.free < floor {
            Some(disk_full(disk.free, &limits))
        } else if start.full.is_none() && grown > limits.workspace_bytes {
            // The disk filled by more than the quota left: the workspace may have, so it is walked.
            let walked = workspace.clone();
            let measured = tokio::task::spawn_blocking(move || usage(&walked)).await.ok().and_then(Result::ok);
            used = measured.unwrap_or(u64::MAX);
            disk_used = disk.used;
            (used > limits.workspace_bytes).then(|| over_quota(measured, &limits))
        } else {
            None
        };
        if let Some(why) = why {
            tracing::warn!(workspace = %workspace.display(), reason = %why, "a sandboxed command was stopped");
            *note.lock() = Some(format!("\nbub: stopped: {why}\n"));
            signal_group(pgid, Signal::KILL);
            return;
        }
    }
}

/// Bytes the workspace takes on disk (allocated blocks, so sparse files
/// count what they use), walked without following symlinks. Blocking.
pub fn usage(root: &Path) -> std::io::Result<u64> {
    let dir = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let own = rustix::fs::fstat(&dir)?;
    Ok(blocks(&own).saturating_add(below(&dir, 0)?))
}

fn below(dir: &OwnedFd, depth: usize) -> std::io::Result<u64> {
    if depth >= MAX_DEPTH {
        return Err(std::io::Error::other("too deep"));
    }
    let mut total = 0u64;
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
        total = total.saturating_add(blocks(&stat));
        if FileType::from_raw_mode(stat.st_mode) == FileType::Directory {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(sub) = rustix::fs::openat(dir, name, flags, Mode::empty()) {
                total = total.saturating_add(below(&sub, depth + 1)?);
            }
        }
    }
    Ok(total)
}

// st_blocks is i64 or u64 depending on the target.
#[allow(clippy::useless_conversion, clippy::unnecessary_fallible_conversions)]
fn blocks(stat: &rustix::fs::Stat) -> u64 {
    u64::try_from(stat.st_blocks).unwrap_or(0).saturating_mul(512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_is_what_the_quota_leaves_and_none_past_it() {
        let workspace = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(workspace.path().join("a/b")).unwrap();
        std::fs::write(workspace.path().join("a/b/data"), vec![7u8; 3 * MIB as usize]).unwrap();
        std::os::unix::fs::symlink("/usr", workspace.path().join("a/usr")).unwrap();
        let used = usage(workspace.path()).unwrap();
        assert!((3 * MIB..4 * MIB).contains(&used), "{used}: the symlink is not followed");
        let limits = SandboxLimits { workspace_bytes: 10 * MIB, disk_reserve_bytes: 0, ..SandboxLimits::default() };
        let left = room(workspace.path(), &limits);
        assert_eq!((left.bytes, left.full), (10 * MIB - used, None));
        assert!(fits(workspace.path(), &limits, MIB).is_ok());
        assert!(fits(workspace.path(), &limits, 8 * MIB).is_err());
        let tight = SandboxLimits { workspace_bytes: 2 * MIB, ..limits };
        let full = room(workspace.path(), &tight);
        assert!(full.bytes == 0 && full.full.as_ref().is_some_and(|why| why.contains("quota")), "{full:?}");
        let reserved = SandboxLimits { disk_reserve_bytes: u64::MAX, ..limits };
        assert!(room(workspace.path(), &reserved).full.is_some_and(|why| why.contains("disk")));
    }
}
