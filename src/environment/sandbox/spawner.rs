//! The threads that fork every sandbox, alive as long as the gateway.
//!
//! The sandbox's outer process (A in `child.rs`) asks for `SIGKILL` when its
//! parent dies (`PR_SET_PDEATHSIG`), so that a SIGKILLed or crashed gateway
//! takes its sandboxes with it. The kernel's "parent" there is the *thread*
//! that forked: a sandbox forked from a tokio blocking thread would be
//! killed when that thread retires after ten idle seconds, however long its
//! command still had to run. So the forks happen here, on threads that
//! never end: they leave only with the process.
//!
//! A fixed few, not one: a spawn blocks until the command's `exec` (the
//! whole sandbox is built in between), and one slow build must not hold up
//! every other session's commands.

use super::error::SandboxError;
use parking_lot::Mutex;

/// How many spawner threads there are.
const THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

static JOBS: Mutex<Option<flume::Sender<Job>>> = Mutex::new(None);

/// Runs `job` (a fork) on a spawner thread, inside the caller's tokio
/// runtime (tokio's `Command::spawn` registers the child with it), and
/// returns its result.
pub async fn run<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> Result<T, SandboxError> {
    let runtime = tokio::runtime::Handle::current();
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _entered = runtime.enter();
        let _ = done.send(job());
    });
    jobs()?.send(job).map_err(|_| stopped())?;
    // A job that panicked dropped its sender.
    result.await.map_err(|_| stopped())
}

/// The queue, with its threads started on first use.
fn jobs() -> Result<flume::Sender<Job>, SandboxError> {
    let mut jobs = JOBS.lock();
    if let Some(sender) = jobs.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, receiver) = flume::unbounded::<Job>();
    for n in 0..THREADS {
        let receiver = receiver.clone();
        std::thread::Builder::new()
            .name(format!("bub-sandbox-spawner-{n}"))
            .spawn(move || {
                let _span = tracing::info_span!("sandbox.spawner", n).entered();
                // Ends only when the sender is gone, which it never is.
                while let Ok(job) = receiver.recv() {
                    // A panicking job must not end the thread: every sandbox it forked would die.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .map_err(|source| SandboxError::Setup { step: "starting the sandbox spawner threads".into(), source })?;
    }
    *jobs = Some(sender.clone());
    Ok(sender)
}

fn stopped() -> SandboxError {
    SandboxError::Setup {
        step: "handing the spawn to a spawner thread".into(),
        source: std::io::Error::other("the spawner thread failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_on_long_lived_named_threads() {
        let name = run(|| std::thread::current().name().map(String::from)).await.unwrap();
        assert!(name.is_some_and(|name| name.starts_with("bub-sandbox-spawner-")));
        let panicked = run(|| panic!("a job that panics")).await;
        assert!(panicked.is_err());
        assert_eq!(run(|| 7).await.unwrap(), 7, "the thread survived the panic");
    }
}
