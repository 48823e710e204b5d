//! Edited messages and Discord threads, through the real `bub gateway` binary
//! and the real adapters against the fake Telegram and Discord, with the fake
//! model: what the chat shows, what the model was asked and what the
//! session's tape holds.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::fake_discord::{self, BOT_ID, FakeDiscord};
use support::fake_model::FakeModel;
use support::fake_telegram::{self, FakeTelegram};
use support::gateway::{GatewayProcess, bub_cli};

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
const USER: u64 = 300_000_000_000_000_001;
const DM_CHANNEL: u64 = 400_000_000_000_000_001;
const GUILD: u64 = 500_000_000_000_000_001;
const PARENT: u64 = 600_000_000_000_000_001;
const THREAD: u64 = 600_000_000_000_000_002;
const OTHER_CHANNEL: u64 = 600_000_000_000_000_003;
const OTHER_THREAD: u64 = 600_000_000_000_000_004;

/// Policy for every test: everyone answered, a debounce of `quiet` seconds, and `extra` keys.
fn policy(quiet: f64, extra: &str) -> String {
    format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = {quiet}, max_wait_seconds = 60.0 }}\n\
         dm_policy = \"open\"\ngroup_policy = \"open\"\n{extra}\n"
    )
}

fn telegram_config(telegram: &FakeTelegram, quiet: f64, extra: &str) -> String {
    format!(
        "{}[channels.tg]\nkind = \"telegram\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        policy(quiet, extra),
        fake_telegram::TOKEN,
        telegram.api_url()
    )
}

fn discord_config(discord: &FakeDiscord, quiet: f64, extra: &str) -> String {
    format!(
        "{}[channels.dc]\nkind = \"discord\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        policy(quiet, extra),
        fake_discord::TOKEN,
        discord.proxy_url()
    )
}

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

