//! Route 1: with the shortest Telegram config (a token, nothing else) a
//! stranger who DMed the bot `,id` got `uid=0(root)` through the shell
//! fallback, and the model offered `bash` to anyone. Now a stranger gets a
//! pairing code and nothing else; once an admin approves it they talk to the
//! agent; commands stay read-only until operators are named; groups nobody
//! approved are not answered.

use crate::support::fake_model::FakeModel;
use crate::support::fake_telegram::{BOT_USERNAME, FakeTelegram, TOKEN};
use crate::support::gateway::{GatewayProcess, bub_cli};
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn shortest_config(telegram: &FakeTelegram) -> String {
    format!("[channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n", telegram.api_url())
}

/// The code in a pairing reply: the `XXXX-XXXX` word.
fn code_in(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
        .find(|word| word.len() == 9 && word.as_bytes()[4] == b'-')
        .unwrap_or_else(|| panic!("no pairing code in {text:?}"))
        .to_string()
}

/// What the chat shows: each message the bot sent, after its last edit.
fn shown(telegram: &FakeTelegram) -> Vec<String> {
    let edits = telegram.edits();
    telegram
        .sent()
        .into_iter()
        .map(|sent| {
            let last = edits.iter().rev().find(|e| e.chat_id == sent.chat_id && e.message_id == sent.message_id);
            last.map_or(sent.text, |edit| edit.text.clone())
        })
        .collect()
}

/// Waits until the chat shows a message containing `text`.
async fn wait_shown(telegram: &FakeTelegram, text: &str) {
    let found = telegram.wait_until(WAIT, |t| shown(t).iter().any(|m| m.contains(text))).await;
    assert!(found, "the chat never showed {text:?}: {:?}", shown(telegram));
}

/// A group message that mentions the bot, as Telegram marks it.
fn mention(text: &str) -> (String, serde_json::Value) {
    let text = format!("@{BOT_USERNAME} {text}");
    (text, json!({"entities": [{"type": "mention", "offset": 0, "length": BOT_USERNAME.len() + 1}]}))
}

