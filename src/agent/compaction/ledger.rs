//! What the agent remembers between runs to decide compaction cheaply: per
//! session, the tokens its context held after the last run (so a run counts
//! only the entries it wrote, not the whole context again), which sessions
//! are being compacted, and the background tasks to wait for.

use super::{CompactionSettings, Trigger};
use crate::agent::runtime::Agent;
use crate::message::tokens::{MESSAGE_OVERHEAD, TokenCounter};
use crate::model::Usage;
use crate::tape::{Entry, EntryKind, Tape, TapeResult, entry_tokens};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// How long a turn waits for a compaction of its session before it goes on
/// without it (the overflow handoff is still there).
const WAIT_FOR_COMPACTION: Duration = Duration::from_secs(120);

/// The agent's compaction state.
pub(crate) struct Compactions {
    pub settings: CompactionSettings,
    tallies: Mutex<HashMap<String, Tally>>,
    running: Mutex<HashMap<String, Arc<Notify>>>,
    tasks: TaskTracker,
}

/// A session's context as last counted.
#[derive(Debug, Clone, Copy)]
struct Tally {
    /// The newest entry counted.
    last_id: u64,
    counted: Counted,
}

/// Tokens counted, by part.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counted {
    /// The context's entries.
    pub context: u64,
    /// The system prompt and the tool schemas.
    pub overhead: u64,
}

impl Counted {
    pub fn total(&self) -> u64 {
        self.context + self.overhead
    }
}

/// What a run leaves for the compaction check.
pub(crate) struct RunEnd<'a> {
    pub tape: &'a Tape,
    /// `provider:model` of the run.
    pub spec: &'a str,
    /// The agent's settings with the run's overrides.
    pub settings: CompactionSettings,
    /// The usage of the run's last model call.
    pub usage: Option<Usage>,
    /// What the merge appended to the tape.
    pub appended: &'a [Entry],
    pub reset: bool,
    pub system: Option<&'a str>,
}

impl Compactions {
    pub fn new(settings: CompactionSettings) -> Compactions {
        Compactions { settings, tallies: Mutex::default(), running: Mutex::default(), tasks: TaskTracker::new() }
    }

    pub async fn settle(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        self.tasks.reopen();
    }

    /// Adds a run's entries to the session's tally when they follow what was
    /// counted; otherwise (a restart, an anchor, another writer) forgets it,
    /// so the next check counts afresh.
    fn extend(&self, session: &str, counter: &TokenCounter, appended: &[Entry], reset: bool) -> Option<Counted> {
        let mut tallies = self.tallies.lock();
        let (Some(first), Some(last)) = (appended.first(), appended.last()) else {
            return tallies.get(session).map(|t| t.counted);
        };
        let anchored = appended.iter().any(|e| e.kind == EntryKind::Anchor && e.in_context());
        match tallies.get_mut(session) {
            Some(tally) if !reset && !anchored && tally.last_id + 1 == first.id => {
                tally.counted.context += appended.iter().map(|e| entry_tokens(counter, e)).sum::<u64>();
                tally.last_id = last.id;
                Some(tally.counted)
            }
            _ => {
                tallies.remove(session);
                None
            }
        }
    }

    fn remember(&self, session: &str, entries: &[Entry], last_id: Option<u64>, counted: Counted) {
        let Some(last) = entries.iter().map(|e| e.id).chain(last_id).max() else { return };
        let tally = Tally { last_id: last, counted };
        self.tallies.lock().insert(session.to_string(), tally);
    }

    fn forget(&self, session: &str) {
        self.tallies.lock().remove(session);
    }

    /// Marks `session` as being compacted; `None` when it already is.
    fn start(&self, session: &str) -> Option<Running<'_>> {
        let mut running = self.running.lock();
        if running.contains_key(session) {
            return None;
        }
        running.insert(session.to_string(), Arc::new(Notify::new()));
        Some(Running { compactions: self, session: session.to_string() })
    }

    fn is_running(&self, session: &str) -> bool {
        self.running.lock().contains_key(session)
    }

    /// The tally's last count for `session`, when it has one.
    fn last_count(&self, session: &str) -> Option<u64> {
        self.tallies.lock().get(session).map(|t| t.counted.total())
    }
}

/// A compaction under way; dropping it lets waiting turns go on.
pub(crate) struct Running<'a> {
    compactions: &'a Compactions,
    session: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let notify = self.compactions.running.lock().remove(&self.session);
        if let Some(notify) = notify {
            notify.notify_waiters();
        }
        self.compactions.forget(&self.session);
    }
}

