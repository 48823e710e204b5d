//! Who gains or loses what between two configs ([`access_diff`]): the
//! console's preview, which an admin reads before saving a new file.
//!
//! Every verdict is the one the gateway would reach: each file resolves the
//! subject's [`EffectivePolicy`](super::EffectivePolicy) and its own rules
//! decide (`tool_verdict`, `admission`, `provenance`,
//! `untrusted_context_verdict`); this module only compares the two answers
//! (`facets.rs`) and words the difference (`wording.rs`).
//!
//! # Subjects, in this order
//! 1. Each channel (the new file's order, then the removed ones): its chats
//!    that are not configured one by one, as a new direct chat and a new
//!    group chat see them, and a stranger writing there (the user `NAME:*`,
//!    whom `NAME:*` and `*` entries name). A channel in one file only is one
//!    line: added or removed.
//! 2. Each configured chat (`[channels.X.chats."ID"]`, in either file) of a
//!    channel in both: the same facets, in that chat. A change on the
//!    channel shows on every configured chat that inherits it, since each
//!    line is that chat's own, whole answer.
//! 3. Each user named in either file (`allow_users`, `operators`), as
//!    written: direct messages, group chats, trust, and the comma commands
//!    they may run in new chats and in each configured chat of their
//!    channel. A pattern stands for everyone it names: `tg:*` is looked at
//!    as the user `tg:*`, whom only `tg:*` and `*` entries match; `*` on each
//!    channel as that channel's `NAME:*`.
//!
//! Subjects with no change are left out; each sentence says what is gained
//! or lost and, in parentheses, the keys whose change caused it.

mod facets;
mod wording;

use crate::config::{ChannelConfig, GatewayConfig};
use crate::tools::Capabilities;
use facets::Scene;
use schemars::JsonSchema;
use serde::Serialize;
use wording::Where;

/// What a new config changes, subject by subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AccessDiff {
    /// Channels first, then configured chats, then users; only those with a change.
    pub changes: Vec<AccessChange>,
}

impl AccessDiff {
    /// Does the new config open anything wider, for anyone?
    pub fn widens(&self) -> bool {
        self.changes.iter().any(|change| change.widens)
    }
}

/// What one subject gains and loses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AccessChange {
    pub subject: Subject,
    /// One sentence each: `` `bash` (exec) as a model call in group chats ``.
    pub gains: Vec<String>,
    pub loses: Vec<String>,
    /// Changes neither wider nor narrower (another model, another channel kind).
    pub other: Vec<String>,
    /// Anything was gained.
    pub widens: bool,
}

/// Whom a change affects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Subject {
    /// A channel's chats that are not configured one by one.
    Channel { channel: String },
    /// `[channels.CHANNEL.chats."CHAT"]`, configured in either file.
    Chat { channel: String, chat: String },
    /// A user or pattern as written in `allow_users` or `operators` (`tg:42`, `tg:*`, `*`).
    User { user: String },
}

/// The sentences of one subject, before they become an [`AccessChange`].
#[derive(Debug, Default)]
struct Delta {
    gains: Vec<String>,
    loses: Vec<String>,
    other: Vec<String>,
}

/// Who gains or loses what when `new` replaces `old`. `tools`: the agent's
/// tools and what each can do (the running agent's), the tools whose
/// verdicts are compared.
pub fn access_diff(old: &GatewayConfig, new: &GatewayConfig, tools: &[(String, Capabilities)]) -> AccessDiff {
    let mut changes = Vec::new();
    let mut push = |subject: Subject, delta: Delta| {
        if !delta.gains.is_empty() || !delta.loses.is_empty() || !delta.other.is_empty() {
            let widens = !delta.gains.is_empty();
            changes.push(AccessChange { subject, gains: delta.gains, loses: delta.loses, other: delta.other, widens });
        }
    };
    let channels = union(new.channels.keys(), old.channels.keys());
    for name in &channels {
        let subject = Subject::Channel { channel: name.clone() };
        match (old.channels.get(name), new.channels.get(name)) {
            (Some(was), Some(is)) => push(subject, channel(old, new, name, was, is, tools)),
            (None, Some(is)) => push(subject, added(new, name, is)),
            (Some(was), None) => push(subject, Delta { loses: vec![removed(was)], ..Delta::default() }),
            (None, None) => {}
        }
    }
    for name in &channels {
        let (Some(was), Some(is)) = (old.channels.get(name), new.channels.get(name)) else { continue };
        for chat in union(is.chats.keys(), was.chats.keys()) {
            let scene = Scene::of(old, new, name, &chat, Where::chat(name, &chat, false));
            let subject = Subject::Chat { channel: name.clone(), chat };
            push(subject, chat_facets(&scene, name, tools, false));
        }
    }
    for user in users(old, new) {
        let on: Vec<&String> = match user.split_once(':') {
            Some((channel, _)) => channels.iter().filter(|c| *c == channel).collect(),
            None => channels.iter().collect(),
        };
        let mut delta = Delta::default();
        for channel in on {
            let representative = if user == "*" { format!("{channel}:*") } else { user.clone() };
            let spans = (user == "*").then_some(channel.as_str());
            user_facets(old, new, channel, &representative, spans, tools, &mut delta);
        }
        push(Subject::User { user }, delta);
    }
    AccessDiff { changes }
}

