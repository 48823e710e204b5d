//! Caps on a session's whole tree: every process of every command of one
//! session, and what they keep in their `/tmp` and `/dev/shm`, share one
//! memory cap and one process cap, held by a control group per session.
//!
//! rlimits cap each process (`RLIMIT_AS`) and each command's processes
//! (`RLIMIT_NPROC`), so a command of 128 processes could hold 128 times the
//! per-process cap; a cgroup counts the tree. The kernel charges tmpfs pages
//! to the cgroup of the process that wrote them, so a filled `/tmp` counts
//! too. Past the memory cap the kernel's OOM killer stops a process of that
//! session (never the gateway, which stays outside); past the process cap
//! `fork` fails with `EAGAIN`.
//!
//! Two backends, the first that works, found once per process ([`shared`]):
//! - **cgroup v2**, where the gateway's own cgroup has the `memory` and
//!   `pids` controllers (systemd's `Delegate=yes`, a container given its own
//!   cgroup namespace). v2 allows controllers below a cgroup only when no
//!   process sits in it, so the gateway moves itself into a leaf of its own
//!   cgroup (`bub-gateway-<pid>`) and creates `bub-sandboxes-<pid>` beside it.
//!   Not exercised by the tests: their machines are hybrid (below).
//! - **cgroup v1**, where the `memory` and `pids` hierarchies are mounted and
//!   writable (root, typically): `bub-sandboxes-<pid>` under the gateway's
//!   cgroup of each. On hybrid hosts (v1 controllers, an empty cgroup2 at
//!   `/sys/fs/cgroup/unified`) this is the only way: a controller bound to a
//!   v1 hierarchy is never available in a cgroup2 mount, fresh or not.
//!
//! Per session, not per command: a session's commands run concurrently
//! (`bash` in the background, `run_code`), and the point is that together
//! they cannot hold more. A session's cgroup is `session-<n>` below the base;
//! the sandbox's outer process writes itself into it before it forks
//! anything (`child.rs`), so everything below is counted from the start.
//!
//! Where neither works, the start-up report says so and what holds: the
//! per-process rlimits and the size of each `/tmp` and `/dev/shm`.
//!
//! A session's cgroup goes with its environment, and the base with its last
//! session. A base whose gateway died (a SIGKILL) is emptied by the next gateway that
//! starts in the same cgroup: what is left in it is killed and its
//! directories removed ([`sweep`]).

use super::error::SandboxError;
use super::settings::SandboxLimits;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Which cgroup interface holds a session's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// The gateway's part of the cgroup tree: where session cgroups are made.
#[derive(Debug)]
pub struct Cgroups {
    pub version: Version,
    /// `bub-sandboxes-<pid>`: one directory for v2; memory's and pids' for v1.
    bases: Vec<PathBuf>,
    next: AtomicU64,
}

/// One session's cgroup; its directories are removed when it is dropped
/// (the kernel refuses while a process is still in it).
#[derive(Debug)]
pub struct SessionCgroup {
    dirs: Vec<PathBuf>,
}

const BASE_PREFIX: &str = "bub-sandboxes-";
const LEAF_PREFIX: &str = "bub-gateway-";

/// The backend of this process, found on first use; why there is none.
pub fn shared() -> Result<Arc<Cgroups>, String> {
    static FOUND: OnceLock<Result<Arc<Cgroups>, String>> = OnceLock::new();
    FOUND.get_or_init(|| find().map(Arc::new)).clone()
}

fn find() -> Result<Cgroups, String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mounts: Vec<Mount> = mounts.lines().filter_map(Mount::parse).collect();
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let v2 = match v2(&mounts, &own) {
        Ok(cgroups) => return Ok(cgroups),
        Err(why) => why,
    };
    let v1 = match v1(&mounts, &own) {
        Ok(cgroups) => return Ok(cgroups),
        Err(why) => why,
    };
    Err(format!("cgroup v2: {v2}; cgroup v1: {v1}"))
}

fn v2(mounts: &[Mount], own: &str) -> Result<Cgroups, String> {
    let mount = mounts.iter().find(|m| m.fstype == "cgroup2").ok_or("not mounted")?;
    let path = own_path(own, |controllers| controllers.is_empty()).ok_or("the gateway's cgroup is not listed")?;
    let dir = mount.dir_of(&path).ok_or_else(|| format!("the gateway's cgroup {path} is outside the mount"))?;
    let available = read(&dir.join("cgroup.controllers"));
    if !has_controllers(&available) {
        return Err(format!(
            "the memory and pids controllers are not delegated to the gateway's cgroup {} (it has: {})",
            dir.display(),
            available.trim()
        ));
    }
    sweep(&dir, Version::V2);
    let pid = std::process::id();
    if !has_controllers(&read(&dir.join("cgroup.subtree_control"))) {
        // No process may sit in a cgroup whose controllers are enabled below it.
        let leaf = dir.join(format!("{LEAF_PREFIX}{pid}"));
        make_dir(&leaf)?;
        write(&leaf.join("cgroup.procs"), &pid.to_string())?;
        write(&dir.join("cgroup.subtree_control"), "+memory +pids")?;
    }
    let base = dir.join(format!("{BASE_PREFIX}{pid}"));
    make_dir(&base)?;
    write(&base.join("cgroup.subtree_control"), "+memory +pids")?;
    Ok(Cgroups { version: Version::V2, bases: vec![base], next: AtomicU64::new(0) })
}

