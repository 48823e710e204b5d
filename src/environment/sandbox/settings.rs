//! [`SandboxSettings`]: what a sandboxed session may see and use.

use std::path::PathBuf;

/// What a sandboxed session may see and use. The defaults are the safe side:
/// no network, modest limits, nothing of the host but its system directories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxSettings {
    /// Share the host's network. Off (the default), the sandbox has a network
    /// namespace of its own with only its own loopback, so neither the
    /// internet nor the gateway's own ports on the host's 127.0.0.1 are
    /// reachable.
    pub network: bool,
    /// Resource limits of every process started inside.
    pub limits: SandboxLimits,
    /// Host paths that must not be visible inside at all (`$BUB_HOME`, a
    /// config directory under `/etc`, …). Everything outside the system
    /// directories is invisible anyway; a hidden path inside a visible
    /// directory is covered by an empty, read-only directory (a hidden file
    /// by one that cannot be opened). The session's own workspace stays
    /// visible even when it lies under a hidden path, and nothing else of
    /// that path does (its parents appear as empty directories). A
    /// [`SandboxSettings::read_only`] directory inside a hidden path is not
    /// shown: hiding wins. What the sandbox needs (the system directories,
    /// the shell, the Python installation) is shown even inside a hidden
    /// path, which then shows nothing else; and a hidden path that would
    /// have to be covered with something needed inside (a config folder
    /// that is `/etc` itself) is refused: [`super::SandboxError::HidesNeeded`].
    pub hidden: Vec<PathBuf>,
    /// Extra host paths made visible read-only, beyond `/usr`, `/bin`,
    /// `/sbin`, `/lib*`, `/etc` and the Python installation.
    pub read_only: Vec<PathBuf>,
    /// The Python interpreter code mode runs (default: `python3` on the
    /// gateway's `PATH`). It is resolved once, on the host, to the real
    /// executable (past pyenv shims and symlinks), and its installation
    /// prefix is made visible read-only.
    pub python: Option<PathBuf>,
}

/// Resource limits. Most are rlimits of the command, inherited by everything
/// it starts (each spawn gets a user namespace of its own, so the process
/// limit counts the processes of that one command tree); the `session_*`
/// caps hold for the session's whole tree (a cgroup, where there is one),
/// and the workspace's quota and the disk's reserve are measured
/// (`quota.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Address space of each process, in bytes (`RLIMIT_AS`): an allocation
    /// beyond it fails, so a memory hog dies of its own out-of-memory error
    /// instead of pressing on the host. Default 1 GiB.
    pub memory_bytes: u64,
    /// Processes (and threads) of one command tree (`RLIMIT_NPROC`, counted
    /// per user namespace): a fork bomb hits the ceiling. Default 128.
    pub max_processes: u64,
    /// CPU time of each process, in seconds (`RLIMIT_CPU`). Default 300.
    pub cpu_seconds: u64,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`). Default 256 MiB.
    pub max_file_bytes: u64,
    /// Output read back from a process's stdout and stderr, each, in bytes;
    /// past it the pipe is closed (the writer gets `EPIPE`). Default 64 MiB.
    pub max_output_bytes: u64,
    /// Size of the fresh `/tmp` (and of `/dev/shm`), in bytes; memory-backed,
    /// and fresh for every spawn (a later command does not see an earlier
    /// one's `/tmp`: the workspace is what persists). Default 256 MiB.
    pub tmp_bytes: u64,
    /// Open files of each process (`RLIMIT_NOFILE`). Default 1024.
    pub open_files: u64,
    /// Memory of one session's whole tree, in bytes: every process of every
    /// command of the session, and what they keep in `/tmp` and `/dev/shm`.
    /// Past it the kernel stops one of them (the OOM killer, inside the
    /// session only). Held by a cgroup where the host has one to give
    /// (`cgroup.rs`); elsewhere only the per-process and `/tmp` caps hold,
    /// and the start-up report says so. Default 2 GiB.
    pub session_memory_bytes: u64,
    /// Processes (and threads) of one session's whole tree, all commands
    /// together; past it `fork` fails. Held by the same cgroup. Default 256.
    pub session_processes: u64,
    /// What the workspace may hold on disk, in bytes (`quota.rs`): a command
    /// started over it cannot make any file grow, and one that passes it is
    /// stopped; the command's output says which. Default 1 GiB.
    pub workspace_bytes: u64,
    /// Free space on the workspace's file system that sandboxed commands
    /// leave alone, in bytes, so the gateway's database (on the same disk,
    /// under `$BUB_HOME`) has room: the same rules as the quota. Default 512 MiB.
    pub disk_reserve_bytes: u64,
}

impl Default for SandboxLimits {
    fn default() -> SandboxLimits {
        const MIB: u64 = 1024 * 1024;
        SandboxLimits {
            memory_bytes: 1024 * MIB,
            max_processes: 128,
            cpu_seconds: 300,
            max_file_bytes: 256 * MIB,
            max_output_bytes: 64 * MIB,
            tmp_bytes: 256 * MIB,
            open_files: 1024,
            session_memory_bytes: 2048 * MIB,
            session_processes: 256,
            workspace_bytes: 1024 * MIB,
            disk_reserve_bytes: 512 * MIB,
        }
    }
}
