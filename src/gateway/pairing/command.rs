//! `,pairing`: pairing from inside a chat, for operators (it is not among
//! the read-only commands, so only the `operators` a policy names reach it).
//!
//! - `,pairing list`: approved users and chats, and pending codes, of this channel;
//! - `,pairing approve CODE`: approves a pending code of this channel;
//! - `,pairing revoke ID`: removes the approval (or pending code) of a user or chat id.
//!
//! Command-only: the model never sees it.

use super::store::{PairingRecord, PairingStore};
use crate::policy::SessionPolicy;
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

/// List, approve or revoke pairings of this channel.
#[derive(Deserialize, JsonSchema)]
pub struct PairingArgs {
    /// `list` (the default), `approve` or `revoke`.
    #[serde(default)]
    pub action: Option<String>,
    /// For `approve`: the code (`ABCD-EFGH`); for `revoke`: the user or chat id.
    #[serde(default)]
    pub target: Option<String>,
}

/// The tool's name.
pub const NAME: &str = "pairing";

/// The `pairing` command tool, over the gateway's pairing table.
pub fn pairing_tool(store: PairingStore) -> Tool {
    Tool::typed(NAME, move |args: PairingArgs, ctx: ToolContext| {
        let store = store.clone();
        async move {
            let Some(session) = ctx.state.extension::<SessionPolicy>() else {
                return Err(ToolError::invalid_input("pairing applies to chats the gateway serves"));
            };
            let channel = session.policy.channel.clone();
            let target = args.target.as_deref().map(str::trim).filter(|t| !t.is_empty());
            let failed = |error: &dyn std::fmt::Display| ToolError::failed(error.to_string());
            match (args.action.as_deref().map(str::trim).unwrap_or("list"), target) {
                ("list" | "", _) => {
                    let records = store.list(Some(&channel)).await.map_err(|e| failed(&e))?;
                    Ok(describe(&channel, &records))
                }
                ("approve", Some(code)) => {
                    let approved = store.approve(&channel, code, &session.user).await.map_err(|e| failed(&e))?;
                    let who = approved.display.map_or(approved.id.clone(), |name| format!("{name} ({})", approved.id));
                    let what = super::store::subject_name(approved.subject);
                    Ok(format!("approved {what} {who} on {channel}"))
                }
                ("revoke", Some(id)) => match store.revoke(&channel, id).await.map_err(|e| failed(&e))? {
                    0 => Err(ToolError::invalid_input(format!("{id} has no pairing on {channel}"))),
                    _ => Ok(format!("revoked {id} on {channel}")),
                },
                ("approve" | "revoke", None) => {
                    Err(ToolError::invalid_input("usage: pairing approve CODE | revoke ID"))
                }
                (other, _) => {
                    Err(ToolError::invalid_input(format!("unknown action `{other}`: use list, approve or revoke")))
                }
            }
        }
    })
    .command_only()
    .with_capabilities([Capability::Session])
}

/// One line per record, for `,pairing list` and `bub pairing list`.
pub fn describe(channel: &str, records: &[PairingRecord]) -> String {
    if records.is_empty() {
        return format!("no pairings on {channel}");
    }
    let lines: Vec<String> = records.iter().map(record_line).collect();
    lines.join("\n")
}

/// `tg  user 42 (Ada)  pending ABCD-EFGH since …` or `… approved by tg:1 at …`;
/// a group's pending code says who asked for it (`chat -100 (asked by user 7)`).
pub fn record_line(record: &PairingRecord) -> String {
    let who = match (&record.display, &record.requested_by) {
        (Some(name), _) => format!("{} ({name})", record.id),
        (None, Some(by)) if record.subject == "chat" && record.code.is_some() => {
            format!("{} (asked by user {by})", record.id)
        }
        (None, _) => record.id.clone(),
    };
    let state = match (&record.code, &record.approved_by) {
        (Some(code), _) => format!("pending {code} since {}", record.requested_at),
        (None, by) => {
            format!("approved by {} at {}", by.as_deref().unwrap_or("?"), record.approved_at.as_deref().unwrap_or("?"))
        }
    };
    format!("{}  {} {who}  {state}", record.channel, record.subject)
}