fn v1(mounts: &[Mount], own: &str) -> Result<Cgroups, String> {
    let mut bases = Vec::new();
    for controller in ["memory", "pids"] {
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == controller))
            .ok_or_else(|| format!("no {controller} hierarchy is mounted"))?;
        let path = own_path(own, |controllers| controllers.split(',').any(|c| c == controller))
            .ok_or_else(|| format!("the gateway's {controller} cgroup is not listed"))?;
        let dir =
            mount.dir_of(&path).ok_or_else(|| format!("the gateway's {controller} cgroup is outside the mount"))?;
        sweep(&dir, Version::V1);
        let base = dir.join(format!("{BASE_PREFIX}{}", std::process::id()));
        make_dir(&base)?;
        bases.push(base);
    }
    Ok(Cgroups { version: Version::V1, bases, next: AtomicU64::new(0) })
}

impl Cgroups {
    /// A new session's cgroup, capped at `limits`' session memory and processes.
    pub fn session(&self, limits: &SandboxLimits) -> Result<SessionCgroup, SandboxError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let failed = |reason: String| SandboxError::Setup {
            step: "creating the session's cgroup".into(),
            source: std::io::Error::other(reason),
        };
        let mut session = SessionCgroup { dirs: Vec::new() };
        for base in &self.bases {
            let dir = base.join(format!("session-{n}"));
            // The base goes with its last session (below); it is made again,
            // and again if that last session's removal raced this.
            let mut made = Err(String::new());
            for _ in 0..3 {
                made = self.make_base(base).and_then(|()| make_dir(&dir));
                if made.is_ok() {
                    break;
                }
            }
            made.map_err(failed)?;
            session.dirs.push(dir);
        }
        let (memory, pids) = match self.version {
            Version::V2 => (&session.dirs[0], &session.dirs[0]),
            Version::V1 => (&session.dirs[0], &session.dirs[1]),
        };
        let bytes = limits.session_memory_bytes.to_string();
        match self.version {
            Version::V2 => {
                write(&memory.join("memory.max"), &bytes).map_err(failed)?;
                // No swap to spill to past the cap (the file is missing without swap support).
                let _ = write(&memory.join("memory.swap.max"), "0");
            }
            Version::V1 => {
                write(&memory.join("memory.limit_in_bytes"), &bytes).map_err(failed)?;
                // Memory plus swap, where swap is accounted: no spilling past the cap.
                let _ = write(&memory.join("memory.memsw.limit_in_bytes"), &bytes);
            }
        }
        write(&pids.join("pids.max"), &limits.session_processes.to_string()).map_err(failed)?;
        Ok(session)
    }
}

impl Cgroups {
    fn make_base(&self, base: &Path) -> Result<(), String> {
        make_dir(base)?;
        match self.version {
            Version::V2 => write(&base.join("cgroup.subtree_control"), "+memory +pids"),
            Version::V1 => Ok(()),
        }
    }
}

impl SessionCgroup {
    /// The `cgroup.procs` files the sandbox's outer process writes itself into.
    pub fn procs(&self) -> Result<Vec<CString>, SandboxError> {
        self.dirs
            .iter()
            .map(|dir| {
                let path = dir.join("cgroup.procs");
                CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::Nul(path))
            })
            .collect()
    }

    /// Removes the directories, trying for up to two seconds. Blocking.
    fn remove(mut self) {
        for _ in 0..100 {
            self.dirs.retain(|dir| !remove_session_dir(dir));
            if self.dirs.is_empty() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!(cgroups = ?self.dirs, "a session's cgroup still holds processes; left in place");
        self.dirs.clear();
    }
}

impl Drop for SessionCgroup {
    /// Removes the directories now, or from a thread of its own while the
    /// session's last processes finish dying (a closed environment was
    /// just killed).
    fn drop(&mut self) {
        let dirs = std::mem::take(&mut self.dirs);
        let left: Vec<PathBuf> = dirs.into_iter().filter(|dir| !remove_session_dir(dir)).collect();
        if !left.is_empty() {
            let (session, span) = (SessionCgroup { dirs: left }, tracing::Span::current());
            let removing = move || span.in_scope(|| session.remove());
            let _ = std::thread::Builder::new().name("bub-cgroup-rmdir".into()).spawn(removing);
        }
    }
}

