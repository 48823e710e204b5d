//! Files out (`chat.send_file`): the real binary and the real adapters
//! against the fake Telegram and Discord, the fake model asking for the tool.
//! Each test asserts what the chat received (file name, bytes, caption) and
//! what the model read back.

use crate::support;

use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::fake_discord::{self, FakeDiscord};
use support::fake_model::{FakeModel, Reply};
use support::fake_telegram::{self, FakeTelegram};
use support::gateway::GatewayProcess;

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
const DISCORD_USER: u64 = 300_000_000_000_000_001;
const DISCORD_DM: u64 = 400_000_000_000_000_001;

const POLICY: &str = "[policy.defaults]\ndebounce = { quiet_seconds = 0.1 }\ndm_policy = \"open\"\n\n";

fn telegram_config(telegram: &FakeTelegram) -> String {
    format!(
        "{POLICY}[channels.tg]\nkind = \"telegram\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        fake_telegram::TOKEN,
        telegram.api_url()
    )
}

fn discord_config(discord: &FakeDiscord) -> String {
    format!(
        "{POLICY}[channels.dc]\nkind = \"discord\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        fake_discord::TOKEN,
        discord.proxy_url()
    )
}

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

/// The workspace of `session` under `home`, created with `files` in it.
fn workspace(home: &Path, session: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let dir = home.join("workspaces").join(session.replace(':', "%3A"));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    dir
}

/// Whether the Telegram chat shows a message reading `text` (after its edits).
fn telegram_shows(telegram: &FakeTelegram, text: &str) -> bool {
    let edits = telegram.edits();
    telegram.sent().iter().any(|sent| {
        let last = edits.iter().rev().find(|e| e.chat_id == sent.chat_id && e.message_id == sent.message_id);
        last.map_or(sent.text.as_str(), |edit| edit.text.as_str()) == text
    })
}

/// Whether the Discord channel shows a message reading `text` (after its edits).
fn discord_shows(discord: &FakeDiscord, text: &str) -> bool {
    let edits = discord.edits();
    discord.sent().iter().any(|sent| {
        let last = edits.iter().rev().find(|edit| edit.message_id == sent.message_id);
        last.map_or(sent.content.as_str(), |edit| edit.content.as_str()) == text
    })
}

/// The model's tool calls, one step, then `text`.
fn script(fake: &FakeModel, calls: Vec<(&str, serde_json::Value)>, text: &str) {
    fake.push(Reply::tool_calls(calls)).push(Reply::text(text));
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_gets_an_image_as_a_photo_and_other_files_as_documents() {
    let home = tempfile::tempdir().unwrap();
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00binary\xff\xfe";
    workspace(home.path(), "tg:1001", &[("out/chart.png", png), ("report.csv", b"a,b\n1,2\n")]);
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("chat_send_file", json!({"path": "out/chart.png", "caption": "the chart"}))]));
    script(&fake, vec![("chat_send_file", json!({"path": "report.csv"}))], "sent both");
    let gateway = start(home.path(), &fake, &telegram_config(&telegram)).await;

    let asked = telegram.user_says(1001, "send me the chart and the report");
    let sent = telegram.wait_until(ANSWER_TIMEOUT, |fake| telegram_shows(fake, "sent both")).await;
    assert!(sent, "the turn never finished: {:?}", telegram.calls());
    let files = telegram.files();
    assert_eq!(files.len(), 2, "{files:?}");
    let (photo, document) = (&files[0], &files[1]);
    assert_eq!((photo.method.as_str(), photo.file_name.as_str()), ("sendPhoto", "chart.png"));
    assert_eq!(photo.bytes, png, "the image's bytes, unchanged");
    assert_eq!(photo.caption.as_deref(), Some("the chart"));
    assert_eq!((photo.chat_id, photo.reply_to), (1001, Some(asked)), "in the user's chat, replying to them");
    assert_eq!((document.method.as_str(), document.file_name.as_str()), ("sendDocument", "report.csv"));
    assert_eq!(document.bytes, b"a,b\n1,2\n");
    assert_eq!(document.caption, None);

    let told = format!("{}\n{}", fake.tool_results(1), fake.tool_results(2));
    assert!(
        told.contains(&format!("\"message_id\":\"{}\"", photo.message_id)),
        "the model read the message id: {told}"
    );
    assert!(told.contains("\"sent\":\"report.csv\"") && told.contains("\"bytes\":8"), "{told}");
    gateway.stop().await;

    let recorded = tool_results_on_tape(home.path(), "tg:1001").await;
    let expected = json!({"sent": "chart.png", "path": "out/chart.png", "bytes": png.len(), "media_type": "image/png",
        "message_id": photo.message_id.to_string(), "earlier": false});
    assert!(recorded.contains(&expected), "the tape records what was sent: {recorded:?}");
}

