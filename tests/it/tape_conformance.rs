//! One suite, every store: the in-memory store, SQLite on a real file,
//! PostgreSQL (a throwaway cluster, `support::postgres`), and a fork
//! overlay. Each case is an async fn taking a `TestStore`; the macro at the
//! bottom runs every case against every store.

use crate::support;

use bub::tape::{EntryKind, NewEntry, TapeError, TapeQuery};
use chrono::{Duration, TimeZone, Utc};
use serde_json::json;
use support::{TestStore, name};

async fn ids_start_at_one_and_have_no_gaps(s: TestStore) {
    let tape = s.tape("chat");
    for i in 0..5 {
        let entry = tape.append(NewEntry::chat("user", format!("m{i}"))).await.unwrap();
        assert_eq!(entry.id, i + 1);
    }
    let batch = tape.append_all(vec![NewEntry::chat("user", "a"), NewEntry::chat("user", "b")]).await.unwrap();
    assert_eq!(batch.iter().map(|e| e.id).collect::<Vec<_>>(), vec![6, 7]);
    let ids: Vec<u64> = tape.read(&TapeQuery::all()).await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=7).collect::<Vec<_>>());
}

async fn tapes_number_their_entries_independently(s: TestStore) {
    s.tape("a").append(NewEntry::chat("user", "x")).await.unwrap();
    let first_b = s.tape("b").append(NewEntry::chat("user", "y")).await.unwrap();
    assert_eq!(first_b.id, 1);
}

async fn a_bad_entry_in_a_batch_writes_nothing(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "before")).await.unwrap();
    let mut broken = NewEntry::chat("user", "x");
    broken.payload.remove("role");
    let error = tape.append_all(vec![NewEntry::chat("user", "ok"), broken]).await.unwrap_err();
    assert!(matches!(error, TapeError::InvalidEntry { .. }), "{error}");
    assert!(error.to_string().contains("tape chat"), "error names the tape: {error}");
    assert_eq!(tape.read(&TapeQuery::all()).await.unwrap().len(), 1);
    assert_eq!(tape.append(NewEntry::chat("user", "after")).await.unwrap().id, 2);
}

async fn entries_round_trip_unchanged(s: TestStore) {
    let tape = s.tape("chat");
    let sent = NewEntry::message(json!({"role": "user", "content": "Grüße 🦀 \"quoted\" \\ back", "n": 1.5}))
        .unwrap()
        .with_meta("run_id", json!("r-1"));
    let stored = tape.append(sent.clone()).await.unwrap();
    let read = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(read, vec![stored.clone()]);
    assert_eq!(read[0].payload, sent.payload);
    assert_eq!(read[0].meta["run_id"], "r-1");
    assert_eq!(read[0].date, sent.date, "dates keep microseconds");
}

async fn odd_tape_names_work(s: TestStore) {
    for odd in ["telegram:-100/42", "it's \"quoted\"", "emoji 🦀/🎉", "../../etc/passwd", "a%2Fb"] {
        let tape = s.tape(odd);
        tape.append(NewEntry::chat("user", odd)).await.unwrap();
        let read = tape.read(&TapeQuery::all()).await.unwrap();
        assert_eq!(read.len(), 1, "{odd}");
        assert_eq!(read[0].payload["content"], odd);
    }
    let listed: Vec<String> = s.store.list().await.unwrap().into_iter().map(|t| t.name).collect();
    assert!(listed.contains(&"emoji 🦀/🎉".to_string()));
}

async fn last_anchor_scope_starts_at_the_newest_anchor(s: TestStore) {
    let tape = s.tape("chat");
    tape.handoff("first", json!({"n": 1})).await.unwrap();
    tape.append(NewEntry::chat("user", "old")).await.unwrap();
    tape.handoff("second", json!({"n": 2})).await.unwrap();
    tape.append(NewEntry::chat("user", "new")).await.unwrap();
    let read = tape.read(&TapeQuery::last_anchor()).await.unwrap();
    assert_eq!(read[0].name(), Some("second"));
    assert_eq!(read.last().unwrap().payload["content"], "new");
    assert!(read.iter().all(|e| e.payload.get("content") != Some(&json!("old"))));
}

