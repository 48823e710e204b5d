//! No secret ever reaches a log (issue 31): the real `bub gateway`, logging
//! everything (`BUB_LOG=trace`: bub's lines and its dependencies', `log`
//! records included; only the file watcher's at debug, see [`EVERYTHING`]), runs a whole session against the fakes — a webhook
//! turn, a request with a bad signature, a Telegram turn, a Discord turn, a
//! model that refuses the key (401), a config reload refused (the error on
//! the token's line) and one applied — once writing JSON lines and once
//! text. Then no line of its stderr holds a configured token, secret or API
//! key: not whole, not the distinctive part (a Telegram token's part after
//! `:`, the marker in each secret the test makes up), not as bytes written
//! out in hex or decimal (how a WebSocket frame's payload is traced). The
//! JSON run's every line is a JSON object with the fixed keys, and a turn's
//! lines carry their channel, session and (on the way out) chat.
//!
//! A Bot API out of reach is where Telegram's token would leak (its URLs
//! hold it, and HTTP errors print the URL): a gateway whose Bot API does not
//! answer says so without it.

use crate::support;

use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use support::fake_discord::{self, FakeDiscord};
use support::fake_model::{FakeModel, Reply};
use support::fake_telegram::{self, FakeTelegram};
use support::gateway::{GatewayProcess, client, signed_request};

/// Answers and reloads come within this (debug binary, loaded 2-core machine).
const PATIENCE: Duration = Duration::from_secs(60);
/// In every secret the test makes up: found anywhere, part of one leaked.
const MARKER: &str = "q7Zx";
const WEBHOOK_SECRET: &str = "whsec-q7ZxWebhook-3f9a2c";
const CALLBACK_SECRET: &str = "cbsec-q7ZxCallback-81d0e4";
const MODEL_KEY: &str = "sk-q7ZxModelKey-5be6a1c2";
const TELEGRAM_USER: i64 = 1001;
const DISCORD_USER: u64 = 300_000_000_000_000_001;
const DISCORD_DM: u64 = 400_000_000_000_000_001;

/// What no line may hold, and what each is.
fn secrets() -> Vec<(&'static str, String)> {
    let (_, telegram_secret) = fake_telegram::TOKEN.split_once(':').expect("a bot token has an id and a secret");
    vec![
        ("the Telegram token", fake_telegram::TOKEN.into()),
        ("the Telegram token's secret part", telegram_secret.into()),
        ("the Discord token", fake_discord::TOKEN.into()),
        ("the webhook secret", WEBHOOK_SECRET.into()),
        ("the webhook callback secret", CALLBACK_SECRET.into()),
        ("the model API key", MODEL_KEY.into()),
        ("a part of a made-up secret", MARKER.into()),
    ]
}

/// `text` and its bytes as a trace line may write them: hex (`0x7b22…`) and
/// decimal (`[123, 34, …]`).
fn written_forms(text: &str) -> [String; 4] {
    let bytes = text.as_bytes();
    [
        text.to_string(),
        bytes.iter().map(|byte| format!("{byte:02x}")).collect(),
        bytes.iter().map(|byte| format!("{byte:02X}")).collect(),
        bytes.iter().map(u8::to_string).collect::<Vec<_>>().join(", "),
    ]
}

/// Fails on the first line of `stderr` that holds a secret in any form.
fn assert_no_secret(stderr: &str) {
    let secrets = secrets();
    for line in stderr.lines() {
        for (what, secret) in &secrets {
            for form in written_forms(secret) {
                assert!(!line.contains(&form), "{what} ({form}) is in a log line:\n{line}");
            }
        }
    }
}

