//! Per-session workers: debounce, one turn at a time, and the busy rule.
//!
//! Each busy session has one task owning its state (pending batch, running
//! turn, queue), fed through a channel; it leaves as soon as it has nothing
//! batched, running or queued, keeping only when the session was last
//! addressed (for the active window) in a small map, so ten thousand quiet
//! sessions cost a map entry each rather than a task. Sends happen under the
//! map's lock and the worker only leaves when its channel is empty under that
//! same lock, so no message falls between a leaving worker and its successor.

use super::turn::{self, TurnShare};
use super::{Inner, Message, outcome};
use super::{admission, edit};
use crate::config::{BusyRule, EditRule};
use crate::tape::provenance::least_trusted;
use bub_channel::{Delivery, OutcomeStatus};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

/// How long a session's last addressed moment is remembered after its worker
/// left: longer than any sensible active window.
const REMEMBER_ACTIVE: Duration = Duration::from_secs(3600);

/// What a session's worker is told.
pub(crate) enum SessionInput {
    /// A prompt message, and whether it addressed the bot.
    Prompt { message: Message, addressed: bool },
    /// An edit of a message of this session (see `super::edit`), and whether it addresses the bot.
    Edit { message: Message, addressed: bool },
}

/// The live session workers, by session id.
#[derive(Default)]
pub(crate) struct Sessions {
    workers: Mutex<Workers>,
}

#[derive(Default)]
struct Workers {
    live: HashMap<String, mpsc::UnboundedSender<Box<SessionInput>>>,
    /// When sessions without a worker were last addressed.
    last_active: HashMap<String, Instant>,
    /// `last_active` is pruned when it grows past this.
    prune_at: usize,
}

impl Workers {
    fn remember(&mut self, session: &str, at: Instant) {
        self.last_active.insert(session.to_string(), at);
        if self.last_active.len() > self.prune_at {
            self.last_active.retain(|_, at| at.elapsed() < REMEMBER_ACTIVE);
            self.prune_at = (self.last_active.len() * 2).max(1024);
        }
    }
}

impl Sessions {
    /// Inputs travel boxed: an unbounded channel allocates its slots in blocks,
    /// and an idle session should cost pointers, not whole messages.
    fn send(&self, inner: &Arc<Inner>, session: String, input: SessionInput) {
        let input = Box::new(input);
        let mut workers = self.workers.lock();
        let input = match workers.live.get(&session) {
            Some(tx) => match tx.send(input) {
                Ok(()) => return,
                Err(returned) => returned.0,
            },
            None => input,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(input);
        workers.live.insert(session.clone(), tx);
        metrics::gauge!("bub_sessions_active").set(workers.live.len() as f64);
        let last_active = workers.last_active.remove(&session);
        // A span of its own, not the message's: the worker outlives the
        // request that started it and runs the turns of later ones.
        let span = tracing::info_span!(parent: None, "session_worker", session = %session);
        let worker = Worker::new(inner.clone(), session, rx, last_active);
        tokio::spawn(worker.run().instrument(span));
    }

    /// Removes `session`'s worker if it has nothing queued, remembering when
    /// the session was last addressed; true when removed.
    fn leave(
        &self,
        session: &str,
        rx: &mpsc::UnboundedReceiver<Box<SessionInput>>,
        last_active: Option<Instant>,
    ) -> bool {
        let mut workers = self.workers.lock();
        if !rx.is_empty() {
            return false;
        }
        workers.live.remove(session);
        if let Some(at) = last_active {
            workers.remember(session, at);
        }
        metrics::gauge!("bub_sessions_active").set(workers.live.len() as f64);
        true
    }
}

/// Routes an admitted-or-not message: refusals end here, commands run at
/// once, prompts go to their session's worker.
pub(crate) async fn dispatch(inner: &Arc<Inner>, message: Message) {
    let policy = message.policy.clone();
    let Some(message) = super::pairing::admit(inner, message).await else { return };
    inner.note_operator_chat(&message);
    if message.inbound.edit.is_some() {
        let session = message.session.clone();
        // Never a command: the session's worker knows whether its message was answered.
        let addressed = admission::is_addressed(&message.inbound, &policy);
        inner.sessions.send(inner, session, SessionInput::Edit { message, addressed });
        return;
    }
    let Some(message) = super::platform::read(inner, message).await else { return };
    let session = message.session.clone();
    if let Some(prefix) = inner.agent.command_prefix()
        && let Some(line) = crate::command::parse_command(&message.inbound.text, prefix)
    {
        let name = line.map(|line| line.name).unwrap_or_default();
        // An unknown name is the shell fallback: it can do what `bash` does.
        let tools = inner.agent.tools();
        let capabilities = tools
            .get(&name)
            .or_else(|| tools.get("bash"))
            .map_or(crate::tools::Capabilities::ALL, |t| t.capabilities());
        if let Err(denial) = policy.may_run_command(&message.user, &name, capabilities) {
            tracing::info!(session = %session, user = %message.user, command = %name, "command refused");
            turn::conclude(inner, vec![message], outcome(OutcomeStatus::Refused, denial.to_string(), &session), true)
                .await;
            return;
        }
        // Commands bypass debounce and the queue.
        let _ = turn::start(inner, &session, vec![message]);
        return;
    }
    let addressed = admission::is_addressed(&message.inbound, &policy);
    inner.sessions.send(inner, session, SessionInput::Prompt { message, addressed });
}

enum Wake {
    Input(Option<Box<SessionInput>>),
    Flush,
    TurnDone,
}

struct Worker {
    inner: Arc<Inner>,
    session: String,
    rx: mpsc::UnboundedReceiver<Box<SessionInput>>,
    batch: Vec<Message>,
    /// When the pending batch is flushed: after a quiet spell, or at its latest.
    quiet_until: Option<Instant>,
    flush_by: Option<Instant>,
    last_active: Option<Instant>,
    running: Option<Arc<TurnShare>>,
    /// Messages this worker holds (batch and queue), as last added to the gauge.
    counted: i64,
    turn_done: Option<oneshot::Receiver<()>>,
    queue: VecDeque<Message>,
    /// "typing…" while the pending batch waits out the debounce: a batch
    /// holding a message that addresses the bot is a turn for certain. Let
    /// go once the batch is handed on (its turn shows its own).
    typing: Option<super::typing::Typing>,
}

impl Worker {
    fn new(
        inner: Arc<Inner>,
        session: String,
        rx: mpsc::UnboundedReceiver<Box<SessionInput>>,
        last_active: Option<Instant>,
    ) -> Worker {
        Worker {
            inner,
            session,
            rx,
            batch: Vec::new(),
            quiet_until: None,
            flush_by: None,
            last_active,
            running: None,
            counted: 0,
            turn_done: None,
            queue: VecDeque::new(),
            typing: None,
        }
    }

