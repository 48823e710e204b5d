//! Enforcement: the gateway puts a [`SessionPolicy`] in each run's
//! [`TurnState`](crate::agent::TurnState); [`enforce`] registers the one
//! `BeforeToolCall` handler that denies what that policy does not allow.
//!
//! One handler covers every way a tool can be reached: model calls, comma
//! commands (`call.command`, which also need an operator), the shell
//! fallback for unknown commands (a `bash` call with `command = true`) and
//! calls made by code under `run_code` (`call.code_mode`). Runs without a
//! `SessionPolicy` (the CLI, library users) are left alone, and so is the
//! loop's `tools.describe` of a turn past the tool-schema budget, which
//! shows only the schemas of what the run is offered
//! ([`crate::agent::tool_budget`]).
//!
//! The same handler applies the provenance rule ([`super::provenance`]): a
//! model's call (direct or from code) of a tool that can exec, write or
//! reach the network is denied while untrusted text is in the context,
//! unless `allow_with_untrusted_context` names it. Before a model's call of a
//! tool that changes the session (`tape.handoff`, `tape.reset`: capability
//! `session`) it reads the context's origin, so the anchor that call writes
//! carries the untrusted text it closes, and the calls of the same step are
//! judged with what the step saw, not with the new anchor. After each
//! model's call, a second handler marks the untrusted text the result
//! carried in ([`super::carried`]).

use super::effective::{EffectivePolicy, Verdict};
use super::{carried, provenance};
use crate::agent::events::{AfterToolCall, BeforeToolCall, ToolCallDecision};
use crate::agent::{Agent, HandlerId};
use crate::config::GatewayConfig;
use crate::tools::Capability;
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
    /// Puts this policy on a run's turn state, with the
    /// [`CommandGate`](crate::tools::CommandGate) that makes `,help` list what
    /// this user may run here: the same list as their platform command menu.
    pub fn install(self, state: &crate::tools::TurnState) {
        let (policy, user, shared) = (self.policy.clone(), self.user.clone(), self.chat_kind.is_shared());
        state.insert_extension(crate::tools::CommandGate(Arc::new(move |tool, capabilities| {
            policy.tool_verdict(tool, capabilities, Some(&user), shared, true).allowed
        })));
        state.insert_extension(self);
    }

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

/// Registers the policy handlers on `agent`'s bus (the returned id is the
/// `BeforeToolCall` one). Register them before handlers that replace
/// results, so a denied call never reaches them.
pub fn enforce(agent: &Agent) -> HandlerId {
    agent.events().on(|event: AfterToolCall| async move {
        if event.call.command || event.run.state.extension::<SessionPolicy>().is_none() {
            return Ok(event);
        }
        carried::follow(&event).await?;
        Ok(event)
    });
    agent.events().on(|mut event: BeforeToolCall| async move {
        let Some(session) = event.run.state.extension::<SessionPolicy>() else { return Ok(event) };
        let call = &event.call;
        // The loop's `tools.describe` reads the schemas of what this run is offered, nothing more.
        if !call.command && crate::agent::tool_budget::is_turn_describe(&call.tool, &event.run.state) {
            return Ok(event);
        }
        let shared = session.chat_kind.is_shared();
        let mut verdict =
            session.policy.tool_verdict(&call.tool, event.capabilities, Some(&session.user), shared, call.command);
        // The provenance rule: not for commands (an operator typed them). A
        // model's anchor carries what the context it closes held, so that is
        // read before a tool that changes the session writes one.
        let model_call = verdict.allowed && !call.command;
        let guarded = session.policy.untrusted_context_verdict(&call.tool, event.capabilities).filter(|_| model_call);
        if guarded.is_some() || (model_call && event.capabilities.contains(Capability::Session)) {
            let unreadable = |error: crate::tape::TapeError| Verdict {
                allowed: false,
                rule: format!(
                    "{} is denied: where this conversation's text came from cannot be read ({error})",
                    call.tool
                ),
            };
            match (provenance::untrusted_context(&event.run).await, guarded) {
                (Err(error), _) => verdict = unreadable(error),
                (Ok(Some(reason)), Some(rule)) if !rule.allowed => {
                    verdict = Verdict { allowed: false, rule: format!("the context holds {reason}: {}", rule.rule) };
                }
                (Ok(_), Some(_)) if event.capabilities.contains(Capability::Network) => {
                    provenance::outside_text_enters(&event.run, &call.tool).await?;
                }
                (Ok(_), _) => {}
            }
        }
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
        Ok(event)
    })
}