/// The gateway's config: a webhook channel, a Telegram bot and a Discord bot
/// on the fakes, everyone answered, debouncing for `quiet` seconds; `token_line`
/// changes the Discord token's line (to break it).
fn config(telegram: &FakeTelegram, discord: &FakeDiscord, quiet: f64, token_line: &str) -> String {
    format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = {quiet} }}\n\
         dm_policy = \"open\"\ngroup_policy = \"open\"\n\n\
         [channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{WEBHOOK_SECRET}\"]\n\
         callback_secret = \"{CALLBACK_SECRET}\"\n\n\
         [channels.tg]\nkind = \"telegram\"\ntoken = \"{}\"\napi_url = \"{}\"\n\n\
         [channels.dc]\nkind = \"discord\"\ntoken = \"{}\"{token_line}\napi_url = \"{}\"\n",
        fake_telegram::TOKEN,
        telegram.api_url(),
        fake_discord::TOKEN,
        discord.proxy_url(),
    )
}

/// Everything, but `notify`'s traces: the config file's watcher traces each
/// change in its folder, the gateway's stderr file is there too, and each
/// line written would trace another, without end.
const EVERYTHING: &str = "trace,notify=debug";

/// The fake model's variables with the test's key, logging [`EVERYTHING`] in `format`.
fn env(model: &FakeModel, format: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        model.vars("openai:gpt-test").into_iter().filter(|(name, _)| !name.ends_with("_API_KEY")).collect();
    env.push(("BUB_OPENAI_API_KEY".into(), MODEL_KEY.into()));
    env.push(("BUB_LOG".into(), EVERYTHING.into()));
    env.push(("BUB_LOG_FORMAT".into(), format.into()));
    env
}

