//! The facets compared between the two files, one function each. Every
//! verdict comes from the [`EffectivePolicy`] of each file — `tool_verdict`,
//! `admission`, `provenance`, `untrusted_context_verdict` — and is only
//! compared here: a rule changed in `effective.rs` changes the preview with it.

use super::Delta;
use super::wording::{self, Where};
use crate::config::{GatewayConfig, GroupPolicy, Rate};
use crate::policy::{Admission, EffectivePolicy};
use crate::tape::Provenance;
use crate::tools::Capabilities;
use bub_channel::ChatKind;

/// One place a subject is looked at, in both files.
pub(super) struct Scene {
    pub old: EffectivePolicy,
    pub new: EffectivePolicy,
    /// The chat id admission is asked about (a fresh one for a channel's new chats).
    pub chat: String,
    pub place: Where,
}

impl Scene {
    /// `chat` on `channel`, in each file.
    pub fn of(old: &GatewayConfig, new: &GatewayConfig, channel: &str, chat: &str, place: Where) -> Scene {
        Scene { old: old.effective(channel, chat), new: new.effective(channel, chat), chat: chat.to_string(), place }
    }
}

/// A key `admission` reads: how it is worded, and how the old file's value
/// is put back into a policy (to tell which change made the difference).
struct Key {
    name: &'static str,
    show: fn(&EffectivePolicy) -> String,
    restore: fn(&mut EffectivePolicy, &EffectivePolicy),
}

const DM_POLICY: Key = Key {
    name: "dm_policy",
    show: |p| p.dm_policy.value.to_string(),
    restore: |p, old| p.dm_policy = old.dm_policy.clone(),
};
const GROUP_POLICY: Key = Key {
    name: "group_policy",
    show: |p| p.group_policy.value.to_string(),
    restore: |p, old| p.group_policy = old.group_policy.clone(),
};
const ALLOW_USERS: Key = Key {
    name: "allow_users",
    show: |p| wording::list(p.allow_users.value.as_deref()),
    restore: |p, old| p.allow_users = old.allow_users.clone(),
};
const ALLOW_CHATS: Key = Key {
    name: "allow_chats",
    show: |p| wording::list(p.allow_chats.value.as_deref()),
    restore: |p, old| p.allow_chats = old.allow_chats.clone(),
};
const OPERATORS: Key = Key {
    name: "operators",
    show: |p| wording::operators(p.operators.value.as_deref()),
    restore: |p, old| p.operators = old.operators.clone(),
};

/// The tools each kind of chat offers the model (rules 2–4).
pub(super) fn model_calls(scene: &Scene, tools: &[(String, Capabilities)], delta: &mut Delta) {
    let allowed =
        |p: &EffectivePolicy, name: &str, caps, shared| p.tool_verdict(name, caps, None, shared, false).allowed;
    compare_tools(scene, tools, allowed, wording::model_calls, delta);
}

/// The comma commands `user` may run (rule 1, then the tool rules).
pub(super) fn commands(scene: &Scene, tools: &[(String, Capabilities)], user: &str, delta: &mut Delta) {
    let allowed =
        |p: &EffectivePolicy, name: &str, caps, shared| p.tool_verdict(name, caps, Some(user), shared, true).allowed;
    compare_tools(scene, tools, allowed, wording::commands, delta);
}

/// The tools that still run while untrusted text is in the context.
pub(super) fn untrusted(scene: &Scene, tools: &[(String, Capabilities)], delta: &mut Delta) {
    let allowed = |p: &EffectivePolicy, name: &str, caps, _shared| {
        p.untrusted_context_verdict(name, caps).is_some_and(|verdict| verdict.allowed)
    };
    let alone = scene.place.alone.clone();
    compare_tools(scene, tools, allowed, |tools, _| wording::untrusted(tools, &alone), delta);
}