    async fn run(mut self) {
        loop {
            let flush_at = match (self.quiet_until, self.flush_by) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let idle = self.batch.is_empty() && self.running.is_none() && self.queue.is_empty();
            if idle && self.inner.sessions.leave(&self.session, &self.rx, self.last_active) {
                break;
            }
            let wake = {
                let rx = &mut self.rx;
                let turn_done = &mut self.turn_done;
                tokio::select! {
                    input = rx.recv() => Wake::Input(input),
                    _ = tokio::time::sleep_until(flush_at.unwrap_or_else(Instant::now)), if flush_at.is_some() => {
                        Wake::Flush
                    }
                    _ = async {
                        if let Some(done) = turn_done.as_mut() {
                            let _ = done.await;
                        }
                    }, if turn_done.is_some() => Wake::TurnDone,
                }
            };
            match wake {
                // Boxed: the work's futures are large, and an idle worker should be small.
                Wake::Input(Some(input)) => match *input {
                    SessionInput::Prompt { message, addressed } => Box::pin(self.prompt(message, addressed)).await,
                    SessionInput::Edit { message, addressed } => Box::pin(self.edit(message, addressed)).await,
                },
                Wake::Input(None) => break,
                Wake::Flush => Box::pin(self.flush()).await,
                Wake::TurnDone => {
                    self.running = None;
                    self.turn_done = None;
                    self.last_active = Some(Instant::now());
                    let next: Vec<Message> = self.queue.drain(..).collect();
                    if !next.is_empty() {
                        self.start(next);
                    }
                }
            }
            self.count_waiting();
        }
        self.count_waiting();
    }

    /// Keeps `bub_inbound_queue_depth` (messages waiting for a turn, in every session) current.
    fn count_waiting(&mut self) {
        let now = (self.batch.len() + self.queue.len()) as i64;
        if now != self.counted {
            let total = self.inner.waiting.fetch_add(now - self.counted, Ordering::Relaxed) + now - self.counted;
            self.counted = now;
            metrics::gauge!("bub_inbound_queue_depth").set(total as f64);
        }
    }

