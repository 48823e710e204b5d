//! `bub gateway` with a Discord channel: the real binary and the real adapter
//! (serenity) against the fake Discord REST API and gateway, with the fake
//! model. Each test asserts what the Discord user would see in the channel.

use crate::support;

use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::fake_discord::{BOT_ID, DiscordFault, FakeDiscord, SentMessage, TOKEN, shard_of};
use support::fake_model::{FakeModel, Reply};
use support::gateway::{GatewayProcess, refused_start};

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
const USER: u64 = 300_000_000_000_000_001;
const DM_CHANNEL: u64 = 400_000_000_000_000_001;
const GUILD: u64 = 500_000_000_000_000_001;
const GUILD_CHANNEL: u64 = 600_000_000_000_000_001;
const OTHER_USER: u64 = 300_000_000_000_000_002;
/// A guild on shard 1 of 2 (`GUILD` is on shard 0: `(id >> 22) % 2`), and a channel in it.
const GUILD_ON_SHARD_1: u64 = GUILD + (1 << 22);
const SHARD_1_CHANNEL: u64 = 600_000_000_000_000_011;

fn config(discord: &FakeDiscord, token: &str) -> String {
    discord.open_config(token)
}

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

/// What the channel shows for each message the bot sent: its content after the last edit.
fn visible(discord: &FakeDiscord) -> Vec<(SentMessage, String)> {
    let edits = discord.edits();
    discord
        .sent()
        .into_iter()
        .map(|sent| {
            let last = edits.iter().rev().find(|edit| edit.message_id == sent.message_id);
            let text = last.map_or_else(|| sent.content.clone(), |edit| edit.content.clone());
            (sent, text)
        })
        .collect()
}

async fn wait_for_visible(discord: &FakeDiscord, expected: &str) -> Vec<(SentMessage, String)> {
    let shown =
        discord.wait_until(ANSWER_TIMEOUT, |fake| visible(fake).last().is_some_and(|(_, text)| text == expected)).await;
    let messages = visible(discord);
    assert!(shown, "the channel never showed {expected:?}; it shows {messages:?}; calls {:?}", discord.calls());
    messages
}

#[tokio::test(flavor = "multi_thread")]
async fn a_direct_message_gets_a_reply_to_it_with_markdown_kept() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("**Hello** from `bub`").await;
    let gateway = start(home.path(), &fake, &config(&discord, TOKEN)).await;

    let asked = discord.user_says(DM_CHANNEL, None, USER, "hi there", json!({}));
    let shown = wait_for_visible(&discord, "**Hello** from `bub`").await;
    assert_eq!((shown[0].0.channel_id, shown[0].0.reply_to), (DM_CHANNEL, Some(asked)));
    assert!(discord.typing().contains(&DM_CHANNEL), "typing… was shown while working");
    let identify = discord.identifies().first().cloned().unwrap_or_default();
    let intents = identify["intents"].as_u64().unwrap_or_default();
    assert_ne!(intents & (1 << 15), 0, "the message-content intent is asked for: {identify}");
    assert!(gateway.stop().await, "SIGTERM closes the connection and stops the gateway");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_guild_only_mentions_and_replies_to_the_bot_are_answered() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("noted").await;
    let gateway = start(home.path(), &fake, &config(&discord, TOKEN)).await;

    discord.user_says(GUILD_CHANNEL, Some(GUILD), USER, "lunch at noon?", json!({}));
    let mention = format!("<@{BOT_ID}> what did we decide?");
    let asked =
        discord.user_says(GUILD_CHANNEL, Some(GUILD), USER, &mention, json!({"mentions": [discord.bot_user()]}));
    let shown = wait_for_visible(&discord, "noted").await;
    assert_eq!(shown.len(), 1, "one answer, to the mention only: {shown:?}");
    assert_eq!(shown[0].0.reply_to, Some(asked));
    let prompt = fake.requests().last().cloned().unwrap_or_default().to_string();
    assert!(prompt.contains("lunch at noon?"), "the unaddressed message is context: {prompt}");
    assert!(prompt.contains("@bub-test what did we decide?"), "the mention reads as a name: {prompt}");
    assert_eq!(fake.request_count(), 1);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_is_split_under_discords_limit_and_a_dropped_connection_loses_nothing_after() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let answer = (0..900).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let fake = FakeModel::start_answering(&answer).await;
    let gateway = start(home.path(), &fake, &config(&discord, TOKEN)).await;

    discord.user_says(DM_CHANNEL, None, USER, "tell me everything", json!({}));
    let last_word = answer.rsplit(' ').next().unwrap().to_string();
    let done = discord
        .wait_until(ANSWER_TIMEOUT, |fake| visible(fake).last().is_some_and(|(_, text)| text.ends_with(&last_word)))
        .await;
    let shown = visible(&discord);
    assert!(done, "the reply never finished: {shown:?}");
    assert!(shown.len() >= 3, "{} chars need at least 3 messages", answer.len());
    for (_, text) in &shown {
        assert!(text.chars().count() <= 2000, "a part over Discord's limit: {}", text.len());
    }
    let words: Vec<&str> = shown.iter().flat_map(|(_, text)| text.split_whitespace()).collect();
    assert_eq!(words, answer.split(' ').collect::<Vec<_>>());

    discord.disconnect_all();
    discord.user_says(DM_CHANNEL, None, USER, "still there?", json!({}));
    let before = shown.len();
    let answered = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() > before).await;
    assert!(answered, "no answer after the connection dropped; calls {:?}", discord.calls());
    gateway.stop().await;
}

