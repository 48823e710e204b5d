//! Command-only tools about the session itself: `help`, `model`,
//! `reasoning_effort`, `quit`. What they need of the agent (its tools, its
//! default model, the command prefix) comes through [`ToolHost`](crate::tools::ToolHost); the
//! switches they record are [`crate::tools::switch`]'s events.

use super::ShellManager;
use crate::model::ModelSpec;
use crate::tools::switch::{self, SessionSwitches};
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// List the comma commands available here.
#[derive(Deserialize, JsonSchema)]
pub struct HelpArgs {}

/// `,help`: every tool the asker may run as a command (all of them unless a
/// [`CommandGate`](crate::tools::CommandGate) on the turn state says
/// otherwise), with its arguments.
pub fn help_tool() -> Tool {
    Tool::typed("help", |_: HelpArgs, ctx: ToolContext| async move {
        let Some(host) = ctx.host.as_ref() else { return Ok("no agent: commands are unavailable here".to_string()) };
        let prefix = host.command_prefix().unwrap_or_else(|| ",".to_string());
        let catalogue = host.catalogue();
        let gate = ctx.state.extension::<crate::tools::CommandGate>();
        let may_run = |tool: &Tool| gate.as_ref().is_none_or(|gate| (gate.0)(tool.name(), tool.capabilities()));
        let shell = catalogue.get("bash").is_some_and(may_run);
        let rest = if shell { "; anything else runs in the shell" } else { "" };
        let mut lines = vec![format!("Commands (type {prefix}name key=value …{rest}):")];
        for tool in catalogue.iter().filter(|tool| may_run(tool)) {
            let params: Vec<String> = tool
                .parameters()
                .get("properties")
                .and_then(|p| p.as_object())
                .map(|props| props.keys().cloned().collect())
                .unwrap_or_default();
            let summary = tool.summary();
            lines.push(format!("  {prefix}{} {} — {summary}", tool.name(), params.join(" ")).replace("  —", " —"));
        }
        Ok::<_, ToolError>(lines.join("\n"))
    })
    .command_only()
    .with_capabilities([Capability::Read])
}

/// Switch this session's model from the next turn on.
#[derive(Deserialize, JsonSchema)]
pub struct ModelArgs {
    /// `provider:model`, e.g. `openrouter:anthropic/claude-sonnet-4`. Empty: back to the default.
    #[serde(default)]
    pub model_id: Option<String>,
}

/// `,model provider:model`: records a `model_switch` event; the next turn uses it.
/// Without an argument it says which model the session uses.
pub fn model_tool() -> Tool {
    Tool::typed("model", |args: ModelArgs, ctx: ToolContext| async move {
        let current = async {
            let chosen = SessionSwitches::read(&ctx.tape).await?.model;
            let default = ctx.host.as_ref().and_then(|host| host.default_model());
            Ok::<_, ToolError>(chosen.or(default))
        };
        let Some(model) = args.model_id else {
            return Ok(match current.await? {
                Some(model) => format!("model: {model}"),
                None => "model: none configured (set BUB_MODEL or use ,model provider:model)".to_string(),
            });
        };
        let model = model.trim().to_string();
        if !model.is_empty() && ModelSpec::parse(&model).is_err() {
            return Err(ToolError::invalid_input(format!("`{model}` is not provider:model (e.g. openai:gpt-4o-mini)")));
        }
        ctx.tape.append(switch::model_switch(&model)).await?;
        Ok(if model.is_empty() {
            "model reset to the default from the next turn".to_string()
        } else {
            format!("model for this session: {model} (from the next turn)")
        })
    })
    .command_only()
    .with_capabilities([Capability::Session])
}

/// Set how hard this session's model reasons, from the next turn on.
#[derive(Deserialize, JsonSchema)]
pub struct ReasoningEffortArgs {
    /// The provider's level, e.g. `low`, `medium` or `high`. Empty: back to the provider's default.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
}

/// `,reasoning_effort level`: records a `reasoning_effort_switch` event; from
/// the next turn on, model calls send `reasoning_effort` (OpenAI-compatible
/// providers; Anthropic's API has no such field and does not get it). Without
/// an argument it says the session's level.
pub fn reasoning_effort_tool() -> Tool {
    Tool::typed("reasoning_effort", |args: ReasoningEffortArgs, ctx: ToolContext| async move {
        let Some(effort) = args.reasoning_effort else {
            return Ok(match SessionSwitches::read(&ctx.tape).await?.reasoning_effort {
                Some(effort) => format!("reasoning_effort: {effort}"),
                None => "reasoning_effort: the provider's default".to_string(),
            });
        };
        let effort = effort.trim().to_string();
        if effort.chars().any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
            return Err(ToolError::invalid_input(format!(
                "`{effort}` is not a reasoning effort level (one word, e.g. low, medium or high)"
            )));
        }
        ctx.tape.append(switch::reasoning_effort_switch(&effort)).await?;
        Ok(if effort.is_empty() {
            "reasoning_effort reset to the provider's default from the next turn".to_string()
        } else {
            format!("reasoning_effort for this session: {effort} (from the next turn)")
        })
    })
    .command_only()
    .with_capabilities([Capability::Session])
}

/// End the session's work: kill its background shells.
#[derive(Deserialize, JsonSchema)]
pub struct QuitArgs {}

/// `,quit`: kills every background shell of this session and marks the turn
/// state `quit = true` (an interactive front end leaves; the gateway also drops
/// the session's queued turns).
pub fn quit_tool(shells: Arc<ShellManager>) -> Tool {
    Tool::typed("quit", move |_: QuitArgs, ctx: ToolContext| {
        let shells = shells.clone();
        async move {
            let killed = shells.kill_session(ctx.tape.name()).await;
            ctx.state.set("quit", json!(true));
            Ok::<_, ToolError>(format!("bye ({killed} background shell(s) stopped)"))
        }
    })
    .command_only()
    .with_capabilities([Capability::Session])
}