/// Each tool's verdict in a direct and a group chat, in both files; what
/// was gained and lost, one sentence per kind of chat.
fn compare_tools(
    scene: &Scene,
    tools: &[(String, Capabilities)],
    allowed: impl Fn(&EffectivePolicy, &str, Capabilities, bool) -> bool,
    sentence: impl Fn(&[String], &str) -> String,
    delta: &mut Delta,
) {
    // Index: 0 both kinds, 1 direct chats only, 2 group chats only.
    let mut gained: [Vec<String>; 3] = Default::default();
    let mut lost: [Vec<String>; 3] = Default::default();
    let slot = |direct: bool, group: bool| match (direct, group) {
        (true, true) => Some(0),
        (true, false) => Some(1),
        (false, true) => Some(2),
        (false, false) => None,
    };
    for (name, caps) in tools {
        let was = [false, true].map(|shared| allowed(&scene.old, name, *caps, shared));
        let is = [false, true].map(|shared| allowed(&scene.new, name, *caps, shared));
        if let Some(i) = slot(is[0] && !was[0], is[1] && !was[1]) {
            gained[i].push(wording::tool(name, *caps));
        }
        if let Some(i) = slot(was[0] && !is[0], was[1] && !is[1]) {
            lost[i].push(wording::tool(name, *caps));
        }
    }
    let kinds = [(true, true), (true, false), (false, true)];
    for ((direct, group), (gained, lost)) in kinds.into_iter().zip(gained.iter().zip(&lost)) {
        let place = scene.place.kinds(direct, group);
        if !gained.is_empty() {
            delta.gains.push(sentence(gained, place));
        }
        if !lost.is_empty() {
            delta.loses.push(sentence(lost, place));
        }
    }
}

/// Admitted above pairing above refused.
fn level(admission: &Admission) -> u8 {
    match admission {
        Admission::Admitted => 2,
        Admission::NeedsPairing(_) => 1,
        Admission::Refused(_) => 0,
    }
}

/// A gain worded as the new level, or a loss worded as the old one
/// (`label(2)`: admitted, `label(1)`: once paired or approved), with the
/// keys that made the difference: of the `keys` that changed, those whose
/// old value alone would undo it (all that changed when none alone would).
fn compare_admission(
    scene: &Scene,
    admission: impl Fn(&EffectivePolicy) -> Admission,
    keys: &[Key],
    label: impl Fn(u8) -> String,
    delta: &mut Delta,
) {
    let (was, is) = (level(&admission(&scene.old)), level(&admission(&scene.new)));
    if was == is {
        return;
    }
    let changed: Vec<&Key> = keys.iter().filter(|key| (key.show)(&scene.old) != (key.show)(&scene.new)).collect();
    let deciding: Vec<&Key> = changed
        .iter()
        .copied()
        .filter(|key| {
            let mut undone = scene.new.clone();
            (key.restore)(&mut undone, &scene.old);
            level(&admission(&undone)) != is
        })
        .collect();
    let shown = if deciding.is_empty() { changed } else { deciding };
    let keys: Vec<(&str, String, String)> =
        shown.iter().map(|key| (key.name, (key.show)(&scene.old), (key.show)(&scene.new))).collect();
    let cause = wording::cause(&keys);
    if is > was {
        delta.gains.push(format!("{}{cause}", label(is)));
    } else {
        delta.loses.push(format!("{}{cause}", label(was)));
    }
}

/// Direct messages from `user` (a stranger: `NAME:*`); `who` names them
/// (` from anyone`, or nothing for the subject itself), `place` ends the sentence.
pub(super) fn direct_messages(scene: &Scene, user: &str, who: &str, place: &str, delta: &mut Delta) {
    let admission = |p: &EffectivePolicy| p.admission(user, ChatKind::Direct, &scene.chat);
    let label = |level| match level {
        2 => format!("direct messages{who}{place}"),
        _ => format!("direct messages{who}, once paired{place}"),
    };
    compare_admission(scene, admission, &[DM_POLICY, ALLOW_USERS, OPERATORS], label, delta);
}

/// Whether the group `scene.chat` is answered: `admission`'s chat half
/// (group_policy, allow_chats, approval), its sender half opened.
/// `group`: how the chat is named (`group chats: any group` for a new one).
pub(super) fn group_chat(scene: &Scene, group: &str, fresh: bool, delta: &mut Delta) {
    let admission = |p: &EffectivePolicy| {
        let mut any_sender = p.clone();
        any_sender.allow_users.value = None;
        any_sender.admission("", ChatKind::Group, &scene.chat)
    };
    let label = |level| match (level, fresh) {
        (2, true) => format!("{group}: any group"),
        (_, true) => format!("{group}: any group an admin or operator approves"),
        (2, false) => group.to_string(),
        (_, false) => format!("{group}, once approved"),
    };
    compare_admission(scene, admission, &[GROUP_POLICY, ALLOW_CHATS], label, delta);
}

