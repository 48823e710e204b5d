//! `subagent`: run a prompt as a separate agent run and return what it said.
//!
//! Sessions: `temp` (default) runs on a throwaway `temp/<8 hex>` tape that is
//! never merged; `inherit` continues the caller's own tape; any other name is
//! a session of its own **under the caller's**: `<caller>/subagent/<name>`.
//! A subagent can never reach another chat's tape (nor its spills, code mode
//! or workspace), whatever name the model writes.
//!
//! What the child may do is at most what its caller may do:
//! - its tools are the caller's model tools ([`RunTools`]), narrowed by
//!   `allowed_tools`, and never `subagent` itself (no recursion);
//! - its model is the caller's when the caller's run had one chosen for it
//!   ([`PinnedModel`], e.g. by the gateway's policy): a different `model`
//!   argument is refused;
//! - its prompt is never a comma command (the model wrote it, not a person);
//! - it runs with a copy of the caller's turn state, so the policy that
//!   governs the caller's tool calls governs the child's too.
//!
//! Why the agent provides this tool rather than `tools/builtin`: starting a
//! run is the agent's business (its options, the pinned model and the run's
//! tools are agent types), and a tool that can start runs can do anything the
//! agent can. Builtin tools get only the narrow [`crate::tools::ToolHost`];
//! this tool, being the agent's own, finds its agent behind that handle
//! (`AgentHost::agent_of`), which no tool outside the agent can.

use super::host::AgentHost;
use super::run::{PinnedModel, RunOptions, RunTools};
use crate::tools::{Capability, Tool, ToolContext, ToolError, model_name};
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
    /// `temp` (throwaway, default), `inherit` (this session's tape) or a name
    /// (letters, digits, `-`, `_`) for a sub-session of this one that keeps its history.
    #[serde(default)]
    pub session: Option<String>,
    /// Only these of your tools (names as listed to you); default: all of yours but `subagent`.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
}

/// Longest name of a named sub-session.
const MAX_SESSION_NAME: usize = 64;

/// The child's tape for the `session` argument, or why it is refused.
fn child_tape(caller: &str, session: Option<&str>) -> Result<String, ToolError> {
    match session.map(str::trim).unwrap_or("temp") {
        "temp" | "" => Ok(format!("temp/{}", &uuid::Uuid::new_v4().simple().to_string()[..8])),
        "inherit" => Ok(caller.to_string()),
        name if name.len() <= MAX_SESSION_NAME
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            Ok(format!("{caller}/subagent/{name}"))
        }
        name => Err(ToolError::invalid_input(format!(
            "session `{name}` is not `temp`, `inherit` or a sub-session name of at most {MAX_SESSION_NAME} \
             letters, digits, `-` and `_` (a subagent works in this session only)"
        ))),
    }
}

/// The child's tools: the caller's, narrowed by `wanted`; names the caller
/// does not have are refused rather than silently dropped.
fn child_tools(callers: Vec<String>, wanted: Option<Vec<String>>) -> Result<Vec<String>, ToolError> {
    let callers: Vec<String> = callers.into_iter().filter(|name| model_name(name) != "subagent").collect();
    let Some(wanted) = wanted else { return Ok(callers) };
    let mut chosen = Vec::new();
    for name in wanted {
        match callers.iter().find(|mine| model_name(mine).eq_ignore_ascii_case(&model_name(&name))) {
            Some(mine) => chosen.push(mine.clone()),
            None => {
                return Err(ToolError::invalid_input(format!(
                    "allowed_tools: `{name}` is not one of your tools, so a subagent cannot have it"
                )));
            }
        }
    }
    Ok(chosen)
}

/// `subagent`: register it on the agent (`AgentBuilder::tool`) to let the
/// model delegate; it works only in calls the agent runs.
pub fn subagent_tool() -> Tool {
    Tool::typed("subagent", |args: SubagentArgs, ctx: ToolContext| async move {
        let agent =
            AgentHost::agent_of(&ctx).cloned().ok_or_else(|| ToolError::failed("subagent needs a running agent"))?;
        let tape = child_tape(ctx.tape.name().as_str(), args.session.as_deref())?;
        let callers = match ctx.state.extension::<RunTools>() {
            Some(tools) => tools.0.clone(),
            None => agent.tools().model_tools().map(|t| t.name().to_string()).collect(),
        };
        let allowed = child_tools(callers, args.allowed_tools)?;
        let pinned = ctx.state.extension::<PinnedModel>().map(|pinned| pinned.0.clone());
        let model = match (pinned, args.model.filter(|m| !m.trim().is_empty())) {
            (Some(pinned), Some(asked)) if asked.trim() != pinned => {
                return Err(ToolError::denied(format!(
                    "the model here is fixed to {pinned}: a subagent cannot use {asked}"
                )));
            }
            (Some(pinned), _) => Some(pinned),
            (None, asked) => asked.or_else(|| ctx.state.get_str("model")),
        };
        let state = ctx.state.fork();
        let mut options = RunOptions::new(tape)
            .state(state.clone())
            .allowed_tools(allowed)
            .workspace(ctx.workspace.clone())
            .no_commands();
        options.model = model;
        let outcome = agent.run(args.prompt, options).collect().await;
        // The answer carries what the subagent read: untrusted text it saw
        // is untrusted in the caller's context too.
        if let Some(carried) = state.extension::<super::CarriedMeta>() {
            ctx.carries(carried.0.clone());
        }
        let mut text = outcome.text;
        if let Some((_, message)) = outcome.error {
            text.push_str(&format!("[Error: {message}]"));
        }
        Ok::<_, ToolError>(text)
    })
    .with_capabilities([Capability::Session])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subagent_session_stays_under_its_caller() {
        assert!(child_tape("tg:42", None).unwrap().starts_with("temp/"));
        assert_eq!(child_tape("tg:42", Some("inherit")).unwrap(), "tg:42");
        assert_eq!(child_tape("tg:42", Some("notes")).unwrap(), "tg:42/subagent/notes");
        for other in ["tg:43", "webhook:c1", "../x", "a/b", "temp/abc"] {
            assert!(child_tape("tg:42", Some(other)).is_err(), "{other}");
        }
    }

    #[test]
    fn a_subagent_gets_at_most_its_callers_tools() {
        let mine = vec!["fs.read".to_string(), "subagent".to_string(), "tape.info".to_string()];
        assert_eq!(child_tools(mine.clone(), None).unwrap(), ["fs.read", "tape.info"]);
        assert_eq!(child_tools(mine.clone(), Some(vec!["fs_read".into()])).unwrap(), ["fs.read"]);
        let error = child_tools(mine, Some(vec!["bash".into()])).unwrap_err();
        assert!(error.message.contains("`bash` is not one of your tools"), "{}", error.message);
    }
}
