//! `bub mcp serve` as another agent uses it: the official MCP Python SDK's
//! client spawns the binary on a home with two sessions, lists, searches and
//! reads their tapes, and makes the calls that must fail; the tapes are the
//! same afterwards.

use crate::support::mcp_python;
use bub::db::SqliteTapeStore;
use bub::home::BubHome;
use bub::tape::{NewEntry, Tape, TapeName, TapeStore, TapeSummary};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The tape with a handoff; `quokka` is only in the other one.
const ANCHORED: &str = "alpha-chat";
const OTHER: &str = "beta-chat";
const WORD: &str = "quokka";

/// A home with two sessions: `alpha-chat` handed off once (its first
/// question, about the platypus, lies before the handoff), `beta-chat`
/// without a handoff and with a long answer. Each anchor is two entries
/// (the anchor, then its `handoff` event): alpha's are #1-2 and #5-6.
async fn seeded_home() -> TempDir {
    let home = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteTapeStore::open(BubHome::at(home.path()).database()).await.unwrap());
    let alpha = Tape::new(store.clone(), TapeName::new(ANCHORED).unwrap());
    alpha.ensure_bootstrap_anchor().await.unwrap();
    alpha.append(NewEntry::chat("user", "where did the platypus go?")).await.unwrap();
    alpha.append(NewEntry::chat("assistant", "It went home.")).await.unwrap();
    alpha.handoff("phase-2", json!({"summary": "The platypus is home; next come the invoices."})).await.unwrap();
    alpha.append(NewEntry::chat("user", "now the invoices")).await.unwrap();
    alpha.append(NewEntry::chat("assistant", "Invoice 7 is paid.")).await.unwrap();
    let beta = Tape::new(store.clone(), TapeName::new(OTHER).unwrap());
    beta.ensure_bootstrap_anchor().await.unwrap();
    beta.append(NewEntry::chat("user", "does the quokka smile?")).await.unwrap();
    beta.append(NewEntry::chat("assistant", format!("It does. {}", "Quokkas smile a lot. ".repeat(200))))
        .await
        .unwrap();
    store.close().await;
    home
}

/// The store's tapes as `bub tape list` counts them.
async fn tapes_of(home: &Path) -> Vec<TapeSummary> {
    let store = SqliteTapeStore::open(BubHome::at(home).database()).await.unwrap();
    let tapes = store.list().await.unwrap();
    store.close().await;
    tapes
}

fn texts(entries: &Value) -> Vec<String> {
    entries.as_array().unwrap().iter().map(|entry| entry["text"].as_str().unwrap().to_string()).collect()
}