/// The first `count` attempts of the reply get `limit` (a 429); the reply waits and arrives once.
async fn a_limited_reply_waits_and_arrives_once(limit: DiscordFault, count: usize) {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("patience").await;
    discord.fail_next("create_message", limit.clone(), count);
    let gateway = start(home.path(), &fake, &config(&discord, TOKEN)).await;

    discord.user_says(DM_CHANNEL, None, USER, "quick!", json!({}));
    let shown = wait_for_visible(&discord, "patience").await;
    assert_eq!(shown.len(), 1, "exactly one message: {shown:?}");
    let creates = discord.calls().iter().filter(|call| *call == "create_message").count();
    assert_eq!(creates, count + 1, "{count} × {limit:?}, then the message");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limited_reply_waits_and_arrives_once() {
    a_limited_reply_waits_and_arrives_once(DiscordFault::RateLimited { retry_after_seconds: 1.0, global: false }, 1)
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_in_slowmode_waits_and_arrives_once() {
    a_limited_reply_waits_and_arrives_once(DiscordFault::Slowmode { retry_after_seconds: 2.0 }, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_token_stops_the_gateway_with_an_error_naming_the_key() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let stderr = refused_start(home.path(), &config(&discord, "wrong-token"));
    assert!(stderr.contains("channels.dc.token"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_written_while_the_gateway_was_stopped_are_caught_up_once() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("answer").await;
    let config_text = config(&discord, TOKEN);
    let gateway = start(home.path(), &fake, &config_text).await;
    discord.user_says(DM_CHANNEL, None, USER, "first", json!({}));
    wait_for_visible(&discord, "answer").await;
    assert!(gateway.stop().await);

    // Discord starts a new session from now: these two are never dispatched.
    let first = discord.written_while_offline(DM_CHANNEL, None, USER, "written while you were away");
    discord.written_while_offline(DM_CHANNEL, None, USER, "and this too");
    let gateway = start(home.path(), &fake, &config_text).await;
    let answered = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() >= 2).await;
    assert!(answered, "the missed messages were never answered; calls {:?}", discord.calls());
    let sent = discord.sent();
    assert_eq!(sent[1].reply_to, Some(first), "one answer to both, threaded to the first: {sent:?}");
    assert!(sent[1].pinged.is_empty(), "one writer: nobody is pinged: {sent:?}");
    let request = fake.requests().last().cloned().unwrap_or_default();
    let asked = request["messages"].as_array().and_then(|messages| messages.last()).cloned().unwrap_or_default();
    assert_eq!(asked["content"], "written while you were away\nand this too", "one turn for both, nothing else");

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(discord.sent().len(), 2, "nothing was answered twice");
    assert_eq!(fake.request_count(), 2);
    gateway.stop().await;
}

/// A long answer, in words of 2 to 5 characters.
fn long_answer(words: usize) -> String {
    (0..words).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

fn calls_of(discord: &FakeDiscord, route: &str) -> usize {
    discord.calls().iter().filter(|call| *call == route).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_streamed_reply_is_one_message_and_no_edit() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("echo: show **bold** text").await;
    let gateway = start(home.path(), &fake, &config(&discord, TOKEN)).await;

    discord.user_says(DM_CHANNEL, None, USER, "show bold text", json!({}));
    let shown = wait_for_visible(&discord, "echo: show **bold** text").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].0.content, "echo: show **bold** text", "the first text sent is the whole reply");
    assert_eq!(calls_of(&discord, "create_message"), 1, "one call: {:?}", discord.calls());
    assert!(discord.edits().is_empty(), "and no edit: {:?}", discord.edits());
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_cut_by_sigkill_is_finished_in_the_same_message_after_the_restart() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let answer = long_answer(120);
    let fake = FakeModel::start().await;
    // About 15 s of streaming: the kill comes well before its end.
    fake.push(Reply::paced(Duration::from_millis(100), Reply::text(&answer)));
    fake.answer_all(Reply::text(&answer));
    let config_text = config(&discord, TOKEN);
    let mut gateway = start(home.path(), &fake, &config_text).await;

    discord.user_says(DM_CHANNEL, None, USER, "tell me everything", json!({}));
    let growing = discord.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty() && !fake.edits().is_empty()).await;
    assert!(growing, "the reply never streamed: {:?}", discord.calls());
    gateway.kill_hard();
    let frozen = visible(&discord);
    assert!(frozen.len() == 1 && frozen[0].1 != answer, "the kill came mid-stream: {frozen:?}");

    let gateway = start(home.path(), &fake, &config_text).await;
    wait_for_visible(&discord, &answer).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shown = visible(&discord);
    assert_eq!(shown.len(), 1, "one message holds the whole answer, no second copy: {shown:?}");
    assert_eq!(shown[0].1, answer, "no frozen fragment");
    assert_eq!(calls_of(&discord, "create_message"), 1, "{:?}", discord.calls());
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_the_final_edit_does_not_send_the_reply_again() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let answer = long_answer(60);
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::paced(Duration::from_millis(30), Reply::text(&answer)));
    // The edit that shows the whole answer takes effect; the gateway never hears back.
    discord.hang_next("edit_message", &answer);
    let config_text = config(&discord, TOKEN);
    let mut gateway = start(home.path(), &fake, &config_text).await;

    discord.user_says(DM_CHANNEL, None, USER, "tell me", json!({}));
    wait_for_visible(&discord, &answer).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    gateway.kill_hard();
    let edits_before = calls_of(&discord, "edit_message");

    // The reply is still pending in the outbox: the next start delivers it, by editing.
    let gateway = start(home.path(), &fake, &config_text).await;
    let finished = |fake: &FakeDiscord| calls_of(fake, "edit_message") > edits_before || fake.sent().len() > 1;
    let edited = discord.wait_until(ANSWER_TIMEOUT, finished).await;
    assert!(edited, "the restart did not finish the reply: {:?}\n{}", discord.calls(), gateway.stderr());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shown = visible(&discord);
    assert_eq!(shown.len(), 1, "the reply was not sent again: {shown:?}");
    assert_eq!(shown[0].1, answer);
    assert_eq!(fake.request_count(), 1, "the turn was not run again");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_from_two_people_replies_to_the_first_and_pings_only_the_other() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    // The model's text names the first writer and everyone: neither may ping.
    let answer = format!("Noon, room 2 (<@{USER}>, @everyone).");
    let fake = FakeModel::start_answering(&answer).await;
    // A quiet spell long enough that both questions surely land in one batch.
    let config_text = config(&discord, TOKEN).replace("quiet_seconds = 0.1", "quiet_seconds = 2.0");
    let gateway = start(home.path(), &fake, &config_text).await;

    let mentions = json!({"mentions": [discord.bot_user()]});
    let first = discord.user_says(GUILD_CHANNEL, Some(GUILD), USER, &format!("<@{BOT_ID}> when?"), mentions.clone());
    discord.user_says(GUILD_CHANNEL, Some(GUILD), OTHER_USER, &format!("<@{BOT_ID}> where?"), mentions);
    let shown = wait_for_visible(&discord, &format!("<@{OTHER_USER}>\n{answer}")).await;
    assert_eq!(shown.len(), 1, "one answer for the burst: {shown:?}");
    let reply = &shown[0].0;
    assert_eq!(reply.reply_to, Some(first), "threaded to the first question");
    assert_eq!(reply.pinged, vec![OTHER_USER], "only the other writer is pinged: {reply:?}");
    let allowed = reply.allowed_mentions.clone().unwrap_or_default();
    assert_eq!(
        allowed,
        json!({"parse": [], "users": [OTHER_USER.to_string()], "roles": [], "replied_user": false}),
        "allowed_mentions names exactly the other writer"
    );
    assert_eq!(fake.request_count(), 1, "one turn for both");
    gateway.stop().await;
}

/// `shards = 2` in one process: one connection per shard, the second IDENTIFY a session-start window
/// (5 s, Discord's `max_concurrency` 1) after the first, and a guild on each shard is answered there.
#[tokio::test(flavor = "multi_thread")]
async fn two_shards_are_two_connections_and_a_guild_on_each_is_answered() {
    assert_eq!(
        (shard_of(&json!({"guild_id": GUILD.to_string()}), 2), shard_of(&json!({"guild_id": GUILD_ON_SHARD_1}), 2)),
        (0, 1)
    );
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    discord.set_shards(2);
    let fake = FakeModel::start_answering("on it").await;
    let gateway = start(home.path(), &fake, &format!("{}shards = 2\n", config(&discord, TOKEN))).await;

    let connected = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.live_shards().len() == 2).await;
    let sessions = discord.shard_sessions();
    assert!(connected, "two shards never connected: {sessions:?}\n{}", gateway.stderr());
    let shards: Vec<(u64, u64)> = sessions.iter().map(|session| (session.shard, session.total)).collect();
    assert_eq!(shards, [(0, 2), (1, 2)], "each shard once, in order: {sessions:?}");
    assert_ne!(sessions[0].connection, sessions[1].connection, "a connection each");
    let spacing = sessions[1].at.duration_since(sessions[0].at);
    assert!(spacing >= Duration::from_millis(4500), "the second session started {spacing:?} after the first");

    let mention = json!({"mentions": [discord.bot_user()]});
    discord.user_says(GUILD_CHANNEL, Some(GUILD), USER, &format!("<@{BOT_ID}> shard zero?"), mention.clone());
    discord.user_says(SHARD_1_CHANNEL, Some(GUILD_ON_SHARD_1), USER, &format!("<@{BOT_ID}> shard one?"), mention);
    discord.user_says(DM_CHANNEL, None, USER, "and a direct message", json!({}));
    let answered = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() >= 3).await;
    assert!(answered, "not every shard's message was answered: {:?}\n{}", discord.sent(), gateway.stderr());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut channels: Vec<u64> = discord.sent().iter().map(|sent| sent.channel_id).collect();
    channels.sort_unstable();
    assert_eq!(channels, [DM_CHANNEL, GUILD_CHANNEL, SHARD_1_CHANNEL], "each answered once, where it was asked");
    assert!(discord.shard_overlaps().is_empty(), "{:?}", discord.shard_overlaps());
    assert!(gateway.stop().await, "SIGTERM closes both connections and stops the gateway");
    assert!(discord.live_shards().is_empty(), "both shards logged off: {:?}", discord.live_shards());
}