async fn the_context_query_reads_from_the_last_anchor_what_a_model_sees(s: TestStore) {
    let tape = s.tape("chat");
    let missing = tape.read(&TapeQuery::context()).await.unwrap_err();
    assert_eq!(missing.to_string(), "tape chat: no anchor yet");
    tape.handoff("first", json!({})).await.unwrap();
    tape.append(NewEntry::chat("user", "old")).await.unwrap();
    tape.handoff("second", json!({"n": 2})).await.unwrap();
    tape.append_event("loop.start", json!({"prompt": "new"})).await.unwrap();
    tape.append(NewEntry::chat("user", "new")).await.unwrap();
    tape.append(NewEntry::error("model", "rate limited", None)).await.unwrap();
    let kinds: Vec<EntryKind> = tape.read(&TapeQuery::context()).await.unwrap().iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![EntryKind::Anchor, EntryKind::Message]);
    let context = tape.context().await.unwrap();
    assert_eq!(context.len(), 2, "{context:?}");
    assert_eq!(context[0]["content"], "[Anchor created: second]: {\"n\":2}");
    assert_eq!(context[1]["content"], "new");
}

async fn latest_finds_the_newest_entry_of_each_query(s: TestStore) {
    let tape = s.tape("chat");
    let model = TapeQuery::all().kinds([EntryKind::Event]).named("model_switch");
    let system = TapeQuery::all().kinds([EntryKind::System]);
    let missing = TapeQuery::all().kinds([EntryKind::Event]).named("never");
    let queries = [model.clone(), system.clone(), missing.clone()];
    assert_eq!(tape.latest(&queries).await.unwrap(), vec![None, None, None]);
    tape.append_event("model_switch", json!({"model": "a:1"})).await.unwrap();
    tape.append(NewEntry::system("first prompt")).await.unwrap();
    tape.append_event("model_switch", json!({"model": "b:2"})).await.unwrap();
    tape.append_event("other", json!({"model": "c:3"})).await.unwrap();
    let found = tape.latest(&queries).await.unwrap();
    assert_eq!(found[0].as_ref().unwrap().data().unwrap()["model"], "b:2");
    assert_eq!(found[1].as_ref().unwrap().payload["content"], "first prompt");
    assert_eq!(found[2], None);
    // Any query works, also one with a scope or text.
    let scoped = [TapeQuery::all().text("FIRST"), TapeQuery::last_anchor()];
    let found = tape.latest(&scoped).await;
    assert_eq!(found.unwrap_err().to_string(), "tape chat: no anchor yet");
    let found = tape.latest(&scoped[..1]).await.unwrap();
    assert_eq!(found[0].as_ref().unwrap().payload["content"], "first prompt");
}

async fn a_missing_anchor_is_a_clear_error(s: TestStore) {
    let tape = s.tape("chat");
    let empty = tape.read(&TapeQuery::last_anchor()).await.unwrap_err();
    assert_eq!(empty.to_string(), "tape chat: no anchor yet");
    tape.append(NewEntry::chat("user", "x")).await.unwrap();
    let named = tape.read(&TapeQuery::after_anchor("nope")).await.unwrap_err();
    assert_eq!(named.to_string(), "tape chat: no anchor named \"nope\"");
}

async fn after_named_anchor_uses_the_newest_of_that_name(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::anchor("phase", json!(1))).await.unwrap();
    tape.append(NewEntry::chat("user", "one")).await.unwrap();
    tape.append(NewEntry::anchor("phase", json!(2))).await.unwrap();
    tape.append(NewEntry::chat("user", "two")).await.unwrap();
    tape.append(NewEntry::anchor("other", json!(3))).await.unwrap();
    tape.append(NewEntry::chat("user", "three")).await.unwrap();
    let ids: Vec<u64> = tape.read(&TapeQuery::after_anchor("phase")).await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![3, 4, 5, 6]);
}

