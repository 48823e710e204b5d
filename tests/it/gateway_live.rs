//! Live replies through the real `bub gateway` on Telegram and Discord (the
//! real adapters against the fake platforms, with the fake model): a text
//! that is ready at once goes out as one message (one per platform-limit
//! part) with no edit; a message is never edited sooner than the edit
//! interval (1 s by default) after its last send or edit, the final edit
//! included; a slow stream still shows its first sentence early.
//!
//! Each test waits until the reply reached the chat (`bub_reply_seconds`
//! counts it in `/metrics` once the last call of the reply returned), then
//! asserts the calls the fake platform received and when.

use crate::support;

use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use support::fake_discord::{Answered, FakeDiscord};
use support::fake_model::{FakeModel, Reply};
use support::fake_telegram::{FakeTelegram, Posted, TOKEN};
use support::gateway::{GatewayProcess, client};

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// The gateway's default shortest time between two updates of one live message.
const EDIT_INTERVAL: Duration = Duration::from_secs(1);
const DISCORD_USER: u64 = 300_000_000_000_000_001;
const DISCORD_DM: u64 = 400_000_000_000_000_001;

fn telegram_config(telegram: &FakeTelegram) -> String {
    format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\n\
         dm_policy = \"open\"\ngroup_policy = \"open\"\noperators = [\"tg:1001\"]\n\n\
         [channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n",
        telegram.api_url()
    )
}

/// [`FakeDiscord::open_config`] with [`DISCORD_USER`] an operator.
fn discord_config(discord: &FakeDiscord) -> String {
    discord
        .open_config(support::fake_discord::TOKEN)
        .replace("[policy.defaults]\n", &format!("[policy.defaults]\noperators = [\"dc:{DISCORD_USER}\"]\n"))
}

/// Asserts `parts` hold `1` to `last`, one number a line, in order, each part within `limit` characters.
fn assert_numbers_in_parts(parts: &[String], last: u32, limit: usize) {
    assert!(parts.iter().all(|part| part.chars().count() <= limit), "{parts:?}");
    let whole = parts.join("\n");
    let numbers: Vec<u32> = whole.lines().filter_map(|line| line.parse().ok()).collect();
    assert_eq!(numbers, (1..=last).collect::<Vec<_>>(), "every line once, in order: {whole}");
}

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

