//! `subagent`: run a prompt as a separate agent run and return what it said.
//!
//! Sessions: `temp` (default) runs on a throwaway `temp/<8 hex>` tape that is
//! never merged; `inherit` continues the caller's own tape; any other name is a
//! session of its own. The child gets a copy of the caller's turn state and
//! never the `subagent` tool itself (no recursion).

use crate::agent::{RunOptions, StreamEvent};
use crate::tools::{Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

/// Delegate a self-contained task to a sub-agent and get its final answer.
#[derive(Deserialize, JsonSchema)]
pub struct SubagentArgs {
    /// The task, written so it can be done without this conversation's history.
    pub prompt: String,
    /// `provider:model` for the sub-agent; default: this session's model.
    #[serde(default)]
    pub model: Option<String>,
    /// `temp` (throwaway, default), `inherit` (this session's tape) or a session name.
    #[serde(default)]
    pub session: Option<String>,
    /// Only these tools (names as listed to you); default: all but `subagent`.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
}

pub fn subagent_tool() -> Tool {
    Tool::typed("subagent", |args: SubagentArgs, ctx: ToolContext| async move {
        let agent = ctx.agent.clone().ok_or_else(|| ToolError::failed("subagent needs a running agent"))?;
        let tape = match args.session.as_deref().unwrap_or("temp") {
            "temp" => format!("temp/{}", &uuid::Uuid::new_v4().simple().to_string()[..8]),
            "inherit" => ctx.tape.name().to_string(),
            name => name.to_string(),
        };
        let allowed: Vec<String> = match args.allowed_tools {
            Some(names) => names,
            None => agent.tools().iter().map(|t| t.name().to_string()).collect(),
        };
        let allowed = allowed.into_iter().filter(|name| crate::tools::model_name(name) != "subagent").collect();
        let mut options =
            RunOptions::new(tape).state(ctx.state.fork()).allowed_tools(allowed).workspace(ctx.workspace.clone());
        options.model = args.model.or_else(|| ctx.state.get_str("model"));
        let outcome = agent.run(args.prompt, options).collect().await;
        let mut text = String::new();
        for event in outcome.events {
            match event {
                StreamEvent::Text(delta) => text.push_str(&delta),
                StreamEvent::Error { message, .. } => text.push_str(&format!("[Error: {message}]")),
                _ => {}
            }
        }
        Ok::<_, ToolError>(text)
    })
}
