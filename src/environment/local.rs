//! [`LocalEnvironment`]: the host itself. Every spawn leads a new process
//! group, so [`Process::signal`] reaches the whole tree; `close` kills every
//! group the environment started that is still alive.

use super::path::{Beneath, resolve_beneath, resolve_path};
use super::process_group::{group_is_alive, signal_group};
use super::workspace_file::{WorkspaceDir, WorkspaceFileError, off_runtime, read_anywhere, write_anywhere};
use super::{
    Environment, EnvironmentError, EnvironmentProvider, MAX_READ_BYTES, Process, ProcessControl, ProcessIo, Program,
    SpawnOptions,
};
use async_trait::async_trait;
use parking_lot::Mutex;
use rustix::process::{Pid, Signal};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

/// What a spawn with [`SpawnOptions::clean_env`] keeps of the host's variables.
const KEPT_VARIABLES: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];

/// Runs on the host in `workspace`.
pub struct LocalEnvironment {
    workspace: PathBuf,
    confined: bool,
    python: String,
    groups: Mutex<Vec<Pid>>,
}

impl LocalEnvironment {
    /// An environment in `workspace` (created if missing). With `confined`,
    /// paths outside the workspace are refused.
    pub fn new(workspace: impl Into<PathBuf>, confined: bool) -> std::io::Result<LocalEnvironment> {
        let workspace = workspace.into();
        std::fs::create_dir_all(&workspace)?;
        Ok(LocalEnvironment { workspace, confined, python: "python3".into(), groups: Mutex::new(Vec::new()) })
    }

    /// Uses another interpreter for code mode.
    pub fn with_python(mut self, python: impl Into<String>) -> LocalEnvironment {
        self.python = python.into();
        self
    }

    fn path(&self, path: &str) -> Result<PathBuf, EnvironmentError> {
        Ok(resolve_path(&self.workspace, path, self.confined)?)
    }
}

#[async_trait]
impl Environment for LocalEnvironment {
    fn workspace(&self) -> &Path {
        &self.workspace
    }

    fn python(&self) -> &str {
        &self.python
    }

    fn resolve_path(&self, path: &str) -> Result<PathBuf, EnvironmentError> {
        self.path(path)
    }

    async fn spawn(&self, command: Program, options: SpawnOptions) -> Result<Box<dyn Process>, EnvironmentError> {
        let cwd = match &options.cwd {
            Some(cwd) => self.path(cwd)?,
            None => self.workspace.clone(),
        };
        let (label, mut process) = match &command {
            Program::Shell(line) => {
                let shell = if Path::new("/bin/bash").exists() || which("bash") { "bash" } else { "sh" };
                let mut process = tokio::process::Command::new(shell);
                process.arg("-c").arg(line);
                (line.clone(), process)
            }
            Program::Argv(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return Err(EnvironmentError::Spawn {
                        command: String::new(),
                        source: std::io::Error::other("empty argument list"),
                    });
                };
                let mut process = tokio::process::Command::new(program);
                process.args(args);
                (argv.join(" "), process)
            }
        };
        if options.clean_env {
            process.env_clear();
            for name in KEPT_VARIABLES {
                if let Some(value) = std::env::var_os(name) {
                    process.env(name, value);
                }
            }
        }
        process
            .current_dir(&cwd)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        let mut child = process.spawn().map_err(|source| EnvironmentError::Spawn { command: label.clone(), source })?;
        let pgid = child.id().and_then(|id| Pid::from_raw(i32::try_from(id).ok()?)).ok_or_else(|| {
            EnvironmentError::Spawn { command: label, source: std::io::Error::other("exited at once") }
        })?;
        self.groups.lock().push(pgid);
        let io = ProcessIo {
            stdin: child.stdin.take().map(|p| Box::new(p) as _),
            stdout: child.stdout.take().map(|p| Box::new(p) as _),
            stderr: child.stderr.take().map(|p| Box::new(p) as _),
        };
        Ok(Box::new(LocalProcess::leading(child, pgid, io)))
    }

    /// Confined: beneath the workspace, as the sandbox's files are read
    /// (a host process of the session may have planted links). Unconfined:
    /// the path as it is; either way a regular file, without blocking.
    async fn read_text(&self, path: &str) -> Result<String, EnvironmentError> {
        let (resolved, read) = if self.confined {
            let Beneath { root, resolved, relative } = resolve_beneath(&self.workspace, path)?;
            let read = off_runtime(move || WorkspaceDir::open(&root)?.read_text(&relative, MAX_READ_BYTES));
            (resolved, read.await)
        } else {
            let resolved = self.path(path)?;
            let at = resolved.clone();
            let read = off_runtime(move || {
                String::from_utf8(read_anywhere(&at, MAX_READ_BYTES)?).map_err(|_| WorkspaceFileError::NotText)
            });
            (resolved, read.await)
        };
        read.map_err(|source| EnvironmentError::FileAccess { path: resolved, source })
    }

    /// Confined: beneath the workspace, never through a link out.
    async fn write_bytes(&self, path: &str, content: &[u8]) -> Result<PathBuf, EnvironmentError> {
        let content = content.to_vec();
        let (resolved, written) = if self.confined {
            let Beneath { root, resolved, relative } = resolve_beneath(&self.workspace, path)?;
            let written = off_runtime(move || WorkspaceDir::open(&root)?.write(&relative, &content, None));
            (resolved, written.await)
        } else {
            let resolved = self.path(path)?;
            let at = resolved.clone();
            (resolved, off_runtime(move || write_anywhere(&at, &content)).await)
        };
        written.map_err(|source| EnvironmentError::FileAccess { path: resolved.clone(), source })?;
        Ok(resolved)
    }

    async fn close(&self) {
        let groups = std::mem::take(&mut *self.groups.lock());
        for pgid in groups.into_iter().filter(|pgid| group_is_alive(*pgid)) {
            signal_group(pgid, Signal::KILL);
        }
    }
}

