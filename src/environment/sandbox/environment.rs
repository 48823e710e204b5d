//! [`SandboxEnvironment`]: one session's sandbox, implementing [`Environment`].

use super::cgroup::SessionCgroup;
use super::child::{self, Step, Wiring};
use super::error::SandboxError;
use super::plan::{self, Blueprint};
use super::process::{Capped, Noted};
use super::quota;
use super::spawner;
use crate::environment::LocalProcess;
use crate::environment::path::{Beneath, resolve_beneath, resolve_path};
use crate::environment::process_group::{group_is_alive, signal_group};
use crate::environment::workspace_file::{WorkspaceDir, chown_tree, off_runtime};
use crate::environment::{Environment, EnvironmentError, MAX_READ_BYTES, Process, ProcessIo, Program, SpawnOptions};
use async_trait::async_trait;
use parking_lot::Mutex;
use rustix::process::{Pid, Signal};
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use tracing::Instrument;

/// The `PATH` inside, after the interpreter's own directory.
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A session's sandbox: every spawn runs in namespaces of its own built from
/// one blueprint (every mount as data). Made by [`super::SandboxProvider::environment`].
///
/// Guarantees, for every process a spawn starts, however deep: it sees the
/// workspace read-write at its host path (the working directory), the system
/// directories and the interpreter read-only, a fresh `/tmp`, its own `/proc`
/// and a minimal `/dev`, and nothing else of the host; it runs as an
/// unprivileged uid without capabilities or `no_new_privs` escapes; it has no
/// network but its own loopback unless the settings allow it; it gets only
/// the variables given (`PATH`, `HOME` = the workspace, `TMPDIR`, `LANG` and
/// the spawn's own), none of the gateway's; it dies when the spawn's tree is
/// killed or the environment is closed.
pub struct SandboxEnvironment {
    workspace: PathBuf,
    python: String,
    path_variable: String,
    blueprint: Arc<Blueprint>,
    max_output_bytes: u64,
    /// The host uid created files are given to (when the gateway is root).
    owner: Option<u32>,
    groups: Mutex<Vec<Pid>>,
    /// The session's cgroup, removed when the environment is dropped.
    _cgroup: Option<SessionCgroup>,
}

impl std::fmt::Debug for SandboxEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxEnvironment")
            .field("workspace", &self.workspace)
            .field("network", &self.blueprint.network)
            .finish_non_exhaustive()
    }
}

impl SandboxEnvironment {
    pub(super) fn new(
        workspace: PathBuf,
        python: String,
        python_dir: Option<&Path>,
        blueprint: Blueprint,
        cgroup: Option<SessionCgroup>,
    ) -> Result<SandboxEnvironment, SandboxError> {
        let owner = blueprint.outer_root.then_some(blueprint.outer_id);
        if let Some(owner) = owner {
            chown_tree(&workspace, owner).map_err(|error| SandboxError::Workspace {
                path: workspace.clone(),
                source: std::io::Error::other(error),
            })?;
        }
        let path_variable = match python_dir {
            Some(dir) => format!("{}:{SYSTEM_PATH}", dir.display()),
            None => SYSTEM_PATH.to_string(),
        };
        Ok(SandboxEnvironment {
            workspace,
            python,
            path_variable,
            max_output_bytes: blueprint.limits.max_output_bytes,
            blueprint: Arc::new(blueprint),
            owner,
            groups: Mutex::new(Vec::new()),
            _cgroup: cgroup,
        })
    }

    /// Whether processes inside share the host's network.
    pub fn network(&self) -> bool {
        self.blueprint.network
    }

    fn path(&self, path: &str) -> Result<PathBuf, EnvironmentError> {
        Ok(resolve_path(&self.workspace, path, true)?)
    }

    /// The path inside the workspace, for opening beneath it.
    fn beneath(&self, path: &str) -> Result<Beneath, EnvironmentError> {
        Ok(resolve_beneath(&self.workspace, path)?)
    }

