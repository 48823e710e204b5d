//! The sentences of an [`AccessDiff`](super::AccessDiff): what an admin
//! reads. Each names what is gained or lost, where, and — in parentheses —
//! the keys whose change caused it (`dm_policy pairing → open`).

use crate::config::{Operator, Rate};
use crate::tools::Capabilities;
use std::fmt::Display;

/// Where a sentence holds, as the phrases that end it: a tool allowed in
/// both kinds of chat, in direct chats only, in group chats only, and a
/// fact that does not depend on the kind (`alone`).
#[derive(Debug, Clone)]
pub(super) struct Where {
    pub both: String,
    pub direct: String,
    pub group: String,
    pub alone: String,
}

impl Where {
    /// A channel's new chats; `on`: the channel, when the subject spans several (`*`).
    pub fn new_chats(on: Option<&str>) -> Where {
        let on = on.map_or(String::new(), |channel| format!(" on {channel}"));
        Where {
            both: format!(" in direct and group chats{on}"),
            direct: format!(" in direct chats{on}"),
            group: format!(" in group chats{on}"),
            alone: on,
        }
    }

    /// One configured chat; `named`: say which (the subject is not the chat itself).
    pub fn chat(channel: &str, chat: &str, named: bool) -> Where {
        let here = if named { format!(" in chat {chat:?} on {channel}") } else { String::new() };
        Where {
            both: here.clone(),
            direct: format!("{here} if it is a direct chat"),
            group: format!("{here} if it is a group chat"),
            alone: here,
        }
    }

    /// The phrase for a tool gained or lost in these kinds of chat.
    pub fn kinds(&self, direct: bool, group: bool) -> &str {
        match (direct, group) {
            (true, true) => &self.both,
            (true, false) => &self.direct,
            _ => &self.group,
        }
    }
}

/// `` `fs.write` (write) ``: a tool and what it can do.
pub(super) fn tool(name: &str, capabilities: Capabilities) -> String {
    if capabilities == Capabilities::NONE { format!("`{name}`") } else { format!("`{name}` ({capabilities})") }
}

/// `` `bash` (exec) as a model call in group chats ``.
pub(super) fn model_calls(tools: &[String], place: &str) -> String {
    let what = if tools.len() == 1 { "a model call" } else { "model calls" };
    format!("{} as {what}{place}", tools.join(", "))
}

/// `` may run `bash` (exec) as a comma command ``.
pub(super) fn commands(tools: &[String], place: &str) -> String {
    let what = if tools.len() == 1 { "a comma command" } else { "comma commands" };
    format!("may run {} as {what}{place}", tools.join(", "))
}

/// `` `web.fetch` (network) while untrusted text is in the context ``.
pub(super) fn untrusted(tools: &[String], place: &str) -> String {
    format!("{} while untrusted text is in the context{place}", tools.join(", "))
}

/// ` (dm_policy pairing → open, allow_users unset → [`tg:1`])`: the keys
/// that changed, `(key, old, new)`; empty when none did.
pub(super) fn cause(keys: &[(&str, String, String)]) -> String {
    let changed: Vec<String> =
        keys.iter().filter(|(_, old, new)| old != new).map(|(key, old, new)| format!("{key} {old} → {new}")).collect();
    if changed.is_empty() { String::new() } else { format!(" ({})", changed.join(", ")) }
}

/// A list key's value: `unset`, or its items in backquotes.
pub(super) fn list<T: Display>(items: Option<&[T]>) -> String {
    match items {
        None => "unset".to_string(),
        Some(items) => {
            let items: Vec<String> = items.iter().map(|item| format!("`{item}`")).collect();
            format!("[{}]", items.join(", "))
        }
    }
}

/// `operators`: each user, with the commands they are limited to.
pub(super) fn operators(operators: Option<&[Operator]>) -> String {
    let Some(operators) = operators else { return "unset".to_string() };
    let each: Vec<String> = operators
        .iter()
        .map(|op| match &op.commands {
            None => format!("`{}`", op.user),
            Some(commands) => {
                let commands: Vec<String> = commands.iter().map(|c| format!("`{}`", c.get_ref())).collect();
                format!("`{}` for {}", op.user, commands.join(", "))
            }
        })
        .collect();
    format!("[{}]", each.join(", "))
}

/// A rate limit, or `none (no limit)`.
pub(super) fn rate(rate: Option<Rate>) -> String {
    rate.map_or("none (no limit)".to_string(), |rate| rate.to_string())
}

/// An optional value, or what its absence means.
pub(super) fn or<T: Display>(value: Option<&T>, absent: &str) -> String {
    value.map_or(absent.to_string(), T::to_string)
}