    async fn prompt(&mut self, message: Message, addressed: bool) {
        let policy = message.policy.clone();
        let quiet = policy.debounce_quiet.value.duration();
        let max_wait = policy.debounce_max_wait.value.duration();
        let active_window = policy.debounce_active_window.value.duration();
        let channel_debounces =
            self.inner.channels.get(&message.inbound.channel).is_some_and(|channel| channel.limits().debounce);
        let debounce = policy.debounce_enabled.value.unwrap_or(channel_debounces) && !quiet.is_zero();
        let now = Instant::now();
        if !addressed {
            // Never a turn of its own: only a message that addresses the bot
            // starts one. A follow-up to an addressed message still waiting in
            // the batch joins it; anything else is kept on the tape as context.
            let in_window = self.last_active.is_some_and(|at| now.duration_since(at) < active_window);
            if debounce && in_window && !self.batch.is_empty() {
                self.batch.push(message);
            } else {
                turn::record_inactive(&self.inner, &self.session, message).await;
            }
            return;
        }
        self.last_active = Some(now);
        if !debounce {
            self.ready(vec![message]).await;
            return;
        }
        if self.typing.is_none() && message.inbound.delivery == Delivery::Channel {
            self.typing = self.inner.show_typing(&message.inbound.channel, &message.inbound.chat);
        }
        self.batch.push(message);
        self.quiet_until = Some(now + quiet);
        self.flush_by.get_or_insert(now + max_wait);
    }

    /// An edit: applied to its message while that waits for a turn, else
    /// answered again or recorded as the policy says (see `super::edit`).
    async fn edit(&mut self, message: Message, addressed: bool) {
        let command = self
            .inner
            .agent
            .command_prefix()
            .is_some_and(|prefix| crate::command::is_command(&message.inbound.text, prefix));
        let waiting =
            self.batch.iter_mut().chain(self.queue.iter_mut()).find(|m| edit::edits(&message.inbound, &m.inbound));
        if let Some(waiting) = waiting
            && !command
        {
            edit::apply(&self.inner, &self.session, waiting, message).await;
        } else if !command && addressed && message.policy.on_edit.value == EditRule::Rerun {
            self.prompt(message, true).await;
        } else {
            turn::record_inactive(&self.inner, &self.session, message).await;
        }
    }

    async fn flush(&mut self) {
        self.quiet_until = None;
        self.flush_by = None;
        let batch = std::mem::take(&mut self.batch);
        if !batch.is_empty() {
            self.ready(batch).await;
        }
        // After the hand-over: a turn started by it holds the chat's hint already.
        self.typing = None;
    }

    /// A batch is ready for a turn: run it, or apply the busy rule.
    async fn ready(&mut self, batch: Vec<Message>) {
        let Some(running) = &self.running else {
            self.start(batch);
            return;
        };
        let busy = batch.last().map(|m| m.policy.busy.value).unwrap_or(BusyRule::Queue);
        match busy {
            // A running turn records what is steered into it with its own
            // provenance: less trusted text waits for a turn of its own.
            BusyRule::Steer if least_trusted(batch.iter().map(|m| m.provenance)) > running.provenance() => {
                self.queue.extend(batch)
            }
            // Files are fetched when a turn starts: a message with files waits for its own.
            BusyRule::Steer if batch.iter().any(|m| !m.inbound.attachments.is_empty()) => self.queue.extend(batch),
            BusyRule::Steer => {
                let text = admission::compose_prompt(batch.iter().map(|m| &m.inbound));
                if self.inner.agent.steer(&self.session, text) {
                    running.join(&self.inner, batch).await;
                } else {
                    self.queue.extend(batch);
                }
            }
            BusyRule::Queue => self.queue.extend(batch),
            BusyRule::Drop => {
                const NOTICE: &str = "I'm still working on the previous message, so this one was dropped. \
                                      Send it again when I have answered.";
                for message in batch {
                    // Kept on the tape, so the next turn sees it; not answered.
                    let _ = turn::record_on_tape(&self.inner, &self.session, &message).await;
                    let reply = message.inbound.delivery == Delivery::Channel;
                    let result = outcome(OutcomeStatus::Dropped, NOTICE, &self.session);
                    turn::conclude(&self.inner, vec![message], result, reply).await;
                }
            }
        }
    }

    fn start(&mut self, batch: Vec<Message>) {
        let (running, done) = turn::start(&self.inner, &self.session, batch);
        self.running = Some(running);
        self.turn_done = Some(done);
    }
}
