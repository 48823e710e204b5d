//! The loop's events. Each carries the [`RunContext`] of the run that emitted
//! it (run id, the run's tape, its turn state), so handlers can read and write
//! the tape and share state.
//!
//! Decisions: [`BeforeLlmCall::decision`] and [`BeforeToolCall::decision`] stop
//! dispatch once set (see [`crate::tools::bus`]).

use crate::model::{ChatRequest, ModelError, ToolCallRequest, Usage};
use crate::tape::Tape;
use crate::tools::ToolError;
use crate::tools::TurnState;
use crate::tools::bus::AgentEvent;
use serde_json::Value;

/// Who is running: shared by every event of one run.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub run_id: String,
    /// The tape the run writes to (a fork until the run ends).
    pub tape: Tape,
    pub state: TurnState,
}

macro_rules! event_name {
    ($ty:ty, $name:literal) => {
        impl AgentEvent for $ty {
            fn event_name(&self) -> &'static str {
                $name
            }
        }
    };
}

/// A run began.
#[derive(Debug, Clone)]
pub struct RunStarted {
    pub run: RunContext,
    /// `provider:model`, or empty for a command.
    pub model: String,
    pub prompt: String,
    pub allowed_tools: Vec<String>,
}
event_name!(RunStarted, "run_started");

/// A model step is about to be prepared. `messages` are the new user messages
/// of this step (the prompt on the first step, steering messages, the prompt
/// again after an automatic handoff); the recorder writes them to the tape.
#[derive(Debug, Clone)]
pub struct StepStarted {
    pub run: RunContext,
    pub step: usize,
    pub messages: Vec<Value>,
}
event_name!(StepStarted, "step_started");

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// The model answered; the run is over.
    Ok,
    /// Tools ran (or messages arrived); another step follows.
    Continue,
    /// The context overflowed; the run handed off and retries.
    AutoHandoff,
    Error,
}

#[derive(Debug, Clone)]
pub struct StepFinished {
    pub run: RunContext,
    pub step: usize,
    pub status: StepStatus,
    pub elapsed_ms: u64,
    pub error: Option<String>,
}
event_name!(StepFinished, "step_finished");

/// What a `BeforeLlmCall` handler decided.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmCallDecision {
    /// Do not call the model; use this text as its answer.
    Finish(String),
}

/// Before each model call. Handlers may replace `request` (messages, tools,
/// `max_tokens`, options; `request.model` is the model id) or set `spec` to
/// another `provider:model`, or decide to finish without a call.
#[derive(Debug, Clone)]
pub struct BeforeLlmCall {
    pub run: RunContext,
    pub step: usize,
    /// `provider:model` the call goes to.
    pub spec: String,
    pub request: ChatRequest,
    pub decision: Option<LlmCallDecision>,
}

impl AgentEvent for BeforeLlmCall {
    fn event_name(&self) -> &'static str {
        "before_llm_call"
    }
    fn stopped(&self) -> bool {
        self.decision.is_some()
    }
}

/// After each model call, successful or not.
#[derive(Debug, Clone)]
pub struct AfterLlmCall {
    pub run: RunContext,
    pub step: usize,
    pub spec: String,
    /// The request as sent (after `BeforeLlmCall` handlers).
    pub request: ChatRequest,
    pub text: String,
    pub tool_calls: Vec<ToolCallRequest>,
    pub usage: Option<Usage>,
    pub error: Option<ModelError>,
    /// How long the call took, to the nanosecond: a sub-millisecond call is
    /// not zero in `bub_model_call_seconds` (the tape records whole ms).
    pub elapsed: std::time::Duration,
}
event_name!(AfterLlmCall, "after_llm_call");

/// One tool call on its way to a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The registry name when the tool exists (`fs.read`), else the name as asked.
    pub tool: String,
    /// The model's call id (commands get `command`).
    pub call_id: String,
    pub arguments: Value,
    /// Came from a comma command.
    pub command: bool,
    /// Came from code run by `run_code`.
    pub code_mode: bool,
    /// For a call from code: the id of the `run_code` call running that code.
    pub parent_call_id: Option<String>,
}

/// What a `BeforeToolCall` handler decided.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCallDecision {
    /// Skip the tool; this is its result.
    Replace(Value),
    /// Skip the tool; the caller gets a `denied` error with this message.
    Deny(String),
}

/// Before each tool call (model, command or code mode). Handlers may change
/// `call.arguments`, or decide to replace the result or deny the call.
#[derive(Debug, Clone)]
pub struct BeforeToolCall {
    pub run: RunContext,
    pub call: ToolCall,
    /// What the called tool can do ([`Capabilities::ALL`](crate::tools::Capabilities::ALL)
    /// when no such tool exists), for handlers that decide by capability.
    pub capabilities: crate::tools::Capabilities,
    pub decision: Option<ToolCallDecision>,
}

impl AgentEvent for BeforeToolCall {
    fn event_name(&self) -> &'static str {
        "before_tool_call"
    }
    fn stopped(&self) -> bool {
        self.decision.is_some()
    }
}

/// The outcome of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallResult {
    /// The structured result, or the error.
    pub value: Result<Value, ToolError>,
    /// What the caller reads (rendered, and spilled when too long). Handlers
    /// that assign it change what the model sees.
    pub output: String,
    pub elapsed_ms: u64,
}

impl ToolCallResult {
    pub fn is_error(&self) -> bool {
        self.value.is_err()
    }
}

/// After each tool call, including denied and replaced ones.
#[derive(Debug, Clone)]
pub struct AfterToolCall {
    pub run: RunContext,
    pub call: ToolCall,
    pub result: ToolCallResult,
}
event_name!(AfterToolCall, "after_tool_call");

/// A step's tool results are ready to record (aligned with its calls).
#[derive(Debug, Clone)]
pub struct ChatCompleted {
    pub run: RunContext,
    pub step: usize,
    pub calls: Vec<ToolCallRequest>,
    pub results: Vec<String>,
}
event_name!(ChatCompleted, "chat_completed");

/// A comma command finished.
#[derive(Debug, Clone)]
pub struct CommandFinished {
    pub run: RunContext,
    /// The text after the prefix.
    pub raw: String,
    /// The tool that ran (`bash` for the shell fallback), or the name typed.
    pub name: String,
    pub ok: bool,
    pub elapsed_ms: u64,
    pub output: String,
}
event_name!(CommandFinished, "command_finished");
