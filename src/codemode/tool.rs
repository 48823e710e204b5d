//! Code mode's tools: `run_code` (model-facing, only in code mode) and the
//! command-only `code_mode` switch (its event is [`crate::tools::switch`]'s).

use super::launch::RunCode;
use super::runner::{CallTool, CodeError, OutputSink};
use super::session::CodeModeSession;
use crate::tools::switch::code_mode_switch;
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn default_timeout() -> u64 {
    120
}

/// Run Python code that calls tools as `await tools.<name>(key=value)`; returns
/// what the code printed. Top-level await works; use asyncio.gather for
/// concurrent calls; a failing tool raises ToolError.
#[derive(Deserialize, JsonSchema)]
pub struct RunCodeArgs {
    /// Python source. Print what you need: only printed output comes back.
    pub code: String,
    /// Seconds before the code is stopped (its output so far is returned).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

/// The tool that runs code.
pub const RUN_CODE: &str = "run_code";

/// `run_code`: offered to the model in code mode only (see [`crate::codemode`]).
pub fn run_code_tool() -> Tool {
    Tool::typed(RUN_CODE, |args: RunCodeArgs, ctx: ToolContext| async move {
        let Some(session) = ctx.state.extension::<CodeModeSession>() else {
            return Err(ToolError::invalid_input(
                "code mode is not on for this session: turn it on with `,code_mode enable=true`",
            ));
        };
        if args.timeout_seconds == 0 {
            return Err(ToolError::invalid_input("timeout_seconds must be at least 1"));
        }
        let environment = ctx.environment()?;
        let caller = session.clone();
        let parent: Arc<str> = ctx.call_id.clone().into();
        let call_tool: CallTool = Arc::new(move |name, arguments| {
            let (session, parent) = (caller.clone(), parent.clone());
            Box::pin(async move { session.call(&parent, &name, arguments).await })
        });
        let write: OutputSink = Arc::new(|_| {});
        let timeout = Duration::from_secs(args.timeout_seconds);
        match environment.run_code(&args.code, &session.tools, call_tool, write, timeout).await {
            Ok(output) if output.is_empty() => Ok("(no output)".to_string()),
            Ok(output) => Ok(output),
            Err(error) => Err(code_error(error)),
        }
    })
    .with_description(
        "Run Python code that calls tools as `await tools.<name>(key=value)`; returns what the code printed.",
    )
    .with_capabilities([Capability::Exec])
}

fn code_error(error: CodeError) -> ToolError {
    let message = error.to_string();
    let details = match error {
        CodeError::Timeout { output, .. } => json!({"output": output}),
        CodeError::Failed { traceback, output, .. } => json!({"output": output, "traceback": traceback}),
        CodeError::Crashed { stderr, output, exit_code } => {
            json!({"output": output, "stderr": stderr, "exit_code": exit_code})
        }
    };
    ToolError::failed(message).with_details(details)
}

/// Turn code mode on or off for this session, from the next turn on.
#[derive(Deserialize, JsonSchema)]
pub struct CodeModeArgs {
    /// true: the model calls tools from Python through run_code; false: directly.
    pub enable: bool,
}

/// `,code_mode enable=true|false`: records a `code_mode_switch` event, so the
/// choice holds from the next turn and survives restarts.
pub fn code_mode_tool() -> Tool {
    Tool::typed("code_mode", |args: CodeModeArgs, ctx: ToolContext| async move {
        ctx.tape.append(code_mode_switch(args.enable)).await?;
        Ok::<_, ToolError>(format!(
            "code mode {} for this session from the next turn",
            if args.enable { "on" } else { "off" }
        ))
    })
    .command_only()
    .with_capabilities([Capability::Session])
}