async fn between_anchors_is_bounded_on_both_sides(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::anchor("start", json!({}))).await.unwrap(); // 1
    tape.append(NewEntry::chat("user", "in")).await.unwrap(); // 2
    tape.append(NewEntry::anchor("end", json!({}))).await.unwrap(); // 3
    tape.append(NewEntry::chat("user", "out")).await.unwrap(); // 4
    tape.append(NewEntry::anchor("end", json!({}))).await.unwrap(); // 5
    let ids: Vec<u64> =
        tape.read(&TapeQuery::between_anchors("start", "end")).await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![1, 2]);
    let open: Vec<u64> =
        tape.read(&TapeQuery::between_anchors("start", "never")).await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(open, vec![1, 2, 3, 4, 5], "without a closing anchor the scope runs to the end");
}

async fn between_dates_is_half_open(s: TestStore) {
    let tape = s.tape("chat");
    let day = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    for offset in 0..4 {
        tape.append(NewEntry::chat("user", format!("day {offset}")).with_date(day + Duration::days(offset)))
            .await
            .unwrap();
    }
    let read =
        tape.read(&TapeQuery::all().between_dates(day + Duration::days(1), day + Duration::days(3))).await.unwrap();
    assert_eq!(read.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2, 3]);
    let first = day.date_naive() + chrono::Days::new(1);
    let days = tape.read(&TapeQuery::all().between_days(first, first)).await.unwrap();
    assert_eq!(days.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2], "a date-only range covers the whole day");
}

async fn kinds_and_names_filter(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "q")).await.unwrap();
    tape.append(NewEntry::event("run", json!({"usage": {"total_tokens": 10}}))).await.unwrap();
    tape.append(NewEntry::event("loop.step", json!({}))).await.unwrap();
    tape.append(NewEntry::event("run", json!({"usage": {"total_tokens": 20}}))).await.unwrap();
    let events = tape.read(&TapeQuery::all().kinds([EntryKind::Event])).await.unwrap();
    assert_eq!(events.len(), 3);
    let runs =
        tape.read(&TapeQuery::all().kinds([EntryKind::Event]).named("run").newest_first().limit(1)).await.unwrap();
    assert_eq!(runs[0].id, 4);
    let mixed = tape.read(&TapeQuery::all().kinds([EntryKind::Message, EntryKind::Event]).limit(2)).await.unwrap();
    assert_eq!(mixed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1, 2]);
}

async fn text_search_is_case_insensitive_newest_first_and_limited(s: TestStore) {
    let tape = s.tape("chat");
    for text in ["Deploy the API", "unrelated", "deploy again", "DEPLOY ÄRGER", "tool output"] {
        tape.append(NewEntry::chat("user", text)).await.unwrap();
    }
    tape.append(NewEntry::tool_result(vec![json!({"log": "deploy finished"})])).await.unwrap();
    let hits = tape.read(&TapeQuery::search("deploy")).await.unwrap();
    assert_eq!(hits.iter().map(|e| e.id).collect::<Vec<_>>(), vec![6, 4, 3, 1]);
    let limited = tape.read(&TapeQuery::search("deploy").limit(2)).await.unwrap();
    assert_eq!(limited.iter().map(|e| e.id).collect::<Vec<_>>(), vec![6, 4]);
    let unicode = tape.read(&TapeQuery::search("ärger")).await.unwrap();
    assert_eq!(unicode.len(), 1, "non-ASCII letters fold case too");
    let scoped = tape.read(&TapeQuery::search("deploy").kinds([EntryKind::Message])).await.unwrap();
    assert_eq!(scoped.len(), 3);
}

