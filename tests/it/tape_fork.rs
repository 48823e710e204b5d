//! Forks: a run's writes stay in an overlay until merged.

use crate::support;

use bub::tape::{EntryKind, NewEntry, TapeError, TapeQuery};
use serde_json::json;
use support::TestStore;

fn contents(entries: &[bub::tape::Entry]) -> Vec<String> {
    entries.iter().filter_map(|e| e.payload.get("content").and_then(|c| c.as_str()).map(str::to_string)).collect()
}

async fn reads_see_the_parent_then_the_overlay_and_the_parent_sees_nothing_until_merge(s: TestStore) {
    let tape = s.tape("chat");
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "before")).await.unwrap();
    let fork = tape.fork();
    fork.tape().append(NewEntry::chat("assistant", "in fork")).await.unwrap();

    let seen = fork.tape().read(&TapeQuery::last_anchor()).await.unwrap();
    assert_eq!(contents(&seen), vec!["before", "in fork"]);
    assert_eq!(contents(&tape.read(&TapeQuery::all()).await.unwrap()), vec!["before"]);
    assert_eq!(fork.tape().context().await.unwrap().len(), 3, "anchor note, before, in fork");
}

/// The context query reads only what a model sees, from the parent's last
/// anchor through the overlay.
async fn the_context_of_a_fork_spans_the_parent_and_the_overlay_without_events(s: TestStore) {
    let tape = s.tape("chat");
    tape.handoff("old", json!({})).await.unwrap();
    tape.append(NewEntry::chat("user", "too old")).await.unwrap();
    tape.handoff("phase", json!({})).await.unwrap();
    tape.append_event("loop.start", json!({})).await.unwrap();
    tape.append(NewEntry::chat("user", "before")).await.unwrap();
    let fork = tape.fork();
    fork.tape().append_event("loop.step", json!({})).await.unwrap();
    fork.tape().append(NewEntry::chat("assistant", "in fork")).await.unwrap();

    let seen = fork.tape().read(&TapeQuery::context()).await.unwrap();
    let kinds: Vec<EntryKind> = seen.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![EntryKind::Anchor, EntryKind::Message, EntryKind::Message]);
    assert_eq!(contents(&seen), vec!["before", "in fork"]);
    let context = fork.tape().context().await.unwrap();
    assert_eq!(context[0]["content"], "[Anchor created: phase]: {}");
    assert_eq!(context.len(), 3);
}

/// `latest` takes what the overlay holds and asks the parent for the rest.
async fn latest_in_a_fork_prefers_the_overlay_then_the_parent(s: TestStore) {
    let tape = s.tape("chat");
    tape.append_event("model_switch", json!({"model": "parent:1"})).await.unwrap();
    tape.append(NewEntry::system("parent prompt")).await.unwrap();
    let fork = tape.fork();
    fork.tape().append_event("model_switch", json!({"model": "fork:2"})).await.unwrap();
    let queries =
        [TapeQuery::all().kinds([EntryKind::Event]).named("model_switch"), TapeQuery::all().kinds([EntryKind::System])];
    let found = fork.tape().latest(&queries).await.unwrap();
    assert_eq!(found[0].as_ref().unwrap().data().unwrap()["model"], "fork:2");
    assert_eq!(found[1].as_ref().unwrap().payload["content"], "parent prompt");
    let parent = tape.latest(&queries).await.unwrap();
    assert_eq!(parent[0].as_ref().unwrap().data().unwrap()["model"], "parent:1");
}

async fn merge_appends_the_overlay_with_fresh_ids_in_order(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "one")).await.unwrap();
    let fork = tape.fork();
    fork.tape().append(NewEntry::chat("user", "two")).await.unwrap();
    fork.tape().append(NewEntry::chat("assistant", "three")).await.unwrap();
    // Somebody else writes to the parent meanwhile (unaddressed group text).
    tape.append(NewEntry::chat("user", "meanwhile")).await.unwrap();
    let report = fork.merge().await.unwrap();
    assert_eq!(report.merged[0].1, 2);
    let all = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(contents(&all), vec!["one", "meanwhile", "two", "three"]);
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
}

async fn discard_drops_the_overlay_and_a_closed_fork_refuses_writes(s: TestStore) {
    let tape = s.tape("chat");
    let fork = tape.fork();
    fork.tape().append(NewEntry::chat("user", "gone")).await.unwrap();
    fork.discard();
    assert!(tape.read(&TapeQuery::all()).await.unwrap().is_empty());
    let error = fork.tape().append(NewEntry::chat("user", "late")).await.unwrap_err();
    assert!(matches!(error, TapeError::ForkClosed { .. }), "{error}");
    assert!(error.to_string().contains("discarded"));
}

