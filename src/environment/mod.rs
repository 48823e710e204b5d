//! Session environments: where a session's processes run and its files live.
//!
//! Tools keep their behaviour (background shells, timeouts, rendering, events)
//! on the host; an [`Environment`] only starts processes, reads and writes text
//! files and resolves paths, so a container or remote sandbox needs to
//! implement just these. Code mode, too, only spawns its child here (with the
//! environment's [`Environment::python`]) and speaks its protocol itself. [`LocalEnvironment`] runs on the host, each spawn in a
//! process group of its own, optionally confined to the workspace.
//! [`Environments`] keeps one environment per session, created by an
//! [`EnvironmentProvider`] on first use and closed when idle or at shutdown.
//!
//! - [`path`]: path resolution and workspace confinement.
//! - [`process_group`]: signalling and liveness of whole process trees.
//! - [`local`]: `LocalEnvironment` and its `LocalProcess`.
//! - [`sessions`]: `Environments`, the per-session registry.
//! - [`sandbox`]: `SandboxEnvironment`, the session in Linux namespaces that
//!   hide the gateway and the host.
//! - [`workspace_file`]: the one way the gateway opens a workspace's files
//!   (beneath it, regular files only, capped, off the runtime's threads).

pub mod local;
pub mod path;
pub mod process_group;
// The one module of bub built on unsafe code: the sandboxed child runs raw syscalls between fork and
// exec (unshare, mount, pivot_root, setrlimit, uid maps, seccomp) that no safe API offers for that
// place, and the probe asks the kernel the same way. Each block says why it holds (`// SAFETY:`).
#[allow(unsafe_code)]
pub mod sandbox;
pub mod sessions;
pub mod workspace_file;

pub use local::{LocalEnvironment, LocalProcess, LocalProvider};
pub use path::PathError;
pub use sessions::Environments;

use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// What to start: a shell line, or a program and its arguments. (Not a comma
/// command: in bub, "command" means one of those, see [`crate::command`].)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A command line run through the shell (`bash -c`, else `sh -c`).
    Shell(String),
    /// A program and its arguments, run directly.
    Argv(Vec<String>),
}

/// How to start it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpawnOptions {
    /// Working directory, resolved like any path (default: the workspace).
    pub cwd: Option<String>,
    /// Variables layered over the environment's defaults.
    pub env: Vec<(String, String)>,
    /// None of the host process's variables: only the environment's own few
    /// (`PATH`, `HOME`, `LANG`, `TMPDIR`; the sandbox adds `USER`) and
    /// [`SpawnOptions::env`]. The sandbox always starts so; a session's MCP
    /// server asks it of the local environment too, so the program never
    /// reads the gateway's model keys.
    pub clean_env: bool,
}

/// A started process's pipes; each can be taken once.
#[derive(Default)]
pub struct ProcessIo {
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
}

/// Signals and liveness of a started process tree, shareable while another
/// task waits for the process.
pub trait ProcessControl: Send + Sync {
    /// TERM (or KILL with `kill`) to the process and everything it started. A
    /// process that is already gone is not an error.
    fn signal(&self, kill: bool);

    /// True while the process or anything it started is still running.
    fn is_running(&self) -> bool;
}

/// A process started by an environment.
#[async_trait]
pub trait Process: Send {
    /// Takes the pipes (stdin, stdout, stderr); later calls get empty ones.
    fn take_io(&mut self) -> ProcessIo;

    /// Waits for the process to exit: its exit code, or minus the signal that ended it.
    async fn wait(&mut self) -> std::io::Result<i32>;

    /// The process tree's signals and liveness, usable from other tasks.
    fn control(&self) -> Arc<dyn ProcessControl>;

    /// Shorthand for `control().signal(kill)`.
    fn signal(&self, kill: bool) {
        self.control().signal(kill)
    }

    /// Shorthand for `control().is_running()`.
    fn is_running(&self) -> bool {
        self.control().is_running()
    }
}

/// The largest file `fs.read` and `fs.edit` read whole: a bigger one is
/// refused and the model told to read a part of it with the shell.
pub const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// Errors of an environment, each naming what it was about.
#[derive(Debug, thiserror::Error)]
pub enum EnvironmentError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("cannot start {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("{}: {source}", .path.display())]
    File { path: PathBuf, source: std::io::Error },
    /// A file the environment would not read or write, or could not.
    #[error("{}: {source}", .path.display())]
    FileAccess { path: PathBuf, source: workspace_file::WorkspaceFileError },
    #[error("the environment of session {0} is closed")]
    Closed(String),
}

/// Where one session's processes and files are.
#[async_trait]
pub trait Environment: Send + Sync {
    /// The working directory inside the environment.
    fn workspace(&self) -> &Path;

    /// The Python interpreter available inside: code mode starts it through
    /// [`Environment::spawn`] with piped stdio (code mode drives it).
    fn python(&self) -> &str {
        "python3"
    }

    /// Resolves a path a tool was given (see [`path`]).
    fn resolve_path(&self, path: &str) -> Result<PathBuf, EnvironmentError>;

    async fn spawn(&self, command: Program, options: SpawnOptions) -> Result<Box<dyn Process>, EnvironmentError>;

    /// Reads a UTF-8 text file of at most [`MAX_READ_BYTES`]: a regular
    /// file only, opened without blocking, never on the runtime's threads
    /// (see [`workspace_file`]).
    async fn read_text(&self, path: &str) -> Result<String, EnvironmentError>;

    /// Writes UTF-8 text, creating parent directories; returns the path written.
    async fn write_text(&self, path: &str, content: &str) -> Result<PathBuf, EnvironmentError> {
        self.write_bytes(path, content.as_bytes()).await
    }

    /// Writes bytes (a file someone sent), creating parent directories;
    /// returns the path written.
    async fn write_bytes(&self, path: &str, content: &[u8]) -> Result<PathBuf, EnvironmentError>;

    /// Releases the environment: every process it started is killed.
    async fn close(&self);
}

/// Creates a session's environment on its first turn. The gateway or a library
/// user replaces [`LocalProvider`] to run sessions elsewhere.
#[async_trait]
pub trait EnvironmentProvider: Send + Sync {
    async fn provide(&self, session: &str, workspace: PathBuf) -> Result<Arc<dyn Environment>, EnvironmentError>;
}