/// Waits until every update so far is confirmed (stored by the gateway).
async fn confirmed(telegram: &FakeTelegram, updates: i64) {
    let stored = telegram.wait_until(WAIT, |fake| fake.offsets().iter().any(|offset| *offset > updates)).await;
    assert!(stored, "the gateway never stored update {updates}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_gets_a_pairing_code_and_nothing_else_until_an_admin_approves() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("hello, friend").await;
    let gateway =
        GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &shortest_config(&telegram))
            .await;

    telegram.user_says(1001, ",id");
    let sent = telegram.wait_for_sent(1, WAIT).await;
    let reply = &sent[0].text;
    assert!(reply.contains("pairing code"), "{reply}");
    assert!(!reply.contains("uid="), "no shell: {reply}");
    let code = code_in(reply);
    telegram.user_says(1001, "please answer");
    confirmed(&telegram, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(telegram.sent().len(), 1, "the code is not sent again at once: {:?}", telegram.sent());
    assert_eq!(fake.request_count(), 0, "no turn for a stranger");
    let (_, tapes, _) = bub_cli(home.path(), &["tape", "list", "--all", "--json"]);
    assert!(tapes.trim().is_empty(), "nothing on a tape: {tapes}");

    let (ok, listed, _) = bub_cli(home.path(), &["pairing", "list"]);
    assert!(ok && listed.contains(&code) && listed.contains("user 1001"), "{listed}");
    let (ok, approved, stderr) = bub_cli(home.path(), &["pairing", "approve", "tg", &code.to_lowercase()]);
    assert!(ok, "{stderr}");
    assert!(approved.contains("approved user 1001"), "{approved}");
    let (ok, _, stderr) = bub_cli(home.path(), &["pairing", "approve", "tg", &code]);
    assert!(!ok && stderr.contains("no pending pairing code"), "a code works once: {stderr}");

    telegram.user_says(1001, "hi again");
    wait_shown(&telegram, "hello, friend").await;
    assert!(fake.requests()[0].to_string().contains("hi again"));

    // Approved is not an operator: the shell fallback stays shut.
    telegram.user_says(1001, ",id");
    wait_shown(&telegram, "no operators are named").await;
    assert!(shown(&telegram).iter().all(|m| !m.contains("uid=")), "{:?}", shown(&telegram));

    let (ok, _, _) = bub_cli(home.path(), &["pairing", "revoke", "tg", "1001"]);
    assert!(ok);
    let before = telegram.sent().len();
    telegram.user_says(1001, "still there?");
    let new_code = telegram.wait_until(WAIT, |t| t.sent().len() > before).await;
    assert!(new_code && telegram.sent()[before].text.contains("pairing code"), "revoked: {:?}", telegram.sent());
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_nobody_approved_is_not_answered_until_approved() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("group answer").await;
    let gateway =
        GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &shortest_config(&telegram))
            .await;
    let group = json!({"id": -100_555, "type": "supergroup", "title": "strangers"});
    let (text, entities) = mention("run id");
    telegram.push_message(group.clone(), 7, &text, entities);
    confirmed(&telegram, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(telegram.sent().is_empty(), "silent in a group nobody approved: {:?}", telegram.sent());
    assert_eq!(fake.request_count(), 0);

    let (_, listed, _) = bub_cli(home.path(), &["pairing", "list", "--json"]);
    let record: serde_json::Value = serde_json::from_str(listed.lines().next().expect("a pending group")).unwrap();
    assert_eq!((record["subject"].as_str(), record["id"].as_str()), (Some("chat"), Some("-100555")));
    let code = record["code"].as_str().unwrap().to_string();
    let (ok, _, stderr) = bub_cli(home.path(), &["pairing", "approve", "tg", &code]);
    assert!(ok, "{stderr}");

    let (text, entities) = mention("hello");
    telegram.push_message(group.clone(), 7, &text, entities);
    wait_shown(&telegram, "group answer").await;

    // A group's id is negative: it is revoked as written, not taken for a flag.
    let (ok, revoked, stderr) = bub_cli(home.path(), &["pairing", "revoke", "tg", "-100555"]);
    assert!(ok, "{stderr}");
    assert_eq!(revoked.trim(), "revoked -100555 on tg");
    let (ok, _, stderr) = bub_cli(home.path(), &["pairing", "revoke", "tg", "-100555"]);
    assert!(!ok && stderr.contains("-100555 has no pairing on tg"), "{stderr}");
    let (ok, listed, _) = bub_cli(home.path(), &["pairing", "list", "--channel", "tg"]);
    assert!(ok && !listed.contains("-100555"), "{listed}");
    assert!(gateway.stop().await);
}

/// One attacker (one Telegram account) added the bot to 60 groups and
/// mentioned it in each: 60 pending group codes filled the channel's 50, and
/// every new stranger got "too many pairing requests" for an hour. Now one
/// sender leaves codes for a few groups only, and everyone else still gets
/// theirs.
#[tokio::test(flavor = "multi_thread")]
async fn one_sender_in_sixty_groups_does_not_lock_out_a_new_stranger() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("never").await;
    let gateway =
        GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &shortest_config(&telegram))
            .await;
    let attacker = 666;
    for group in 0..60 {
        let chat = json!({"id": -100_000 - group, "type": "supergroup", "title": format!("spam {group}")});
        let (text, entities) = mention("pair me");
        telegram.push_message(chat, attacker, &text, entities);
    }
    confirmed(&telegram, 60).await;
    let pending_groups = || {
        let (_, listed, _) = bub_cli(home.path(), &["pairing", "list", "--json"]);
        listed.lines().filter(|line| line.contains("\"subject\":\"chat\"")).count()
    };
    let held = pending_groups();
    assert!((1..=10).contains(&held), "one sender leaves codes for a few of its groups, not all 60: {held}");

    // Another group (someone else's) and a stranger's direct message still get their codes.
    let other_group = json!({"id": -100_999, "type": "supergroup", "title": "a real team"});
    let (text, entities) = mention("hello bot");
    telegram.push_message(other_group, 1002, &text, entities);
    telegram.user_says(1003, "hi, may I talk to you?");
    wait_shown(&telegram, "Your pairing code is").await;
    let sent = telegram.sent();
    let to_stranger = sent.iter().find(|message| message.chat_id == 1003).expect("a reply to the stranger");
    let code = code_in(&to_stranger.text);
    assert_eq!(pending_groups(), held + 1, "the other group's code is stored");
    let (ok, approved, stderr) = bub_cli(home.path(), &["pairing", "approve", "tg", &code]);
    assert!(ok && approved.contains("approved user 1003"), "{approved}{stderr}");
    assert!(sent.iter().all(|message| message.chat_id > 0), "nothing is said in the groups: {sent:?}");
    assert!(gateway.stop().await);
}