/// The entries of a session's tape (`bub tape show --json`, beside the running gateway).
fn tape(home: &Path, session: &str) -> Vec<Value> {
    let (_, out, _) = bub_cli(home, &["tape", "show", "--exact", session, "--json"]);
    out.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

/// The user messages' texts on a session's tape.
fn user_texts(home: &Path, session: &str) -> Vec<String> {
    tape(home, session)
        .iter()
        .filter(|entry| entry["kind"] == "message" && entry["payload"]["role"] == "user")
        .filter_map(|entry| entry["payload"]["content"].as_str().map(str::to_string))
        .collect()
}

/// What the model was asked last (its request body, as text).
fn last_prompt(fake: &FakeModel) -> String {
    fake.requests().last().cloned().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_an_edit_before_the_turn_replaces_the_text_the_model_gets() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("four").await;
    // Both arrive in the first poll, within the debounce window of the message.
    let asked = telegram.user_says(1001, "what is 2 + 2?");
    telegram.user_edits(1001, asked, "what is 2 + 2, in words?", json!({}));
    let gateway = start(home.path(), &fake, &telegram_config(&telegram, 3.0, "")).await;

    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer");
    let prompt = last_prompt(&fake);
    assert!(prompt.contains("what is 2 + 2, in words?"), "the model got the edited text: {prompt}");
    assert!(!prompt.contains("what is 2 + 2?"), "and not the first one: {prompt}");
    assert_eq!(fake.request_count(), 1, "one turn");
    let sent = telegram.sent();
    assert_eq!((sent.len(), sent[0].reply_to), (1, Some(asked)), "one reply, to the message: {sent:?}");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_an_edit_after_the_turn_is_recorded_on_the_tape_and_not_answered() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("four").await;
    let gateway = start(home.path(), &fake, &telegram_config(&telegram, 0.1, "")).await;

    let asked = telegram.user_says(1001, "what is 2 + 2?");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer");
    telegram.user_edits(1001, asked, "what is 3 + 3?", json!({}));
    let recorded = telegram
        .wait_until(ANSWER_TIMEOUT, |_| {
            user_texts(home.path(), "tg:1001").iter().any(|t| t == "(edited) what is 3 + 3?")
        })
        .await;
    assert!(recorded, "the edit is on the tape: {:#?}", tape(home.path(), "tg:1001"));
    let edit = tape(home.path(), "tg:1001").into_iter().rfind(|e| e["payload"]["content"] == "(edited) what is 3 + 3?");
    let meta = &edit.unwrap_or_default()["meta"];
    assert_eq!(meta["edit_of"], format!("1001:{asked}"), "it says which message was edited: {meta}");
    assert_eq!(meta["inactive"], true);
    assert_eq!(telegram.sent().len(), 1, "no second reply: {:?}", telegram.sent());
    assert_eq!(fake.request_count(), 1, "no second turn");

    // The next turn sees the correction as context.
    telegram.user_says(1001, "and?");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() == 2).await);
    assert!(last_prompt(&fake).contains("(edited) what is 3 + 3?"), "{}", last_prompt(&fake));
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_with_on_edit_rerun_an_edited_message_is_answered_again() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("noted").await;
    let gateway = start(home.path(), &fake, &telegram_config(&telegram, 0.1, "on_edit = \"rerun\"")).await;

    let asked = telegram.user_says(1001, "what is 2 + 2?");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer");
    telegram.user_edits(1001, asked, "what is 3 + 3?", json!({}));
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() == 2).await, "no second answer");
    let sent = telegram.sent();
    assert_eq!(sent[1].reply_to, Some(asked), "the second answer replies to the edited message: {sent:?}");
    assert!(last_prompt(&fake).contains("(edited) what is 3 + 3?"), "{}", last_prompt(&fake));
    assert_eq!(fake.request_count(), 2);
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_an_edit_by_a_stranger_gets_no_turn() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("hello").await;
    // Direct messages only from user 7; everyone else is ignored (allowlist), edits included.
    let config = format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\ndm_policy = \"allowlist\"\n\
         allow_users = [\"tg:7\"]\non_edit = \"rerun\"\n\n\
         [channels.tg]\nkind = \"telegram\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        fake_telegram::TOKEN,
        telegram.api_url()
    );
    let gateway = start(home.path(), &fake, &config).await;
    let stranger = telegram.user_says(1001, "hi");
    telegram.user_edits(1001, stranger, "hi, please answer", json!({}));
    // A message from the allowed user after both: once it is answered, both were handled.
    telegram.user_says(7, "hello?");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer");
    let sent = telegram.sent();
    assert!(sent.iter().all(|m| m.chat_id == 7), "nothing to the stranger: {sent:?}");
    assert_eq!(fake.request_count(), 1, "only the allowed user's turn");
    assert!(user_texts(home.path(), "tg:1001").is_empty(), "nothing of the stranger on a tape");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_an_edit_before_the_turn_replaces_the_text_and_embed_updates_change_nothing() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("four").await;
    // Dispatched together once the bot is ready: the edit lands within the message's debounce window.
    let asked = discord.user_says(DM_CHANNEL, None, USER, "what is 2 + 2? https://example.org", json!({}));
    discord.embeds_update(asked);
    discord.user_edits(asked, "what is 2 + 2, in words?");
    let gateway = start(home.path(), &fake, &discord_config(&discord, 3.0, "")).await;

    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer");
    let prompt = last_prompt(&fake);
    assert!(prompt.contains("what is 2 + 2, in words?"), "the model got the edited text: {prompt}");
    assert!(!prompt.contains("example.org"), "and not the first one: {prompt}");
    let sent = discord.sent();
    assert_eq!((sent.len(), sent[0].reply_to), (1, Some(asked)), "one reply, to the message: {sent:?}");
    assert_eq!(fake.request_count(), 1);
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_with_on_edit_rerun_an_edit_delivered_twice_is_answered_once() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("noted").await;
    let gateway = start(home.path(), &fake, &discord_config(&discord, 0.1, "on_edit = \"rerun\"")).await;

    let asked = discord.user_says(DM_CHANNEL, None, USER, "what is 2 + 2?", json!({}));
    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer");
    // A link preview arriving after the answer is no edit.
    discord.embeds_update(asked);
    let update = discord.user_edits(asked, "what is 3 + 3?");
    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() == 2).await, "no second answer");
    discord.dispatch_again("MESSAGE_UPDATE", update);
    // Handled in order: once this is answered, the repeated edit was too.
    discord.user_says(DM_CHANNEL, None, USER, "thanks", json!({}));
    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() >= 3).await, "no third answer");
    let sent = discord.sent();
    assert_eq!(sent.len(), 3, "the repeated edit is not answered again: {sent:?}");
    assert_eq!(sent[1].reply_to, Some(asked), "the rerun replies to the edited message");
    assert_eq!(fake.request_count(), 3);
    let prompts: Vec<String> = fake.requests().iter().map(Value::to_string).collect();
    assert!(prompts[1].contains("(edited) what is 3 + 3?"), "{}", prompts[1]);
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_a_thread_folds_into_its_parents_session_with_scope_chat_and_is_approved_with_it() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("on it").await;
    discord.thread(THREAD, PARENT, GUILD);
    discord.thread(OTHER_THREAD, OTHER_CHANNEL, GUILD);
    // Only the parent channel is allowed; its threads come with it, another channel's do not.
    let config = format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\nsession_scope = \"chat\"\n\
         group_policy = \"allowlist\"\nallow_chats = [\"{PARENT}\"]\n\n\
         [channels.dc]\nkind = \"discord\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        fake_discord::TOKEN,
        discord.proxy_url()
    );
    let gateway = start(home.path(), &fake, &config).await;
    let mention = json!({"mentions": [discord.bot_user()]});

    discord.user_says(PARENT, Some(GUILD), USER, &format!("<@{BOT_ID}> the plan is A"), mention.clone());
    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer in the channel");
    let asked =
        discord.user_says(THREAD, Some(GUILD), USER, &format!("<@{BOT_ID}> what was the plan?"), mention.clone());
    discord.user_says(OTHER_THREAD, Some(GUILD), USER, &format!("<@{BOT_ID}> psst"), mention.clone());
    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() >= 2).await, "no answer in the thread");

    let sent = discord.sent();
    assert_eq!((sent[1].channel_id, sent[1].reply_to), (THREAD, Some(asked)), "the reply goes into the thread");
    assert!(last_prompt(&fake).contains("the plan is A"), "the thread's turn has the parent's context");
    let texts = user_texts(home.path(), &format!("dc:{PARENT}"));
    assert!(texts.iter().any(|t| t.contains("what was the plan?")), "the thread is on the parent's tape: {texts:?}");
    assert!(tape(home.path(), &format!("dc:{PARENT}:{THREAD}")).is_empty(), "no tape of its own");

    // Another message in the allowed thread, so the other channel's thread had its chance.
    discord.user_says(THREAD, Some(GUILD), USER, &format!("<@{BOT_ID}> and then?"), mention);
    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() >= 3).await);
    assert!(discord.sent().iter().all(|m| m.channel_id != OTHER_THREAD), "a thread of another channel is not approved");
    assert_eq!(fake.request_count(), 3);
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_an_edited_waiting_message_keeps_its_new_text_across_a_crash() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("four").await;
    // A long debounce: the turn does not start before the crash.
    let mut gateway = start(home.path(), &fake, &telegram_config(&telegram, 600.0, "")).await;
    let asked = telegram.user_says(1001, "what is 2 + 2?");
    telegram.user_edits(1001, asked, "what is 2 + 2, in words?", json!({}));
    let applied = telegram
        .wait_until(ANSWER_TIMEOUT, |_| gateway.stderr().contains("an edit replaced the text of a message waiting"))
        .await;
    assert!(applied, "the edit never reached its waiting message:\n{}", gateway.stderr());
    gateway.kill_hard();

    let gateway = start(home.path(), &fake, &telegram_config(&telegram, 0.1, "")).await;
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await, "no answer after the restart");
    let prompt = last_prompt(&fake);
    assert!(prompt.contains("what is 2 + 2, in words?"), "the restart runs the edited text: {prompt}");
    assert!(!prompt.contains("what is 2 + 2?"), "{prompt}");
    assert_eq!((fake.request_count(), telegram.sent().len()), (1, 1), "one turn, one reply");
    assert!(gateway.stop().await);
}
