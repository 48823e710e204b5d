//! Steering: messages that arrive for a tape while a run on it is going on are
//! handed to that run before its next model step instead of starting another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Clone, Default)]
pub(crate) struct Steering {
    active: Arc<Mutex<HashMap<String, Inbox>>>,
}

#[derive(Default)]
struct Inbox {
    runs: usize,
    messages: Vec<String>,
}

/// Keeps a tape's inbox open while a run holds it.
pub(crate) struct ActiveRun {
    steering: Steering,
    tape: String,
}

impl Steering {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Inbox>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn open(&self, tape: &str) -> ActiveRun {
        self.lock().entry(tape.to_string()).or_default().runs += 1;
        ActiveRun { steering: self.clone(), tape: tape.to_string() }
    }

    /// Queues `message` for the run on `tape`; false when no run is active.
    pub(crate) fn steer(&self, tape: &str, message: String) -> bool {
        match self.lock().get_mut(tape) {
            Some(inbox) => {
                inbox.messages.push(message);
                true
            }
            None => false,
        }
    }
}

impl ActiveRun {
    pub(crate) fn drain(&self) -> Vec<String> {
        self.steering.lock().get_mut(&self.tape).map(|inbox| std::mem::take(&mut inbox.messages)).unwrap_or_default()
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.steering.lock().get(&self.tape).is_some_and(|inbox| !inbox.messages.is_empty())
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
