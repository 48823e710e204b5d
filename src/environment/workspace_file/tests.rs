//! Each resolution case runs through `openat2` and through the fallback
//! walk alike, so hosts without `openat2` are held to the same rules.

use super::*;
use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A workspace `ws` beside `secret.txt` (outside), holding `sub/inside.txt`,
/// `CLAUDE.md`, and links: `AGENTS.md -> CLAUDE.md`, `up -> ..`,
/// `abs -> <secret>`, `out -> ../secret.txt`, `subdir -> sub`,
/// `sub/back -> ../CLAUDE.md`, `loop -> loop`.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/inside.txt"), "inside").unwrap();
    std::fs::write(ws.join("CLAUDE.md"), "claude").unwrap();
    symlink("CLAUDE.md", ws.join("AGENTS.md")).unwrap();
    symlink("..", ws.join("up")).unwrap();
    symlink(dir.path().join("secret.txt"), ws.join("abs")).unwrap();
    symlink("../secret.txt", ws.join("out")).unwrap();
    symlink("sub", ws.join("subdir")).unwrap();
    symlink("../CLAUDE.md", ws.join("sub/back")).unwrap();
    symlink("loop", ws.join("loop")).unwrap();
    (dir, ws)
}

type Resolver = fn(std::os::fd::BorrowedFd<'_>, &Path, OFlags, Mode) -> Result<OwnedFd, WorkspaceFileError>;

/// `relative` read beneath `ws` by `resolve`, as text.
fn read_with(resolve: Resolver, ws: &Path, relative: &str) -> Result<String, WorkspaceFileError> {
    let root = WorkspaceDir::open(ws)?;
    let fd = resolve(root.fd.as_fd(), Path::new(relative), READ_FLAGS, Mode::empty())?;
    let bytes = read_capped(checked(fd, 1024, true)?, 1024)?;
    Ok(String::from_utf8(bytes).unwrap())
}

const RESOLVERS: [(&str, Resolver); 2] = [("openat2", beneath::open), ("walk", beneath::walk)];

#[test]
fn links_inside_the_workspace_are_followed() {
    let (_dir, ws) = workspace();
    for (name, resolve) in RESOLVERS {
        for (path, text) in [
            ("AGENTS.md", "claude"),
            ("sub/inside.txt", "inside"),
            ("subdir/inside.txt", "inside"),
            ("sub/back", "claude"),
            ("sub/../CLAUDE.md", "claude"),
            ("./subdir/../sub/./inside.txt", "inside"),
        ] {
            assert_eq!(read_with(resolve, &ws, path).unwrap(), text, "{name}: {path}");
        }
    }
}

#[test]
fn every_way_out_of_the_workspace_is_refused() {
    let (dir, ws) = workspace();
    let absolute = dir.path().join("secret.txt");
    for (name, resolve) in RESOLVERS {
        for path in ["../secret.txt", "sub/../../secret.txt", "abs", "out", "up/secret.txt", absolute.to_str().unwrap()]
        {
            let refused = read_with(resolve, &ws, path).unwrap_err();
            assert!(matches!(refused, WorkspaceFileError::Escapes), "{name}: {path}: {refused}");
            assert!(refused.to_string().contains("leaves the workspace"), "{refused}");
        }
        assert!(matches!(read_with(resolve, &ws, "missing"), Err(WorkspaceFileError::NotFound)), "{name}");
        let looped = read_with(resolve, &ws, "loop").unwrap_err();
        assert!(matches!(looped, WorkspaceFileError::Io(_)), "{name}: {looped}");
    }
}

#[test]
fn fifos_directories_and_hard_links_are_refused_without_blocking() {
    let (dir, ws) = workspace();
    rustix::fs::mknodat(rustix::fs::CWD, ws.join("pipe"), rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o644), 0)
        .unwrap();
    std::fs::hard_link(dir.path().join("secret.txt"), ws.join("linked.txt")).unwrap();
    for (name, resolve) in RESOLVERS {
        let fifo = read_with(resolve, &ws, "pipe").unwrap_err();
        assert_eq!(fifo.to_string(), "it is a FIFO, not a regular file", "{name}");
        let directory = read_with(resolve, &ws, "subdir").unwrap_err();
        assert!(matches!(directory, WorkspaceFileError::NotRegular("a directory")), "{name}: {directory}");
        let linked = read_with(resolve, &ws, "linked.txt").unwrap_err();
        assert!(matches!(linked, WorkspaceFileError::HardLinked(2)), "{name}: {linked}");
    }
    let root = WorkspaceDir::open(&ws).unwrap();
    assert!(root.write(Path::new("pipe"), b"x", None).is_err(), "no reader: refused, not blocked");
    assert!(matches!(root.write(Path::new("linked.txt"), b"x", None), Err(WorkspaceFileError::HardLinked(2))));
    assert_eq!(std::fs::read_to_string(dir.path().join("secret.txt")).unwrap(), "outside");
}

