//! What a run yields: [`StreamEvent`]s on a [`RunStream`].
//!
//! The run itself is a task; the stream is its receiving end. Dropping the
//! stream cancels the run at its next await point (the model stream is dropped,
//! running tools are abandoned and their processes killed) and the run's fork
//! is still merged with an `interrupted` error entry, so what was recorded
//! stays and says how it ended. [`RunStream::cancel`] does the same and waits
//! until it is done. The stream ends only after the merge, so a consumer that
//! reads to the end sees the tape complete.
//!
//! A model answer cut off mid-stream (the connection dropped, or went silent
//! past the timeout) is not an answer: the run yields [`StreamEvent::Cut`],
//! and either asks the model again (its text follows from the start) or ends
//! with an `Error`. [`AnswerText`] keeps the text a consumer should show.

use super::failure::FailureKind;
use crate::model::Usage;
use futures::Stream;
use parking_lot::Mutex;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// One item of a run's output.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A piece of the model's answer.
    Text(String),
    /// A piece of the model's reasoning, where the provider sends it.
    Reasoning(String),
    /// A tool call the model asked for (before it runs).
    ToolCall {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// A tool's result as the model reads it.
    ToolResult {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
    },
    Usage(Usage),
    /// The model's answer was cut off after `partial` streamed (the
    /// connection dropped or went silent): `partial` is not its answer and
    /// is recorded on the tape as an error, never as what the model said.
    /// `retrying`: the model is asked again and its new text follows; else an
    /// `Error` follows and the run ends.
    Cut {
        /// What cut it (`cut`, `timeout`, `connection`…): the kind the run's
        /// `Error` would carry had it not been asked again.
        kind: FailureKind,
        message: String,
        partial: String,
        retrying: bool,
    },
    /// Messages steered into the run ([`Agent::steer`](super::Agent::steer))
    /// that it ended without reading (it failed first): the caller should
    /// start a turn with them. Comes just before the stream ends.
    Unread(Vec<String>),
    /// The run failed; nothing follows but the end of the stream.
    Error {
        kind: FailureKind,
        message: String,
    },
    /// A model step (or a command) ended; `text` is what it said.
    Final {
        step: usize,
        text: String,
    },
}

/// The receiving end of a run.
pub struct RunStream {
    pub(crate) events: mpsc::Receiver<StreamEvent>,
    pub(crate) interruption: Interruption,
    /// The run's task: [`RunStream::cancel`] waits for it (a closed channel
    /// says nothing about whether the run has finished recording).
    pub(crate) task: tokio::task::JoinHandle<Vec<String>>,
}

/// Why a run was cancelled, told by its consumer, read by the run when it
/// records the interruption.
#[derive(Clone, Default)]
pub(crate) struct Interruption(Arc<Mutex<Option<String>>>);

impl Interruption {
    fn set(&self, reason: &str) {
        *self.0.lock() = Some(reason.to_string());
    }

    pub(crate) fn reason(&self) -> String {
        let reason = self.0.lock().clone();
        reason.unwrap_or_else(|| "its consumer stopped reading".to_string())
    }
}

/// The text of a run's answers as a consumer should show it: the deltas in
/// order, less the partial text of an answer that was cut off and asked again.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerText(String);

impl AnswerText {
    /// Takes `event` into account; true when the text changed.
    pub fn apply(&mut self, event: &StreamEvent) -> bool {
        match event {
            StreamEvent::Text(delta) => {
                self.0.push_str(delta);
                !delta.is_empty()
            }
            StreamEvent::Cut { partial, retrying: true, .. } if self.0.ends_with(partial.as_str()) => {
                self.0.truncate(self.0.len() - partial.len());
                !partial.is_empty()
            }
            _ => false,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// A finished run, collected.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunOutcome {
    /// All text of the run, concatenated (a cut answer asked again counts once, see [`AnswerText`]).
    pub text: String,
    /// The first error, if the run failed: its kind and message.
    pub error: Option<(FailureKind, String)>,
    /// Usage of the last model call.
    pub usage: Option<Usage>,
    pub events: Vec<StreamEvent>,
}

impl RunStream {
    /// The next event, or `None` when the run is over (and merged).
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.events.recv().await
    }

    /// Cancels the run and waits until it has stopped: its tools' processes
    /// killed, the interruption (with `reason`) recorded, its fork merged.
    /// Events not yet read are dropped. Returns the messages steered into the
    /// run that it had not read: the caller decides whether they start a turn.
    pub async fn cancel(mut self, reason: &str) -> Vec<String> {
        self.interruption.set(reason);
        self.events.close();
        (&mut self.task).await.unwrap_or_else(|error| {
            tracing::error!(%error, "a cancelled run's task failed");
            Vec::new()
        })
    }

    /// Runs to the end and gathers the output.
    pub async fn collect(mut self) -> RunOutcome {
        let mut outcome = RunOutcome::default();
        let mut text = AnswerText::default();
        while let Some(event) = self.events.recv().await {
            text.apply(&event);
            match &event {
                StreamEvent::Usage(usage) => outcome.usage = Some(*usage),
                StreamEvent::Error { kind, message } if outcome.error.is_none() => {
                    outcome.error = Some((*kind, message.clone()));
                }
                _ => {}
            }
            outcome.events.push(event);
        }
        outcome.text = text.into_string();
        outcome
    }
}

impl Stream for RunStream {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        self.events.poll_recv(cx)
    }
}

/// The sending end, held by the run task.
pub(crate) struct Output {
    pub tx: mpsc::Sender<StreamEvent>,
    pub interruption: Interruption,
    /// The text of the model step under way, as sent: what an interrupted
    /// run had said when it was stopped.
    pub unfinished: Mutex<String>,
}

impl Output {
    /// Sends an event; false when the consumer is gone (the run should stop).
    pub async fn send(&self, event: StreamEvent) -> bool {
        match &event {
            StreamEvent::Text(delta) => self.unfinished.lock().push_str(delta),
            StreamEvent::Final { .. } | StreamEvent::Cut { .. } => self.unfinished.lock().clear(),
            _ => {}
        }
        self.tx.send(event).await.is_ok()
    }

    /// The step's text is on the tape now (or recorded as a fragment).
    pub fn recorded(&self) {
        self.unfinished.lock().clear()
    }

    /// The text of the step under way (see [`Output::unfinished`]).
    pub fn unfinished_text(&self) -> String {
        self.unfinished.lock().clone()
    }

    /// Resolves when the consumer dropped the stream.
    pub async fn cancelled(&self) {
        self.tx.closed().await
    }
}
