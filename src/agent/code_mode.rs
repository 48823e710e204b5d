//! Code mode inside a run: which tools the model sees, the stub it is told
//! about, and how calls from running code reach the tools.
//!
//! A session is in code mode when its latest `code_mode_switch` event says so
//! (`,code_mode enable=true`, effective from the next turn, kept on the tape
//! so it survives restarts) or when the run's turn state sets `code_mode`. It
//! only applies when `run_code` is among the run's tools; otherwise the turn
//! uses direct tool calls.

use super::events::ToolCall;
use super::execute::CallSite;
use crate::codemode::stub::{StubTool, write_stub};
use crate::tools::{Tool, ToolRegistry};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The tool that runs code.
pub const RUN_CODE: &str = "run_code";

/// The code-mode part of a run, kept on its turn state for `run_code`.
pub struct CodeModeSession {
    site: CallSite,
    /// The model names callable as `tools.<name>`.
    pub tools: Vec<String>,
    /// The typed stub of those tools.
    pub stub: PathBuf,
    /// Numbers the calls made from code in this run, so each has its own id.
    calls: AtomicU64,
}

impl CodeModeSession {
    /// Runs one call from the code of the `run_code` call `parent` through the
    /// tool events (`code_mode = true`, call id `<parent>/code-<n>`, unique in
    /// the run); the structured result, not rendered or spilled, or the error
    /// message.
    pub async fn call(&self, parent: &str, name: &str, arguments: Value) -> Result<Value, String> {
        if !arguments.is_object() {
            return Err(format!("tools.{name} takes keyword arguments"));
        }
        let Some(tool) = self.site.tools.get(name).filter(|t| self.tools.contains(&t.model_name())) else {
            return Err(format!("no tool `{name}` in code mode"));
        };
        let number = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let call = ToolCall {
            tool: tool.name().to_string(),
            call_id: format!("{parent}/code-{number}"),
            arguments,
            command: false,
            code_mode: true,
            parent_call_id: Some(parent.to_string()),
        };
        match self.site.execute(call, None).await {
            Ok(result) => result.value.map_err(|error| error.message),
            Err(error) => Err(format!("a handler failed: {error}")),
        }
    }
}

/// Splits the run's tools: what the model calls directly (preserved tools and
/// `run_code`) and what code calls (every other tool the model may use).
pub(crate) fn split(tools: &ToolRegistry) -> (ToolRegistry, Vec<Tool>) {
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
pub(crate) async fn open(
    site: CallSite,
    in_code: &[Tool],
    codemode_dir: PathBuf,
    session: String,
) -> std::io::Result<CodeModeSession> {
    let stubs: Vec<StubTool> = in_code.iter().map(StubTool::from_tool).collect();
    let workspace = site.workspace.clone();
    let stub = tokio::task::spawn_blocking(move || write_stub(&codemode_dir, &workspace, &session, &stubs))
        .await
        .map_err(std::io::Error::other)??;
    Ok(CodeModeSession { site, tools: in_code.iter().map(Tool::model_name).collect(), stub, calls: AtomicU64::new(0) })
}

/// The system prompt block that explains code mode.
pub(crate) fn prompt_block(session: &CodeModeSession) -> String {
    format!(
        "<code_mode>\nCall tools from Python with `run_code`. Inside the code every tool below is an async \
         function: `await tools.<name>(key=value, ...)` (keyword arguments only; top-level await works; use \
         `asyncio.gather` to run calls at once; results are structured values; a failing tool raises). Only what \
         the code prints comes back to you, so print what you need and batch calls into one run.\n\
         Read the typed stub {} (with fs_read) before using a tool you do not know.\n\
         Tools in code: {}\n</code_mode>",
        session.stub.display(),
        session.tools.join(", ")
    )
}