/// Whether `user`'s messages are answered in the groups the bot answers:
/// `admission`'s sender half (allow_users, operators), its chat half opened.
pub(super) fn group_senders(scene: &Scene, user: &str, who: &str, place: &str, delta: &mut Delta) {
    let admission = |p: &EffectivePolicy| {
        let mut any_group = p.clone();
        any_group.group_policy.value = GroupPolicy::Open;
        any_group.allow_chats.value = None;
        any_group.admission(user, ChatKind::Group, &scene.chat)
    };
    let label = |_| format!("messages{who} in the group chats answered{place}");
    compare_admission(scene, admission, &[ALLOW_USERS, OPERATORS], label, delta);
}

/// How far `user`'s messages are trusted (`provenance`: operator above user
/// above stranger); trust lets exec, write and network tools keep running.
pub(super) fn trust(scene: &Scene, user: &str, delta: &mut Delta) {
    let provenance = |p: &EffectivePolicy| p.provenance(user, ChatKind::Group, false, false);
    let (was, is) = (provenance(&scene.old), provenance(&scene.new));
    let label = |provenance: Provenance| match provenance {
        Provenance::Operator => "messages trusted as an operator's",
        Provenance::User => "messages trusted as a named user's",
        _ => "messages taken as a stranger's",
    };
    let sentence = |better| format!("{}{} (provenance {was} → {is})", label(better), scene.place.alone);
    // A lower `Provenance` is more trusted.
    if is < was {
        delta.gains.push(sentence(is));
    } else if was < is {
        delta.loses.push(sentence(was));
    }
}

/// `rate.*`: a higher rate, or none, is wider.
pub(super) fn rates(scene: &Scene, delta: &mut Delta) {
    let per_second = |rate: Option<Rate>| {
        rate.map_or(f64::INFINITY, |rate| f64::from(rate.count) / rate.period.as_secs_f64().max(f64::MIN_POSITIVE))
    };
    type Limit = fn(&EffectivePolicy) -> Option<Rate>;
    let keys: [(&str, Limit); 3] = [
        ("inbound_per_user", |p| p.inbound_per_user.value),
        ("outbound_per_chat", |p| p.outbound_per_chat.value),
        ("outbound_per_channel", |p| p.outbound_per_channel.value),
    ];
    for (key, get) in keys {
        let (was, is) = (get(&scene.old), get(&scene.new));
        let sentence = format!("{key} {} → {}{}", wording::rate(was), wording::rate(is), scene.place.alone);
        if per_second(is) > per_second(was) {
            delta.gains.push(sentence);
        } else if per_second(is) < per_second(was) {
            delta.loses.push(sentence);
        }
    }
}

/// Where the shell runs and how far tools reach: `environment`,
/// `sandbox_network`, `confine_fs`.
pub(super) fn reach(scene: &Scene, delta: &mut Delta) {
    use crate::config::EnvironmentKind::Local;
    type Fact = (&'static str, &'static str, fn(&EffectivePolicy) -> bool, fn(&EffectivePolicy) -> String);
    let facts: [Fact; 3] = [
        (
            "the shell runs on the host",
            "environment",
            |p| p.environment.value == Local,
            |p| p.environment.value.to_string(),
        ),
        ("sandbox network", "sandbox_network", |p| p.sandbox_network.value, |p| p.sandbox_network.value.to_string()),
        (
            "files outside the session's workspace",
            "confine_fs",
            |p| !p.confine_fs.value,
            |p| p.confine_fs.value.to_string(),
        ),
    ];
    for (what, key, wide, value) in facts {
        let (was, is) = (wide(&scene.old), wide(&scene.new));
        let sentence = format!("{what}{} ({key} {} → {})", scene.place.alone, value(&scene.old), value(&scene.new));
        match (was, is) {
            (false, true) => delta.gains.push(sentence),
            (true, false) => delta.loses.push(sentence),
            _ => {}
        }
    }
}

/// `model`: a change, neither wider nor narrower.
pub(super) fn model(scene: &Scene, delta: &mut Delta) {
    let (was, is) = (&scene.old.model.value, &scene.new.model.value);
    if was != is {
        let show = |model: &Option<String>| wording::or(model.as_ref(), "the agent's default");
        delta.other.push(format!("model {} → {}{}", show(was), show(is), scene.place.alone));
    }
}