impl Agent {
    /// After a run: updates the session's count and starts a compaction in
    /// the background when the next context would pass `compact_at`.
    pub(crate) async fn after_run(&self, end: RunEnd<'_>) {
        let session = end.tape.name().as_str().to_string();
        if end.tape.name().is_temporary() {
            return;
        }
        let compactions = &self.inner.compactions;
        let counter = TokenCounter::for_model(end.spec);
        let counted = match compactions.extend(&session, &counter, end.appended, end.reset) {
            Some(counted) => counted,
            None => match self.count_context(end.tape, end.spec, end.system, end.appended.last().map(|e| e.id)).await {
                Ok(counted) => counted,
                Err(error) => {
                    tracing::warn!(session = %session, %error, "cannot count the context for compaction");
                    return;
                }
            },
        };
        let reported = end.usage.map_or(0, |u| u.prompt_tokens + u.completion_tokens);
        let estimate = counted.total().max(reported);
        let budget = end.settings.budget(end.settings.window_for(end.spec), counted.overhead);
        let (threshold, window, fixed) = (budget.threshold, budget.window, budget.fixed);
        tracing::debug!(session = %session, estimate, threshold, window, fixed, "context estimate");
        if estimate < threshold || !end.settings.auto {
            return;
        }
        if compactions.is_running(&session) {
            return;
        }
        let (agent, tape, spec, settings) = (self.clone(), end.tape.clone(), end.spec.to_string(), end.settings);
        let compacting = async move {
            match agent.compact_tape(&tape, &spec, &settings, Trigger::Auto).await {
                Ok(Some(done)) => {
                    tracing::info!(session = %tape.name(), anchor = done.anchor_id, covers = ?done.covers, estimate, "context compacted")
                }
                Ok(None) => tracing::debug!(session = %tape.name(), "nothing to compact"),
                Err(error) => {
                    tracing::warn!(session = %tape.name(), %error, "compaction failed; trying again after the next turn")
                }
            }
        };
        // In the span of the run it follows (its model call is that run's too).
        compactions.tasks.spawn(compacting.in_current_span());
    }

    /// Counts the whole context of `tape` (and remembers it for the next run).
    /// `last_id`: the tape's last entry, when the caller knows it (the run just
    /// appended it): the context's own last entry is often not the tape's (a
    /// `run` event follows it), and the next run's tally must start where the
    /// tape ends, or every run would count the whole context again.
    pub(crate) async fn count_context(
        &self,
        tape: &Tape,
        spec: &str,
        system: Option<&str>,
        last_id: Option<u64>,
    ) -> TapeResult<Counted> {
        let counter = TokenCounter::for_model(spec);
        let entries = tape.scope_or_whole(crate::tape::TapeQuery::context()).await?;
        let context = entries.iter().map(|e| entry_tokens(&counter, e)).sum();
        let counted = Counted { context, overhead: self.fixed_tokens(tape, &counter, system).await? };
        self.inner.compactions.remember(tape.name().as_str(), &entries, last_id, counted);
        Ok(counted)
    }

    /// The fixed part of `tape`'s requests, counted with `counter` (the
    /// model's, as the context is): the tool schemas and `system`, else the
    /// newest system prompt on the tape.
    pub(crate) async fn fixed_tokens(
        &self,
        tape: &Tape,
        counter: &TokenCounter,
        system: Option<&str>,
    ) -> TapeResult<u64> {
        let recorded = match system {
            Some(_) => None,
            None => tape.system_prompt().await?,
        };
        Ok(self.fixed_part(counter, system.or(recorded.as_deref())))
    }

    /// The tool schemas and `system`, counted with `counter`. The schemas as
    /// a turn's first request sends them under the agent's schema budget
    /// (compact past it; a run's own budget may differ, which this ignores).
    pub(crate) fn fixed_part(&self, counter: &TokenCounter, system: Option<&str>) -> u64 {
        let registry = self.tools();
        let offered: Vec<&crate::tools::Tool> = registry.model_tools().collect();
        let tools = super::super::tool_budget::sent_tokens(&offered, self.inner.tool_schema_budget, counter);
        tools + system.map_or(0, |s| counter.count(s) + MESSAGE_OVERHEAD)
    }

    /// Runs `compact` unless the session is being compacted already (then
    /// waits for that one and returns `Ok(None)`).
    pub(crate) async fn compact_once(
        &self,
        tape: &Tape,
        compact: impl std::future::Future<Output = Result<Option<super::Compaction>, super::CompactionError>>,
    ) -> Result<Option<super::Compaction>, super::CompactionError> {
        let session = tape.name().as_str();
        match self.inner.compactions.start(session) {
            Some(_running) => compact.await,
            None => {
                self.wait_for_compaction(session).await;
                Ok(None)
            }
        }
    }

    /// Before a run: waits for a compaction of `session` under way when the
    /// context as last counted would not fit the window otherwise.
    pub(crate) async fn wait_if_compacting(&self, session: &str, spec: &str, settings: &CompactionSettings) {
        let compactions = &self.inner.compactions;
        let window = settings.window_for(spec);
        let full = compactions.last_count(session).is_none_or(|tokens| tokens * 10 >= window * 9);
        if full {
            self.wait_for_compaction(session).await;
        }
    }

    async fn wait_for_compaction(&self, session: &str) {
        let notify = self.inner.compactions.running.lock().get(session).cloned();
        let Some(notify) = notify else { return };
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self.inner.compactions.is_running(session) {
            return;
        }
        if tokio::time::timeout(WAIT_FOR_COMPACTION, notified).await.is_err() {
            tracing::warn!(session, "a compaction is taking long; the turn goes on without it");
        }
    }
}