async fn reset_clears_the_tape_and_restarts_ids(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "x")).await.unwrap();
    s.tape("other").append(NewEntry::chat("user", "kept")).await.unwrap();
    s.store.reset(&name("chat")).await.unwrap();
    assert!(tape.read(&TapeQuery::all()).await.unwrap().is_empty());
    assert_eq!(tape.append(NewEntry::chat("user", "y")).await.unwrap().id, 1);
    assert_eq!(s.tape("other").read(&TapeQuery::all()).await.unwrap().len(), 1, "other tapes untouched");
}

async fn stats_and_list_report_counts(s: TestStore) {
    let tape = s.tape("chat");
    tape.handoff("a", json!({})).await.unwrap();
    tape.append(NewEntry::chat("user", "x")).await.unwrap();
    tape.append(NewEntry::anchor("b", json!({}))).await.unwrap();
    tape.append(NewEntry::chat("user", "y")).await.unwrap();
    let stats = s.store.stats(&name("chat")).await.unwrap();
    assert_eq!((stats.entries, stats.anchors, stats.last_id), (5, 2, 5));
    assert_eq!(stats.last_anchor.unwrap().name(), Some("b"));
    assert_eq!(s.store.stats(&name("never")).await.unwrap().entries, 0);
    let list = s.store.list().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].name.as_str(), list[0].entries), ("chat", 5));
}

async fn concurrent_appends_stay_gapless_and_batches_stay_whole(s: TestStore) {
    let tape = s.tape("chat");
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let tape = tape.clone();
        tasks.push(tokio::spawn(async move {
            for batch in 0..10 {
                let entries = (0..3)
                    .map(|i| {
                        NewEntry::chat("user", format!("{writer}/{batch}/{i}"))
                            .with_meta("batch", json!(format!("{writer}/{batch}")))
                    })
                    .collect();
                tape.append_all(entries).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let entries = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), (1..=240).collect::<Vec<_>>());
    for window in entries.chunks(3) {
        assert!(window.iter().all(|e| e.meta["batch"] == window[0].meta["batch"]), "a batch was interleaved");
    }
}

async fn a_large_batch_lands_whole_with_consecutive_ids(s: TestStore) {
    let tape = s.tape("chat");
    tape.append(NewEntry::chat("user", "first")).await.unwrap();
    let batch: Vec<NewEntry> = (0..2_500).map(|i| NewEntry::chat("user", format!("m{i}"))).collect();
    let stored = tape.append_all(batch).await.unwrap();
    assert_eq!(stored.first().unwrap().id, 2);
    assert_eq!(stored.last().unwrap().id, 2_501);
    let read = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(read.iter().map(|e| e.id).collect::<Vec<_>>(), (1..=2_501).collect::<Vec<_>>());
    assert_eq!(read[2_500].payload["content"], "m2499");
    assert_eq!(s.store.stats(&name("chat")).await.unwrap().last_id, 2_501);
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod memory { $( #[tokio::test] async fn $case() { super::$case(super::support::memory_store().await).await } )* }
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(super::support::sqlite_store().await).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(super::support::postgres_store().await).await } )* }
        mod fork { $( #[tokio::test] async fn $case() { super::$case(super::support::fork_store().await).await } )* }
    };
}

conformance!(
    ids_start_at_one_and_have_no_gaps,
    tapes_number_their_entries_independently,
    a_bad_entry_in_a_batch_writes_nothing,
    entries_round_trip_unchanged,
    odd_tape_names_work,
    last_anchor_scope_starts_at_the_newest_anchor,
    the_context_query_reads_from_the_last_anchor_what_a_model_sees,
    latest_finds_the_newest_entry_of_each_query,
    a_missing_anchor_is_a_clear_error,
    after_named_anchor_uses_the_newest_of_that_name,
    between_anchors_is_bounded_on_both_sides,
    between_dates_is_half_open,
    kinds_and_names_filter,
    text_search_is_case_insensitive_newest_first_and_limited,
    reset_clears_the_tape_and_restarts_ids,
    stats_and_list_report_counts,
    concurrent_appends_stay_gapless_and_batches_stay_whole,
    a_large_batch_lands_whole_with_consecutive_ids,
);