#[test]
fn the_size_cap_holds_before_and_while_reading() {
    let (_dir, ws) = workspace();
    std::fs::write(ws.join("big.txt"), "0123456789").unwrap();
    let root = WorkspaceDir::open(&ws).unwrap();
    let refused = root.read(Path::new("big.txt"), 9).unwrap_err();
    assert_eq!(refused.to_string(), "the file is 10 bytes; at most 9 can be read here");
    assert_eq!(root.read(Path::new("big.txt"), 10).unwrap(), b"0123456789");
    // A file that says it is empty and is not (`/proc`): cut at the cap.
    let grown = read_capped(
        checked(rustix::fs::open("/proc/self/status", READ_FLAGS, Mode::empty()).unwrap(), 8, false).unwrap(),
        8,
    );
    assert!(matches!(grown, Err(WorkspaceFileError::TooLarge { max: 8, .. })), "{grown:?}");
}

#[test]
fn anywhere_follows_links_but_still_refuses_devices_and_fifos() {
    let (dir, ws) = workspace();
    assert_eq!(read_anywhere(&ws.join("abs"), 64).unwrap(), b"outside");
    let device = read_anywhere(Path::new("/dev/zero"), 64).unwrap_err();
    assert_eq!(device.to_string(), "it is a device, not a regular file");
    rustix::fs::mknodat(rustix::fs::CWD, ws.join("pipe"), rustix::fs::FileType::Fifo, Mode::from_raw_mode(0o644), 0)
        .unwrap();
    assert!(matches!(read_anywhere(&ws.join("pipe"), 64), Err(WorkspaceFileError::NotRegular("a FIFO"))));
    assert!(write_anywhere(&ws.join("pipe"), b"x").is_err());
    write_anywhere(&dir.path().join("new/deeper/file.txt"), b"hello").unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("new/deeper/file.txt")).unwrap(), "hello");
}

#[test]
fn writes_create_parents_beneath_and_never_through_a_link_out() {
    let (dir, ws) = workspace();
    let root = WorkspaceDir::open(&ws).unwrap();
    assert!(matches!(root.write(Path::new("up/new.txt"), b"x", None), Err(WorkspaceFileError::Escapes)));
    assert!(matches!(root.write(Path::new("abs"), b"x", None), Err(WorkspaceFileError::Escapes)));
    assert!(!dir.path().join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(dir.path().join("secret.txt")).unwrap(), "outside");
    root.write(Path::new("attachments/m1/photo.jpg"), b"hello", None).unwrap();
    root.write(Path::new("attachments/m1/photo.jpg"), b"hi", None).unwrap();
    assert_eq!(root.read(Path::new("attachments/m1/photo.jpg"), 64).unwrap(), b"hi", "rewritten, not appended");
    root.write(Path::new("subdir/via-link.txt"), b"through a link inside", None).unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("sub/via-link.txt")).unwrap(), "through a link inside");
    // A planted `attachments/<message>` pointing out is not written through.
    symlink(dir.path(), ws.join("attachments/m2")).unwrap();
    assert!(matches!(root.write(Path::new("attachments/m2/x.jpg"), b"x", None), Err(WorkspaceFileError::Escapes)));
    assert!(!dir.path().join("x.jpg").exists());
}

/// A file swapped for a symlink out (and back) while it is opened again and
/// again: every open reads the file, or is refused; none reads the secret.
#[test]
fn a_file_swapped_for_a_link_out_is_never_read_through_it() {
    let (dir, ws) = workspace();
    std::fs::write(ws.join("file"), "inside").unwrap();
    symlink(dir.path().join("secret.txt"), ws.join("link-abs")).unwrap();
    symlink("../secret.txt", ws.join("link-rel")).unwrap();
    std::fs::write(ws.join("file-copy"), "inside").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (ws, stop) = (ws.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut absolute = false;
            while !stop.load(Ordering::Relaxed) {
                // rename(2) replaces atomically: the name is always something.
                absolute = !absolute;
                let link = if absolute { "link-abs" } else { "link-rel" };
                let _ = std::fs::hard_link(ws.join(link), ws.join("tmp-link"));
                let _ = std::fs::rename(ws.join("tmp-link"), ws.join("file"));
                let _ = std::fs::copy(ws.join("file-copy"), ws.join("tmp-file"));
                let _ = std::fs::rename(ws.join("tmp-file"), ws.join("file"));
            }
        })
    };
    for _ in 0..2000 {
        for (name, resolve) in RESOLVERS {
            match read_with(resolve, &ws, "file") {
                Ok(text) => assert_eq!(text, "inside", "{name} read through a swapped-in link"),
                Err(error) => assert!(
                    matches!(error, WorkspaceFileError::Escapes | WorkspaceFileError::NotFound),
                    "{name}: {error}"
                ),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("secret.txt")).unwrap(), "outside");
}

#[tokio::test]
async fn off_runtime_gives_back_what_the_work_returned() {
    let (_dir, ws) = workspace();
    let text = off_runtime(move || WorkspaceDir::open(&ws)?.read_text(Path::new("AGENTS.md"), 64)).await;
    assert_eq!(text.unwrap(), "claude");
    let failed = off_runtime(|| Err::<(), _>(WorkspaceFileError::NotText)).await.unwrap_err();
    assert!(matches!(failed, WorkspaceFileError::NotText));
}

/// A file system that hangs holds a blocking thread, never the caller.
#[tokio::test]
async fn work_that_hangs_is_given_up_after_the_timeout() {
    let (release, hung) = std::sync::mpsc::channel::<()>();
    let given_up = within(Duration::from_millis(50), move || {
        let _ = hung.recv();
        Ok(())
    })
    .await;
    assert!(matches!(given_up, Err(WorkspaceFileError::TimedOut(_))), "{given_up:?}");
    drop(release);
}
