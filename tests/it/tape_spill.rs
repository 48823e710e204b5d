//! Spill of oversized tool results to the `spill` sidecar.

use crate::support;

use bub::tape::spill::CHUNK_BYTES;
use bub::tape::{NewEntry, SpillOutcome, SpillReadError, SpillSettings, TapeQuery, TapeSettings};
use serde_json::json;
use support::TestStore;

/// Text whose 4-byte and 2-byte characters straddle every chunk edge.
fn straddling_text(chunks: usize) -> String {
    let mut text = String::new();
    let mut n = 0;
    while text.len() < chunks * CHUNK_BYTES {
        text.push_str(match n % 4 {
            0 => "🦀",
            1 => "é",
            2 => "中",
            _ => "a",
        });
        n += 1;
    }
    text
}

async fn spill_round_trip_keeps_multibyte_characters_whole(s: TestStore) {
    let tape = s.tape("chat");
    let text = straddling_text(5);
    let outcome = tape.spill_if_large("bash", text.clone()).await;
    let SpillOutcome::Spilled { handle, text: shown } = outcome else { panic!("expected a spill") };
    assert!(shown.contains(&format!("handle {handle}")));
    assert!(shown.contains(&format!("spill_read(handle=\"{handle}\", cursor=0, count=1, from_end=false)")));
    assert!(shown.contains("chars omitted"));
    assert!(shown.len() < 2_000, "the model gets a preview, not the payload");

    let mut read_back = String::new();
    let mut cursor = Some(0);
    let mut pages = 0;
    while let Some(at) = cursor {
        let page = tape.read_spill(&handle, at, 2, false).await.unwrap();
        assert!(page.shown <= 2);
        read_back.push_str(&page.content);
        cursor = page.next_cursor;
        pages += 1;
    }
    assert_eq!(read_back, text);
    assert!(pages >= 3);
}

async fn reading_from_the_end_returns_the_last_chunks(s: TestStore) {
    let tape = s.tape("chat");
    let text = format!("{}{}", "a".repeat(CHUNK_BYTES * 3), "THE END");
    let SpillOutcome::Spilled { handle, .. } = tape.spill_if_large("bash", text.clone()).await else { panic!() };
    let page = tape.read_spill(&handle, 0, 1, true).await.unwrap();
    assert_eq!(page.content, "THE END");
    assert_eq!((page.first_chunk, page.manifest.chunks, page.next_cursor), (3, 4, Some(1)));
    let rendered = page.to_string();
    assert!(rendered.starts_with(&format!("[spill {handle}: chunks 3-3 of 4")), "{rendered}");
    let rest = tape.read_spill(&handle, 1, 4, true).await.unwrap();
    assert_eq!(rest.first_chunk, 0);
    assert_eq!(rest.next_cursor, None);
    assert_eq!(format!("{}{}", rest.content, page.content), text);
}

async fn short_results_are_kept_and_the_threshold_is_configurable(s: TestStore) {
    let tape = s.tape("chat");
    assert_eq!(tape.spill_if_large("bash", "small".into()).await, SpillOutcome::Kept("small".into()));
    let exactly = "x".repeat(4096 * 4);
    assert!(matches!(tape.spill_if_large("bash", exactly).await, SpillOutcome::Kept(_)), "at the threshold: kept");
    let tight = tape
        .clone()
        .with_settings(TapeSettings { spill: SpillSettings { threshold_tokens: 2 }, archive_dir: s.dir.path().into() });
    assert!(matches!(tight.spill_if_large("bash", "123456789".into()).await, SpillOutcome::Spilled { .. }));
}

async fn threshold_zero_stops_new_spills_but_old_handles_stay_readable(s: TestStore) {
    let tape = s.tape("chat");
    let big = "y".repeat(20_000);
    let SpillOutcome::Spilled { handle, .. } = tape.spill_if_large("bash", big.clone()).await else { panic!() };
    let off = tape
        .clone()
        .with_settings(TapeSettings { spill: SpillSettings { threshold_tokens: 0 }, archive_dir: s.dir.path().into() });
    assert_eq!(off.spill_if_large("bash", big.clone()).await, SpillOutcome::Kept(big.clone()));
    assert_eq!(off.read_spill(&handle, 0, 4, false).await.unwrap().content, big);
}

async fn bad_reads_get_clear_messages(s: TestStore) {
    let tape = s.tape("chat");
    let SpillOutcome::Spilled { handle, .. } = tape.spill_if_large("bash", "z".repeat(40_000)).await else { panic!() };
    let unknown = tape.read_spill("nope", 0, 1, false).await.unwrap_err();
    assert_eq!(unknown.to_string(), "no spilled result has handle \"nope\"; use the handle from the spill header");
    let count = tape.read_spill(&handle, 0, 5, false).await.unwrap_err();
    assert_eq!(count.to_string(), "count must be between 1 and 4, got 5");
    let cursor = tape.read_spill(&handle, 3, 1, false).await.unwrap_err();
    assert!(matches!(cursor, SpillReadError::BadCursor { cursor: 3, chunks: 3 }), "{cursor}");
    assert!(cursor.to_string().contains("cursors 0-2"));
}

async fn a_spill_without_its_manifest_is_reported_incomplete(s: TestStore) {
    let tape = s.tape("chat");
    // What a crash between the chunk batches and the manifest leaves behind.
    tape.spill_tape()
        .append_all(vec![
            NewEntry::anchor("spill/abc/chunk/0", json!({})),
            NewEntry::tool_result(vec![json!("partial")]).with_meta("spill_handle", json!("abc")),
        ])
        .await
        .unwrap();
    let error = tape.read_spill("abc", 0, 1, false).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "the spilled result \"abc\" is incomplete (no manifest, 1 chunk(s) written); it cannot be read"
    );
}

async fn spill_records_stay_out_of_the_model_context(s: TestStore) {
    let tape = s.tape("chat");
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.spill_if_large("bash", "q".repeat(20_000)).await;
    let events = tape.read(&TapeQuery::all().named("spill.write")).await.unwrap();
    assert_eq!(events[0].data().unwrap()["status"], "ok");
    assert_eq!(tape.context().await.unwrap().len(), 1, "only the bootstrap anchor note");
    assert!(s.store.list().await.unwrap().iter().any(|t| t.name == "chat__sidecar__spill"));
}

async fn the_sidecar_is_reset_with_its_tape(s: TestStore) {
    let tape = s.tape("chat");
    let SpillOutcome::Spilled { handle, .. } = tape.spill_if_large("bash", "w".repeat(20_000)).await else { panic!() };
    let report = tape.reset(true).await.unwrap();
    assert_eq!(report.sidecars.len(), 1);
    let (sidecar, archived) = &report.sidecars[0];
    assert_eq!(sidecar.as_str(), "chat__sidecar__spill");
    assert!(archived.as_ref().unwrap().exists(), "the sidecar was archived too");
    assert!(matches!(tape.read_spill(&handle, 0, 1, false).await, Err(SpillReadError::UnknownHandle(_))));
}

support::on_every_database!(
    spill_round_trip_keeps_multibyte_characters_whole,
    reading_from_the_end_returns_the_last_chunks,
    short_results_are_kept_and_the_threshold_is_configurable,
    threshold_zero_stops_new_spills_but_old_handles_stay_readable,
    bad_reads_get_clear_messages,
    a_spill_without_its_manifest_is_reported_incomplete,
    spill_records_stay_out_of_the_model_context,
    the_sidecar_is_reset_with_its_tape,
);
