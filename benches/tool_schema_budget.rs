//! Request bytes per model call with many MCP tools, with and without the
//! tool-schema budget (see `bub::agent::tool_budget`).
//!
//! The `bub` binary's agent (its builtin tools and system prompt, from
//! `Setup`) talks to a fake OpenAI-compatible server on localhost, which
//! counts the bytes of each request body exactly as the OpenAI client sent
//! it. MCP-like tools are added as a server would add them
//! (`Agent::replace_tools("mcp.NAME", …)`): 3 to 8 properties, descriptions
//! of one to three sentences, some enums and nested objects. When the
//! request offers `tools_describe`, the fake model first describes two
//! tools, then answers: the second row of such a turn is the next call of
//! the same turn, with those two tools in full.
//!
//! Run: `cargo bench --bench tool_schema_budget` (or, quicker to build,
//! `cargo test --bench tool_schema_budget`: the sizes do not depend on the
//! profile). Knobs: `BENCH_MCP_TOOLS` (default `20,200`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use bub::agent::{DEFAULT_TOOL_SCHEMA_BUDGET, RunOptions};
use bub::db::{HomeStore, SqliteTapeStore};
use bub::home::BubHome;
use bub::setup::Setup;
use bub::tools::{Capability, Tool};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The two tools the fake model describes when it is offered `tools_describe`.
const DESCRIBED: [&str; 2] = ["mcp_srv00_op_00", "mcp_srv01_op_01"];

/// The body sizes of the requests received, in order.
#[derive(Default)]
struct Received(Mutex<Vec<usize>>);

/// A chunk of an OpenAI stream.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {body}\n\n")
}

/// Describes [`DESCRIBED`] when offered `tools_describe` and no tool result is
/// in the request yet; answers `ok` otherwise.
async fn answer(State(received): State<Arc<Received>>, body: Bytes) -> impl IntoResponse {
    received.0.lock().push(body.len());
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let offers_describe = request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == "tools_describe"));
    let after_a_call = request["messages"].as_array().is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let mut stream = if offers_describe && !after_a_call {
        let arguments = json!({"names": DESCRIBED}).to_string();
        let call = json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "tools_describe", "arguments": arguments}}]});
        chunk(call, None) + &chunk(json!({}), Some("tool_calls"))
    } else {
        chunk(json!({"role": "assistant", "content": "ok"}), None) + &chunk(json!({}), Some("stop"))
    };
    stream.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream")], stream)
}