    /// A program name as the host finds it on the sandbox's `PATH` (the
    /// directories are the same inside), so the exec needs no search.
    fn program(&self, name: &str) -> OsString {
        if name.contains('/') {
            return name.into();
        }
        std::env::split_paths(&self.path_variable)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
            .map_or_else(|| name.into(), PathBuf::into_os_string)
    }

    /// Starts `command` in a new sandbox: see [`super::child`]. A sandbox
    /// that cannot be built is an error naming the failed step; the command
    /// never runs outside.
    pub(super) async fn start(
        &self,
        command: &Program,
        options: &SpawnOptions,
    ) -> Result<LocalProcess, (String, SpawnFailure)> {
        let (label, program, args) = match command {
            Program::Shell(line) => {
                let shell = if Path::new("/bin/bash").exists() { "/bin/bash" } else { "/bin/sh" };
                (line.clone(), OsString::from(shell), vec!["-c".to_string(), line.clone()])
            }
            Program::Argv(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return Err((String::new(), SpawnFailure::Io(std::io::Error::other("empty argument list"))));
                };
                (argv.join(" "), self.program(program), args.to_vec())
            }
        };
        let fail = |failure| (label.clone(), failure);
        let cwd = match &options.cwd {
            Some(cwd) => self.path(cwd).map_err(|e| fail(SpawnFailure::Environment(e)))?,
            None => self.workspace.clone(),
        };
        let cwd_c = plan::cp(&cwd).map_err(|e| fail(SpawnFailure::Sandbox(e)))?;
        // The disk: what this command's files may grow to (`quota.rs`).
        let (workspace, limits) = (self.workspace.clone(), self.blueprint.limits);
        let room = tokio::task::spawn_blocking(move || quota::room(&workspace, &limits))
            .await
            .map_err(|e| fail(SpawnFailure::Io(std::io::Error::other(e))))?;
        let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from);
        let (report_read, report_write) = pipe().map_err(|e| fail(SpawnFailure::Io(e)))?;
        let (sync_read, sync_write) = pipe().map_err(|e| fail(SpawnFailure::Io(e)))?;
        let wiring = Wiring {
            report: report_write.as_raw_fd(),
            sync_read: sync_read.as_raw_fd(),
            sync_write: sync_write.as_raw_fd(),
            cwd: cwd_c,
            gateway: rustix::process::getpid().as_raw_nonzero().get(),
            max_file_bytes: limits.max_file_bytes.min(room.bytes),
        };

        let mut process = tokio::process::Command::new(program);
        process
            .args(&args)
            .env_clear()
            .env("PATH", &self.path_variable)
            .env("HOME", &self.workspace)
            .env("TMPDIR", "/tmp")
            .env("LANG", "C.UTF-8")
            .env("USER", "sandbox")
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // No `process_group(0)`: `child::enter` calls setsid, which makes
            // a group too and fails in a process that already leads one.
            .kill_on_drop(false);
        let blueprint = self.blueprint.clone();
        // SAFETY: `child::enter` does only async-signal-safe work (raw
        // syscalls on data prepared here) and is made for this place.
        unsafe {
            process.pre_exec(move || child::enter(&blueprint, &wiring));
        }
        // The child is built before std's spawn returns, which blocks: off
        // the runtime's threads, on one that lives as long as the gateway
        // (the sandbox dies with the thread that forked it: `spawner.rs`).
        let spawned = spawner::run(move || {
            let spawned = process.spawn();
            drop((report_write, sync_read, sync_write));
            spawned
        })
        .await
        .map_err(|e| fail(SpawnFailure::Sandbox(e)))?;
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                let report = tokio::task::spawn_blocking(move || read_report(report_read)).await.ok().flatten();
                return Err(fail(match report {
                    Some((code, errno)) => SpawnFailure::Sandbox(SandboxError::Setup {
                        step: Step::describe(code, &self.blueprint),
                        source: std::io::Error::from_raw_os_error(errno),
                    }),
                    None => SpawnFailure::Io(error),
                }));
            }
        };
        let pgid = child
            .id()
            .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?))
            .ok_or_else(|| fail(SpawnFailure::Io(std::io::Error::other("exited at once"))))?;
        self.groups.lock().push(pgid);
        let note = Arc::new(Mutex::new(None));
        let before = room.full.as_ref().map(|why| format!("bub: {why}\n"));
        tokio::spawn(quota::watch(self.workspace.clone(), limits, pgid, room, note.clone()).in_current_span());
        let cap = self.max_output_bytes;
        let io = ProcessIo {
            stdin: child.stdin.take().map(|p| Box::new(p) as _),
            stdout: child.stdout.take().map(|p| Box::new(Noted::new(before, Capped::new(p, cap), note)) as _),
            stderr: child.stderr.take().map(|p| Box::new(Capped::new(p, cap)) as _),
        };
        Ok(LocalProcess::leading(child, pgid, io))
    }
}

