//! `bub gateway` with a Discord channel against the fake Discord playing the
//! parts of Discord's protocol a bot meets in a long run: RECONNECT, INVALID
//! SESSION, close codes, heartbeats asked for and missing, the MESSAGE
//! CONTENT intent refused, its own REST rate limits, refusals,
//! `allowed_mentions` and how Discord counts a message's length. Each test
//! asserts what the Discord user sees (answers, once each) and what Discord
//! saw (IDENTIFY or RESUME, the calls made).

use crate::support;

use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::fake_discord::{DiscordFault, FakeDiscord, RateLimits, TOKEN};
use support::fake_model::{FakeModel, Reply};
use support::gateway::{GatewayProcess, refused_start};

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
const USER: u64 = 300_000_000_000_000_002;
const DM_CHANNEL: u64 = 400_000_000_000_000_002;
const GUILD: u64 = 500_000_000_000_000_002;
const GUILD_CHANNEL: u64 = 600_000_000_000_000_002;
/// Discord's privileged MESSAGE CONTENT intent.
const MESSAGE_CONTENT: u64 = 1 << 15;

fn config(discord: &FakeDiscord) -> String {
    discord.open_config(TOKEN)
}

async fn start(home: &Path, fake: &FakeModel, discord: &FakeDiscord) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), &config(discord)).await
}

/// The user says `text` in the DM channel; waits until the bot has sent one more message than before.
async fn say_and_wait_for_answer(discord: &FakeDiscord, text: &str) {
    let before = discord.sent().len();
    discord.user_says(DM_CHANNEL, None, USER, text, json!({}));
    let answered = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.sent().len() > before).await;
    assert!(answered, "{text:?} was never answered; calls {:?}", discord.calls());
}

/// What the model was asked last: the newest user message of its last request.
fn last_question(fake: &FakeModel) -> String {
    let request = fake.requests().last().cloned().unwrap_or_default();
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let asked = messages.iter().rev().find(|message| message["role"] == "user").cloned().unwrap_or_default();
    asked["content"].as_str().unwrap_or_default().to_string()
}

/// A connected gateway that has answered one message in the DM channel (so catch-up knows the chat).
async fn connected(home: &Path, fake: &FakeModel, discord: &FakeDiscord) -> GatewayProcess {
    let gateway = start(home, fake, discord).await;
    say_and_wait_for_answer(discord, "hello").await;
    gateway
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_connection_is_resumed_and_the_resume_replays_what_was_said_meanwhile() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = connected(home.path(), &fake, &discord).await;

    discord.disconnect_all();
    say_and_wait_for_answer(&discord, "said while the connection was down").await;
    assert_eq!(last_question(&fake), "said while the connection was down");
    assert_eq!(discord.identifies().len(), 1, "no new session: the old one was resumed");
    assert_eq!(discord.resumes().len(), 1, "one RESUME");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(discord.sent().len(), 2, "nothing answered twice");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reconnect_and_resumable_invalid_session_are_resumed_without_losing_a_message() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = connected(home.path(), &fake, &discord).await;

    // op 7: Discord asks the bot to reconnect and resume
    discord.request_reconnect();
    say_and_wait_for_answer(&discord, "said during the reconnect").await;
    assert_eq!(last_question(&fake), "said during the reconnect");
    assert_eq!((discord.identifies().len(), discord.resumes().len()), (1, 1), "op 7 is answered by a RESUME");

    // op 9 with d: true: the session may be resumed
    discord.invalidate_sessions(true);
    say_and_wait_for_answer(&discord, "said during the invalid session").await;
    assert_eq!(last_question(&fake), "said during the invalid session");
    assert_eq!((discord.identifies().len(), discord.resumes().len()), (1, 2), "op 9 (d: true) is answered by a RESUME");
    assert_eq!(fake.request_count(), 3, "each message was one turn");
    gateway.stop().await;
}

/// Something Discord does to end the bot's sessions.
type EndSession = dyn Fn(&FakeDiscord);