/// A message on the webhook channel, signed with `secret`: the status and the JSON answer.
async fn ask(gateway: &GatewayProcess, id: &str, text: &str, secret: &str) -> (u16, Value) {
    let body = json!({"message_id": id, "chat_id": "room-1", "sender_id": "u1", "text": text});
    let response =
        signed_request(&client(), gateway.addr, "hooks", "sync", &body, secret).await.expect("a webhook request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Replaces the file the way editors do: write a sibling, rename it over.
fn replace(path: &Path, text: &str) {
    let temporary = path.with_extension("toml.tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// Waits until the gateway's stderr has `count` lines holding `text`.
async fn wait_for_lines(gateway: &GatewayProcess, text: &str, count: usize) {
    let deadline = Instant::now() + PATIENCE;
    while gateway.stderr().lines().filter(|line| line.contains(text)).count() < count {
        assert!(Instant::now() < deadline, "no {count} lines with {text:?} within {PATIENCE:?}:\n{}", gateway.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The whole session on a gateway logging everything in `format`; its stderr.
async fn session(format: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let model = FakeModel::start_answering("all good").await;
    let telegram = FakeTelegram::start().await;
    let discord = FakeDiscord::start().await;
    let config_text = config(&telegram, &discord, 0.1, "");
    let gateway = GatewayProcess::start_with_config(home.path(), &env(&model, format), &config_text).await;

    let (status, answer) = ask(&gateway, "m1", "hello from a webhook", WEBHOOK_SECRET).await;
    assert_eq!((status, &answer["text"]), (200, &json!("all good")), "{answer}");
    let (status, _) = ask(&gateway, "m2", "a forged request", "not-the-secret").await;
    assert_eq!(status, 401, "a bad signature is refused");

    telegram.user_says(TELEGRAM_USER, "hello from telegram");
    let sent = telegram.wait_for_sent(1, PATIENCE).await;
    assert_eq!(sent.first().map(|sent| sent.text.as_str()), Some("all good"), "{sent:?}");

    discord.user_says(DISCORD_DM, None, DISCORD_USER, "hello from discord", json!({}));
    assert!(discord.wait_until(PATIENCE, |fake| !fake.sent().is_empty()).await, "Discord answered");

    // The provider refuses the key: errors are where secrets leak.
    model.push(Reply::error(401, "Incorrect API key provided"));
    let (status, answer) = ask(&gateway, "m3", "and now?", WEBHOOK_SECRET).await;
    assert_eq!((status, &answer["status"]), (200, &json!("failed")), "{answer}");

    // A reload refused, its error on the Discord token's line, then one applied.
    let path = home.path().join("bub.toml");
    replace(&path, &config(&telegram, &discord, 0.1, " oops"));
    wait_for_lines(&gateway, "the new config is invalid", 1).await;
    replace(&path, &config(&telegram, &discord, 0.2, ""));
    wait_for_lines(&gateway, "config reloaded", 1).await;

    let stderr_path = gateway.stderr_path.clone();
    assert!(gateway.stop().await, "the gateway stops cleanly");
    std::fs::read_to_string(stderr_path).unwrap()
}

/// The JSON lines of a JSON run, each checked: a JSON object with the fixed keys.
fn json_lines(stderr: &str) -> Vec<Map<String, Value>> {
    stderr
        .lines()
        .map(|line| {
            let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) else {
                panic!("not a JSON object a line:\n{line}")
            };
            for key in ["timestamp", "level", "target", "message"] {
                assert!(object.get(key).is_some_and(Value::is_string), "no {key} in:\n{line}");
            }
            let timestamp = object["timestamp"].as_str().unwrap_or_default();
            assert!(
                timestamp.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
                "not an RFC 3339 UTC time:\n{line}"
            );
            object
        })
        .collect()
}

fn in_span(line: &Map<String, Value>, name: &str) -> bool {
    line.get("spans").and_then(Value::as_array).is_some_and(|spans| spans.iter().any(|span| span == name))
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_a_json_log_line_and_a_turns_lines_carry_channel_chat_and_session() {
    let stderr = session("json").await;
    assert_no_secret(&stderr);
    let lines = json_lines(&stderr);
    assert!(lines.len() > 100, "everything was logged: {} lines", lines.len());
    assert!(lines.iter().any(|line| line["target"] == "bub"), "the gateway's own lines are JSON too:\n{stderr}");
    for (channel, chat) in
        [("hooks", "room-1"), ("tg", &TELEGRAM_USER.to_string()[..]), ("dc", &DISCORD_DM.to_string()[..])]
    {
        let session = format!("{channel}:{chat}");
        let answered = lines.iter().filter(|line| line["message"] == "turn answered" && in_span(line, "turn"));
        let mut answered = answered.filter(|line| line["channel"] == channel);
        let line = answered.next().unwrap_or_else(|| panic!("no turn answered on {channel}:\n{stderr}"));
        assert_eq!(line["session"], session.as_str(), "{line:?}");
        assert_eq!(line["chat"], chat, "the turn's chat: {line:?}");
        assert!(line.get("turn").is_some_and(Value::is_string), "{line:?}");
        if channel != "hooks" {
            let to_chat = |line: &&Map<String, Value>| line["channel"] == channel && line["chat"] == chat;
            assert!(
                lines.iter().filter(|line| in_span(line, "outbound")).any(|line| to_chat(&line)),
                "no line of the answer's send to {session}:\n{stderr}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_a_text_log_line() {
    let stderr = session("text").await;
    assert_no_secret(&stderr);
    assert!(stderr.lines().count() > 100, "everything was logged:\n{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bot_api_out_of_reach_is_reported_without_the_token() {
    let home = tempfile::tempdir().unwrap();
    let model = FakeModel::start_answering("never asked").await;
    // Nothing listens on port 9 (discard) of loopback here: the connection is refused.
    let text = format!(
        "[channels.tg]\nkind = \"telegram\"\ntoken = \"{}\"\napi_url = \"http://127.0.0.1:9\"\n",
        fake_telegram::TOKEN
    );
    std::fs::write(home.path().join("bub.toml"), &text).unwrap();
    let path = home.path().join("bub.toml");
    let args = ["--config", path.to_str().unwrap()];
    let (status, stderr) = GatewayProcess::spawn(home.path(), &env(&model, "text"), &args).exit_within(PATIENCE).await;
    assert!(status.is_some_and(|status| !status.success()), "the gateway does not start:\n{stderr}");
    assert!(stderr.contains("cannot reach the Telegram Bot API at http://127.0.0.1:9/"), "{stderr}");
    assert_no_secret(&stderr);
}
