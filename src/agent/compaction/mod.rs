//! Proactive compaction: a session's context is summarised before it fills
//! the model's window, so a chat that never ends costs the same per turn at
//! its thousandth turn as at its first.
//!
//! After every run the agent estimates the tokens the next turn's context
//! will hold (the entries from the last anchor on, the system prompt and the
//! tool schemas; see [`ContextEstimate`]). When that passes the
//! [`Budget`]'s threshold ([`CompactionSettings::compact_at`] of the window,
//! unless the system prompt and the tool schemas leave too little below it),
//! a background task (the reply is already on its way: nobody waits for it)
//! asks the session's model for a summary of the older part, with the prompt
//! in `prompt.md`, and writes two things:
//! 1. an event [`SUMMARY_EVENT`] `{summary, covers, keep_from, base, model,
//!    usage, elapsed_ms, trigger, max_tokens, cut_from_tokens}`: the summary
//!    and what it cost (`cut_from_tokens` when the model's answer passed
//!    `max_tokens` and was cut to it);
//! 2. an anchor [`COMPACTION_ANCHOR`] whose state is `{summary, covers:
//!    [first id, last id], keep_from}`.
//!
//! The next context is that anchor (read as the summary, see
//! [`crate::tape::context`]), then the most recent turns verbatim (from
//! `keep_from`, within [`Budget::keep`]), then what
//! came after: the tape is only appended to, and everything before stays
//! there for `tape.search`. A crash between the two writes leaves the event
//! alone, which no context reads; the next compaction of the same stretch
//! uses that summary instead of asking the model again. A failed summary call
//! (429, timeout, an empty answer) is recorded as a [`FAILURE_EVENT`] and
//! tried again after the next turn; the context meanwhile stays as it was.
//! A compaction that leaves room for fewer than [`MIN_TURNS_BETWEEN`]
//! turns says so once per tape and window ([`WARNING_EVENT`], shown by
//! `tape.info`, and a log warning).
//! A turn that starts while a compaction runs waits for it only when its
//! context would not fit otherwise; the overflow handoff
//! ([`crate::agent::OVERFLOW_ANCHOR`]) stays the last resort, and it too
//! writes a summary when the model gives one.

mod budget;
mod cap;
mod ledger;
mod room;
mod summary;
mod tool;

pub use budget::Budget;
pub(crate) use ledger::{Compactions, RunEnd};
pub use room::{MIN_TURNS_BETWEEN, WARNING_EVENT};
pub use tool::tape_compact_tool;

use super::runtime::Agent;
use crate::model::{ModelError, Usage};
use crate::tape::TapeError;
use serde::Serialize;

pub use crate::tape::COMPACTION_ANCHOR;
/// The event that holds a compaction's summary and its usage.
pub const SUMMARY_EVENT: &str = "compaction.summary";
/// The event a failed compaction leaves.
pub const FAILURE_EVENT: &str = "compaction.failed";
/// The default [`CompactionSettings::compact_at`].
pub const DEFAULT_COMPACT_AT: f64 = 0.75;

/// When and how much to compact.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionSettings {
    /// The context window of every model, over the family defaults of
    /// [`crate::model::window`] (`[agent] context_window`,
    /// `BUB_CONTEXT_WINDOW`); a run's own ([`crate::agent::RunOptions::context_window`]) wins.
    pub context_window: Option<u64>,
    /// Compact when the next context would pass this fraction of the window
    /// (above 0, at most 1; default 0.75), or, where the system prompt and
    /// the tool schemas leave less than a quarter of the window below it,
    /// when the context passes them plus that quarter (see [`Budget`]).
    pub compact_at: f64,
    /// Tokens of the most recent turns kept verbatim after the summary;
    /// `None`: a third of the conversation's room (see [`Budget`]). Never
    /// more than half of it.
    pub keep_recent_tokens: Option<u64>,
    /// Compact on its own after runs (default true); `,tape.compact` and the
    /// overflow handoff compact either way.
    pub auto: bool,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            context_window: None,
            compact_at: DEFAULT_COMPACT_AT,
            keep_recent_tokens: None,
            auto: true,
        }
    }
}

/// What one run (one chat, through its policy and the gateway's `[agent]`
/// table) sets over the agent's [`CompactionSettings`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CompactionOverrides {
    pub context_window: Option<u64>,
    pub compact_at: Option<f64>,
    pub keep_recent_tokens: Option<u64>,
}

impl CompactionSettings {
    /// These settings with a run's overrides.
    pub fn with(&self, overrides: &CompactionOverrides) -> CompactionSettings {
        CompactionSettings {
            context_window: overrides.context_window.or(self.context_window),
            compact_at: overrides.compact_at.unwrap_or(self.compact_at),
            keep_recent_tokens: overrides.keep_recent_tokens.or(self.keep_recent_tokens),
            auto: self.auto,
        }
    }

