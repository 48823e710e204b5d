//! `bub tape …` on a real database file, as an operator or a script uses it.

use bub::db::SqliteTapeStore;
use bub::home::BubHome;
use bub::tape::{NewEntry, Tape, TapeName};
use serde_json::{Value, json};
use std::process::{Command, Output};
use std::sync::Arc;
use tempfile::TempDir;

/// A `$BUB_HOME` with two sessions on it, one with a spill sidecar.
async fn seeded_home() -> TempDir {
    let home = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteTapeStore::open(BubHome::at(home.path()).database()).await.unwrap());
    let ops = Tape::new(store.clone(), TapeName::new("telegram:ops/42").unwrap());
    ops.ensure_bootstrap_anchor().await.unwrap();
    ops.append(NewEntry::chat("user", "deploy the API please")).await.unwrap();
    ops.append(NewEntry::chat("assistant", "Deployed.")).await.unwrap();
    ops.handoff("deploy/done", json!({"summary": "API deployed"})).await.unwrap();
    ops.append(NewEntry::chat("user", "thanks 🦀")).await.unwrap();
    ops.spill_if_large("bash", "x".repeat(20_000)).await;
    let other = Tape::new(store.clone(), TapeName::new("webhook:ci").unwrap());
    other.append(NewEntry::chat("user", "build failed")).await.unwrap();
    store.close().await;
    home
}

fn bub(home: &TempDir, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bub")).env("BUB_HOME", home.path()).args(args).output().expect("run bub")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "bub failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(|line| serde_json::from_str(line).expect("one JSON object per line")).collect()
}

#[tokio::test]
async fn list_shows_sessions_and_hides_sidecars_unless_asked() {
    let home = seeded_home().await;
    let text = stdout(&bub(&home, &["tape", "list"]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("TAPE") && lines[0].contains("ENTRIES"), "{text}");
    assert!(lines.iter().any(|l| l.starts_with("telegram:ops/42") && l.contains(" 8 ")), "{text}");
    assert!(lines.iter().any(|l| l.starts_with("webhook:ci")), "{text}");
    assert!(!text.contains("__sidecar__"), "{text}");

    let all = json_lines(&stdout(&bub(&home, &["tape", "list", "--all", "--json"])));
    let names: Vec<&str> = all.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["telegram:ops/42", "telegram:ops/42__sidecar__spill", "webhook:ci"]);
    assert_eq!(all[0]["entries"], 8);
}

#[tokio::test]
async fn show_since_anchor_prints_what_the_model_would_be_built_from() {
    let home = seeded_home().await;
    let text = stdout(&bub(&home, &["tape", "show", "telegram:ops/42", "--since-anchor"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("#5 ") && lines[0].contains("anchor") && lines[0].contains("deploy/done"), "{text}");
    assert!(lines[2].contains("user: thanks 🦀"), "{text}");
    assert!(!text.contains("deploy the API"), "{text}");

    let entries = json_lines(&stdout(&bub(&home, &["tape", "show", "telegram:ops/42", "--kind", "message", "--json"])));
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[0]["payload"]["content"], "deploy the API please");
}

#[tokio::test]
async fn show_since_anchor_includes_the_turns_a_compaction_kept() {
    let home = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteTapeStore::open(BubHome::at(home.path()).database()).await.unwrap());
    let tape = Tape::new(store.clone(), TapeName::new("webhook:long").unwrap());
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "old question")).await.unwrap();
    tape.append(NewEntry::chat("assistant", "old answer")).await.unwrap();
    let kept = tape.append(NewEntry::chat("user", "recent question")).await.unwrap();
    tape.append(NewEntry::chat("assistant", "recent answer")).await.unwrap();
    let state = json!({"summary": "They asked twice.", "covers": [2, 3], "keep_from": kept.id});
    tape.handoff(bub::tape::COMPACTION_ANCHOR, state).await.unwrap();
    tape.append(NewEntry::chat("user", "newest question")).await.unwrap();
    store.close().await;

    let text = stdout(&bub(&home, &["tape", "show", "webhook:long", "--since-anchor"]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("auto_handoff/compaction"), "{text}");
    assert!(lines[1].contains("user: recent question") && lines[2].contains("assistant: recent answer"), "{text}");
    assert!(text.contains("newest question") && !text.contains("old question"), "{text}");
    let last = stdout(&bub(&home, &["tape", "show", "webhook:long", "--since-anchor", "--limit", "1"]));
    assert_eq!(last.lines().count(), 1, "{last}");
    assert!(last.contains("newest question"), "{last}");
}

#[tokio::test]
async fn search_finds_newest_first_case_insensitively() {
    let home = seeded_home().await;
    let hits = json_lines(&stdout(&bub(&home, &["tape", "search", "telegram:ops/42", "DEPLOY", "--json"])));
    let ids: Vec<u64> = hits.iter().map(|h| h["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, vec![6, 5, 4, 3], "handoff event, anchor, \"Deployed.\", the request");
    let none = stdout(&bub(&home, &["tape", "search", "webhook:ci", "nothing-like-this"]));
    assert_eq!(none.trim(), "no entries of webhook:ci match \"nothing-like-this\"");
}

#[tokio::test]
async fn export_writes_every_entry_as_json_lines() {
    let home = seeded_home().await;
    let entries = json_lines(&stdout(&bub(&home, &["tape", "export", "telegram:ops/42"])));
    assert_eq!(entries.len(), 8);
    assert_eq!(entries.iter().map(|e| e["id"].as_u64().unwrap()).collect::<Vec<_>>(), (1..=8).collect::<Vec<_>>());
    for entry in &entries {
        assert!(entry["kind"].is_string() && entry["payload"].is_object() && entry["meta"].is_object());
        assert!(entry["date"].as_str().unwrap().ends_with('Z'));
    }
    let file = home.path().join("out.jsonl");
    let output = bub(&home, &["tape", "export", "webhook:ci", "-o", file.to_str().unwrap()]);
    assert!(output.status.success());
    assert_eq!(json_lines(&std::fs::read_to_string(&file).unwrap()).len(), 1);
}

#[tokio::test]
async fn an_unknown_session_or_kind_is_a_clear_error() {
    let home = seeded_home().await;
    let output = bub(&home, &["tape", "show", "no-such-chat"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no tape named \"no-such-chat\"") && stderr.contains("bub tape list"), "{stderr}");

    let output = bub(&home, &["tape", "show", "webhook:ci", "--kind", "mesage"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("unknown entry kind \"mesage\"") && stderr.contains("message"), "{stderr}");
}

#[tokio::test]
async fn a_corrupt_database_is_reported_with_its_path() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("bub.db"), "garbage garbage garbage").unwrap();
    let output = bub(&home, &["tape", "list"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bub.db") && stderr.contains("not a SQLite database"), "{stderr}");
}
