//! Telegram's own commands through the real binary, the real adapter and the
//! fake Bot API: `/start` and `/help` answered without the model, `/cmd@bot`
//! run as its comma command under the same policy, the command menu
//! (`setMyCommands`) following what each user may run, and the warning when
//! privacy mode hides what a group policy keeps as context.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::fake_model::FakeModel;
use support::fake_telegram::{BOT_USERNAME, FakeTelegram, MenuSet, TOKEN};
use support::gateway::GatewayProcess;

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// One Telegram channel `tg` on the fake; `policy` goes in `[policy.defaults]`.
fn config(telegram: &FakeTelegram, policy: &str) -> String {
    format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\n{policy}\n\n\
         [channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n",
        telegram.api_url()
    )
}

const OPEN: &str = "dm_policy = \"open\"\ngroup_policy = \"open\"";

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

fn group_chat() -> Value {
    json!({"id": -100_777, "type": "supergroup", "title": "team"})
}

/// A command as Telegram sends it: the text with its `bot_command` entity.
fn command(text: &str) -> Value {
    let length = text.split_whitespace().next().map_or(0, |word| word.encode_utf16().count());
    json!({"entities": [{"type": "bot_command", "offset": 0, "length": length}]})
}

/// Waits for the `count`th message the bot sent; returns its text.
async fn nth_reply(telegram: &FakeTelegram, count: usize) -> String {
    let sent = telegram.wait_for_sent(count, ANSWER_TIMEOUT).await;
    assert!(sent.len() >= count, "only {} replies came: {sent:?}", sent.len());
    sent[count - 1].text.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn start_and_help_are_answered_without_the_model() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let gateway = start(home.path(), &fake, &config(&telegram, OPEN)).await;

    let asked = telegram.push_message(
        json!({"id": 1001, "type": "private", "first_name": "Ada"}),
        1001,
        "/start",
        command("/start"),
    );
    let welcome = nth_reply(&telegram, 1).await;
    assert!(welcome.starts_with("Hello! Write to me"), "{welcome}");
    assert!(welcome.contains("/help — List the commands you can use here"), "{welcome}");
    assert!(welcome.contains("/tape_info — "), "read-only commands are anyone's without operators: {welcome}");
    assert!(!welcome.contains("/bash"), "the shell is not: {welcome}");
    assert_eq!(telegram.sent()[0].reply_to, Some(asked));

    telegram.push_message(json!({"id": 1001, "type": "private", "first_name": "Ada"}), 1001, "/help", command("/help"));
    let help = nth_reply(&telegram, 2).await;
    assert!(help.starts_with("Commands you can use here:") && help.contains("/tape_search — "), "{help}");
    assert_eq!(fake.request_count(), 0, "the model was never asked");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_sending_start_gets_a_pairing_code_not_the_welcome() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    // The defaults of a chat platform: strangers pair first.
    let gateway = start(home.path(), &fake, &config(&telegram, "")).await;

    telegram.push_message(
        json!({"id": 1002, "type": "private", "first_name": "Eve"}),
        1002,
        "/start",
        command("/start"),
    );
    let reply = nth_reply(&telegram, 1).await;
    assert!(reply.contains("pairing code"), "{reply}");
    assert!(!reply.contains("Commands you can use"), "{reply}");
    assert_eq!(fake.request_count(), 0);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_addressed_to_this_bot_runs_its_comma_command_and_one_for_another_bot_is_context() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("on it").await;
    let gateway = start(home.path(), &fake, &config(&telegram, OPEN)).await;

    let ours = format!("/tape_info@{BOT_USERNAME}");
    let asked = telegram.push_message(group_chat(), 7, &ours, command(&ours));
    let info = nth_reply(&telegram, 1).await;
    assert!(info.contains("name: tg:-100777") && info.contains("last_anchor:"), ",tape.info's output: {info}");
    assert_eq!(telegram.sent()[0].reply_to, Some(asked));

    // After our command's turn: a command and an unaddressed message racing on a
    // fresh tape can each start it with an anchor (a separate, older issue).
    let other = "/tape_info@other_bot";
    telegram.push_message(group_chat(), 7, other, command(other));

    let mention = format!("@{BOT_USERNAME} anything new?");
    let entities = json!({"entities": [{"type": "mention", "offset": 0, "length": BOT_USERNAME.len() + 1}]});
    telegram.push_message(group_chat(), 7, &mention, entities);
    nth_reply(&telegram, 2).await;
    let shows = |fake: &FakeTelegram| {
        fake.sent().get(1).is_some_and(|sent| sent.text == "on it")
            || fake.edits().last().is_some_and(|edit| edit.text == "on it")
    };
    let answered = telegram.wait_until(ANSWER_TIMEOUT, shows).await;
    assert!(answered, "the mention was answered: {:?} {:?}", telegram.sent(), telegram.edits());
    let prompt = fake.requests().last().cloned().unwrap_or_default().to_string();
    assert!(prompt.contains(other), "the other bot's command is context on the tape: {prompt}");
    assert_eq!(fake.request_count(), 1, "only the mention asked the model");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_the_user_may_not_run_is_refused_the_same_way_as_its_comma_form() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let policy = format!("{OPEN}\noperators = [\"tg:1\"]");
    let gateway = start(home.path(), &fake, &config(&telegram, &policy)).await;

    let chat = json!({"id": 2, "type": "private", "first_name": "Bob"});
    telegram.push_message(chat.clone(), 2, "/tape_handoff", command("/tape_handoff"));
    let slash = nth_reply(&telegram, 1).await;
    telegram.push_message(chat, 2, ",tape.handoff", json!({}));
    let comma = nth_reply(&telegram, 2).await;
    assert_eq!(slash, comma);
    assert!(slash.contains("tg:2 is not an operator here"), "{slash}");

    let chat = json!({"id": 1, "type": "private", "first_name": "Ada"});
    telegram.push_message(chat, 1, "/tape_info", command("/tape_info"));
    let allowed = nth_reply(&telegram, 3).await;
    assert!(allowed.contains("name: tg:1"), "the operator runs it: {allowed}");
    assert_eq!(fake.request_count(), 0);
    gateway.stop().await;
}

