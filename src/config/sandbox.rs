//! `[sandbox]`: the resource limits of the sandbox that chats with
//! `environment = "sandbox"` run their shell and code in, and the host
//! folders it shows beside the system's. Every key is optional; unset, the
//! sandbox's own default applies (see
//! `bub::environment::sandbox::SandboxLimits` and `SandboxSettings`, which
//! these keys fill in the gateway). The sandboxes are built at start, so a
//! change needs a restart.

use serde::Deserialize;
use serde::de::{self, Deserializer};
use std::path::PathBuf;

/// `[sandbox]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Memory of one session's whole tree (all its commands and their
    /// `/tmp`), in bytes; held by a cgroup where the host has one.
    #[serde(default, deserialize_with = "above_zero")]
    pub session_memory_bytes: Option<u64>,
    /// Processes and threads of one session's whole tree.
    #[serde(default, deserialize_with = "above_zero")]
    pub session_processes: Option<u64>,
    /// Address space of each process, in bytes.
    #[serde(default, deserialize_with = "above_zero")]
    pub memory_bytes: Option<u64>,
    /// Processes and threads of one command.
    #[serde(default, deserialize_with = "above_zero")]
    pub max_processes: Option<u64>,
    /// CPU time of each process, in seconds.
    #[serde(default, deserialize_with = "above_zero")]
    pub cpu_seconds: Option<u64>,
    /// Largest file a process may write, in bytes.
    #[serde(default, deserialize_with = "above_zero")]
    pub max_file_bytes: Option<u64>,
    /// Size of each command's `/tmp` and of its `/dev/shm`, in bytes.
    #[serde(default, deserialize_with = "above_zero")]
    pub tmp_bytes: Option<u64>,
    /// Open files of each process.
    #[serde(default, deserialize_with = "above_zero")]
    pub open_files: Option<u64>,
    /// What one session's workspace may hold on disk, in bytes.
    #[serde(default, deserialize_with = "above_zero")]
    pub workspace_bytes: Option<u64>,
    /// Free space sandboxed commands leave on the workspaces' disk, in bytes.
    #[serde(default)]
    pub disk_reserve_bytes: Option<u64>,
    /// Host folders shown read-only inside every sandbox, beside `/usr`,
    /// `/etc` and the other system folders: where a program the sessions
    /// run is installed elsewhere (a `scope = "session"` MCP server under
    /// `/opt`). Absolute paths; hidden paths (`$BUB_HOME`, the config's
    /// folder) stay hidden.
    #[serde(default, deserialize_with = "absolute_paths")]
    pub read_only: Vec<PathBuf>,
}

/// A relative path would depend on where the gateway was started.
fn absolute_paths<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<PathBuf>, D::Error> {
    let paths = Vec::<PathBuf>::deserialize(deserializer)?;
    if let Some(relative) = paths.iter().find(|path| !path.is_absolute()) {
        return Err(de::Error::custom(format!("read_only: `{}` is not an absolute path", relative.display())));
    }
    Ok(paths)
}

/// A limit of 0 would make the sandbox unusable: it is a typo.
fn above_zero<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = u64::deserialize(deserializer)?;
    if value == 0 {
        return Err(de::Error::custom("a sandbox limit must be above 0"));
    }
    Ok(Some(value))
}
