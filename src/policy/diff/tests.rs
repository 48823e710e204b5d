//! The preview against realistic edits of one file (`BASE`): a telegram bot
//! with an operator, a listed group and a configured group, and a webhook
//! (so the tests need the `telegram` feature).
#![cfg(feature = "telegram")]

use super::*;
use crate::tools::Capability;

/// A telegram bot with one listed group and one configured group, and a webhook.
const BASE: &str = r#"
[policy.defaults]
allowed_tools = ["*"]
denied_tools = ["web.fetch"]
rate = { inbound_per_user = "20/min", outbound_per_chat = "20/min" }

[channels.tg]
kind = "telegram"
token = "t"

[channels.tg.policy]
operators = ["tg:1"]
allow_chats = ["-100"]

[channels.tg.chats."-200".policy]
allowed_tools = ["fs.read", "tape.*"]

[channels.hooks]
kind = "webhook"
secrets = ["s"]
"#;

/// The agent's tools, as the builtin ones declare themselves.
fn tools() -> Vec<(String, Capabilities)> {
    let declared = [
        ("bash", Capability::Exec),
        ("fs.read", Capability::Read),
        ("fs.write", Capability::Write),
        ("web.fetch", Capability::Network),
        ("tape.info", Capability::Read),
        ("tape.reset", Capability::Session),
        ("help", Capability::Read),
    ];
    declared.into_iter().map(|(name, can)| (name.to_string(), Capabilities::of([can]))).collect()
}

fn preview(old: &str, new: &str) -> AccessDiff {
    let parse = |text: &str| GatewayConfig::parse(text, "bub.toml").unwrap();
    access_diff(&parse(old), &parse(new), &tools())
}

/// `BASE` with `from` replaced by `to`.
fn edit(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from}");
    BASE.replacen(from, to, 1)
}

fn channel(name: &str) -> Subject {
    Subject::Channel { channel: name.to_string() }
}

fn chat(channel: &str, chat: &str) -> Subject {
    Subject::Chat { channel: channel.to_string(), chat: chat.to_string() }
}

fn user(user: &str) -> Subject {
    Subject::User { user: user.to_string() }
}

fn subjects(diff: &AccessDiff) -> Vec<&Subject> {
    diff.changes.iter().map(|change| &change.subject).collect()
}

/// The change of `subject`, which must have one.
fn of<'a>(diff: &'a AccessDiff, subject: &Subject) -> &'a AccessChange {
    diff.changes.iter().find(|change| change.subject == *subject).unwrap_or_else(|| panic!("{subject:?}: {diff:#?}"))
}

#[test]
fn widening_a_group_to_bash_by_exact_name_shows_on_group_chats_only() {
    let new = edit("operators = [\"tg:1\"]", "operators = [\"tg:1\"]\nallowed_tools = [\"*\", \"bash\"]");
    let diff = preview(BASE, &new);
    assert_eq!(subjects(&diff), [&channel("tg"), &user("tg:1")], "not hooks, not the chat with its own allowed_tools");
    let tg = of(&diff, &channel("tg"));
    assert_eq!(tg.gains, ["`bash` (exec) as a model call in group chats"], "direct chats had it already");
    assert!(tg.loses.is_empty() && tg.widens);
    // Rule 4 holds for commands too: the operator gains the shell in groups.
    assert_eq!(of(&diff, &user("tg:1")).gains, ["may run `bash` (exec) as a comma command in group chats"]);
}

#[test]
fn a_star_in_allowed_tools_opens_no_exec_or_write_tool_in_groups() {
    let old = edit("operators = [\"tg:1\"]", "operators = [\"tg:1\"]\nallowed_tools = [\"fs.read\"]");
    let diff = preview(&old, BASE);
    let tg = of(&diff, &channel("tg"));
    assert_eq!(
        tg.gains,
        [
            "`tape.info` (read), `tape.reset` (session), `help` (read) as model calls in direct and group chats",
            "`bash` (exec), `fs.write` (write) as model calls in direct chats",
        ]
    );
    assert!(tg.gains.iter().all(|gain| !gain.contains("bash") || !gain.contains("group")), "{tg:?}");
}