    /// The window of `model`: the configured one, else the family's.
    pub fn window_for(&self, model: &str) -> u64 {
        crate::model::window::window_of(model, self.context_window)
    }
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The context passed `compact_at` after a run.
    Auto,
    /// An operator's `,tape.compact`.
    Command,
    /// The model refused the context as too long.
    Overflow,
}

/// What a compaction wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// The id of its anchor.
    pub anchor_id: u64,
    /// The first and last ids the summary covers.
    pub covers: (u64, u64),
    /// The first entry kept verbatim, when any was.
    pub keep_from: Option<u64>,
    pub summary: String,
    /// What the summary call cost (`None` when reused or not reported).
    pub usage: Option<Usage>,
    /// The summary came from an earlier attempt that did not write its anchor.
    pub reused: bool,
}

/// Why a compaction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("the summary call failed: {0}")]
    Model(#[from] ModelError),
    #[error("the model's summary was empty")]
    EmptySummary,
    #[error(transparent)]
    Tape(#[from] TapeError),
    #[error("no model configured: set BUB_MODEL to provider:model, e.g. openai:gpt-4o-mini")]
    NoModel,
}

/// How full a session's context is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ContextEstimate {
    /// The estimated tokens of the next request (system prompt, tool schemas
    /// and the context), the larger of what was counted and what the
    /// provider last reported.
    pub tokens: u64,
    /// The model's window.
    pub window: u64,
    /// Where compaction starts (see [`Budget::threshold`]).
    pub threshold: u64,
    /// The system prompt and the tool schemas, in `tokens`.
    pub fixed: u64,
    /// Counted with the model's own tokenizer (else the calibrated estimate).
    pub exact: bool,
}

impl Agent {
    /// Compacts `tape` now, whatever its size (`,tape.compact`), with the
    /// summary from `model` (else the session's `,model`, else the agent's
    /// default). `Ok(None)`: there is nothing older than the recent turns to
    /// summarise yet.
    ///
    /// ```
    /// use bub::agent::Agent;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let agent = Agent::builder().build();
    /// // A fresh tape has nothing to summarise: no model is asked.
    /// assert!(agent.compact("team-chat", Some("any:model")).await.unwrap().is_none());
    /// # });
    /// ```
    pub async fn compact(&self, tape: &str, model: Option<&str>) -> Result<Option<Compaction>, CompactionError> {
        let handle = self.tape(tape)?;
        let spec = match model {
            Some(model) => model.to_string(),
            None => self.session_model(&handle).await?.ok_or(CompactionError::NoModel)?,
        };
        let settings = self.inner.compactions.settings.clone();
        self.compact_tape(&handle, &spec, &settings, Trigger::Command).await
    }

    /// How full `tape`'s context is for `model` (else the session's model),
    /// counted afresh (on a tape no run has opened, all of it).
    ///
    /// ```
    /// use bub::agent::Agent;
    /// use bub::tape::NewEntry;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let agent = Agent::builder().build();
    /// let fresh = agent.context_estimate("team-chat", Some("any:model")).await.unwrap();
    /// agent.tape("team-chat").unwrap().append(NewEntry::chat("user", "a long question ".repeat(50))).await.unwrap();
    /// let grown = agent.context_estimate("team-chat", Some("any:model")).await.unwrap();
    /// assert!(grown.tokens > fresh.tokens + 100);
    /// # });
    /// ```
    pub async fn context_estimate(&self, tape: &str, model: Option<&str>) -> Result<ContextEstimate, TapeError> {
        let handle = self.tape(tape)?;
        let spec = match model {
            Some(model) => model.to_string(),
            None => self.session_model(&handle).await?.unwrap_or_default(),
        };
        let settings = &self.inner.compactions.settings;
        let counted = self.count_context(&handle, &spec, None, None).await?;
        let budget = settings.budget(settings.window_for(&spec), counted.overhead);
        Ok(ContextEstimate {
            tokens: counted.total(),
            window: budget.window,
            threshold: budget.threshold,
            fixed: budget.fixed,
            exact: crate::message::tokens::TokenCounter::for_model(&spec).is_exact(),
        })
    }

    /// Waits until the compactions running in the background are done (a
    /// one-shot program calls this before it exits, so a summary it paid for
    /// is not lost).
    pub async fn settle(&self) {
        self.inner.compactions.settle().await;
    }

    /// The session's `,model`, else the agent's default.
    pub(crate) async fn session_model(&self, tape: &crate::tape::Tape) -> Result<Option<String>, TapeError> {
        let switches = super::settings::read(tape).await?.switches;
        Ok(switches.model.or_else(|| self.inner.default_model.clone()))
    }
}
