//! Steering: messages that arrive for a tape while a run on it is going on are
//! handed to that run before its next model step instead of starting another.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Default)]
pub(crate) struct Steering {
    active: Arc<Mutex<HashMap<String, Inbox>>>,
}

#[derive(Default)]
struct Inbox {
    runs: usize,
    messages: Vec<String>,
    /// A run decided to finish with nothing pending: later messages are
    /// refused (the caller starts a new turn) rather than left unread.
    closed: bool,
}

/// Keeps a tape's inbox open while a run holds it.
pub(crate) struct ActiveRun {
    steering: Steering,
    tape: String,
}

impl Steering {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Inbox>> {
        self.active.lock()
    }

    pub(crate) fn open(&self, tape: &str) -> ActiveRun {
        let mut active = self.lock();
        let inbox = active.entry(tape.to_string()).or_default();
        inbox.runs += 1;
        inbox.closed = false;
        drop(active);
        ActiveRun { steering: self.clone(), tape: tape.to_string() }
    }

    /// Queues `message` for the run on `tape`; false when no run is active
    /// or the run is finishing (so the message would not be read).
    pub(crate) fn steer(&self, tape: &str, message: String) -> bool {
        match self.lock().get_mut(tape) {
            Some(inbox) if !inbox.closed => {
                inbox.messages.push(message);
                true
            }
            _ => false,
        }
    }
}

impl ActiveRun {
    pub(crate) fn drain(&self) -> Vec<String> {
        self.steering.lock().get_mut(&self.tape).map(|inbox| std::mem::take(&mut inbox.messages)).unwrap_or_default()
    }

    /// Closes the inbox and takes what waits in it, at once: a run that
    /// stops here hands those back, and nothing more can arrive unread.
    pub(crate) fn close(&self) -> Vec<String> {
        match self.steering.lock().get_mut(&self.tape) {
            Some(inbox) => {
                inbox.closed = true;
                std::mem::take(&mut inbox.messages)
            }
            None => Vec::new(),
        }
    }

    /// True when steered messages wait (the run continues with them);
    /// otherwise closes the inbox, atomically, so none can arrive unread.
    pub(crate) fn pending_or_close(&self) -> bool {
        let mut active = self.steering.lock();
        match active.get_mut(&self.tape) {
            Some(inbox) if !inbox.messages.is_empty() => true,
            Some(inbox) => {
                inbox.closed = true;
                false
            }
            None => false,
        }
    }
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        let mut active = self.steering.lock();
        if let Some(inbox) = active.get_mut(&self.tape) {
            inbox.runs -= 1;
            if inbox.runs == 0 {
                active.remove(&self.tape);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finishing_run_refuses_messages_it_would_not_read() {
        let steering = Steering::default();
        assert!(!steering.steer("t", "nobody is running".into()));
        let run = steering.open("t");
        assert!(steering.steer("t", "read at the next step".into()));
        assert!(run.pending_or_close(), "a waiting message keeps the run going");
        assert_eq!(run.drain(), vec!["read at the next step".to_string()]);
        assert!(!run.pending_or_close(), "nothing waits: the run finishes");
        assert!(!steering.steer("t", "too late".into()), "refused, so the caller starts a new turn");
        drop(run);
        let next = steering.open("t");
        assert!(steering.steer("t", "a new run reads it".into()));
        drop(next);
    }
}
