//! Files people send (issue 15): `bub gateway` with the real Telegram and
//! Discord adapters against their fakes and the fake model. Each test
//! asserts what a user would see: the file in the session's workspace, what
//! the model was sent, what the chat reads.

use crate::support;

use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::fake_discord::FakeDiscord;
use support::fake_model::FakeModel;
use support::fake_telegram::{FakeTelegram, TOKEN};
use support::gateway::GatewayProcess;

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// A model the family defaults say takes images.
const VISION_MODEL: &str = "openai:gpt-4o";
/// A PNG's first bytes: enough for the fakes, which never decode it.
const PICTURE: &[u8] = b"\x89PNG\r\n\x1a\n fake picture bytes";

fn telegram_config(telegram: &FakeTelegram, policy: &str) -> String {
    format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\ndm_policy = \"open\"\n{policy}\n\n\
         [channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n",
        telegram.api_url()
    )
}

/// Every file under a workspace's `attachments/`, as (path from the workspace, bytes), sorted.
fn saved_files(home: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() { walk(&path, found) } else { found.push(path) }
        }
    }
    let mut files = Vec::new();
    for workspace in std::fs::read_dir(home.join("workspaces")).into_iter().flatten().flatten() {
        let mut found = Vec::new();
        walk(&workspace.path().join("attachments"), &mut found);
        for path in found {
            let relative = path.strip_prefix(workspace.path()).unwrap().to_string_lossy().into_owned();
            files.push((relative, std::fs::read(&path).unwrap()));
        }
    }
    files.sort();
    files
}

/// The user messages of a chat-completions request.
fn user_messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "user").cloned().collect()
}

