//! The SQLite store keeps each busy tape's context entries decoded and reads
//! only what was appended since (see `db::context_cache`). What a caller
//! sees must stay what the database holds: appends and resets from another
//! process (a `bub tape reset` beside the gateway) show on the next read,
//! and a compaction's kept turns are spliced in as without the cache.

use crate::support;

use bub::agent::RunOptions;
use bub::db::SqliteTapeStore;
use bub::message::RequestMessage;
use bub::tape::{Entry, NewEntry, Tape, TapeName, TapeQuery, TapeStore};
use serde_json::json;
use std::sync::Arc;

fn tape_on(store: &SqliteTapeStore) -> Tape {
    Tape::new(Arc::new(store.clone()), TapeName::new("chat").unwrap())
}

/// What the context is by definition: the context query evaluated over the
/// whole tape as another store reads it (a whole-tape read, never cached),
/// with a compaction anchor's kept entries after it.
async fn expected_context(path: &std::path::Path) -> Vec<(u64, String)> {
    let fresh = SqliteTapeStore::open(path).await.unwrap();
    let name = TapeName::new("chat").unwrap();
    let all = fresh.read(&name, &TapeQuery::all()).await.unwrap();
    fresh.close().await;
    let scoped = TapeQuery::context().apply(&name, &all).unwrap();
    let keep_from = scoped.first().and_then(bub::tape::kept_from).unwrap_or(0);
    let anchor_id = scoped.first().map_or(0, |a| a.id);
    let mut expected: Vec<&Entry> = scoped.iter().take(1).collect();
    if keep_from > 0 {
        let kept = all.iter().filter(|e| e.id >= keep_from && e.id < anchor_id && e.in_context());
        expected.extend(kept.filter(|e| e.kind != bub::tape::EntryKind::Anchor));
    }
    expected.extend(scoped.iter().skip(1));
    expected.iter().map(|e| (e.id, text_of(e))).collect()
}

fn text_of(entry: &Entry) -> String {
    entry.payload.get("content").and_then(|c| c.as_str()).unwrap_or(entry.kind.as_str()).to_string()
}

/// Appends `n` short messages in one batch.
async fn fill(tape: &Tape, n: usize) {
    tape.append_all((0..n).map(|i| NewEntry::chat("user", format!("filler {i}"))).collect()).await.unwrap();
}

async fn context_of(tape: &Tape) -> Vec<(u64, String)> {
    tape.context_entries().await.unwrap().iter().map(|e| (e.id, text_of(e))).collect()
}

#[tokio::test]
async fn appends_and_resets_from_another_process_show_on_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    let gateway = SqliteTapeStore::open(&path).await.unwrap();
    let tape = tape_on(&gateway);
    tape.handoff("session/start", json!({})).await.unwrap();
    // Long enough to be kept (a short context is read whole every time).
    fill(&tape, 300).await;
    for n in 0..5 {
        tape.append(NewEntry::chat("user", format!("turn {n}"))).await.unwrap();
        tape.append_event("run", json!({"n": n})).await.unwrap();
    }
    assert_eq!(context_of(&tape).await, expected_context(&path).await);

    // Another process appends: the gateway's next read has it.
    let other = SqliteTapeStore::open(&path).await.unwrap();
    let beside = tape_on(&other);
    beside.append(NewEntry::chat("user", "from the cli")).await.unwrap();
    let seen = context_of(&tape).await;
    assert_eq!(seen.last().unwrap().1, "from the cli");
    assert_eq!(seen, expected_context(&path).await);

    // Another process resets the tape and writes past the id the gateway
    // last saw: nothing of the old tape may come back.
    beside.reset(false).await.unwrap();
    beside.handoff("session/start", json!({})).await.unwrap();
    let refill = (0..400).map(|n| NewEntry::chat("user", format!("after reset {n}"))).collect();
    beside.append_all(refill).await.unwrap();
    let seen = context_of(&tape).await;
    let old = seen.iter().find(|(_, text)| !text.starts_with("after reset") && text != "anchor");
    assert!(old.is_none(), "an entry from before the reset: {old:?}");
    assert_eq!(seen, expected_context(&path).await);

    // A compaction written elsewhere: its anchor, then the kept turns, then what follows.
    let keep_from = seen[seen.len() - 3].0;
    let covers = json!([1, keep_from - 1]);
    beside
        .handoff("auto_handoff/compaction", json!({"summary": "s", "covers": covers, "keep_from": keep_from}))
        .await
        .unwrap();
    beside.append(NewEntry::chat("user", "after the compaction")).await.unwrap();
    let seen = context_of(&tape).await;
    assert_eq!(seen.len(), 1 + 3 + 1, "anchor, three kept turns, the new one: {seen:?}");
    assert_eq!(seen, expected_context(&path).await);

    // The gateway's own reset and appends.
    tape.reset(false).await.unwrap();
    tape.handoff("session/start", json!({})).await.unwrap();
    tape.append(NewEntry::chat("user", "fresh")).await.unwrap();
    assert_eq!(context_of(&tape).await, expected_context(&path).await);
    other.close().await;
    gateway.close().await;
}

/// Entries are immutable, so a read after the first decodes only the new
/// ones: an old row changed behind the store's back (which bub never does)
/// shows that the cached copy answered, while a fresh store sees the change.
#[tokio::test]
async fn a_later_read_decodes_only_the_new_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    let gateway = SqliteTapeStore::open(&path).await.unwrap();
    let tape = tape_on(&gateway);
    tape.handoff("session/start", json!({})).await.unwrap();
    tape.append(NewEntry::chat("user", "first")).await.unwrap();
    // Long enough to be kept (a short context is read whole every time).
    fill(&tape, 300).await;
    assert_eq!(context_of(&tape).await.last().unwrap().1, "filler 299");

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "UPDATE tape_entries SET payload = '{\"role\":\"user\",\"content\":\"rewritten\"}' WHERE entry_id = 3",
        [],
    )
    .unwrap();
    tape.append(NewEntry::chat("user", "second")).await.unwrap();
    let texts: Vec<String> = context_of(&tape).await.into_iter().map(|(_, text)| text).collect();
    assert_eq!((texts[1].as_str(), texts.last().unwrap().as_str()), ("first", "second"));
    assert_eq!(expected_context(&path).await[1].1, "rewritten", "the database did change");
    gateway.close().await;
}

/// A model request carries the tape's messages as the store keeps them:
/// the same message in two consecutive calls is one allocation, not a copy
/// made per call (on a long chat, copying the context was a third of a
/// turn's CPU).
#[tokio::test]
async fn consecutive_requests_share_the_cached_messages() {
    let (agent, model, store) = support::scripted_agent(Vec::new()).await;
    let tape = store.tape("chat");
    tape.handoff("session/start", json!({})).await.unwrap();
    fill(&tape, 300).await;
    for (prompt, answer) in [("first question", "one"), ("second question", "two"), ("third question", "three")] {
        model.text(answer);
        agent.run(prompt, RunOptions::new("chat")).collect().await;
    }
    let requests = model.requests();
    let first_question = |request: &bub::model::ChatRequest| {
        let message = request.messages.iter().find(|m| m["content"] == "first question").expect("in the context");
        assert!(matches!(message, RequestMessage::Shared(_)), "a copy: {message:?}");
        message.as_object().unwrap() as *const _
    };
    assert_eq!(first_question(&requests[1]), first_question(&requests[2]), "copied between calls");
}