/// Waits until `count` replies on `channel` reached the chat, as `/metrics` counts them.
async fn wait_for_replies(gateway: &GatewayProcess, channel: &str, count: usize) {
    let url = format!("{}/metrics", gateway.base_url());
    let line = format!("bub_reply_seconds_count{{channel=\"{channel}\",to=\"chat\"}} {count}");
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    let mut metrics = String::new();
    while Instant::now() < deadline {
        if let Ok(response) = client().get(&url).send().await {
            metrics = response.text().await.unwrap_or_default();
            if metrics.lines().any(|l| l == line) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{count} replies never reached the chat on {channel}; metrics:\n{metrics}\n{}", gateway.stderr());
}

/// A long answer, in words of 2 to 5 characters.
fn long_answer(words: usize) -> String {
    (0..words).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// Asserts every edit came at least [`EDIT_INTERVAL`] after the call before it
/// (`calls` are (is an edit, when) of one message, in order).
fn assert_edits_spaced(calls: &[(bool, Instant)]) {
    for pair in calls.windows(2) {
        let [(_, before), (edit, at)] = pair else { continue };
        if *edit {
            let gap = at.duration_since(*before);
            assert!(gap >= EDIT_INTERVAL, "an edit {gap:?} after the call before it: {calls:?}");
        }
    }
}

fn telegram_calls(posted: &[Posted]) -> Vec<(bool, Instant)> {
    posted.iter().map(|post| (post.method == "editMessageText", post.at)).collect()
}

fn discord_calls(answered: &[Answered]) -> Vec<(bool, Instant)> {
    answered
        .iter()
        .filter(|call| call.route == "create_message" || call.route == "edit_message")
        .map(|call| (call.route == "edit_message", call.at))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_a_commands_output_ready_at_once_is_one_message_per_part_and_no_edit() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("never asked").await;
    let gateway = start(home.path(), &fake, &telegram_config(&telegram)).await;

    telegram.user_says(1001, ",help");
    wait_for_replies(&gateway, "tg", 1).await;
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "one message: {sent:?}");
    assert!(sent[0].text.starts_with("Commands (type ,name"), "{}", sent[0].text);
    assert!(sent[0].text.chars().count() > 200, "long enough to have been cut before: {}", sent[0].text);
    assert!(telegram.edits().is_empty(), "and no edit: {:?}", telegram.edits());

    // About 8,900 characters of output: three of Telegram's 4,096-character messages.
    telegram.user_says(1001, ",bash cmd='seq 1 2000'");
    wait_for_replies(&gateway, "tg", 2).await;
    let parts: Vec<String> = telegram.sent().into_iter().skip(1).map(|sent| sent.text).collect();
    assert!(parts.len() >= 3, "split at the limit: {parts:?}");
    assert_numbers_in_parts(&parts, 2000, 4096);
    assert!(telegram.edits().is_empty(), "one message per part and no edit: {:?}", telegram.edits());
    assert_eq!(fake.request_count(), 0);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_a_commands_output_ready_at_once_is_one_message_per_part_and_no_edit() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("never asked").await;
    let gateway = start(home.path(), &fake, &discord_config(&discord)).await;

    discord.user_says(DISCORD_DM, None, DISCORD_USER, ",help", json!({}));
    wait_for_replies(&gateway, "dc", 1).await;
    // An operator's list is over Discord's 2,000 characters: one message per part.
    let help: Vec<String> = discord.sent().into_iter().map(|sent| sent.content).collect();
    assert!(help[0].starts_with("Commands (type ,name"), "{help:?}");
    assert!(help.iter().all(|part| part.chars().count() <= 2000), "{help:?}");
    assert!(discord.edits().is_empty(), "and no edit: {:?}", discord.edits());

    // About 6,900 characters of output: four of Discord's 2,000-character messages.
    discord.user_says(DISCORD_DM, None, DISCORD_USER, ",bash cmd='seq 1 1500'", json!({}));
    wait_for_replies(&gateway, "dc", 2).await;
    let parts: Vec<String> = discord.sent().into_iter().skip(help.len()).map(|sent| sent.content).collect();
    assert!(parts.len() >= 4, "split at the limit: {parts:?}");
    assert_numbers_in_parts(&parts, 1500, 2000);
    assert!(discord.edits().is_empty(), "one message per part and no edit: {:?}", discord.edits());
    assert_eq!(fake.request_count(), 0);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_a_fast_answer_is_never_edited_within_the_interval() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let answer = long_answer(150);
    let fake = FakeModel::start_answering(&answer).await;
    let gateway = start(home.path(), &fake, &telegram_config(&telegram)).await;

    telegram.user_says(1001, "tell me everything");
    wait_for_replies(&gateway, "tg", 1).await;
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "one message: {sent:?}");
    let shown = telegram.edits().last().map_or(sent[0].text.clone(), |edit| edit.text.clone());
    assert_eq!(shown, answer);
    assert_edits_spaced(&telegram_calls(&telegram.posted()));
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_a_fast_answer_is_never_edited_within_the_interval() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let answer = long_answer(150);
    let fake = FakeModel::start_answering(&answer).await;
    let gateway = start(home.path(), &fake, &discord_config(&discord)).await;

    discord.user_says(DISCORD_DM, None, DISCORD_USER, "tell me everything", json!({}));
    wait_for_replies(&gateway, "dc", 1).await;
    let sent = discord.sent();
    assert_eq!(sent.len(), 1, "one message: {sent:?}");
    let shown = discord.edits().last().map_or(sent[0].content.clone(), |edit| edit.content.clone());
    assert_eq!(shown, answer);
    assert_edits_spaced(&discord_calls(&discord.answered()));
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_a_slow_stream_shows_its_first_sentence_early_then_edits_at_the_interval() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let answer = long_answer(80);
    let fake = FakeModel::start().await;
    // About 4.5 s of streaming, 3 characters every 40 ms.
    fake.answer_all(Reply::paced(Duration::from_millis(40), Reply::text(&answer)));
    let gateway = start(home.path(), &fake, &telegram_config(&telegram)).await;

    telegram.user_says(1001, "tell me slowly");
    wait_for_replies(&gateway, "tg", 1).await;
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "one message, grown in place: {sent:?}");
    let first = &sent[0].text;
    assert!(first.chars().count() >= 80, "the first message says something: {first:?}");
    assert!(answer.starts_with(&format!("{first} ")), "shown before the end, in whole words: {first:?}");
    let edits = telegram.edits();
    assert!(edits.len() >= 2, "grown by edits: {edits:?}");
    assert_eq!(edits.last().map(|edit| edit.text.as_str()), Some(answer.as_str()));
    assert_edits_spaced(&telegram_calls(&telegram.posted()));
    gateway.stop().await;
}