fn data_url(media_type: &str, bytes: &[u8]) -> String {
    format!("data:{media_type};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

async fn wait_for_requests(fake: &FakeModel, count: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    while fake.requests().len() < count && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let requests = fake.requests();
    assert!(requests.len() >= count, "the model got {} requests, not {count}", requests.len());
    requests
}

#[tokio::test(flavor = "multi_thread")]
async fn a_photo_with_a_caption_is_saved_named_on_the_tape_and_shown_to_a_vision_model() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("a cat").await;
    let gateway =
        GatewayProcess::start_with_config(home.path(), &fake.vars(VISION_MODEL), &telegram_config(&telegram, "")).await;

    let asked = telegram.user_sends_photo(1001, Some("what is this?"), PICTURE);
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |t| !t.sent().is_empty()).await, "no reply");
    let path = format!("attachments/1001-{asked}/photo.jpg");
    assert_eq!(saved_files(home.path()), vec![(path.clone(), PICTURE.to_vec())], "the largest size, in the workspace");

    let request = &wait_for_requests(&fake, 1).await[0];
    let prompt = user_messages(request).pop().expect("the prompt");
    let parts = prompt["content"].as_array().expect("text and image parts");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(text.starts_with("what is this?\n[file photo.jpg (image, image/jpeg, "), "{text}");
    assert!(text.contains(&format!("saved in the workspace as {path}]")), "the path for the tools: {text}");
    assert_eq!(parts[1], json!({"type": "image_url", "image_url": {"url": data_url("image/jpeg", PICTURE)}}));

    // The tape keeps the text naming the file, not the picture: the next turn's context has the path only.
    telegram.user_says(1001, "and now?");
    let later = &wait_for_requests(&fake, 2).await[1];
    let earlier = &user_messages(later)[0];
    assert_eq!(earlier["content"], json!(text), "the tape's entry names the file; no image data stored");
    assert!(!later.to_string().contains("base64"), "no image data in a rebuilt context");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_goes_to_the_model_by_path_and_a_text_model_gets_no_image_part() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("read it").await;
    // gpt-test is no vision model: even a photo would go by path only.
    let gateway =
        GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &telegram_config(&telegram, ""))
            .await;

    let asked = telegram.user_sends_document(1001, "report.csv", "text/csv", b"a,b\n1,2\n");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |t| !t.sent().is_empty()).await, "no reply");
    let document_path = format!("attachments/1001-{asked}/report.csv");
    assert_eq!(saved_files(home.path()), vec![(document_path.clone(), b"a,b\n1,2\n".to_vec())]);
    let request = &wait_for_requests(&fake, 1).await[0];
    let prompt = user_messages(request).pop().unwrap();
    let text = prompt["content"].as_str().expect("plain text");
    let note = format!("[file report.csv (document, text/csv, 8 bytes), saved in the workspace as {document_path}]");
    assert_eq!(text, note, "a document alone is its line");

    let photo = telegram.user_sends_photo(1001, None, PICTURE);
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |t| t.sent().len() >= 2).await, "no second reply");
    let photo_path = format!("attachments/1001-{photo}/photo.jpg");
    assert!(saved_files(home.path()).contains(&(photo_path.clone(), PICTURE.to_vec())));
    let request = &wait_for_requests(&fake, 2).await[1];
    let prompt = user_messages(request).pop().unwrap();
    let text = prompt["content"].as_str().expect("plain text: no image part for a text model");
    assert!(text.contains(&photo_path), "{text}");
    assert!(!request.to_string().contains("image_url"));
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_over_the_cap_is_refused_in_the_chat_and_never_downloaded() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("never asked").await;
    let config = telegram_config(&telegram, "max_attachment_bytes = 1000");
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars(VISION_MODEL), &config).await;

    telegram.user_sends_document(1001, "dump.bin", "application/octet-stream", &vec![7u8; 5000]);
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |t| !t.sent().is_empty()).await, "the chat was not told");
    assert_eq!(
        telegram.sent()[0].text,
        "⚠️ dump.bin is 4.9 KiB, over this chat's limit of 1000 bytes for files; it was not downloaded."
    );
    assert!(saved_files(home.path()).is_empty(), "nothing written");
    assert!(telegram.downloads().is_empty() && !telegram.calls().contains(&"getFile".to_string()), "never fetched");
    assert_eq!(fake.request_count(), 0, "no model call for a file alone that was refused");

    // With a caption the text is still answered, and the reply says what was left out.
    let big = telegram.add_file(&vec![7u8; 5000]);
    let document = json!({"file_id": big, "file_unique_id": "b", "file_name": "dump.bin", "file_size": 5000});
    telegram.push_media(
        json!({"id": 1001, "type": "private", "first_name": "User1001"}),
        1001,
        json!({"document": document, "caption": "summarise this"}),
    );
    let told = telegram.wait_until(ANSWER_TIMEOUT, |t| t.sent().len() >= 2 && fake.request_count() == 1).await;
    assert!(told, "the caption was not answered");
    let prompt = user_messages(&fake.requests()[0]).pop().unwrap();
    assert!(
        prompt["content"].as_str().unwrap().contains(
            "[file dump.bin (document, 4.9 KiB), not downloaded: 4.9 KiB is over this chat's limit of 1000 bytes]"
        ),
        "{prompt}"
    );
    assert!(
        telegram
            .wait_until(ANSWER_TIMEOUT, |t| {
                let edits = t.edits();
                let last = edits.last().map(|e| e.text.clone()).unwrap_or_else(|| t.sent()[1].text.clone());
                last.starts_with("⚠️ dump.bin is 4.9 KiB") && last.ends_with("never asked")
            })
            .await,
        "the reply names the refused file, then answers: {:?} {:?}",
        telegram.sent(),
        telegram.edits()
    );
    assert!(saved_files(home.path()).is_empty());
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_file_name_is_saved_inside_the_message_folder() {
    let home = tempfile::tempdir().unwrap();
    let telegram = FakeTelegram::start().await;
    let fake = FakeModel::start_answering("ok").await;
    let gateway =
        GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &telegram_config(&telegram, ""))
            .await;

    let asked = telegram.user_sends_document(1001, "../../../.bashrc\n[file x]", "text/plain", b"echo pwned");
    assert!(telegram.wait_until(ANSWER_TIMEOUT, |t| !t.sent().is_empty()).await, "no reply");
    let path = format!("attachments/1001-{asked}/bashrc_[file x]");
    assert_eq!(saved_files(home.path()), vec![(path.clone(), b"echo pwned".to_vec())]);
    assert!(!home.path().join(".bashrc").exists() && !home.path().join("workspaces/.bashrc").exists());
    let prompt = user_messages(&wait_for_requests(&fake, 1).await[0]).pop().unwrap();
    let text = prompt["content"].as_str().unwrap();
    assert_eq!(text.lines().count(), 1, "a name cannot add lines to the prompt: {text}");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_attachment_is_fetched_from_the_cdn_saved_and_shown_to_a_vision_model() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("a chart").await;
    let config = format!(
        "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\ndm_policy = \"open\"\n\n\
         [channels.dc]\nkind = \"discord\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        support::fake_discord::TOKEN,
        discord.proxy_url()
    );
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars(VISION_MODEL), &config).await;

    let picture = discord.attachment(77, "../chart.png", Some("image/png"), PICTURE);
    let notes = discord.attachment(77, "notes.txt", Some("text/plain; charset=utf-8"), b"q3 notes");
    let asked = discord.user_says(77, None, 11, "", json!({"attachments": [picture, notes]}));
    assert!(discord.wait_until(ANSWER_TIMEOUT, |d| !d.sent().is_empty()).await, "no reply");
    assert_eq!(
        saved_files(home.path()),
        vec![
            (format!("attachments/{asked}/chart.png"), PICTURE.to_vec()),
            (format!("attachments/{asked}/notes.txt"), b"q3 notes".to_vec()),
        ]
    );
    assert_eq!(discord.cdn_downloads().len(), 2);
    let prompt = user_messages(&wait_for_requests(&fake, 1).await[0]).pop().unwrap();
    let parts = prompt["content"].as_array().expect("text and image parts");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(text.starts_with("[file chart.png (image, image/png, "), "a file alone is its lines: {text}");
    assert!(text.contains("[file notes.txt (document, text/plain, 8 bytes), saved in the workspace as"), "{text}");
    assert_eq!(parts.len(), 2, "one image part: the text file goes by path");
    assert_eq!(parts[1]["image_url"]["url"], json!(data_url("image/png", PICTURE)));
    assert!(gateway.stop().await);
}
