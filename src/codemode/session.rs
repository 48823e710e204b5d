//! Code mode inside a run: which tools the model is offered, the stub it is
//! told about, and how calls from running code reach the tools.
//!
//! This is the seam the agent loop calls: [`offered_tools`] when a run starts
//! and [`prompt_block`] for each model request. Calls from code go back
//! through the agent's executor (its tool events: policy, audit, recording)
//! via the [`ExecuteCall`] the agent hands over, so code mode never imports
//! the agent and the agent never reaches into code mode's insides.
//!
//! Ownership: the [`CodeModeSession`] lives on the run's turn state (for
//! `run_code` and the prompt), and the executor it calls holds the run —
//! its turn state among the rest. So the session keeps only a `Weak` of the
//! executor; the strong one is in the [`Offered`] that [`offered_tools`]
//! returns, which the run keeps for as long as it goes on. However the run
//! ends (answer, error, cancel, its stream dropped), dropping it ends calls
//! from code and leaves no cycle: the state, the run's tape and the agent
//! are freed with the last outside handle. A call from code after that fails
//! ("the run ... has ended") instead of reaching a finished run.
//!
//! A session is in code mode when its latest `code_mode_switch` event says so
//! (`,code_mode enable=true`, effective from the next turn, kept on the tape
//! so it survives restarts) or when the run's turn state sets `code_mode`. It
//! only applies when `run_code` is among the run's tools; otherwise the turn
//! uses direct tool calls.

use super::stub::{StubTool, code_names, write_stub};
use super::tool::RUN_CODE;
use crate::tools::{Tool, ToolRegistry, TurnState};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

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
pub(crate) type ExecuteCall = Arc<ExecuteFn>;

/// What an [`ExecuteCall`] points to.
pub(crate) type ExecuteFn = dyn Fn(CodeCall) -> BoxFuture<'static, Result<Value, String>> + Send + Sync;

/// The error of a call from code once the run that started the code has
/// ended (the code outlived it, or a later run reuses the state).
const RUN_ENDED: &str = "the run this code belongs to has ended";

/// The code-mode part of a run, kept on its turn state for `run_code`.
pub(crate) struct CodeModeSession {
    /// The names callable as `tools.<name>`: Python identifiers, the
    /// functions of the stub (see [`code_names`]), in the run's tool order.
    pub tools: Vec<String>,
    /// Each of those names → its tool.
    by_name: HashMap<String, Tool>,
    /// The typed stub of those tools.
    pub stub: PathBuf,
    /// Numbers the calls made from code in this run, so each has its own id.
    calls: AtomicU64,
    /// Weak: the executor holds the run and with it the turn state this
    /// session is kept on; the run owns the strong one ([`Offered`]).
    execute: Weak<ExecuteFn>,
}

impl CodeModeSession {
    /// Runs one call from the code of the `run_code` call `parent` (call id
    /// `<parent>/code-<n>`, unique in the run); the structured result or the
    /// error message.
    pub async fn call(&self, parent: &str, name: &str, arguments: Value) -> Result<Value, String> {
        if !arguments.is_object() {
            return Err(format!("tools.{name} takes keyword arguments"));
        }
        let Some(tool) = self.by_name.get(name) else {
            return Err(format!("no tool `{name}` in code mode"));
        };
        let execute = self.execute.upgrade().ok_or_else(|| RUN_ENDED.to_string())?;
        let number = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        execute(CodeCall {
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

/// What a run is offered, and what keeps its calls from code working: the
/// run holds it until it ends (see the module doc), and dropping it is what
/// frees the run.
#[must_use = "calls from code fail once this is dropped"]
pub(crate) struct Offered {
    /// The tools the model is offered.
    pub tools: Arc<ToolRegistry>,
    /// The executor the session on the turn state points to (in code mode).
    _execute: Option<ExecuteCall>,
}

/// The tools the model is offered. In code mode: the preserved tools and
/// `run_code`, with the stub written and the session kept on the turn state
/// (`code_mode = true`). Otherwise the run's tools without `run_code`, which
/// means nothing outside code mode, and no session on the state (one it
/// came with, a subagent's copy of its caller's or a reused state's, is
/// removed). The error is the stub's write failing.
pub(crate) async fn offered_tools(run: CodeModeRun) -> std::io::Result<Offered> {
    let has_run_code = run.tools.get(RUN_CODE).is_some();
    let requested = run.state.get("code_mode").and_then(|v| v.as_bool()).unwrap_or(run.switched_on);
    if !has_run_code || !requested {
        run.state.remove_extension::<CodeModeSession>();
        let tools = if has_run_code {
            let mut visible = (*run.tools).clone();
            visible.remove(RUN_CODE);
            Arc::new(visible)
        } else {
            run.tools
        };
        return Ok(Offered { tools, _execute: None });
    }
    let (direct, in_code) = split(&run.tools);
    let session = open(&run, &in_code).await?;
    run.state.set("code_mode", json!(true));
    run.state.insert_extension(session);
    Ok(Offered { tools: Arc::new(direct), _execute: Some(run.execute) })
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
    // The library writes no file it was not told where to put (see `Agent::builder`).
    if run.codemode_dir.as_os_str().is_empty() {
        return Err(std::io::Error::other("no directory for code-mode stubs is set (AgentBuilder::codemode_dir)"));
    }
    let stubs: Vec<StubTool> = in_code.iter().map(StubTool::from_tool).collect();
    let names = code_names(&stubs);
    let by_name = names.iter().cloned().zip(in_code.iter().cloned()).collect();
    let (dir, workspace, session) = (run.codemode_dir.clone(), run.workspace.clone(), run.session.clone());
    let stub = tokio::task::spawn_blocking(move || write_stub(&dir, &workspace, &session, &stubs))
        .await
        .map_err(std::io::Error::other)??;
    Ok(CodeModeSession { tools: names, by_name, stub, calls: AtomicU64::new(0), execute: Arc::downgrade(&run.execute) })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_from_code_work_while_the_run_holds_its_executor_and_fail_after() {
        let tool = Tool::new("echo", "", json!({"type": "object"}), |args, _| async move { Ok(args) });
        let execute: ExecuteCall = Arc::new(|call: CodeCall| Box::pin(async move { Ok(json!(call.call_id)) }));
        let session = CodeModeSession {
            tools: vec!["echo".into()],
            by_name: HashMap::from([("echo".to_string(), tool)]),
            stub: PathBuf::new(),
            calls: AtomicU64::new(0),
            execute: Arc::downgrade(&execute),
        };
        assert_eq!(session.call("c1", "echo", json!({})).await, Ok(json!("c1/code-1")));
        drop(execute);
        assert_eq!(session.call("c1", "echo", json!({})).await, Err(RUN_ENDED.to_string()));
    }
}