#[test]
fn adding_an_operator_shows_that_user_gaining_commands() {
    let new = edit("operators = [\"tg:1\"]", "operators = [\"tg:1\", { user = \"tg:2\", commands = [\"tape.*\"] }]");
    let diff = preview(BASE, &new);
    assert_eq!(subjects(&diff), [&user("tg:2")], "strangers gain nothing");
    let tg2 = of(&diff, &user("tg:2"));
    assert_eq!(
        tg2.gains,
        [
            "direct messages (operators [`tg:1`] → [`tg:1`, `tg:2` for `tape.*`])",
            "messages trusted as an operator's (provenance stranger → operator)",
            "may run `tape.reset` (session) as a comma command in direct and group chats",
            "may run `tape.reset` (session) as a comma command in chat \"-200\" on tg",
        ]
    );
    assert!(tg2.widens);
    let everyone = edit(
        "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n",
        "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n[channels.hooks.policy]\noperators = [\"*\"]\n",
    );
    let diff = preview(BASE, &everyone);
    assert_eq!(subjects(&diff), [&user("*")]);
    assert_eq!(
        of(&diff, &user("*")).gains,
        [
            "messages trusted as an operator's on hooks (provenance user → operator)",
            "may run `fs.read` (read), `tape.reset` (session) as comma commands in direct and group chats on hooks",
            "may run `bash` (exec), `fs.write` (write) as comma commands in direct chats on hooks",
        ]
    );
}

#[test]
fn dm_policy_open_shows_direct_messages_from_anyone() {
    let new = edit("allow_chats = [\"-100\"]", "allow_chats = [\"-100\"]\ndm_policy = \"open\"");
    let diff = preview(BASE, &new);
    assert_eq!(of(&diff, &channel("tg")).gains, ["direct messages from anyone (dm_policy pairing → open)"]);
    // The configured chat inherits it, and says so as its own answer.
    assert_eq!(
        of(&diff, &chat("tg", "-200")).gains,
        ["direct messages from anyone if it is a direct chat (dm_policy pairing → open)"]
    );
    assert_eq!(subjects(&diff).len(), 2, "tg:1 was answered already, as an operator");
}

#[test]
fn group_policy_and_allow_chats_show_which_groups_are_answered() {
    let open = edit("allow_chats = [\"-100\"]", "group_policy = \"open\"");
    assert_eq!(
        of(&preview(BASE, &open), &channel("tg")).gains,
        ["group chats: any group (group_policy allowlist → open, allow_chats [`-100`] → unset)"]
    );
    // `open` with `allow_chats` answers the listed groups only: no more pairing for the others.
    let listed = edit("allow_chats = [\"-100\"]", "allow_chats = [\"-100\", \"-300\"]\ngroup_policy = \"open\"");
    let tg = of(&preview(BASE, &listed), &channel("tg")).clone();
    assert_eq!(tg.gains, ["the group chat \"-300\" (allow_chats [`-100`] → [`-100`, `-300`])"]);
    assert_eq!(tg.loses, ["group chats: any group an admin or operator approves (group_policy allowlist → open)"]);
}

#[test]
fn a_chat_level_override_shows_on_that_chat_only() {
    let new =
        format!("{BASE}\n[channels.tg.chats.\"-100\".policy]\nenvironment = \"local\"\nmodel = \"openai:gpt-4o\"\n");
    let diff = preview(BASE, &new);
    assert_eq!(subjects(&diff), [&chat("tg", "-100")]);
    let room = of(&diff, &chat("tg", "-100"));
    assert_eq!(room.gains, ["the shell runs on the host (environment sandbox → local)"]);
    assert_eq!(room.other, ["model the agent's default → openai:gpt-4o"]);
}

