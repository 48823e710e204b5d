//! Code mode inside a run: which tools the model is offered, the stub it is
//! told about, and how calls from running code reach the tools.
//!
//! This is the seam the agent loop calls: [`offered_tools`] when a run starts
//! and [`prompt_block`] for each model request. Calls from code go back
//! through the agent's executor (its tool events: policy, audit, recording)
//! via the [`ExecuteCall`] the agent hands over, so code mode never imports
//! the agent and the agent never reaches into code mode's insides.
//!
//! A session is in code mode when its latest `code_mode_switch` event says so
//! (`,code_mode enable=true`, effective from the next turn, kept on the tape
//! so it survives restarts) or when the run's turn state sets `code_mode`. It
//! only applies when `run_code` is among the run's tools; otherwise the turn
//! uses direct tool calls.

use super::stub::{StubTool, write_stub};
use super::tool::RUN_CODE;
use crate::tools::{Tool, ToolRegistry, TurnState};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One tool call made by running code, for the agent to execute.
pub(crate) struct CodeCall {
    /// The tool's registry name.
    pub tool: String,
    /// `<parent>/code-<n>`, unique in the run.
    pub call_id: String,
    /// The id of the `run_code` call whose code made it.
    pub parent_call_id: String,
    pub arguments: Value,
}

/// Runs a [`CodeCall`] through the agent's tool events (`code_mode = true`):
/// the structured result, not rendered or spilled, or the error message.
pub(crate) type ExecuteCall = Arc<dyn Fn(CodeCall) -> BoxFuture<'static, Result<Value, String>> + Send + Sync>;

/// The code-mode part of a run, kept on its turn state for `run_code`.
pub(crate) struct CodeModeSession {
    /// Every tool of the run, for lookups by registry or model name.
    run_tools: Arc<ToolRegistry>,
    /// The model names callable as `tools.<name>`.
    pub tools: Vec<String>,
    /// The typed stub of those tools.
    pub stub: PathBuf,
    /// Numbers the calls made from code in this run, so each has its own id.
    calls: AtomicU64,
    execute: ExecuteCall,
}

impl CodeModeSession {
    /// Runs one call from the code of the `run_code` call `parent` (call id
    /// `<parent>/code-<n>`, unique in the run); the structured result or the
    /// error message.
    pub async fn call(&self, parent: &str, name: &str, arguments: Value) -> Result<Value, String> {
        if !arguments.is_object() {
            return Err(format!("tools.{name} takes keyword arguments"));
        }
        let Some(tool) = self.run_tools.get(name).filter(|t| self.tools.contains(&t.model_name())) else {
            return Err(format!("no tool `{name}` in code mode"));
        };
        let number = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        (self.execute)(CodeCall {
            tool: tool.name().to_string(),
            call_id: format!("{parent}/code-{number}"),
            parent_call_id: parent.to_string(),
            arguments,
        })
        .await
    }
}

/// What a run brings to code mode when it starts.
pub(crate) struct CodeModeRun {
    /// The tools the run's model may use.
    pub tools: Arc<ToolRegistry>,
    pub state: TurnState,
    /// The session's `,code_mode` switch (the turn state's `code_mode` wins).
    pub switched_on: bool,
    /// Where stubs are written.
    pub codemode_dir: PathBuf,
    pub workspace: PathBuf,
    /// The run's session (tape name): the stub's path depends on it.
    pub session: String,
    pub execute: ExecuteCall,
}

/// The tools the model is offered. In code mode: the preserved tools and
/// `run_code`, with the stub written and the session kept on the turn state
/// (`code_mode = true`). Otherwise the run's tools without `run_code`, which
/// means nothing outside code mode. The error is the stub's write failing.
pub(crate) async fn offered_tools(run: CodeModeRun) -> std::io::Result<Arc<ToolRegistry>> {
    let has_run_code = run.tools.get(RUN_CODE).is_some();
    let requested = run.state.get("code_mode").and_then(|v| v.as_bool()).unwrap_or(run.switched_on);
    if !has_run_code {
        return Ok(run.tools);
    }
    if !requested {
        let mut visible = (*run.tools).clone();
        visible.remove(RUN_CODE);
        return Ok(Arc::new(visible));
    }
    let (direct, in_code) = split(&run.tools);
    let session = open(&run, &in_code).await?;
    run.state.set("code_mode", json!(true));
    run.state.insert_extension(session);
    Ok(Arc::new(direct))
}

/// Splits the run's tools: what the model calls directly (preserved tools and
/// `run_code`) and what code calls (every other tool the model may use).
fn split(tools: &ToolRegistry) -> (ToolRegistry, Vec<Tool>) {
    let mut direct = ToolRegistry::new();
    let mut in_code = Vec::new();
    for tool in tools.iter() {
        if tool.preserve() || tool.name() == RUN_CODE || !tool.agent_use() {
            direct.insert(tool.clone());
        } else {
            in_code.push(tool.clone());
        }
    }
    (direct, in_code)
}

/// Writes the stub for `in_code` and builds the session kept on the state.
async fn open(run: &CodeModeRun, in_code: &[Tool]) -> std::io::Result<CodeModeSession> {
    let stubs: Vec<StubTool> = in_code.iter().map(StubTool::from_tool).collect();
    let (dir, workspace, session) = (run.codemode_dir.clone(), run.workspace.clone(), run.session.clone());
    let stub = tokio::task::spawn_blocking(move || write_stub(&dir, &workspace, &session, &stubs))
        .await
        .map_err(std::io::Error::other)??;
    Ok(CodeModeSession {
        run_tools: run.tools.clone(),
        tools: in_code.iter().map(Tool::model_name).collect(),
        stub,
        calls: AtomicU64::new(0),
        execute: run.execute.clone(),
    })
}

/// The system prompt block that explains code mode, when the run is in it.
pub(crate) fn prompt_block(state: &TurnState) -> Option<String> {
    let session = state.extension::<CodeModeSession>()?;
    Some(format!(
        "<code_mode>\nCall tools from Python with `run_code`. Inside the code every tool below is an async \
         function: `await tools.<name>(key=value, ...)` (keyword arguments only; top-level await works; use \
         `asyncio.gather` to run calls at once; results are structured values; a failing tool raises). Only what \
         the code prints comes back to you, so print what you need and batch calls into one run.\n\
         Read the typed stub {} (with fs_read) before using a tool you do not know.\n\
         Tools in code: {}\n</code_mode>",
        session.stub.display(),
        session.tools.join(", ")
    ))
}
