//! Running one tool call: `BeforeToolCall` → the tool (unless denied or
//! replaced) → rendering → spill → `AfterToolCall`. Model calls, comma commands
//! and code-mode calls all come through here, so a handler on these events
//! (policy, audit) covers every path.

use super::events::{AfterToolCall, BeforeToolCall, RunContext, ToolCall, ToolCallDecision, ToolCallResult};
use super::host::AgentHost;
use super::runtime::Agent;
use crate::codemode::{CodeCall, ExecuteCall};
use crate::environment::Environment;
use crate::telemetry::traces;
use crate::tools::bus::HandlerError;
use crate::tools::{ToolContext, ToolError, ToolErrorKind, ToolRegistry, default_render};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Where a call runs. Owned and cheap to clone, so code mode can hand it to
/// the tasks that serve calls from running code.
#[derive(Clone)]
pub(crate) struct CallSite {
    pub agent: Agent,
    pub run: RunContext,
    /// The tools callable from here (the run's allowed tools; every tool for commands).
    pub tools: Arc<ToolRegistry>,
    pub workspace: PathBuf,
    /// The session's environment, when the agent manages environments.
    pub environment: Option<Arc<dyn Environment>>,
}

impl CallSite {
    /// Runs `call`. `preset` is an error found before the call could be made
    /// (arguments that are not JSON); the events still fire around it.
    /// Only a failing event handler is an `Err`: tool failures are results.
    pub async fn execute(&self, call: ToolCall, preset: Option<ToolError>) -> Result<ToolCallResult, HandlerError> {
        let span = tracing::info_span!("tool_call", tool = %call.tool, call_id = %call.call_id);
        if traces::exporting() {
            traces::set_name(&span, || format!("execute_tool {}", call.tool));
            traces::set_attribute(&span, "gen_ai.operation.name", "execute_tool");
            traces::set_attribute(&span, "gen_ai.tool.name", call.tool.clone());
            traces::set_attribute(&span, "gen_ai.tool.call.id", call.call_id.clone());
            traces::capture(&span, "gen_ai.tool.call.arguments", || call.arguments.to_string());
        }
        let result = self.execute_in_span(call, preset).instrument(span.clone()).await;
        if traces::exporting()
            && let Ok(done) = &result
        {
            if let Err(error) = &done.value {
                traces::set_error(&span, format!("{:?}", error.kind));
            }
            traces::capture(&span, "gen_ai.tool.call.result", || done.output.clone());
        }
        result
    }

    async fn execute_in_span(&self, call: ToolCall, preset: Option<ToolError>) -> Result<ToolCallResult, HandlerError> {
        let bus = &self.agent.inner.events;
        let started = Instant::now();
        let capabilities = self.tools.get(&call.tool).map_or(crate::tools::Capabilities::ALL, |t| t.capabilities());
        let before = bus.emit(BeforeToolCall { run: self.run.clone(), call, capabilities, decision: None }).await?;
        let call = before.call;
        let tool = self.tools.get(&call.tool).cloned();
        let value = match (preset, before.decision) {
            (Some(error), _) => Err(error),
            (None, Some(ToolCallDecision::Deny(message))) => Err(ToolError::denied(message)),
            (None, Some(ToolCallDecision::Replace(value))) => Ok(value),
            (None, None) => match &tool {
                Some(tool) => tool.call(call.arguments.clone(), self.context(&call)).await,
                None => Err(self.unknown_tool(&call.tool, &self.tools)),
            },
        };
        let rendered = match &value {
            Ok(result) => tool.as_ref().map_or_else(|| default_render(result), |t| t.render(result)),
            Err(error) => error.to_value().to_string(),
        };
        // Commands show their output to an operator and code-mode results go
        // back into code: only what the model reads is spilled, and not what
        // a tool marks as never spilled (a page of a spill).
        let spills = tool.as_ref().is_none_or(|t| t.spills());
        let output = if call.command || call.code_mode || !spills {
            rendered
        } else {
            self.writing_tape().spill_if_large(&call.tool, rendered).await.into_text()
        };
        if let Err(error) = &value {
            tracing::info!(run_id = %self.run.run_id, tool = %call.tool, error = %error, "tool call failed");
        }
        let result = ToolCallResult { value, output, elapsed_ms: started.elapsed().as_millis() as u64 };
        let after = bus.emit(AfterToolCall { run: self.run.clone(), call, result }).await?;
        Ok(after.result)
    }

    /// The run's tape, whose anchors (and spilled results) carry what the
    /// run's context held ([`super::CarriedMeta`]).
    fn writing_tape(&self) -> crate::tape::Tape {
        match self.run.state.extension::<super::CarriedMeta>() {
            Some(carried) => self.run.tape.clone().with_anchor_meta(carried.0.clone()),
            None => self.run.tape.clone(),
        }
    }

    fn context(&self, call: &ToolCall) -> ToolContext {
        ToolContext {
            tape: self.writing_tape(),
            state: self.run.state.clone(),
            run_id: self.run.run_id.clone(),
            call_id: call.call_id.clone(),
            events: Some(self.agent.inner.events.clone()),
            command: call.command,
            code_mode: call.code_mode,
            workspace: self.workspace.clone(),
            host: Some(Arc::new(AgentHost(self.agent.clone()))),
            environment: self.environment.clone(),
        }
    }

    /// Runs code mode's calls from running code here, through the same events
    /// (`code_mode = true`, the `run_code` call as parent); a failing handler
    /// becomes the call's error. The closure holds this site, and so the
    /// run's turn state: what is kept on that state may only point to it
    /// weakly (code mode's session does; the run holds it strongly).
    pub(crate) fn code_calls(&self) -> ExecuteCall {
        let site = self.clone();
        Arc::new(move |call: CodeCall| {
            let site = site.clone();
            Box::pin(async move {
                let call = ToolCall {
                    tool: call.tool,
                    call_id: call.call_id,
                    arguments: call.arguments,
                    command: false,
                    code_mode: true,
                    parent_call_id: Some(call.parent_call_id),
                };
                match site.execute(call, None).await {
                    Ok(result) => result.value.map_err(|error| error.message),
                    Err(error) => Err(format!("a handler failed: {error}")),
                }
            })
        })
    }

    /// The error for a call naming no tool of `offered`, with close names from it.
    pub(crate) fn unknown_tool(&self, name: &str, offered: &ToolRegistry) -> ToolError {
        let close: Vec<String> =
            offered.suggest(name).into_iter().filter(|n| offered.get(n).is_some_and(|t| t.agent_use())).collect();
        let message = if close.is_empty() {
            format!("unknown tool `{name}`; no tool has a similar name (the `skill` tool lists skills that may help)")
        } else {
            let names: Vec<String> = close.iter().map(|n| format!("`{}`", crate::tools::model_name(n))).collect();
            format!("unknown tool `{name}`; did you mean {}?", names.join(", "))
        };
        ToolError::new(ToolErrorKind::NotFound, message)
    }
}

/// Parses a model's argument text; empty text means no arguments.
pub(crate) fn parse_arguments(text: &str) -> Result<Value, ToolError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text).map_err(|e| ToolError::invalid_input(format!("arguments are not valid JSON: {e}")))
}
