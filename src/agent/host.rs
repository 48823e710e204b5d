//! The agent's side of [`ToolHost`]: what a tool call may ask of the agent.
//!
//! Every call gets an [`AgentHost`]; builtin and outside tools see only the
//! [`ToolHost`] methods. The agent's own tools (`subagent`) downcast it back
//! to the agent with [`AgentHost::agent_of`]: the type is private to the
//! crate, so no tool written elsewhere can start runs or add tools.

use super::run::RunCompaction;
use super::runtime::Agent;
use crate::message::tokens::TokenCounter;
use crate::tools::{ContextLimits, ToolContext, ToolHost, ToolRegistry, TurnState};
use std::any::Any;
use std::sync::Arc;

/// The agent, behind the narrow [`ToolHost`] handle.
pub(crate) struct AgentHost(pub Agent);

impl AgentHost {
    /// The agent running the call, for the agent's own tools.
    pub fn agent_of(ctx: &ToolContext) -> Option<&Agent> {
        let host: &dyn Any = ctx.host.as_deref()?;
        host.downcast_ref::<AgentHost>().map(|host| &host.0)
    }
}

impl ToolHost for AgentHost {
    fn catalogue(&self) -> Arc<ToolRegistry> {
        self.0.tools()
    }

    fn default_model(&self) -> Option<String> {
        self.0.default_model().map(str::to_string)
    }

    fn command_prefix(&self) -> Option<String> {
        self.0.command_prefix().map(str::to_string)
    }

    fn context_limits(&self, state: &TurnState, model: &str, system: Option<&str>) -> Option<ContextLimits> {
        let overrides = state.extension::<RunCompaction>().map(|c| c.0).unwrap_or_default();
        let settings = self.0.compaction().with(&overrides);
        let fixed = self.0.fixed_part(&TokenCounter::for_model(model), system);
        let budget = settings.budget(settings.window_for(model), fixed);
        Some(ContextLimits { window: budget.window, threshold: budget.threshold, fixed: budget.fixed })
    }
}