async fn start_model() -> (String, Arc<Received>) {
    let received = Arc::new(Received::default());
    let app = Router::new().route("/v1/chat/completions", post(answer)).with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake model");
    let addr = listener.local_addr().expect("fake model address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), received)
}

const NOUNS: [&str; 8] = ["issue", "page", "record", "file", "ticket", "event", "message", "build"];
const VERBS: [&str; 6] = ["Search", "Create", "Update", "List", "Fetch", "Archive"];

/// A property of tool `n`, the `p`th: strings, numbers, booleans, an enum,
/// a nested object, an array, in turn.
fn property(n: usize, p: usize) -> (String, Value) {
    let noun = NOUNS[(n + p) % NOUNS.len()];
    match p % 6 {
        0 => (
            format!("{noun}_id"),
            json!({"type": "string", "description": format!("The {noun}'s id, as shown in its URL.")}),
        ),
        1 => (
            "limit".into(),
            json!({"type": "integer", "minimum": 1, "maximum": 100,
            "description": "How many results to return at most. Defaults to 20."}),
        ),
        2 => (
            "state".into(),
            json!({"type": "string", "enum": ["open", "closed", "all"],
            "description": format!("Which {noun}s to include, by state.")}),
        ),
        3 => (
            "filter".into(),
            json!({"type": "object", "description": "Narrows the results.",
            "properties": {
                "author": {"type": "string", "description": "Only items created by this user."},
                "since": {"type": "string", "format": "date-time", "description": "Only items changed after this time."},
                "labels": {"type": "array", "items": {"type": "string"}, "description": "Items carrying every label."}
            }}),
        ),
        4 => ("include_archived".into(), json!({"type": "boolean", "description": "Also return archived items."})),
        _ => (
            format!("{noun}_fields"),
            json!({"type": "array", "items": {"type": "string"},
            "description": format!("The fields of each {noun} to return; all when empty.")}),
        ),
    }
}

/// MCP-like tool `n` of server `server`: 3 to 8 properties, 1 to 3 sentences.
fn mcp_tool(server: usize, n: usize) -> Tool {
    let (verb, noun) = (VERBS[n % VERBS.len()], NOUNS[(n / VERBS.len() + server) % NOUNS.len()]);
    let sentences = [
        format!("{verb} {noun}s in the server's workspace (operation {n} of server {server})."),
        "Results are paged; pass the cursor of the previous page to continue, and narrow by state or author."
            .to_string(),
        format!("Requires read access to the {noun}s; archived {noun}s are left out unless asked for."),
    ];
    let description = sentences[..1 + n % 3].join(" ");
    let count = 3 + n % 6;
    let properties: Map<String, Value> = (0..count).map(|p| property(n, p)).collect();
    let required: Vec<&String> = properties.keys().take(1 + n % 2).collect();
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Tool::new(format!("mcp.srv{server:02}.op_{n:02}"), description, schema, |args: Value, _| async move {
        Ok(json!({"ok": true, "echo": args}))
    })
    .with_capabilities([Capability::Read, Capability::Network])
}

/// `count` MCP tools over servers of ten tools each.
fn mcp_tools(count: usize) -> Vec<(String, Vec<Tool>)> {
    (0..count.div_ceil(10))
        .map(|server| {
            let tools = (0..10.min(count - server * 10)).map(|n| mcp_tool(server, n)).collect();
            (format!("mcp.srv{server:02}"), tools)
        })
        .collect()
}

/// One turn of the `bub` binary's agent with `mcp` MCP tools under `budget`
/// (0: off): the body size of each of its model calls, and the estimated
/// tokens of all its tools' full definitions.
async fn turn(mcp: usize, budget: u64) -> (Vec<usize>, u64) {
    let (base, received) = start_model().await;
    let home = tempfile::tempdir().unwrap();
    let bub_home = BubHome::at(home.path());
    let store = Arc::new(HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
    let vars = vec![
        ("BUB_MODEL".to_string(), "openai:gpt-4o-mini".to_string()),
        ("BUB_OPENAI_API_BASE".to_string(), base),
        ("BUB_OPENAI_API_KEY".to_string(), "bench-key".to_string()),
        ("BUB_TOOL_SCHEMA_BUDGET".to_string(), budget.to_string()),
    ];
    let setup = Setup::build(&bub_home, home.path().to_path_buf(), store, vars).unwrap();
    for (source, tools) in mcp_tools(mcp) {
        setup.agent.replace_tools(&source, tools).unwrap();
    }
    let tokens = bub::agent::tool_budget::definitions_tokens(setup.agent.tools().model_tools());
    let outcome =
        setup.agent.run("Which open issues mention the flaky test?", RunOptions::new("bench")).collect().await;
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    setup.shutdown().await;
    let sizes = received.0.lock().clone();
    (sizes, tokens)
}

fn kib(bytes: usize) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let counts: Vec<usize> = match std::env::var("BENCH_MCP_TOOLS") {
        Ok(value) => value.split(',').filter_map(|v| v.trim().parse().ok()).collect(),
        Err(_) => vec![20, 200],
    };
    println!(
        "request bytes per model call (OpenAI body; the bub binary's tools + MCP tools; default budget \
         {DEFAULT_TOOL_SCHEMA_BUDGET} estimated tokens)"
    );
    let row = |mcp: String, tokens: String, budget: &str, first: String, second: String, ratio: String| {
        println!("{mcp:>9} {tokens:>11} {budget:<9} {first:>11} {second:>19} {ratio:>7}");
    };
    row(
        "mcp tools".into(),
        "full tokens".into(),
        "budget",
        "first call".into(),
        "after describing 2".into(),
        "vs off".into(),
    );
    let (builtins, tokens) = runtime.block_on(turn(0, DEFAULT_TOOL_SCHEMA_BUDGET));
    row("0".into(), tokens.to_string(), "default", kib(builtins[0]), "-".into(), "-".into());
    for count in counts {
        let (off, tokens) = runtime.block_on(turn(count, 0));
        let (on, _) = runtime.block_on(turn(count, DEFAULT_TOOL_SCHEMA_BUDGET));
        row(count.to_string(), tokens.to_string(), "off (0)", kib(off[0]), "-".into(), "1.00".into());
        let second = on.get(1).map_or_else(|| "(not offered)".to_string(), |bytes| kib(*bytes));
        let ratio = format!("{:.2}", on[0] as f64 / off[0] as f64);
        row(count.to_string(), tokens.to_string(), "default", kib(on[0]), second, ratio);
    }
}