async fn temporary_sessions_never_merge(s: TestStore) {
    let tape = s.tape("temp/subagent-1");
    let fork = tape.fork();
    fork.tape().append(NewEntry::chat("user", "scratch")).await.unwrap();
    let report = fork.merge().await.unwrap();
    assert!(report.skipped_temporary);
    assert!(tape.read(&TapeQuery::all()).await.unwrap().is_empty());
}

async fn an_anchor_written_in_the_fork_hides_the_parent_from_context(s: TestStore) {
    let tape = s.tape("chat");
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "old")).await.unwrap();
    let fork = tape.fork();
    fork.tape().handoff("auto_handoff/context_overflow", json!({"reason": "context_length_exceeded"})).await.unwrap();
    fork.tape().append(NewEntry::chat("user", "retry")).await.unwrap();
    let context = fork.tape().context().await.unwrap();
    assert_eq!(context.len(), 2);
    assert!(context[0]["content"].as_str().unwrap().starts_with("[Anchor created: auto_handoff/context_overflow]"));
    assert_eq!(context[1]["content"], "retry");
}

async fn a_reset_inside_a_fork_waits_for_the_merge(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "history")).await.unwrap();
    let fork = tape.fork();
    fork.tape().reset(false).await.unwrap();
    assert_eq!(contents(&tape.read(&TapeQuery::all()).await.unwrap()), vec!["history"], "parent untouched");
    assert_eq!(fork.tape().read(&TapeQuery::all()).await.unwrap().len(), 2, "fork sees the fresh anchor and event");
    fork.merge().await.unwrap();
    let after = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(after[0].id, 1);
    assert_eq!(after[0].name(), Some("session/start"));
    assert!(contents(&after).is_empty());
}

async fn concurrent_merges_of_two_forks_both_land_whole(s: TestStore) {
    let tape = s.tape("chat");
    let forks: Vec<_> = (0..2).map(|_| tape.fork()).collect();
    for (n, fork) in forks.iter().enumerate() {
        for i in 0..200 {
            fork.tape().append(NewEntry::chat("user", format!("fork{n}-{i}"))).await.unwrap();
        }
    }
    let (a, b) = tokio::join!(forks[0].merge(), forks[1].merge());
    a.unwrap();
    b.unwrap();
    let all = contents(&tape.read(&TapeQuery::all()).await.unwrap());
    assert_eq!(all.len(), 400);
    let first_block = &all[..200];
    let owner = &first_block[0][..5];
    assert!(first_block.iter().all(|c| c.starts_with(owner)), "forks interleaved");
    let expected: Vec<String> = (0..200).map(|i| format!("{owner}-{i}")).collect();
    assert_eq!(first_block, expected.as_slice(), "order kept");
}

async fn sidecars_follow_the_fork(s: TestStore) {
    let tape = s.tape("chat");
    let fork = tape.fork();
    let big = "x".repeat(20_000);
    let outcome = fork.tape().spill_if_large("bash", big.clone()).await;
    let bub::tape::SpillOutcome::Spilled { handle, .. } = outcome else { panic!("expected a spill: {outcome:?}") };
    assert!(fork.tape().read_spill(&handle, 0, 4, false).await.is_ok(), "readable inside the fork");
    assert!(tape.read_spill(&handle, 0, 1, false).await.is_err(), "not in the parent before merge");
    fork.merge().await.unwrap();
    let page = tape.read_spill(&handle, 0, 4, false).await.unwrap();
    assert_eq!(page.content, big);
    let events = tape.read(&TapeQuery::all().kinds([EntryKind::Event]).named("spill.write")).await.unwrap();
    assert_eq!(events.len(), 1, "the spill.write record merged with the tape");
}

support::on_every_database!(
    reads_see_the_parent_then_the_overlay_and_the_parent_sees_nothing_until_merge,
    the_context_of_a_fork_spans_the_parent_and_the_overlay_without_events,
    latest_in_a_fork_prefers_the_overlay_then_the_parent,
    merge_appends_the_overlay_with_fresh_ids_in_order,
    discard_drops_the_overlay_and_a_closed_fork_refuses_writes,
    temporary_sessions_never_merge,
    an_anchor_written_in_the_fork_hides_the_parent_from_context,
    a_reset_inside_a_fork_waits_for_the_merge,
    concurrent_merges_of_two_forks_both_land_whole,
    sidecars_follow_the_fork,
);