/// The menus the fake received for scope `kind` (and, for chat scopes, chat id `chat`).
fn menus_for(telegram: &FakeTelegram, kind: &str, chat: Option<i64>) -> Vec<MenuSet> {
    let menus = telegram.menus().into_iter().filter(|menu| menu.scope_type() == kind);
    menus.filter(|menu| chat.is_none_or(|id| menu.scope["chat_id"].as_i64() == Some(id))).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_menu_lists_what_each_user_may_run_and_is_sent_once() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("hello").await;
    let policy = format!("{OPEN}\noperators = [\"tg:1\"]");
    let gateway = start(home.path(), &fake, &config(&telegram, &policy)).await;

    let default = telegram.wait_until(ANSWER_TIMEOUT, |fake| !menus_for(fake, "default", None).is_empty()).await;
    assert!(default, "no default menu was set at start: {:?}", telegram.menus());
    assert_eq!(
        menus_for(&telegram, "default", None)[0].names(),
        ["help", "tape_info", "tape_search", "tape_anchors", "policy"],
        "a plain user may run the read-only commands here"
    );

    // The operator writes twice in their direct chat, a plain user once.
    telegram.user_says(1, "hi");
    nth_reply(&telegram, 1).await;
    telegram.user_says(1, "hi again");
    nth_reply(&telegram, 2).await;
    telegram.user_says(2, "hi");
    nth_reply(&telegram, 3).await;
    let operator = menus_for(&telegram, "chat", Some(1));
    assert_eq!(operator.len(), 1, "sent once: {operator:?}");
    let names = operator[0].names();
    assert!(names.starts_with(&["help"]) && names.contains(&"tape_info") && names.contains(&"bash"), "{names:?}");
    assert!(names.iter().all(|name| !name.contains('.')), "platform names: {names:?}");
    assert!(menus_for(&telegram, "chat", Some(2)).is_empty(), "the plain user's menu is the default");

    // In a group the operator gets a menu of their own, without the shell (not allowed by name there).
    let mention = format!("@{BOT_USERNAME} hi");
    let entities = json!({"entities": [{"type": "mention", "offset": 0, "length": BOT_USERNAME.len() + 1}]});
    telegram.push_message(group_chat(), 1, &mention, entities);
    nth_reply(&telegram, 4).await;
    let member = menus_for(&telegram, "chat_member", Some(-100_777));
    assert_eq!(member.len(), 1, "{:?}", telegram.menus());
    assert_eq!(member[0].scope["user_id"], 1);
    let names = member[0].names();
    assert!(names.contains(&"tape_info") && !names.contains(&"bash"), "{names:?}");
    assert!(menus_for(&telegram, "chat", Some(-100_777)).is_empty(), "the group's own menu is the default");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn privacy_mode_is_warned_about_only_when_a_group_policy_needs_unaddressed_messages() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    telegram.set_privacy_mode(true);
    let fake = FakeModel::start_answering("hello").await;

    let closed = "dm_policy = \"open\"\ngroup_policy = \"disabled\"";
    let gateway = start(home.path(), &fake, &config(&telegram, closed)).await;
    telegram.user_says(1001, "hi");
    nth_reply(&telegram, 1).await;
    let stderr = gateway.stderr();
    assert!(!stderr.contains("privacy mode"), "no group is answered, nothing is lost: {stderr}");
    gateway.stop().await;

    let gateway = start(home.path(), &fake, &config(&telegram, OPEN)).await;
    // Logged once the channel started; wait for it rather than for a time.
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    while !gateway.stderr().contains("privacy mode") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let warned = gateway.stderr();
    let logged = warned.lines().any(|line| line.contains("WARN") && line.contains("privacy mode"));
    assert!(logged, "in the log: {warned}");
    let notice = "warning: channel tg: Telegram's privacy mode is on";
    let line = warned.lines().find(|line| line.starts_with(notice)).unwrap_or_default();
    assert!(line.contains("/setprivacy") && line.contains("admin"), "printed for the operator: {warned}");
    assert!(line.contains("never reach it"), "{line}");
    gateway.stop().await;
}
