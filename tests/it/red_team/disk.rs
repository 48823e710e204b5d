//! Route 8 (issue 28): a sandboxed command filled the disk `bub.db` lives
//! on, with files of at most 256 MiB each (the per-file cap) but as many as
//! it liked. Now each workspace has a quota (`[sandbox] workspace_bytes`)
//! and the disk keeps a reserve for the gateway (`disk_reserve_bytes`):
//! writes past either fail inside the sandbox, the chat is told, and the
//! gateway keeps answering.

use super::host_side::{config, say, workspace};
use crate::support::fake_model::FakeModel;
use crate::support::gateway::GatewayProcess;
use std::os::unix::process::CommandExt;
use std::path::Path;

const MIB: u64 = 1024 * 1024;

/// Writes ten 100 MiB files into the workspace, one after the other.
const FILL: &str = "for i in 1 2 3 4 5 6 7 8 9 10; do head -c 104857600 /dev/zero > fill$i || break; done; echo done";

/// Bytes the files below `dir` take on disk.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(metadata) = entry.path().symlink_metadata() else { continue };
        total += metadata.blocks() * 512;
        if metadata.is_dir() {
            total += disk_usage(&entry.path());
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_cannot_grow_past_its_quota() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("text").await;
    let limits = format!("[sandbox]\nworkspace_bytes = {}\n", 300 * MIB);
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config(&limits)).await;
    assert!(gateway.stderr().contains("workspace quota: ok (300 MiB per workspace"), "{}", gateway.stderr());
    let filled = say(gateway.addr, "m1", &format!(",bash cmd='{FILL}' timeout_seconds=120")).await;
    let used = disk_usage(&workspace(home.path()));
    // The quota, and at most what a fast disk takes in the moments before the watch stops the command.
    assert!(used <= 600 * MIB, "the workspace holds {} MiB: {filled}", used / MIB);
    assert!(filled.contains("quota"), "the chat is told: {filled}");
    let refused = say(gateway.addr, "m2", ",bash cmd='echo more > more.txt && echo WROTE'").await;
    assert!(!refused.contains("WROTE") && refused.contains("quota"), "over the quota, files cannot grow: {refused}");
    say(gateway.addr, "m3", ",bash cmd='rm -f fill*'").await;
    let freed = say(gateway.addr, "m4", ",bash cmd='echo more > more.txt && echo WROTE'").await;
    assert!(freed.contains("WROTE"), "room again once files are deleted: {freed}");
    assert!(gateway.stop().await);
}

/// Free bytes of the file system at `path` (as the process `pid` sees it,
/// through `/proc/<pid>/root`).
fn free_bytes(pid: u32, path: &Path) -> u64 {
    let seen = Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap());
    let stat = rustix::fs::statvfs(&seen).expect("statvfs");
    stat.f_bavail * stat.f_frsize
}

/// The gateway's home on a small disk of its own (a 1 GiB tmpfs in the
/// gateway's mount namespace): a chat fills it from the sandbox. The
/// sandbox stops at the reserve, and the gateway, whose database is on that
/// disk, keeps answering.
#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_command_cannot_fill_the_gateways_disk() {
    let outer = tempfile::tempdir().unwrap();
    let home = outer.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let path = outer.path().join("bub.toml");
    std::fs::write(&path, config(&format!("[sandbox]\ndisk_reserve_bytes = {}\n", 512 * MIB))).unwrap();
    let fake = FakeModel::start_answering("answered").await;
    let mount_point = std::ffi::CString::new(home.to_str().unwrap()).unwrap();
    let gateway = GatewayProcess::start_with(
        &home,
        &fake.vars("openai:gpt-test"),
        &["--config", path.to_str().unwrap()],
        move |command| {
            // SAFETY: unshare and mount are raw syscalls, fine between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let tmpfs = c"tmpfs".as_ptr();
                    let done = libc::unshare(libc::CLONE_NEWNS) == 0
                        && libc::mount(
                            std::ptr::null(),
                            c"/".as_ptr(),
                            std::ptr::null(),
                            libc::MS_REC | libc::MS_PRIVATE,
                            std::ptr::null(),
                        ) == 0
                        && libc::mount(tmpfs, mount_point.as_ptr(), tmpfs, 0, c"size=1g".as_ptr().cast()) == 0;
                    if done { Ok(()) } else { Err(std::io::Error::last_os_error()) }
                });
            }
        },
    )
    .await;
    let filled = say(gateway.addr, "m1", &format!(",bash cmd='{FILL}' timeout_seconds=120")).await;
    let free = free_bytes(gateway.pid(), &home);
    assert!(free >= 128 * MIB, "the disk was filled to {} MiB free: {filled}", free / MIB);
    assert!(filled.contains("disk"), "the chat is told: {filled}");
    let answer = say(gateway.addr, "m2", "hello?").await;
    assert!(answer.contains("answered"), "the gateway keeps answering: {answer}");
    assert!(gateway.stop().await);
}
