//! What a tool knows about the call it serves.

use crate::agent::{Agent, EventBus, TurnState};
use crate::tape::Tape;
use std::path::PathBuf;

/// Handed to every tool call.
#[derive(Clone)]
pub struct ToolContext {
    /// The run's tape (a fork while a run is going on).
    pub tape: Tape,
    /// The run's turn state.
    pub state: TurnState,
    pub run_id: String,
    /// The run's event bus; `None` when a tool is called outside an agent.
    pub events: Option<EventBus>,
    /// The call came from a comma command, not from the model.
    pub command: bool,
    /// The call came from code run by `run_code`.
    pub code_mode: bool,
    /// The session's workspace: where shell and file tools work.
    pub workspace: PathBuf,
    /// The agent running the call (for `subagent`, `model`, `help`…).
    pub agent: Option<Agent>,
}

impl ToolContext {
    /// A context for calling a tool outside any run (tests, scripts).
    pub fn detached(tape: Tape, workspace: impl Into<PathBuf>) -> ToolContext {
        ToolContext {
            tape,
            state: TurnState::new(),
            run_id: "detached".to_string(),
            events: None,
            command: false,
            code_mode: false,
            workspace: workspace.into(),
            agent: None,
        }
    }
}