/// Whether `program` is on `PATH`. Reading `PATH` (and the other
/// [`KEPT_VARIABLES`]) is part of spawning a process here (the child inherits
/// the same environment), so it stays in the library, unlike the `BUB_*`
/// settings the binary reads (`cli/env.rs`).
fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// A host child that leads a process group of its own: what
/// [`LocalEnvironment`] starts, and what the sandbox starts too (its outer
/// process, whose group holds the sandbox's PID 1). Its exit code is the
/// command's, or minus the signal that ended it.
pub struct LocalProcess {
    child: tokio::process::Child,
    group: Arc<ProcessGroup>,
    io: ProcessIo,
}

impl LocalProcess {
    /// `child`, which leads process group `pgid`, with the pipes it was given.
    pub(crate) fn leading(child: tokio::process::Child, pgid: Pid, io: ProcessIo) -> LocalProcess {
        LocalProcess { child, group: Arc::new(ProcessGroup(pgid)), io }
    }
}

/// The process group a [`LocalProcess`] leads.
struct ProcessGroup(Pid);

impl ProcessControl for ProcessGroup {
    fn signal(&self, kill: bool) {
        signal_group(self.0, if kill { Signal::KILL } else { Signal::TERM });
    }

    fn is_running(&self) -> bool {
        group_is_alive(self.0)
    }
}

#[async_trait]
impl Process for LocalProcess {
    fn take_io(&mut self) -> ProcessIo {
        std::mem::take(&mut self.io)
    }

    async fn wait(&mut self) -> std::io::Result<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.wait().await?;
        Ok(status.code().unwrap_or_else(|| status.signal().map_or(-1, |signal| -signal)))
    }

    fn control(&self) -> Arc<dyn ProcessControl> {
        self.group.clone()
    }
}

/// Provides a [`LocalEnvironment`] per session in the workspace it is given.
#[derive(Debug, Clone, Default)]
pub struct LocalProvider {
    /// Refuse paths outside the workspace.
    pub confined: bool,
}

#[async_trait]
impl EnvironmentProvider for LocalProvider {
    async fn provide(&self, _session: &str, workspace: PathBuf) -> Result<Arc<dyn Environment>, EnvironmentError> {
        let environment = LocalEnvironment::new(&workspace, self.confined)
            .map_err(|source| EnvironmentError::File { path: workspace, source })?;
        Ok(Arc::new(environment))
    }
}