/// Empties and removes the bases (and gateway leaves) under `dir` of
/// gateways that are gone: a SIGKILLed gateway cannot clean up after itself.
fn sweep(dir: &Path, version: Version) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(pid) = name.strip_prefix(BASE_PREFIX).or_else(|| name.strip_prefix(LEAF_PREFIX)) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        // A live process with that pid may be that gateway, or a stranger that
        // reused the pid: left alone either way.
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let base = entry.path();
        let sessions: Vec<PathBuf> = std::fs::read_dir(&base)
            .map(|entries| entries.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
            .unwrap_or_default();
        for session in &sessions {
            let killed = kill_all(session, version);
            if killed > 0 {
                tracing::warn!(cgroup = %session.display(), killed, "killed what a gone gateway left running");
            }
            for _ in 0..50 {
                if remove_dir(session) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        remove_dir(&base);
    }
}

/// Kills every process in the cgroup at `dir`; how many there were.
fn kill_all(dir: &Path, version: Version) -> usize {
    let pids: Vec<i32> = read(&dir.join("cgroup.procs")).lines().filter_map(|l| l.trim().parse().ok()).collect();
    if pids.is_empty() {
        return 0;
    }
    // v2's cgroup.kill is atomic (Linux 5.14+); else one by one (a pid that
    // exits in between and is reused at once would be hit: the window is a
    // few microseconds, for processes that should not exist at all).
    if version == Version::V2 && write(&dir.join("cgroup.kill"), "1").is_ok() {
        return pids.len();
    }
    for pid in &pids {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    pids.len()
}

/// The gateway's cgroup path in the hierarchy whose controller list passes `matches`.
fn own_path(own: &str, matches: impl Fn(&str) -> bool) -> Option<String> {
    own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        matches(controllers).then(|| path.to_string())
    })
}

fn has_controllers(list: &str) -> bool {
    let listed = |name| list.split_whitespace().any(|c| c == name);
    listed("memory") && listed("pids")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("writing {value:?} to {}: {e}", path.display()))
}

fn make_dir(path: &Path) -> Result<(), String> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(format!("cannot create {}: {e} (it needs root or a delegated cgroup)", path.display()))
        }
        _ => Ok(()),
    }
}

/// Removes a session's directory, then its base when that was the last
/// session in it (no gateway leaves an empty base behind); true when the
/// session's directory is gone.
fn remove_session_dir(path: &Path) -> bool {
    let gone = remove_dir(path);
    if gone && let Some(base) = path.parent() {
        // Refused while other sessions live in it.
        let _ = std::fs::remove_dir(base);
    }
    gone
}

/// `rmdir`; true when the directory is gone.
fn remove_dir(path: &Path) -> bool {
    match std::fs::remove_dir(path) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// A line of `/proc/self/mountinfo`, the fields used here.
#[derive(Debug)]
struct Mount {
    /// The mounted file system's directory shown at `point`.
    root: PathBuf,
    point: PathBuf,
    fstype: String,
    /// The super block's options (a v1 hierarchy's controllers).
    options: String,
}

impl Mount {
    fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        let (fstype, _source, options) = (right.next()?, right.next()?, right.next()?);
        Some(Mount {
            root: PathBuf::from(unescape(left.get(3)?)),
            point: PathBuf::from(unescape(left.get(4)?)),
            fstype: fstype.to_string(),
            options: options.to_string(),
        })
    }

    /// The directory of cgroup `path` under this mount, when the mount shows it.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let relative = Path::new(path).strip_prefix(&self.root).ok()?;
        Some(self.point.join(relative))
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_and_cgroup_paths_are_read() {
        let v1 =
            Mount::parse("30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory").unwrap();
        assert_eq!((v1.fstype.as_str(), v1.options.as_str()), ("cgroup", "rw,memory"));
        assert_eq!(v1.dir_of("/a/b").unwrap(), Path::new("/sys/fs/cgroup/memory/a/b"));
        let nested = Mount::parse("40 25 0:30 /docker/x /sys/fs\\040cg rw - cgroup2 cgroup2 rw").unwrap();
        assert_eq!(nested.dir_of("/docker/x/y").unwrap(), Path::new("/sys/fs cg/y"));
        assert!(nested.dir_of("/elsewhere").is_none());
        let own = "9:name=systemd:/\n8:pids:/\n4:memory:/jobs/42\n0::/user.slice\n";
        assert_eq!(own_path(own, |c| c.split(',').any(|c| c == "memory")).as_deref(), Some("/jobs/42"));
        assert_eq!(own_path(own, str::is_empty).as_deref(), Some("/user.slice"));
        assert!(has_controllers("cpu memory io pids") && !has_controllers("cpu memory"));
    }
}