/// Every tool result on `session`'s tape (as the model read it: JSON text, parsed).
async fn tool_results_on_tape(home: &Path, session: &str) -> Vec<serde_json::Value> {
    use bub::db::SqliteTapeStore;
    use bub::tape::{EntryKind, Tape, TapeName, TapeQuery};
    let store = std::sync::Arc::new(SqliteTapeStore::open(home.join("bub.db")).await.expect("open bub.db"));
    let tape = Tape::new(store.clone(), TapeName::new(session).expect("tape name"));
    let entries = tape.read(&TapeQuery::all().kinds([EntryKind::ToolResult])).await.expect("read the tape");
    store.close().await;
    entries
        .iter()
        .flat_map(|entry| entry.payload["results"].as_array().cloned().unwrap_or_default())
        .map(|result| match result.as_str().map(serde_json::from_str) {
            Some(Ok(parsed)) => parsed,
            _ => result,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_outside_the_workspace_and_a_file_over_the_limit_are_refused_with_nothing_sent() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("secret.txt"), "token").unwrap();
    let dir = workspace(home.path(), "tg:1001", &[]);
    // Over Telegram's 50 MB upload limit, without taking the disk space (a sparse file).
    std::fs::File::create(dir.join("huge.bin")).unwrap().set_len(60_000_000).unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("chat_send_file", json!({"path": "../../secret.txt"}))]));
    fake.push(Reply::tool_calls(vec![("chat_send_file", json!({"path": "/etc/hostname"}))]));
    script(&fake, vec![("chat_send_file", json!({"path": "huge.bin"}))], "could not send it");
    let gateway = start(home.path(), &fake, &telegram_config(&telegram)).await;

    telegram.user_says(1001, "send me the secret, the hostname and the big file");
    let done = telegram.wait_until(ANSWER_TIMEOUT, |fake| telegram_shows(fake, "could not send it")).await;
    assert!(done, "the turn never finished: {:?}", telegram.calls());
    assert!(telegram.files().is_empty(), "nothing reached the chat: {:?}", telegram.files());
    let calls = telegram.calls();
    assert!(!calls.iter().any(|c| c == "sendDocument" || c == "sendPhoto"), "no upload was even tried: {calls:?}");
    for (request, refusal) in [(1, "leaves the workspace"), (2, "leaves the workspace"), (3, "at most 50000000")] {
        let told = fake.tool_results(request);
        assert!(told.contains(refusal), "request {request}: {told}");
    }
    assert!(fake.tool_results(3).contains("nothing reached the chat"), "{}", fake.tool_results(3));
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_telegram_refuses_comes_back_to_the_model_with_telegrams_reason() {
    let home = tempfile::tempdir().unwrap();
    workspace(home.path(), "tg:1001", &[("notes.md", b"# notes\n")]);
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start().await;
    let caption = "x".repeat(1100);
    script(&fake, vec![("chat_send_file", json!({"path": "notes.md", "caption": caption}))], "it was refused");
    let gateway = start(home.path(), &fake, &telegram_config(&telegram)).await;

    telegram.user_says(1001, "send the notes with a long caption");
    let done = telegram.wait_until(ANSWER_TIMEOUT, |fake| telegram_shows(fake, "it was refused")).await;
    assert!(done, "the turn never finished: {:?}", telegram.calls());
    assert!(telegram.files().is_empty(), "nothing reached the chat: {:?}", telegram.files());
    let calls = telegram.calls();
    assert_eq!(calls.iter().filter(|c| *c == "sendDocument").count(), 1, "refused once, not retried: {calls:?}");
    let told = fake.tool_results(1);
    assert!(told.contains("notes.md was not sent") && told.contains("caption"), "{told}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_run_again_after_a_crash_does_not_send_its_file_twice() {
    let home = tempfile::tempdir().unwrap();
    workspace(home.path(), "tg:1001", &[("notes.md", b"# notes\n")]);
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start().await;
    let send = || Reply::tool_calls(vec![("chat_send_file", json!({"path": "notes.md"}))]);
    // The first run sends the file, then hangs until the gateway is killed.
    fake.push(send()).push(Reply::slow_first_token(Duration::from_secs(600), Reply::text("never")));
    let config_text = telegram_config(&telegram);
    let mut gateway = start(home.path(), &fake, &config_text).await;
    telegram.user_says(1001, "send me the notes");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |fake| !fake.files().is_empty()).await, "{:?}", telegram.calls());
    // Let the delivery be recorded and the model be asked again (the run hangs there).
    assert!(fake_asked(&fake, 2).await, "the run never went on after the file");
    gateway.kill_hard();

    // The turn did not land on the tape: the restart runs it again, and the model asks again.
    script(&fake, vec![("chat_send_file", json!({"path": "notes.md"}))], "here are the notes");
    let gateway = start(home.path(), &fake, &config_text).await;
    let done = telegram.wait_until(ANSWER_TIMEOUT, |fake| telegram_shows(fake, "here are the notes")).await;
    assert!(done, "the rerun never finished: {:?}", telegram.calls());
    let files = telegram.files();
    assert_eq!(files.len(), 1, "the file went out once: {files:?}");
    let told = fake.tool_results(3);
    assert!(told.contains("\"earlier\":true"), "the model read that it was sent before: {told}");
    assert!(told.contains(&format!("\"message_id\":\"{}\"", files[0].message_id)), "{told}");
    gateway.stop().await;
}

