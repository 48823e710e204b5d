//! The tasks running now — turns, and deliveries of replies — so that a stop
//! can give them a grace period and then abandon the rest instead of waiting
//! for a model call of minutes.
//!
//! Deliveries have a set of their own, stopped after the turns: a turn
//! abandoned while its reply is being sent leaves the delivery running, so a
//! POST in flight is finished and recorded, never cut (a cut one would be
//! sent again by the next start, though it may have arrived).
//!
//! Abandoning is safe because a turn only reaches its tape when its fork is
//! merged, in one transaction: an abandoned turn left no trace there, its
//! messages have no outcome in the inbox, and the next start runs it again.
//! Dropping it also drops the reply sinks of its messages, so a caller still
//! waiting (webhook `sync` or `sse`) is answered 503 at once, and told to
//! send the same message id again.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tracing::Instrument;

#[derive(Default)]
pub(crate) struct RunningTasks {
    state: Mutex<State>,
    /// Woken whenever a task ends.
    ended: Notify,
}

#[derive(Default)]
struct State {
    next: u64,
    running: HashMap<u64, AbortHandle>,
    /// Set once a stop began: no new task starts.
    closed: bool,
}

/// Removes its task from the set when the task ends or is aborted.
struct Registration<'a> {
    tasks: &'a RunningTasks,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.tasks.lock().running.remove(&self.id);
        self.tasks.ended.notify_waiters();
    }
}

impl RunningTasks {
    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Runs `task` on its own tokio task, in the caller's span, unless a
    /// stop began: then `task` is dropped unstarted (a turn's messages, or a
    /// reply, wait in the store for the next start) and this returns false.
    pub(crate) fn spawn<F>(self: &std::sync::Arc<Self>, task: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        let id = state.next;
        state.next += 1;
        let tasks = self.clone();
        // The task cannot deregister before it is registered: that needs this lock.
        let handle = tokio::spawn(
            async move {
                let _registration = Registration { tasks: &tasks, id };
                task.await;
            }
            .in_current_span(),
        );
        state.running.insert(id, handle.abort_handle());
        true
    }

    /// Stops new tasks, waits up to `grace` for the running ones, then aborts
    /// those still going; returns how many were abandoned.
    pub(crate) async fn stop(&self, grace: Duration) -> usize {
        self.lock().closed = true;
        let all_ended = async {
            loop {
                let ended = self.ended.notified();
                if self.lock().running.is_empty() {
                    return;
                }
                ended.await;
            }
        };
        if tokio::time::timeout(grace, all_ended).await.is_ok() {
            return 0;
        }
        let abandoned: Vec<AbortHandle> = self.lock().running.drain().map(|(_, task)| task).collect();
        for task in &abandoned {
            task.abort();
        }
        abandoned.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn a_stop_waits_for_short_turns_abandons_long_ones_and_refuses_new_ones() {
        let turns = Arc::new(RunningTasks::default());
        let (short_done, short_seen) = tokio::sync::oneshot::channel();
        assert!(turns.spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = short_done.send(());
        }));
        let (long_dropped, long_seen) = tokio::sync::oneshot::channel::<()>();
        assert!(turns.spawn(async move {
            let _dropped_with_the_turn = long_dropped;
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }));

        assert_eq!(turns.stop(Duration::from_secs(10)).await, 1, "the long turn is abandoned");
        assert!(short_seen.await.is_ok(), "the short turn finished");
        assert!(long_seen.await.is_err(), "the long turn was dropped, and with it what it held");
        assert!(!turns.spawn(async {}), "no turn starts once a stop began");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_with_nothing_running_returns_at_once() {
        let turns = Arc::new(RunningTasks::default());
        let started = tokio::time::Instant::now();
        assert_eq!(turns.stop(Duration::from_secs(10)).await, 0);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
