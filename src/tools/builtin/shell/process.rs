//! [`ShellProcess`]: one `bash -c` (or `sh -c`) in a process group of its own.
//!
//! Guarantees the shell tools build on:
//! - stdout and stderr share one pipe, so the output interleaves exactly as the
//!   command wrote it;
//! - the command leads a new process group (`process_group(0)`), so signals sent
//!   to the group reach everything it started, however deep;
//! - [`ShellProcess::terminate`] returns only once no live process of the group
//!   remains (or it gave up after TERM, a grace period and KILL, and logged it);
//! - dropping a `ShellProcess` kills whatever is left of its group, so a
//!   cancelled tool call or a dropped manager leaks no processes.
//!
//! "Live" ignores zombies: an orphan is reparented to PID 1, and a PID 1 that
//! does not reap (common in containers) leaves it in the group as a zombie that
//! runs nothing. Processes that leave the group (`setsid`) are out of reach.

use super::output::OutputBuffer;
use crate::environment::process_group::{group_is_alive, signal_group};
use rustix::process::{Pid, Signal};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a terminated group gets between TERM and KILL.
pub const KILL_GRACE: Duration = Duration::from_secs(3);
/// How long output may still arrive after the command exited (from processes
/// it left behind that hold the pipe open).
const DRAIN_GRACE: Duration = Duration::from_millis(250);
/// How long to wait for the group to vanish after KILL.
const REAP_WAIT: Duration = Duration::from_secs(2);
const POLL_EVERY: Duration = Duration::from_millis(20);

/// Whether the shell itself (the group leader) is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellStatus {
    Running,
    /// The exit code, or minus the signal number that ended it (`-15` for TERM).
    Exited(i32),
}

impl ShellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ShellStatus::Running => "running",
            ShellStatus::Exited(_) => "exited",
        }
    }

    pub fn exit_code(self) -> Option<i32> {
        match self {
            ShellStatus::Running => None,
            ShellStatus::Exited(code) => Some(code),
        }
    }
}

/// A running (or finished) shell command. See the module docs.
#[derive(Debug)]
pub struct ShellProcess {
    pgid: Pid,
    output: Arc<Mutex<OutputBuffer>>,
    status: watch::Receiver<ShellStatus>,
}

impl ShellProcess {
    /// Starts `bash -c cmd` in `cwd` (`sh -c` when there is no bash), keeping
    /// at most `output_cap` bytes of its newest output. `cwd` must exist: a
    /// missing directory would be indistinguishable from a missing shell.
    pub fn spawn(cmd: &str, cwd: &Path, output_cap: usize) -> std::io::Result<ShellProcess> {
        let (reader, writer) = std::io::pipe()?;
        let child = match start("bash", cmd, cwd, &writer) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => start("sh", cmd, cwd, &writer)?,
            started => started?,
        };
        // Our copy of the write end must close, or the pipe never reaches EOF.
        drop(writer);
        let pgid = child
            .id()
            .and_then(|id| Pid::from_raw(i32::try_from(id).ok()?))
            .ok_or_else(|| std::io::Error::other("the shell exited before it was tracked"))?;
        let pipe = pipe::Receiver::from_owned_fd(reader.into())?;
        let output = Arc::new(Mutex::new(OutputBuffer::new(output_cap)));
        let (status_tx, status) = watch::channel(ShellStatus::Running);
        tokio::spawn(supervise(child, pipe, output.clone(), status_tx));
        Ok(ShellProcess { pgid, output, status })
    }

    /// The process group id (the shell's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid.as_raw_pid()
    }

    pub fn status(&self) -> ShellStatus {
        *self.status.borrow()
    }

    /// The output buffer; hold the guard briefly.
    pub fn output(&self) -> MutexGuard<'_, OutputBuffer> {
        lock(&self.output)
    }

    /// Waits for the shell to exit, with its output complete.
    pub async fn wait(&self) -> ShellStatus {
        let mut status = self.status.clone();
        match status.wait_for(|s| *s != ShellStatus::Running).await {
            Ok(status) => *status,
            // The supervisor is gone without a status: it can only have panicked.
            Err(_) => ShellStatus::Exited(-1),
        }
    }

    /// TERM to the whole group, KILL after [`KILL_GRACE`] if anything of it is
    /// still alive; returns once the shell was reaped and the group is empty.
    pub async fn terminate(&self) -> ShellStatus {
        if group_is_alive(self.pgid) {
            signal_group(self.pgid, Signal::TERM);
        }
        if !self.wait_until_gone(KILL_GRACE).await {
            signal_group(self.pgid, Signal::KILL);
            if !self.wait_until_gone(REAP_WAIT).await {
                tracing::warn!(pgid = self.pgid(), "process group still alive after KILL");
            }
        }
        self.status()
    }

    async fn wait_until_gone(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.status() != ShellStatus::Running && !group_is_alive(self.pgid) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

impl Drop for ShellProcess {
    fn drop(&mut self) {
        if group_is_alive(self.pgid) {
            tracing::debug!(pgid = self.pgid(), "killing what is left of a shell's group");
            signal_group(self.pgid, Signal::KILL);
        }
    }
}

/// Spawns one shell; the `Command` (and its copies of the pipe) is dropped on return.
fn start(program: &str, cmd: &str, cwd: &Path, writer: &std::io::PipeWriter) -> std::io::Result<Child> {
    let mut command = Command::new(program);
    command
        .arg("-c")
        .arg(cmd)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer.try_clone()?))
        .stderr(Stdio::from(writer.try_clone()?))
        .process_group(0);
    command.spawn()
}

/// Pumps output until the pipe closes, reaps the shell, publishes its status.
/// Output that processes left behind keep writing is read for [`DRAIN_GRACE`]
/// after the shell exits, then the pipe is closed.
async fn supervise(
    mut child: Child,
    mut pipe: pipe::Receiver,
    output: Arc<Mutex<OutputBuffer>>,
    status: watch::Sender<ShellStatus>,
) {
    enum First {
        Exited(std::io::Result<ExitStatus>),
        Drained,
    }
    let pump = pump(&mut pipe, &output);
    tokio::pin!(pump);
    let first = tokio::select! {
        exit = child.wait() => First::Exited(exit),
        () = &mut pump => First::Drained,
    };
    let exit = match first {
        First::Exited(exit) => {
            let _ = tokio::time::timeout(DRAIN_GRACE, &mut pump).await;
            exit
        }
        First::Drained => child.wait().await,
    };
    lock(&output).finish();
    let code = match exit {
        Ok(exit) => exit_code(exit),
        Err(error) => {
            tracing::warn!(%error, "could not reap a shell");
            -1
        }
    };
    let _ = status.send(ShellStatus::Exited(code));
}

async fn pump(pipe: &mut pipe::Receiver, output: &Mutex<OutputBuffer>) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) => return,
            Ok(n) => lock(output).push(&buffer[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::warn!(%error, "reading shell output failed");
                return;
            }
        }
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| status.signal().map_or(-1, |signal| -signal))
}

fn lock(output: &Mutex<OutputBuffer>) -> MutexGuard<'_, OutputBuffer> {
    // A panic mid-push leaves at worst a partial character; the text is usable.
    output.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