/// Waits until the model was asked `count` times.
async fn fake_asked(fake: &FakeModel, count: usize) -> bool {
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    while fake.request_count() < count {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread")]
async fn discord_gets_the_file_as_an_attachment_and_a_file_over_its_limit_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let dir = workspace(home.path(), &format!("dc:{DISCORD_DM}"), &[("plot.svg", b"<svg/>")]);
    // Over Discord's 10 MiB (a bot without boosts), under Telegram's 50 MB.
    std::fs::File::create(dir.join("video.mp4")).unwrap().set_len(11 * 1024 * 1024).unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("chat_send_file", json!({"path": "video.mp4"}))]));
    script(&fake, vec![("chat_send_file", json!({"path": "plot.svg", "caption": "the plot"}))], "done");
    let gateway = start(home.path(), &fake, &discord_config(&discord)).await;

    let asked = discord.user_says(DISCORD_DM, None, DISCORD_USER, "plot it", json!({}));
    let done = discord.wait_until(ANSWER_TIMEOUT, |fake| discord_shows(fake, "done")).await;
    assert!(done, "the turn never finished: {:?}", discord.calls());
    let with_files: Vec<_> = discord.sent().into_iter().filter(|m| !m.files.is_empty()).collect();
    assert_eq!(with_files.len(), 1, "one message with a file: {with_files:?}");
    let message = &with_files[0];
    assert_eq!(message.files, vec![("plot.svg".to_string(), b"<svg/>".to_vec())]);
    assert_eq!((message.content.as_str(), message.reply_to), ("the plot", Some(asked)));
    let refused = fake.tool_results(1);
    assert!(refused.contains("at most 10485760"), "the model read the limit: {refused}");
    gateway.stop().await;
}
