//! [`ShellProcess`]: one shell command started through the session's
//! [`Environment`], which runs it as a tree it can signal as a whole.
//!
//! Guarantees the shell tools build on:
//! - stderr is redirected into stdout by the shell itself (`exec 2>&1`), so the
//!   output interleaves exactly as the command wrote it;
//! - signals reach everything the command started, however deep;
//! - [`ShellProcess::terminate`] returns only once no live process of the group
//!   remains (or it gave up after TERM, a grace period and KILL, and logged it);
//! - dropping a `ShellProcess` kills whatever is left of its group, so a
//!   cancelled tool call or a dropped manager leaks no processes.
//!

use super::output::OutputBuffer;
use crate::environment::{Environment, EnvironmentError, Process, ProcessControl, Program, SpawnOptions};
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

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
pub struct ShellProcess {
    control: Arc<dyn ProcessControl>,
    output: Arc<Mutex<OutputBuffer>>,
    status: watch::Receiver<ShellStatus>,
}

impl std::fmt::Debug for ShellProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellProcess").field("status", &*self.status.borrow()).finish_non_exhaustive()
    }
}

impl ShellProcess {
    /// Starts `cmd` through the environment's shell in `cwd` (default: the
    /// workspace), keeping at most `output_cap` bytes of its newest output.
    pub async fn spawn(
        environment: &dyn Environment,
        cmd: &str,
        cwd: Option<&str>,
        output_cap: usize,
    ) -> Result<ShellProcess, EnvironmentError> {
        let options = SpawnOptions { cwd: cwd.map(str::to_string), ..SpawnOptions::default() };
        let mut process = environment.spawn(Program::Shell(format!("exec 2>&1\n{cmd}")), options).await?;
        let io = process.take_io();
        drop(io.stdin); // closed: commands read EOF, as from /dev/null
        let control = process.control();
        let output = Arc::new(Mutex::new(OutputBuffer::new(output_cap)));
        let (status_tx, status) = watch::channel(ShellStatus::Running);
        tokio::spawn(supervise(process, io.stdout, io.stderr, output.clone(), status_tx).in_current_span());
        Ok(ShellProcess { control, output, status })
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
        if self.control.is_running() {
            self.control.signal(false);
        }
        if !self.wait_until_gone(KILL_GRACE).await {
            self.control.signal(true);
            if !self.wait_until_gone(REAP_WAIT).await {
                tracing::warn!("a shell's processes are still alive after KILL");
            }
        }
        self.status()
    }

    async fn wait_until_gone(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.status() != ShellStatus::Running && !self.control.is_running() {
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
        if self.control.is_running() {
            tracing::debug!("killing what is left of a shell");
            self.control.signal(true);
        }
    }
}

/// Pumps output until the pipe closes, reaps the shell, publishes its status.
/// Output that processes left behind keep writing is read for [`DRAIN_GRACE`]
/// after the shell exits, then the pipe is closed.
async fn supervise(
    mut process: Box<dyn Process>,
    stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    output: Arc<Mutex<OutputBuffer>>,
    status: watch::Sender<ShellStatus>,
) {
    enum First {
        Exited(std::io::Result<i32>),
        Drained,
    }
    // stderr is already in stdout (`exec 2>&1`); whatever an environment still
    // sends there is kept too.
    let pump = async {
        tokio::join!(pump(stdout, &output), pump(stderr, &output));
    };
    tokio::pin!(pump);
    let first = tokio::select! {
        exit = process.wait() => First::Exited(exit),
        () = &mut pump => First::Drained,
    };
    let exit = match first {
        First::Exited(exit) => {
            let _ = tokio::time::timeout(DRAIN_GRACE, &mut pump).await;
            exit
        }
        First::Drained => process.wait().await,
    };
    lock(&output).finish();
    let code = exit.unwrap_or_else(|error| {
        tracing::warn!(%error, "could not reap a shell");
        -1
    });
    let _ = status.send(ShellStatus::Exited(code));
}

async fn pump(pipe: Option<Box<dyn AsyncRead + Send + Unpin>>, output: &Mutex<OutputBuffer>) {
    let Some(mut pipe) = pipe else { return };
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

fn lock(output: &Mutex<OutputBuffer>) -> MutexGuard<'_, OutputBuffer> {
    // A panic mid-push leaves at worst a partial character; the text is usable.
    output.lock()
}