/// Why a spawn failed, before it becomes an [`EnvironmentError`].
#[derive(Debug)]
pub(super) enum SpawnFailure {
    Environment(EnvironmentError),
    Sandbox(SandboxError),
    Io(std::io::Error),
}

/// The step the child reported, if it reported one.
fn read_report(pipe: OwnedFd) -> Option<(u32, i32)> {
    let mut bytes = Vec::new();
    std::fs::File::from(pipe).read_to_end(&mut bytes).ok()?;
    child::decode_report(&bytes)
}

#[async_trait]
impl Environment for SandboxEnvironment {
    fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn python(&self) -> &str {
        &self.python
    }

    /// Always confined to the workspace.
    fn resolve_path(&self, path: &str) -> Result<PathBuf, EnvironmentError> {
        self.path(path)
    }

    async fn spawn(&self, command: Program, options: SpawnOptions) -> Result<Box<dyn Process>, EnvironmentError> {
        match self.start(&command, &options).await {
            Ok(process) => Ok(Box::new(process)),
            Err((_, SpawnFailure::Environment(error))) => Err(error),
            Err((command, SpawnFailure::Sandbox(error))) => {
                tracing::warn!(%error, "a sandboxed command could not start");
                Err(EnvironmentError::Spawn { command, source: std::io::Error::other(error) })
            }
            Err((command, SpawnFailure::Io(source))) => Err(EnvironmentError::Spawn { command, source }),
        }
    }

    async fn read_text(&self, path: &str) -> Result<String, EnvironmentError> {
        let Beneath { root, resolved, relative } = self.beneath(path)?;
        off_runtime(move || WorkspaceDir::open(&root)?.read_text(&relative, MAX_READ_BYTES))
            .await
            .map_err(|source| EnvironmentError::FileAccess { path: resolved, source })
    }

    /// Refused, with why, when the content does not fit in what the
    /// workspace's quota and the disk's reserve leave (`quota.rs`).
    async fn write_bytes(&self, path: &str, content: &[u8]) -> Result<PathBuf, EnvironmentError> {
        let Beneath { root, resolved, relative } = self.beneath(path)?;
        let (content, owner, limits) = (content.to_vec(), self.owner, self.blueprint.limits);
        off_runtime(move || {
            quota::fits(&root, &limits, content.len() as u64)
                .map_err(|why| std::io::Error::new(std::io::ErrorKind::QuotaExceeded, why))?;
            WorkspaceDir::open(&root)?.write(&relative, &content, owner)
        })
        .await
        .map_err(|source| EnvironmentError::FileAccess { path: resolved.clone(), source })?;
        Ok(resolved)
    }

    async fn close(&self) {
        let groups = std::mem::take(&mut *self.groups.lock());
        for pgid in groups.into_iter().filter(|pgid| group_is_alive(*pgid)) {
            signal_group(pgid, Signal::KILL);
        }
    }
}