/// After an INVALID_SESSION that cannot be resumed and after close codes
/// 4007 and 4009, Discord starts a new session from now: the bot identifies
/// anew, and what was said in between comes from the channel's history.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_session_ends_the_bot_identifies_anew_and_catches_up_what_it_missed() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = connected(home.path(), &fake, &discord).await;

    let endings: [(&str, &EndSession); 3] = [
        ("INVALID_SESSION (d: false)", &|discord| discord.invalidate_sessions(false)),
        ("close 4007 (invalid seq)", &|discord| discord.close_all(4007, "Invalid seq")),
        ("close 4009 (session timed out)", &|discord| discord.close_all(4009, "Session timed out")),
    ];
    for (round, (ending, end_session)) in endings.iter().enumerate() {
        end_session(&discord);
        let text = format!("said after {ending}");
        say_and_wait_for_answer(&discord, &text).await;
        assert_eq!(last_question(&fake), text, "after {ending}");
        assert_eq!(discord.identifies().len(), round + 2, "after {ending} the bot identified anew");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(discord.sent().len(), 4, "each message answered once: {:?}", discord.sent());
    assert_eq!(fake.request_count(), 4);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_the_gateway_asks_for_is_sent_at_once() {
    let home = tempfile::tempdir().unwrap();
    // So long that the bot's own heartbeats never come within the test: one that comes answers the request.
    let discord = FakeDiscord::start_with_heartbeat_interval(Duration::from_secs(3600)).await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = start(home.path(), &fake, &discord).await;

    assert!(discord.wait_until(ANSWER_TIMEOUT, |fake| !fake.identifies().is_empty()).await);
    discord.request_heartbeat();
    let answered = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.heartbeat_requests_answered() == 1).await;
    assert!(answered, "the heartbeat request (op 1) was not answered; heartbeats {}", discord.heartbeats());
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_connection_is_replaced_and_what_was_said_meanwhile_is_answered_once() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = connected(home.path(), &fake, &discord).await;

    // The path dies: heartbeats get no ACK, nothing arrives, the TCP connection stays open.
    discord.go_silent();
    say_and_wait_for_answer(&discord, "said to a zombie").await;
    assert_eq!(last_question(&fake), "said to a zombie");
    let new_connections = discord.identifies().len() + discord.resumes().len();
    assert!(
        new_connections >= 2,
        "the bot connected again: {} IDENTIFY, {} RESUME",
        discord.identifies().len(),
        discord.resumes().len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(discord.sent().len(), 2, "nothing answered twice");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_message_content_intent_the_gateway_refuses_to_start_and_says_where_to_enable_it() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    discord.disallow_intents(MESSAGE_CONTENT);
    let stderr = refused_start(home.path(), &config(&discord));
    assert!(stderr.contains("MESSAGE CONTENT") && stderr.contains("Developer Portal"), "{stderr}");
    assert_eq!(discord.identifies().len(), 1, "refused once, not retried: {:?}", discord.identifies());
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_the_message_content_intent_while_running_is_an_error_not_a_reconnect_loop() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = connected(home.path(), &fake, &discord).await;

    // The intent is switched off in the portal; the next new session is refused with 4014.
    discord.disallow_intents(MESSAGE_CONTENT);
    discord.close_all(4009, "Session timed out");
    let logged = discord
        .wait_until(ANSWER_TIMEOUT, |_| {
            let stderr = gateway.stderr();
            stderr.contains("MESSAGE CONTENT") && stderr.contains("Developer Portal")
        })
        .await;
    assert!(logged, "no error says what to fix:\n{}", gateway.stderr());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(discord.identifies().len(), 2, "the refused IDENTIFY is not retried in a loop");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_reply_or_edit_can_ping_anyone() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    // Long enough to stream by edits; it names everyone, a role and a user.
    let answer = format!("@everyone <@&77> <@{USER}> {}", "and so on ".repeat(150));
    let fake = FakeModel::start_answering(&answer).await;
    let gateway = start(home.path(), &fake, &discord).await;

    let mention = json!({"mentions": [discord.bot_user()]});
    discord.user_says(GUILD_CHANNEL, Some(GUILD), USER, "<@900000000000000001> ping them all", mention);
    let done = discord
        .wait_until(ANSWER_TIMEOUT, |fake| {
            let last = fake.edits().last().map(|edit| edit.content.clone());
            let first = fake.sent().first().map(|sent| sent.content.clone());
            last.or(first).is_some_and(|text| text.trim_end() == answer.trim_end())
        })
        .await;
    assert!(done, "the reply never finished: {:?}", discord.sent());
    let sent = discord.sent().into_iter().map(|sent| (sent.content, sent.allowed_mentions));
    let edits = discord.edits().into_iter().map(|edit| (edit.content, edit.allowed_mentions));
    for (content, allowed) in sent.chain(edits) {
        let allowed = allowed.unwrap_or_else(|| panic!("no allowed_mentions, so Discord parses them all: {content:?}"));
        assert_eq!(allowed["parse"], json!([]), "{allowed}");
        for list in ["users", "roles"] {
            assert!(allowed.get(list).is_none_or(|ids| ids == &json!([])), "{allowed}");
        }
        assert_eq!(allowed["replied_user"], json!(false), "{allowed}");
    }
    gateway.stop().await;
}

/// Sends a reply of about 7 Discord messages (2300 words) under `limits`, which it
/// exceeds; every word arrives once, in order, and the fake's 429s had `scope`.
async fn long_reply_under(limits: RateLimits, scope: &str) {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let answer = (0..2300).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let fake = FakeModel::start().await;
    fake.push(Reply::text("hi")).answer_all(Reply::text(&answer));
    let gateway = connected(home.path(), &fake, &discord).await;
    discord.set_rate_limits(limits);
    let before = discord.sent().len();

    discord.user_says(DM_CHANNEL, None, USER, "everything, please", json!({}));
    let last_word = answer.rsplit(' ').next().unwrap_or_default().to_string();
    let done = discord
        .wait_until(ANSWER_TIMEOUT * 2, |fake| shown(fake).last().is_some_and(|text| text.ends_with(&last_word)))
        .await;
    let texts = shown(&discord).split_off(before);
    assert!(done, "the reply never finished: {} messages; calls {:?}", texts.len(), discord.calls());
    let words: Vec<&str> = texts.iter().flat_map(|text| text.split_whitespace()).collect();
    assert_eq!(words, answer.split(' ').collect::<Vec<_>>(), "every word once, in order");
    let hits = discord.self_made_429s();
    assert!(!hits.is_empty(), "the fake's buckets were never hit; the test proves nothing");
    assert!(hits.iter().all(|hit| hit.scope == scope), "{hits:?}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_channels_rate_limit_is_waited_out_and_every_part_arrives_once_in_order() {
    let per_channel =
        RateLimits { per_channel: 3, per_channel_window: Duration::from_secs(3), ..RateLimits::default() };
    long_reply_under(per_channel, "user").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_global_rate_limit_is_waited_out_and_every_part_arrives_once_in_order() {
    let global = RateLimits { per_channel: 1000, global_per_second: 1, ..RateLimits::default() };
    long_reply_under(global, "global").await;
}

/// What the channel shows: each message the bot sent, after its last edit.
fn shown(discord: &FakeDiscord) -> Vec<String> {
    let edits = discord.edits();
    discord
        .sent()
        .into_iter()
        .map(|sent| {
            let last = edits.iter().rev().find(|edit| edit.message_id == sent.message_id);
            last.map_or(sent.content, |edit| edit.content.clone())
        })
        .collect()
}

/// A channel Discord refuses for good (no permission, DMs closed, deleted)
/// costs a reply a bounded number of calls, never a retry loop, and other
/// chats are answered meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_channel_is_not_retried_and_other_chats_are_answered() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("here").await;
    let gateway = connected(home.path(), &fake, &discord).await;

    let refusals = [
        (GUILD_CHANNEL, Some(GUILD), DiscordFault::MissingPermissions),
        (DM_CHANNEL + 1, None, DiscordFault::CannotMessageUser),
        (GUILD_CHANNEL + 1, Some(GUILD), DiscordFault::UnknownChannel),
    ];
    let replies_to = |fake: &FakeDiscord, channel: u64| {
        let calls = fake.refused_calls();
        calls.iter().filter(|(route, id)| *id == channel && route != "typing").count()
    };
    for (channel, guild, refusal) in refusals {
        discord.refuse_channel(channel, refusal.clone());
        let mention = json!({"mentions": [discord.bot_user()]});
        discord.user_says(channel, guild, USER, "<@900000000000000001> answer me", mention);
        let tried = discord.wait_until(ANSWER_TIMEOUT, |fake| replies_to(fake, channel) > 0).await;
        assert!(tried, "{refusal:?}: the reply was never tried; calls {:?}", discord.calls());
        say_and_wait_for_answer(&discord, &format!("and here, after {refusal:?}?")).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let attempts = replies_to(&discord, channel);
        assert!(attempts <= 2, "{refusal:?}: {attempts} refused calls; a refusal is final");
    }
    assert!(discord.sent().iter().all(|sent| sent.channel_id == DM_CHANNEL), "{:?}", discord.sent());
    gateway.stop().await;
}

/// Discord counts a message's length in Unicode code points: 2000 emoji
/// outside the Basic Multilingual Plane (4000 UTF-16 units) fit one message.
#[tokio::test(flavor = "multi_thread")]
async fn a_reply_is_split_where_discord_counts_2000_code_points() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fits = "😀".repeat(2000);
    let over = format!("{}{}", "🎉".repeat(1500), " 😀".repeat(300));
    let fake = FakeModel::start().await;
    fake.push(Reply::text(&fits)).push(Reply::text(&over));
    let gateway = start(home.path(), &fake, &discord).await;

    discord.user_says(DM_CHANNEL, None, USER, "2000 emoji", json!({}));
    assert!(
        discord.wait_until(ANSWER_TIMEOUT, |fake| shown(fake).last() == Some(&fits)).await,
        "{:?}",
        shown(&discord)
    );
    assert_eq!(shown(&discord).len(), 1, "2000 code points are one Discord message");

    discord.user_says(DM_CHANNEL, None, USER, "2100 emoji", json!({}));
    let done = discord.wait_until(ANSWER_TIMEOUT, |fake| shown(fake).concat().matches('😀').count() >= 2300).await;
    let texts = shown(&discord);
    assert!(done, "{texts:?}");
    assert_eq!(texts.len(), 3, "2100 code points are two messages");
    assert!(texts.iter().all(|text| text.chars().count() <= 2000));
    let words: Vec<&str> = texts[1..].iter().flat_map(|text| text.split_whitespace()).collect();
    assert_eq!(words, over.split_whitespace().collect::<Vec<_>>(), "nothing lost at the cut");
    gateway.stop().await;
}
