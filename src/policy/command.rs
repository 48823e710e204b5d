//! `,policy`: what the gateway policy says here, from inside the chat.
//!
//! - `,policy show`: every key of this chat's policy, its value and the layer
//!   that set it.
//! - `,policy explain TOOL [USER]`: whether `TOOL` may run here as a model
//!   call (and, for tools that can exec, write or reach the network, as one
//!   while untrusted text is in the context) and as a comma command (for
//!   `USER`, default: whoever asks), and the rule that decided.
//!
//! Command-only: the model never sees it.

use super::effective::{EffectivePolicy, Verdict};
use super::enforce::SessionPolicy;
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

/// Show this chat's gateway policy, or explain why a tool is allowed or denied here.
#[derive(Deserialize, JsonSchema)]
pub struct PolicyArgs {
    /// `show` (the default) or `explain`.
    #[serde(default)]
    pub action: Option<String>,
    /// For `explain`: the tool, by registry or model name (`bash`, `fs.write`).
    #[serde(default)]
    pub tool: Option<String>,
    /// For `explain`: the user (`<channel>:<user id>`); default: you.
    #[serde(default)]
    pub user: Option<String>,
}

/// The `policy` command tool.
pub fn policy_tool() -> Tool {
    Tool::typed("policy", |args: PolicyArgs, ctx: ToolContext| async move {
        let Some(session) = ctx.state.extension::<SessionPolicy>() else {
            return Ok("no gateway policy for this session (policies apply to chats the gateway serves)".to_string());
        };
        match args.action.as_deref().map(str::trim).unwrap_or("show") {
            "show" | "" => Ok(session.policy.describe()),
            "explain" => {
                let Some(tool) = args.tool.filter(|t| !t.trim().is_empty()) else {
                    return Err(ToolError::invalid_input("usage: policy explain TOOL [USER]"));
                };
                let context = super::provenance::first_untrusted(&ctx.tape).await?.map(|(_, reason)| reason);
                let user = args.user.as_deref().unwrap_or(&session.user);
                Ok(explain(&session, &ctx, tool.trim(), user, context.as_deref()))
            }
            other => Err(ToolError::invalid_input(format!("unknown action `{other}`: use `show` or `explain`"))),
        }
    })
    .command_only()
    .with_capabilities([Capability::Read])
}

/// Two verdicts, model call and command, for one tool and user; for a tool
/// the provenance rule guards, also what the chat's context holds now
/// (`untrusted`: why it is untrusted).
fn explain(session: &SessionPolicy, ctx: &ToolContext, tool: &str, user: &str, untrusted: Option<&str>) -> String {
    // Accept model names (`fs_write`) the way tool lookups do.
    let found = ctx.host.as_ref().and_then(|host| {
        let catalogue = host.catalogue();
        catalogue.get(tool).map(|t| (t.name().to_string(), t.capabilities()))
    });
    let (tool, capabilities) = found.unwrap_or((tool.to_string(), crate::tools::Capabilities::ALL));
    Explanation::of(&session.policy, &tool, capabilities, user, session.chat_kind.is_shared()).describe(Some(untrusted))
}

/// Whether a tool may run for a user in a chat, as a model call and as a
/// comma command, and (for a tool the provenance rule guards) with
/// untrusted text in the context: what `,policy explain` says, and what
/// the admin console's explain form shows for any chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub tool: String,
    pub capabilities: crate::tools::Capabilities,
    pub user: String,
    pub channel: String,
    pub chat_id: String,
    /// A group chat or thread (rule 4 applies).
    pub shared: bool,
    pub model_call: Verdict,
    pub command: Verdict,
    /// For tools that can exec, write or reach the network: a model call
    /// while untrusted text is in the context.
    pub with_untrusted_context: Option<Verdict>,
}

impl Explanation {
    /// The verdicts of `policy` for `tool` (with `capabilities`) and `user`.
    pub fn of(
        policy: &EffectivePolicy,
        tool: &str,
        capabilities: crate::tools::Capabilities,
        user: &str,
        shared: bool,
    ) -> Explanation {
        let model_call = policy.tool_verdict(tool, capabilities, Some(user), shared, false);
        let command = policy.tool_verdict(tool, capabilities, Some(user), shared, true);
        let with_untrusted_context =
            policy.untrusted_context_verdict(tool, capabilities).filter(|_| model_call.allowed);
        Explanation {
            tool: tool.to_string(),
            capabilities,
            user: user.to_string(),
            channel: policy.channel.clone(),
            chat_id: policy.chat_id.clone(),
            shared,
            model_call,
            command,
            with_untrusted_context,
        }
    }

    /// As `,policy explain` words it. `context`: what a session's context
    /// holds now — `Some(Some(why))` untrusted text, `Some(None)` nothing
    /// untrusted; `None`: no session looked at (the admin console), so
    /// nothing is said about it.
    pub fn describe(&self, context: Option<Option<&str>>) -> String {
        let Explanation { tool, capabilities, user, channel, chat_id, .. } = self;
        let kind = if self.shared { "group" } else { "direct" };
        let word = |allowed: bool| if allowed { "allowed" } else { "denied" };
        let untrusted = match (&self.with_untrusted_context, context) {
            (Some(rule), None) => {
                format!("\n  model call with untrusted text in the context: {} — {}", word(rule.allowed), rule.rule)
            }
            (Some(rule), Some(now)) => {
                let now = match now {
                    Some(reason) if !rule.allowed => format!(
                        "the context holds {reason}, so the model's calls of {tool} are denied now, until an \
                         operator writes an anchor (`,tape.handoff`; an anchor the model writes keeps the origin)"
                    ),
                    Some(reason) => format!("the context holds {reason}"),
                    None => "nothing untrusted since the last anchor".to_string(),
                };
                format!(
                    "\n  model call with untrusted text in the context: {} — {}\n  context now: {now}",
                    word(rule.allowed),
                    rule.rule
                )
            }
            (None, _) => String::new(),
        };
        format!(
            "{tool} ({capabilities}) for {user} in this {kind} chat ({channel}/{chat_id}):\n  model call: {} — {}{untrusted}\n  command: {} — {}",
            word(self.model_call.allowed),
            self.model_call.rule,
            word(self.command.allowed),
            self.command.rule
        )
    }
}
