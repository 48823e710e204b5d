//! Per-tape operations: bootstrap anchor, handoff, info, anchors, reset with
//! archive, context.

use crate::support;

use bub::tape::{EntryKind, NewEntry, TapeError, TapeQuery, TapeSettings};
use serde_json::{Value, json};
use support::sqlite_store;

#[tokio::test]
async fn the_bootstrap_anchor_is_written_once() {
    let s = sqlite_store().await;
    let tape = s.tape("chat");
    assert!(tape.ensure_bootstrap_anchor().await.unwrap());
    assert!(!tape.ensure_bootstrap_anchor().await.unwrap());
    let anchors = tape.anchors(20).await.unwrap();
    assert_eq!(anchors.len(), 1);
    assert_eq!(anchors[0].name(), Some("session/start"));
    assert_eq!(anchors[0].data(), Some(&json!({"owner": "human"})));
}

#[tokio::test]
async fn handoff_writes_an_anchor_and_a_handoff_event_and_starts_a_shorter_context() {
    let s = sqlite_store().await;
    let tape = s.tape("chat");
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "long story")).await.unwrap();
    let anchor = tape.handoff("summary", json!({"summary": "Ada asked about A123"})).await.unwrap();
    let after = tape.read(&TapeQuery::all().after_id(anchor.id - 1)).await.unwrap();
    assert_eq!(after[0].kind, EntryKind::Anchor);
    assert_eq!(after[1].name(), Some("handoff"));
    assert_eq!(after[1].data().unwrap()["state"]["summary"], "Ada asked about A123");
    let context = tape.context().await.unwrap();
    assert_eq!(
        context,
        vec![
            json!({"role": "assistant", "content": "[Anchor created: summary]: {\"summary\":\"Ada asked about A123\"}"})
        ]
    );
}

#[tokio::test]
async fn info_reports_counts_the_last_anchor_and_the_last_token_usage() {
    let s = sqlite_store().await;
    let tape = s.tape("chat");
    tape.ensure_bootstrap_anchor().await.unwrap(); // anchor + event
    tape.append(NewEntry::chat("user", "q")).await.unwrap();
    tape.append(NewEntry::event("run", json!({"status": "ok", "usage": {"total_tokens": 120}}))).await.unwrap();
    tape.append(NewEntry::event("run", json!({"status": "ok", "usage": {"total_tokens": 345}}))).await.unwrap();
    tape.append(NewEntry::chat("assistant", "a")).await.unwrap();
    let info = tape.info().await.unwrap();
    assert_eq!(info.entries, 6);
    assert_eq!(info.anchors, 1);
    assert_eq!(info.last_anchor.as_deref(), Some("session/start"));
    assert_eq!(info.entries_since_last_anchor, 5);
    assert_eq!(info.last_token_usage, Some(345));
    assert_eq!(
        info.to_string(),
        "name: chat\nentries: 6\nanchors: 1\nlast_anchor: session/start\nentries_since_last_anchor: 5\nlast_token_usage: 345\nlast_compaction: -"
    );
}

#[tokio::test]
async fn reset_with_archive_writes_readable_jsonl_and_records_where_it_went() {
    let s = sqlite_store().await;
    let tape = s.tape("team/ops 🦀");
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "remember this")).await.unwrap();
    let report = tape.reset(true).await.unwrap();
    let path = report.archived.expect("an archive path");
    assert!(path.starts_with(s.dir.path().join("archives")));
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("team%2Fops%20%F0%9F%A6%80.jsonl.") && name.ends_with(".bak"), "{name}");

    let lines: Vec<Value> =
        std::fs::read_to_string(&path).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["payload"]["content"], "remember this");
    assert_eq!(lines[2]["id"], 3);

    let now = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(now[0].id, 1);
    assert_eq!(now[0].name(), Some("session/start"));
    assert_eq!(now[0].data().unwrap()["archived"], path.display().to_string());
}

#[tokio::test]
async fn an_archive_that_cannot_be_written_leaves_the_tape_untouched() {
    let s = sqlite_store().await;
    let blocker = s.dir.path().join("not-a-dir");
    std::fs::write(&blocker, "a file where the archive directory should be").unwrap();
    let tape =
        s.tape("chat").with_settings(TapeSettings { archive_dir: blocker.join("tapes"), ..TapeSettings::default() });
    tape.append(NewEntry::chat("user", "precious")).await.unwrap();
    let error = tape.reset(true).await.unwrap_err();
    assert!(matches!(error, TapeError::Archive { .. }), "{error}");
    assert!(error.to_string().contains("not-a-dir"), "names the path: {error}");
    assert_eq!(tape.read(&TapeQuery::all()).await.unwrap().len(), 1);
}

#[tokio::test]
async fn reset_without_archive_just_clears() {
    let s = sqlite_store().await;
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "x")).await.unwrap();
    let report = tape.reset(false).await.unwrap();
    assert_eq!(report.archived, None);
    let entries = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(entries[0].data(), Some(&json!({"owner": "human"})));
    assert!(!s.dir.path().join("archives").exists());
}

#[tokio::test]
async fn context_ignores_everything_before_the_last_anchor_and_hidden_entries() {
    let s = sqlite_store().await;
    let tape = s.tape("chat");
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "old question")).await.unwrap();
    tape.handoff("phase/2", json!({"summary": "s"})).await.unwrap();
    tape.append(NewEntry::system("system prompt")).await.unwrap();
    tape.append(NewEntry::chat("user", "new question")).await.unwrap();
    tape.append(NewEntry::tool_call(vec![
        json!({"id": "c1", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}}),
    ]))
    .await
    .unwrap();
    tape.append(NewEntry::tool_result(vec![json!("contents")])).await.unwrap();
    tape.append(NewEntry::event("loop.step", json!({"step": 1}))).await.unwrap();
    tape.append(NewEntry::chat("user", "internal").hidden_from_context()).await.unwrap();
    let context = tape.context().await.unwrap();
    let roles: Vec<&str> = context.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, vec!["assistant", "user", "assistant", "tool"]);
    assert_eq!(context[3]["tool_call_id"], "c1");
}

#[tokio::test]
async fn a_tape_told_no_archive_directory_refuses_to_archive_and_keeps_its_entries() {
    let s = sqlite_store().await;
    // The library's default names no directory: it writes nowhere it was not told.
    let tape = s.tape("chat").with_settings(TapeSettings::default());
    tape.append(NewEntry::chat("user", "precious")).await.unwrap();
    let error = tape.reset(true).await.unwrap_err();
    assert!(matches!(error, TapeError::NoArchiveDir { .. }), "{error}");
    assert_eq!(error.to_string(), "tape chat: cannot archive: no archive directory is set");
    assert_eq!(tape.read(&TapeQuery::all()).await.unwrap().len(), 1);
}
