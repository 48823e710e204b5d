//! What a run yields: [`StreamEvent`]s on a [`RunStream`].
//!
//! The run itself is a task; the stream is its receiving end. Dropping the
//! stream cancels the run at its next await point (the model stream is dropped,
//! running tools are abandoned) and the run's fork is still merged, so what was
//! recorded stays. The stream ends only after the merge, so a consumer that
//! reads to the end sees the tape complete.

use crate::model::Usage;
use futures::Stream;
use std::pin::Pin;
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
    /// The run failed; `kind` is a stable name (`rate_limited`, `max_steps`, …).
    Error {
        kind: String,
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
}

/// A finished run, collected.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunOutcome {
    /// All text of the run, concatenated.
    pub text: String,
    /// The first error, if the run failed.
    pub error: Option<(String, String)>,
    /// Usage of the last model call.
    pub usage: Option<Usage>,
    pub events: Vec<StreamEvent>,
}

impl RunStream {
    /// The next event, or `None` when the run is over (and merged).
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.events.recv().await
    }

    /// Runs to the end and gathers the output.
    pub async fn collect(mut self) -> RunOutcome {
        let mut outcome = RunOutcome::default();
        while let Some(event) = self.events.recv().await {
            match &event {
                StreamEvent::Text(delta) => outcome.text.push_str(delta),
                StreamEvent::Usage(usage) => outcome.usage = Some(*usage),
                StreamEvent::Error { kind, message } if outcome.error.is_none() => {
                    outcome.error = Some((kind.clone(), message.clone()));
                }
                _ => {}
            }
            outcome.events.push(event);
        }
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
}

impl Output {
    /// Sends an event; false when the consumer is gone (the run should stop).
    pub async fn send(&self, event: StreamEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }

    /// Resolves when the consumer dropped the stream.
    pub async fn cancelled(&self) {
        self.tx.closed().await
    }
}
