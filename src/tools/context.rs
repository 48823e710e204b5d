//! What a tool knows about the call it serves: the run's tape, turn state,
//! workspace and environment, the run's event bus (for the tool's own events),
//! and a narrow [`ToolHost`] handle on the agent (never the agent itself; see
//! [`super::host`]).

use crate::environment::{Environment, LocalEnvironment};
use crate::tape::{Entry, Tape};
use crate::tools::{EventBus, ToolError, ToolHost, TurnState};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The `meta` of stored entries whose text a call's result repeats (the hits
/// of a `tape.search`), by call id: recorded by the tool, taken by the
/// handlers after the call, so text read back from the tape keeps its origin
/// (the policy's provenance rule reads `meta.provenance`).
#[derive(Debug, Default)]
pub struct RepeatedEntries(Mutex<HashMap<String, Vec<Map<String, Value>>>>);

impl RepeatedEntries {
    /// Takes what the call `call_id` recorded.
    pub fn take(&self, call_id: &str) -> Vec<Map<String, Value>> {
        self.0.lock().remove(call_id).unwrap_or_default()
    }
}

/// Handed to every tool call.
#[derive(Clone)]
pub struct ToolContext {
    /// The run's tape (a fork while a run is going on).
    pub tape: Tape,
    /// The run's turn state.
    pub state: TurnState,
    pub run_id: String,
    /// The id of the call being served: the model's call id (`command` for a
    /// comma command); code mode names the calls of its code after it.
    pub call_id: String,
    /// The run's event bus, to emit the tool's own events for handlers to
    /// decide; `None` when a tool is called outside an agent.
    pub events: Option<EventBus>,
    /// The call came from a comma command, not from the model.
    pub command: bool,
    /// The call came from code run by `run_code`.
    pub code_mode: bool,
    /// The session's workspace: where shell and file tools work.
    pub workspace: PathBuf,
    /// What the agent running the call offers (for `help`, `model`,
    /// `,policy explain`); `None` outside an agent.
    pub host: Option<Arc<dyn ToolHost>>,
    /// The session's environment; `None` outside a run with environments.
    pub environment: Option<Arc<dyn Environment>>,
}

impl ToolContext {
    /// A context for calling a tool outside any run (tests, scripts).
    pub fn detached(tape: Tape, workspace: impl Into<PathBuf>) -> ToolContext {
        ToolContext {
            tape,
            state: TurnState::new(),
            run_id: "detached".to_string(),
            call_id: "detached".to_string(),
            events: None,
            command: false,
            code_mode: false,
            workspace: workspace.into(),
            host: None,
            environment: None,
        }
    }

    /// Records that this call's result repeats the text of `entries` (see
    /// [`RepeatedEntries`]).
    pub fn repeats<'a>(&self, entries: impl IntoIterator<Item = &'a Entry>) {
        for entry in entries {
            self.carries(entry.meta.clone());
        }
    }

    /// Records that this call's result carries text whose entry would have
    /// had `meta` (a subagent's answer carries what its run read).
    pub fn carries(&self, meta: Map<String, Value>) {
        if meta.is_empty() {
            return;
        }
        let repeated = self.state.extension_or_insert_with(RepeatedEntries::default);
        repeated.0.lock().entry(self.call_id.clone()).or_default().push(meta);
    }

    /// Where the call's processes run and files live: the session's
    /// environment, or an unconfined host environment in the workspace.
    pub fn environment(&self) -> Result<Arc<dyn Environment>, ToolError> {
        if let Some(environment) = &self.environment {
            return Ok(environment.clone());
        }
        let local = LocalEnvironment::new(&self.workspace, false).map_err(|error| {
            ToolError::failed(format!("cannot create the workspace {}: {error}", self.workspace.display()))
        })?;
        Ok(Arc::new(local))
    }
}
