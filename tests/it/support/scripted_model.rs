//! An in-process model for loop tests: plays scripted answers without HTTP.
//! (HTTP behaviour — SSE framing, retries, status codes — is tested against
//! `fake_model`; this one keeps loop tests fast and exact.)

use async_trait::async_trait;
use bub::model::{ChatRequest, FinishReason, ModelClient, ModelError, ModelEvent, ModelStream, ToolCallRequest, Usage};
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;

type Script = Vec<Result<ModelEvent, ModelError>>;

enum Step {
    Events(Script),
    /// Sends these events, then never finishes (for cancellation tests); the
    /// sender, if any, is dropped with the stream.
    Hang(Script, Option<tokio::sync::oneshot::Sender<()>>),
}

#[derive(Default)]
pub struct ScriptedModel {
    replies: Mutex<VecDeque<Step>>,
    requests: Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    pub fn new() -> Arc<ScriptedModel> {
        Arc::new(ScriptedModel::default())
    }

    fn push(&self, step: Step) {
        self.replies.lock().push_back(step);
    }

    /// A plain answer, streamed word by word, with usage.
    pub fn text(&self, text: &str) {
        let mut events: Script = text.split_inclusive(' ').map(|w| Ok(ModelEvent::TextDelta(w.to_string()))).collect();
        events.push(Ok(ModelEvent::Usage(Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15,
            cached_tokens: None,
        })));
        events.push(Ok(ModelEvent::Finish(FinishReason::Stop)));
        self.push(Step::Events(events));
    }

    /// Tool calls `(model name, arguments)`, ids `call_0`, `call_1`, …
    pub fn tool_calls(&self, calls: &[(&str, Value)]) {
        let mut events: Script = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                Ok(ModelEvent::ToolCall(ToolCallRequest {
                    id: format!("call_{i}"),
                    name: name.to_string(),
                    arguments: args.to_string(),
                }))
            })
            .collect();
        events.push(Ok(ModelEvent::Finish(FinishReason::ToolCalls)));
        self.push(Step::Events(events));
    }

    /// One call whose argument text is given verbatim (e.g. invalid JSON).
    pub fn raw_tool_call(&self, name: &str, arguments: &str) {
        let call = ToolCallRequest { id: "call_0".into(), name: name.into(), arguments: arguments.into() };
        self.push(Step::Events(vec![Ok(ModelEvent::ToolCall(call)), Ok(ModelEvent::Finish(FinishReason::ToolCalls))]));
    }

    pub fn error(&self, error: ModelError) {
        self.push(Step::Events(vec![Err(error)]));
    }

    /// Streams `text`, then fails with a cut (the connection dropped mid-answer).
    pub fn cut_after(&self, text: &str) {
        let cut = ModelError::Cut { provider: "scripted".into(), message: "connection lost".into() };
        self.push(Step::Events(vec![Ok(ModelEvent::TextDelta(text.to_string())), Err(cut)]));
    }

    /// Streams `text`, then hangs until the consumer goes away.
    pub fn hang_after(&self, text: &str) {
        self.push(Step::Hang(vec![Ok(ModelEvent::TextDelta(text.to_string()))], None));
    }

    /// [`ScriptedModel::hang_after`], and the returned receiver resolves (with
    /// an error) once the run has dropped the model's stream.
    pub fn hang_after_noting_drop(&self, text: &str) -> tokio::sync::oneshot::Receiver<()> {
        let (dropped, noticed) = tokio::sync::oneshot::channel();
        self.push(Step::Hang(vec![Ok(ModelEvent::TextDelta(text.to_string()))], Some(dropped)));
        noticed
    }

    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().clone()
    }
}

#[async_trait]
impl ModelClient for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        self.requests.lock().push(request.clone());
        let step = self.replies.lock().pop_front();
        match step {
            None => Err(ModelError::Server {
                provider: "scripted".into(),
                status: 500,
                message: "no scripted reply left".into(),
            }),
            Some(Step::Events(events)) => Ok(futures::stream::iter(events).boxed()),
            Some(Step::Hang(events, dropped)) => {
                let hang = futures::stream::pending().map(move |event| {
                    let _held_until_the_stream_drops = &dropped;
                    event
                });
                Ok(futures::stream::iter(events).chain(hang).boxed())
            }
        }
    }
}

pub fn overflow() -> ModelError {
    ModelError::ContextOverflow { provider: "scripted".into(), message: "maximum context length is 8192 tokens".into() }
}
