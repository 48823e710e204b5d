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
    let shared = session.chat_kind.is_shared();
    let policy = &session.policy;
    let kind = if shared { "group" } else { "direct" };
    let as_model = policy.tool_verdict(&tool, capabilities, Some(user), shared, false);
    let as_command = policy.tool_verdict(&tool, capabilities, Some(user), shared, true);
    let word = |allowed: bool| if allowed { "allowed" } else { "denied" };
    let untrusted = match (policy.untrusted_context_verdict(&tool, capabilities), untrusted) {
        (Some(rule), now) if as_model.allowed => {
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
        _ => String::new(),
    };
    format!(
        "{tool} ({capabilities}) for {user} in this {kind} chat ({}/{}):\n  model call: {} — {}{untrusted}\n  command: {} — {}",
        policy.channel,
        policy.chat_id,
        word(as_model.allowed),
        as_model.rule,
        word(as_command.allowed),
        as_command.rule
    )
}
