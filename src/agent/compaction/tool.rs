//! `,tape.compact`: an operator compacts the session's context now.

use super::Trigger;
use crate::agent::host::AgentHost;
use crate::agent::run::{PinnedModel, RunCompaction};
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

/// Summarise the older part of this session's context now, keeping the most
/// recent turns verbatim (the entries stay on the tape for tape.search).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TapeCompactArgs {}

/// `,tape.compact` (command only: an operator's, as `tape.reset` is).
pub fn tape_compact_tool() -> Tool {
    Tool::typed("tape.compact", |_: TapeCompactArgs, ctx: ToolContext| async move {
        let agent = AgentHost::agent_of(&ctx)
            .cloned()
            .ok_or_else(|| ToolError::failed("tape.compact needs a running agent"))?;
        let model = match ctx.state.extension::<PinnedModel>() {
            Some(pinned) => Some(pinned.0.clone()),
            None => agent.session_model(&ctx.tape).await?,
        };
        let model = model.ok_or_else(|| ToolError::failed(super::CompactionError::NoModel.to_string()))?;
        let overrides = ctx.state.extension::<RunCompaction>().map(|c| c.0).unwrap_or_default();
        let settings = agent.compaction().with(&overrides);
        match agent.compact_tape(&ctx.tape, &model, &settings, Trigger::Command).await {
            Ok(Some(done)) => {
                let kept = match done.keep_from {
                    Some(from) => format!("; entries from #{from} on are kept as they are"),
                    None => String::new(),
                };
                let words = done.summary.split_whitespace().count();
                Ok(format!(
                    "compacted: entries {}-{} summarised in {words} words{kept}; they stay on the tape for tape.search",
                    done.covers.0, done.covers.1
                ))
            }
            Ok(None) => Ok("nothing to compact yet: the context is only recent turns".to_string()),
            Err(error) => Err(ToolError::failed(format!("compaction failed, the context is unchanged: {error}"))),
        }
    })
    .command_only()
    .with_capabilities([Capability::Session])
}