#[test]
fn narrowing_shows_losses_and_does_not_widen() {
    let new = edit("denied_tools = [\"web.fetch\"]", "denied_tools = [\"web.fetch\", \"cap:write\"]")
        .replace("allow_chats = [\"-100\"]", "allow_chats = [\"-100\"]\ngroup_policy = \"disabled\"");
    let diff = preview(BASE, &new);
    assert!(!diff.widens(), "{diff:#?}");
    let tg = of(&diff, &channel("tg"));
    assert_eq!(
        tg.loses,
        [
            "`fs.write` (write) as a model call in direct chats",
            "group chats: any group an admin or operator approves (group_policy allowlist → disabled)",
            "the group chat \"-100\" (group_policy allowlist → disabled)",
        ]
    );
    assert!(tg.gains.is_empty() && !tg.widens);
    assert_eq!(of(&diff, &channel("hooks")).loses, ["`fs.write` (write) as a model call in direct chats"]);
    assert_eq!(of(&diff, &user("tg:1")).loses, ["may run `fs.write` (write) as a comma command in direct chats"]);
}

#[test]
fn identical_configs_have_no_changes() {
    assert_eq!(preview(BASE, BASE), AccessDiff { changes: Vec::new() });
    let reordered = BASE.replace(
        "[channels.tg.policy]\noperators = [\"tg:1\"]\nallow_chats = [\"-100\"]",
        "[channels.tg.policy]\nallow_chats = [\"-100\"]\noperators = [\"tg:1\"]",
    );
    assert!(preview(BASE, &reordered).changes.is_empty(), "the same policy written in another order");
}

#[test]
fn a_rate_limit_is_a_gain_when_faster_or_gone_and_a_loss_when_slower() {
    let new = edit(
        "rate = { inbound_per_user = \"20/min\", outbound_per_chat = \"20/min\" }",
        "rate = { inbound_per_user = \"1/s\", outbound_per_channel = \"100/min\" }",
    );
    let diff = preview(BASE, &new);
    let hooks = of(&diff, &channel("hooks"));
    assert_eq!(hooks.gains, ["inbound_per_user 20/min → 1/s", "outbound_per_chat 20/min → none (no limit)"]);
    assert_eq!(hooks.loses, ["outbound_per_channel none (no limit) → 100/min"]);
    assert!(hooks.widens);
    let same_speed = edit("inbound_per_user = \"20/min\"", "inbound_per_user = \"1200/h\"");
    assert!(preview(BASE, &same_speed).changes.is_empty(), "20/min is 1200/h");
}

#[test]
fn channels_added_or_removed_are_one_line_in_file_order() {
    let discord = "[channels.dc]\nkind = \"discord\"\ntoken = \"d\"\n";
    let new = edit("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s\"]\n", discord);
    let diff = preview(BASE, &new);
    assert_eq!(subjects(&diff), [&channel("dc"), &channel("hooks")], "the new file's order, then the removed");
    assert_eq!(
        of(&diff, &channel("dc")).gains,
        ["channel added (discord): dm_policy pairing, group_policy allowlist, environment sandbox"]
    );
    let hooks = of(&diff, &channel("hooks"));
    assert_eq!(hooks.loses, ["channel removed (webhook): the bot no longer answers there"]);
    assert!(!hooks.widens);
}

#[test]
fn the_preview_serializes_with_a_tagged_subject_and_has_a_schema() {
    let new = edit("allow_chats = [\"-100\"]", "allow_chats = [\"-100\"]\ndm_policy = \"open\"");
    let json = serde_json::to_value(preview(BASE, &new)).unwrap();
    assert_eq!(json["changes"][0]["subject"], serde_json::json!({ "kind": "channel", "channel": "tg" }));
    assert_eq!(json["changes"][0]["widens"], true);
    let schema = serde_json::to_value(schemars::schema_for!(AccessDiff)).unwrap();
    assert!(schema["$defs"]["Subject"].is_object(), "{schema}");
}
