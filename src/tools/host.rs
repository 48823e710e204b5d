//! [`ToolHost`]: the little a tool may ask of the agent running it.
//!
//! Tools never see the agent: a tool that could reach it could add tools,
//! start runs or read other sessions, and the tools layer could not become a
//! crate others build tools on. So a call carries this narrow handle instead
//! ([`ToolContext::host`](super::ToolContext::host)), implemented by the agent:
//! the tool catalogue (for `,help` and `,policy explain`), the default model
//! (for `,model`) and the command prefix. Everything else a tool needs comes
//! with the call itself (tape, turn state, workspace, environment).
//!
//! Starting a sub-run is deliberately not here: `subagent` is a tool the agent
//! provides (`bub::agent::subagent_tool`), the one place that may start runs.
//! It finds its agent by downcasting the host (`ToolHost: Any`) to the agent's
//! own type, which nothing outside `agent/` can name.

use super::{ToolRegistry, TurnState};
use std::any::Any;
use std::sync::Arc;

/// What the agent running a call offers the tool. `None` on a context made
/// outside any agent ([`ToolContext::detached`](super::ToolContext::detached)).
pub trait ToolHost: Any + Send + Sync {
    /// A snapshot of every tool the agent has, command-only ones included,
    /// in registration order: names, descriptions, schemas and capabilities.
    fn catalogue(&self) -> Arc<ToolRegistry>;

    /// The `provider:model` a run uses when neither it nor its session chose one.
    fn default_model(&self) -> Option<String>;

    /// The comma-command prefix (`,`), when the agent takes commands.
    fn command_prefix(&self) -> Option<String>;

    /// How `model`'s window is shared out for the run on `state` (its
    /// chat's window may be its own) when the system prompt is `system`
    /// (for `tape.info`); `None` when the agent does not compact.
    fn context_limits(&self, _state: &TurnState, _model: &str, _system: Option<&str>) -> Option<ContextLimits> {
        None
    }
}

/// A model's window shared out, in tokens, as [`ToolHost::context_limits`]
/// tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimits {
    pub window: u64,
    /// Where compaction starts.
    pub threshold: u64,
    /// The system prompt and the tool schemas: in every request, never compacted.
    pub fixed: u64,
}

/// Which comma commands the person running this one may run, by tool name
/// and capabilities: put on the turn state by whoever decides (the gateway's
/// policy, [`crate::policy::SessionPolicy::install`]), so `,help` lists only
/// those. Without one, every command is listed.
#[derive(Clone)]
pub struct CommandGate(pub Arc<MayRun>);

/// `may_run(tool, capabilities)`: whether the asker may run that command.
pub type MayRun = dyn Fn(&str, crate::tools::Capabilities) -> bool + Send + Sync;

impl std::fmt::Debug for CommandGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommandGate")
    }
}
