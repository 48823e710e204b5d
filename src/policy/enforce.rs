//! Enforcement: the gateway puts a [`SessionPolicy`] in each run's
//! [`TurnState`](crate::agent::TurnState); [`enforce`] registers the one
//! `BeforeToolCall` handler that denies what that policy does not allow.
//!
//! One handler covers every way a tool can be reached: model calls, comma
//! commands (`call.command`, which also need an operator), the shell
//! fallback for unknown commands (a `bash` call with `command = true`) and
//! calls made by code under `run_code` (`call.code_mode`). Runs without a
//! `SessionPolicy` (the CLI, library users) are left alone.

use super::config::GatewayConfig;
use super::effective::EffectivePolicy;
use crate::agent::events::{BeforeToolCall, ToolCallDecision};
use crate::agent::{Agent, HandlerId};
use bub_channel::ChatKind;
use std::sync::Arc;

/// The policy a run is under, and who it runs for. Stored as a typed
/// extension: `state.insert_extension(SessionPolicy { .. })`.
#[derive(Debug, Clone)]
pub struct SessionPolicy {
    pub policy: Arc<EffectivePolicy>,
    /// `<channel>:<user id>` of the person whose message started the run.
    pub user: String,
    pub chat_kind: ChatKind,
}

impl SessionPolicy {
    /// The policy of `chat_id` on `channel` for `user`. Chat layers are keyed
    /// by the platform's chat id, so a thread gets the layer of its chat.
    pub fn for_chat(
        config: &GatewayConfig,
        channel: &str,
        chat_id: &str,
        user: impl Into<String>,
        chat_kind: ChatKind,
    ) -> SessionPolicy {
        SessionPolicy { policy: Arc::new(config.effective(channel, chat_id)), user: user.into(), chat_kind }
    }
}

/// Registers the policy handler on `agent`'s bus. Register it before
/// handlers that replace results, so a denied call never reaches them.
pub fn enforce(agent: &Agent) -> HandlerId {
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        let Some(session) = event.run.state.extension::<SessionPolicy>() else { return Ok(()) };
        let call = &event.call;
        let verdict =
            session.policy.tool_verdict(&call.tool, Some(&session.user), session.chat_kind.is_shared(), call.command);
        if !verdict.allowed {
            tracing::info!(
                run_id = %event.run.run_id,
                channel = %session.policy.channel,
                chat = %session.policy.chat_id,
                user = %session.user,
                tool = %call.tool,
                command = call.command,
                code_mode = call.code_mode,
                reason = %verdict.rule,
                "tool call denied by policy"
            );
            event.decision = Some(ToolCallDecision::Deny(verdict.rule));
        }
        Ok(())
    })
}