/// A channel in both files: its new chats, and the listed groups no chat
/// table configures.
fn channel(
    old: &GatewayConfig,
    new: &GatewayConfig,
    name: &str,
    was: &ChannelConfig,
    is: &ChannelConfig,
    tools: &[(String, Capabilities)],
) -> Delta {
    let fresh = fresh_chat(old, new, name);
    let scene = Scene::of(old, new, name, &fresh, Where::new_chats(None));
    let mut delta = chat_facets(&scene, name, tools, true);
    if was.kind.name() != is.kind.name() {
        delta.other.push(format!("kind {} → {}", was.kind.name(), is.kind.name()));
    }
    let listed = |config: &GatewayConfig| -> Vec<String> {
        config.effective(name, &fresh).allow_chats.value.into_iter().flatten().collect()
    };
    for chat in union(listed(old).iter(), listed(new).iter()) {
        if chat == "*" || was.chats.contains_key(&chat) || is.chats.contains_key(&chat) {
            continue;
        }
        let scene = Scene::of(old, new, name, &chat, Where::new_chats(None));
        facets::group_chat(&scene, &format!("the group chat {chat:?}"), false, &mut delta);
    }
    delta
}

/// What a chat gains or loses: a configured one, or (`new_chats`) a
/// channel's new ones.
fn chat_facets(scene: &Scene, channel: &str, tools: &[(String, Capabilities)], new_chats: bool) -> Delta {
    let mut delta = Delta::default();
    let stranger = format!("{channel}:*");
    facets::model_calls(scene, tools, &mut delta);
    facets::untrusted(scene, tools, &mut delta);
    match new_chats {
        true => {
            facets::direct_messages(scene, &stranger, " from anyone", "", &mut delta);
            facets::group_chat(scene, "group chats", true, &mut delta);
            facets::group_senders(scene, &stranger, " from anyone", "", &mut delta);
        }
        false => {
            facets::direct_messages(scene, &stranger, " from anyone", " if it is a direct chat", &mut delta);
            facets::group_chat(scene, "answered as a group chat", false, &mut delta);
            facets::group_senders(scene, &stranger, " from anyone", " if it is a group chat", &mut delta);
        }
    }
    facets::rates(scene, &mut delta);
    facets::reach(scene, &mut delta);
    facets::model(scene, &mut delta);
    delta
}

/// What `user` gains or loses on `channel`: in its new chats, then in each
/// of its configured chats. `spans`: the channel, named in each sentence
/// when the subject (`*`) spans several.
fn user_facets(
    old: &GatewayConfig,
    new: &GatewayConfig,
    channel: &str,
    user: &str,
    spans: Option<&str>,
    tools: &[(String, Capabilities)],
    delta: &mut Delta,
) {
    let fresh = fresh_chat(old, new, channel);
    let scene = Scene::of(old, new, channel, &fresh, Where::new_chats(spans));
    let on = scene.place.alone.clone();
    facets::direct_messages(&scene, user, "", &on, delta);
    facets::group_senders(&scene, user, "", &on, delta);
    facets::trust(&scene, user, delta);
    facets::commands(&scene, tools, user, delta);
    let chats = |config: &GatewayConfig| config.channels.get(channel).map(|c| c.chats.keys().cloned().collect());
    let configured: Vec<String> =
        union(chats(new).unwrap_or_else(Vec::new).iter(), chats(old).unwrap_or_else(Vec::new).iter());
    for chat in configured {
        let scene = Scene::of(old, new, channel, &chat, Where::chat(channel, &chat, true));
        let here = scene.place.alone.clone();
        facets::group_senders(&scene, user, "", &here, delta);
        facets::commands(&scene, tools, user, delta);
    }
}

/// The one line of a channel only the new file has.
fn added(new: &GatewayConfig, name: &str, channel: &ChannelConfig) -> Delta {
    let policy = new.effective(name, &fresh_chat(new, new, name));
    let line = format!(
        "channel added ({}): dm_policy {}, group_policy {}, environment {}",
        channel.kind.name(),
        policy.dm_policy.value,
        policy.group_policy.value,
        policy.environment.value
    );
    Delta { gains: vec![line], ..Delta::default() }
}

/// The one line of a channel only the old file has.
fn removed(channel: &ChannelConfig) -> String {
    format!("channel removed ({}): the bot no longer answers there", channel.kind.name())
}

/// A chat id neither file configures or lists on `channel`: what a new chat is.
fn fresh_chat(old: &GatewayConfig, new: &GatewayConfig, channel: &str) -> String {
    let taken = |id: &str| {
        [old, new].iter().any(|config| {
            config.channels.get(channel).is_some_and(|c| c.chats.contains_key(id))
                || config.layers().iter().any(|(_, layer)| layer.allow_chats.iter().flatten().any(|c| c == id))
        })
    };
    let mut id = "(new chat)".to_string();
    while taken(&id) {
        id.push('\'');
    }
    id
}

/// The users `allow_users` and `operators` name in either file, as written:
/// the new file's in order, then the old file's others.
fn users(old: &GatewayConfig, new: &GatewayConfig) -> Vec<String> {
    let named = |config: &GatewayConfig| -> Vec<String> {
        let mut names = Vec::new();
        for (_, layer) in config.layers() {
            let allowed = layer.allow_users.iter().flatten().map(|u| u.get_ref().to_string());
            let operators = layer.operators.iter().flatten().map(|op| op.get_ref().user.to_string());
            names.extend(allowed.chain(operators));
        }
        names
    };
    union(named(new).iter(), named(old).iter())
}

/// `first`'s items in order, then `second`'s others, each once.
fn union<'a>(first: impl Iterator<Item = &'a String>, second: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for item in first.chain(second) {
        if !all.contains(item) {
            all.push(item.clone());
        }
    }
    all
}

#[cfg(test)]
mod tests;