fn ids(entries: &Value) -> Vec<u64> {
    entries.as_array().unwrap().iter().map(|entry| entry["id"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn another_agent_lists_searches_and_reads_the_tapes_and_changes_nothing() {
    let home = seeded_home().await;
    let before = tapes_of(home.path()).await;
    let home_path = home.path().to_path_buf();
    let seen = tokio::task::spawn_blocking(move || {
        let args = [env!("CARGO_BIN_EXE_bub").as_ref(), home_path.as_os_str(), WORD.as_ref(), ANCHORED.as_ref()];
        mcp_python::run_client("tapes.py", &args)
    })
    .await
    .unwrap();

    // Only the protocol on stdout, with every log on.
    assert_eq!(seen["stream_errors"], json!([]), "{seen:#}");
    assert_eq!(seen["server"], json!({"name": "bub", "version": env!("CARGO_PKG_VERSION")}));
    assert!(seen["instructions"].as_str().unwrap().contains("read-only"));

    // Three tools, all reading, each with its schemas.
    let tools = seen["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["tapes_list", "tape_search", "tape_read"]);
    for tool in tools {
        assert_eq!(tool["read_only"], json!(true), "{tool}");
        assert_eq!(tool["has_output_schema"], json!(true), "{tool}");
        assert_eq!(tool["input"]["type"], json!("object"), "{tool}");
    }
    assert_eq!(tools[2]["input"]["required"], json!(["tape"]));

    // The tapes, as `bub tape list` names them.
    let list = &seen["list"];
    assert_eq!(list["is_error"], json!(false));
    assert_eq!(list["structured"]["total"], json!(2));
    let tapes = list["structured"]["tapes"].as_array().unwrap();
    let alpha = tapes.iter().find(|tape| tape["name"] == ANCHORED).expect("alpha listed");
    assert_eq!((alpha["entries"].as_u64(), alpha["anchors"].as_u64()), (Some(8), Some(2)));
    assert_eq!(alpha["last_anchor"], json!("phase-2"));
    assert!(tapes.iter().any(|tape| tape["name"] == OTHER));
    assert!(list["text"].as_str().unwrap().contains(ANCHORED));

    // One tape a page.
    let [first, second] = [&seen["pages"][0]["structured"], &seen["pages"][1]["structured"]];
    assert_eq!((first["tapes"].as_array().unwrap().len(), first["total"].as_u64()), (1, Some(2)));
    assert!(first["next_cursor"].is_string());
    assert_eq!(second["tapes"].as_array().unwrap().len(), 1);
    assert_ne!(first["tapes"][0]["name"], second["tapes"][0]["name"]);
    assert_eq!(second["next_cursor"], Value::Null);

    // A word of one tape is found there only.
    let search = &seen["search"]["structured"];
    assert_eq!(search["tapes"], json!(2));
    let hits = search["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{search:#}");
    assert!(hits.iter().all(|hit| hit["tape"] == OTHER));
    assert!(texts(&search["hits"]).iter().all(|text| text.to_lowercase().contains(WORD)));
    assert!(seen["search"]["text"].as_str().unwrap().contains("does the quokka smile?"));
    assert_eq!(seen["search_in_other_tape"]["structured"]["hits"], json!([]));

    // From the last anchor: what came before the handoff is left out.
    let read = &seen["read"]["structured"];
    assert_eq!(read["from"], json!("last anchor"));
    assert_eq!(read["anchor"]["name"], json!("phase-2"));
    assert_eq!(read["before"], json!(4));
    let read_texts = texts(&read["entries"]);
    assert_eq!(ids(&read["entries"]), [5, 6, 7, 8]);
    assert!(read_texts.iter().any(|text| text == "user: now the invoices"), "{read_texts:?}");
    assert!(!read_texts.iter().any(|text| text.contains("where did the platypus go")), "{read_texts:?}");
    assert!(!seen["read"]["text"].as_str().unwrap().contains("where did the platypus go"));

    // From the first entry, each cut to 40 characters with a note.
    let whole = &seen["read_whole"]["structured"];
    assert_eq!(ids(&whole["entries"]), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(texts(&whole["entries"]).iter().all(|text| text.chars().count() <= 41));
    let handoff = &whole["entries"][4];
    assert_eq!((handoff["kind"].as_str(), handoff["truncated"].as_bool()), (Some("anchor"), Some(true)));
    assert!(handoff["chars"].as_u64().unwrap() > 40);
    assert!(seen["read_whole"]["text"].as_str().unwrap().contains("[cut: "));

    // Paged by two.
    assert_eq!(ids(&seen["read_paged"]["structured"]["entries"]), [1, 2]);
    assert_eq!(ids(&seen["read_next_page"]["structured"]["entries"]), [3, 4]);

    // Bad calls are tool errors that say what to change.
    let errors = &seen["errors"];
    for (call, says) in [
        ("unknown_tape", "no tape named \"no-such-tape\""),
        ("unknown_anchor", "no anchor named \"no/such\"; its last anchors: session/start, phase-2"),
        ("limit_zero", "limit must be between 1 and 500 (it was 0)"),
        ("limit_huge", "limit must be between 1 and 200 (it was 1000000000000)"),
        ("bad_argument", "invalid arguments: invalid type: string \"many\""),
        ("unknown_argument", "invalid arguments: unknown field `write`"),
        ("bad_cursor", "cursor \"forged\" is not one this server gave"),
    ] {
        assert_eq!(errors[call]["is_error"], json!(true), "{call}: {errors:#}");
        let text = errors[call]["text"].as_str().unwrap();
        assert!(text.contains(says), "{call}: {text:?} should say {says:?}");
    }
    assert!(seen["unknown_tool"].as_str().unwrap().contains("no tool named \"tape_write\""), "{seen:#}");
    assert_eq!(seen["after_errors"]["is_error"], json!(false));

    assert_eq!(tapes_of(home.path()).await, before, "the tapes are unchanged");
}

/// Lines that are not JSON-RPC, or not a request this server knows, get an
/// error or nothing; the requests after them are answered.
#[tokio::test(flavor = "multi_thread")]
async fn lines_that_are_not_the_protocol_do_not_stop_the_server() {
    let home = seeded_home().await;
    let mut server = Command::new(env!("CARGO_BIN_EXE_bub"))
        .args(["mcp", "serve"])
        .env("BUB_HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    let lines = [
        initialize.to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        "this is not JSON".to_string(),
        "{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\": ".to_string(),
        json!({"jsonrpc": "2.0", "id": 3, "method": 42}).to_string(),
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/write", "params": {}}).to_string(),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "tapes_list"}}).to_string(),
    ];
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    let stdout = BufReader::new(server.stdout.take().unwrap());
    let mut answers = Vec::new();
    for line in stdout.lines() {
        let message: Value = serde_json::from_str(&line.unwrap()).expect("only JSON-RPC on stdout");
        let done = message["id"] == json!(5);
        answers.push(message);
        if done {
            break;
        }
    }
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "bub mcp serve did not stop when its stdin closed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let answer = |id: u64| answers.iter().find(|message| message["id"] == json!(id));
    assert!(answer(4).unwrap()["error"].is_object(), "{answers:#?}");
    let tapes = &answer(5).expect("the call after the garbage is answered")["result"];
    assert_eq!(tapes["isError"], json!(false), "{tapes:#}");
    assert_eq!(tapes["structuredContent"]["total"], json!(2));
}

/// A home nothing has run in is refused, and left without a database.
#[test]
fn a_home_without_a_database_is_refused_not_created() {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_bub"))
        .args(["mcp", "serve"])
        .env("BUB_HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "stdout is the protocol's only");
    assert!(String::from_utf8_lossy(&output.stderr).contains("no database at"), "{output:?}");
    assert!(!BubHome::at(home.path()).database().exists());
}
