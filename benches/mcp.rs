//! What MCP costs through bub: the overhead of one tool call against a
//! client calling the same stdio server directly, and the start-up time a
//! configured server adds. Request bytes with and without the tool-schema
//! budget are `benches/tool_schema_budget.rs`.
//!
//! ```sh
//! cargo bench --bench mcp        # release (bench profile); or, quicker to build, `cargo test --bench mcp`
//! # knobs (environment): BENCH_MCP_CALLS=2000 (measured calls per path and payload, after
//! #   BENCH_MCP_WARMUP=200), BENCH_MCP_PAYLOADS=16,65536 (echoed text, bytes),
//! #   BENCH_MCP_TURNS=1000 (agent turns per path), BENCH_MCP_SERVERS=0,1,5,10,
//! #   BENCH_MCP_STARTS=5 (starts per server count), BENCH_MCP_PHASES=calls,startup,gateway
//! ```
//!
//! The server is `tests/mcp/fixtures/server.py` in its `normal` mode: JSON-RPC
//! lines on stdio by hand, Python's standard library only, so its own cost
//! per call is a `json.loads`, a `json.dumps` and a flushed write. Every path
//! has a process of its own of the same script.
//!
//! `calls`: the `echo` tool, called on each path in turn, in blocks of
//! [`BLOCK`] calls (so a change in the load of the shared machine falls on
//! every path alike), each call timed alone (median and p99):
//! - `direct`: rmcp's client over a child process (`TokioChildProcess`), what
//!   a client that is not bub pays;
//! - `McpServer::call`: bub's supervised server (`bub::mcp::McpServer`, from
//!   `McpServers`): the call timeout, the select on the connection going
//!   down, the metrics (the Prometheus recorder is installed, as in the
//!   gateway) and the counters of `,mcp`; bub's transport (stdout sniffed
//!   for lines that are not JSON-RPC) over the pipes of a process group of
//!   its own;
//! - `Tool::call`: the registry's `mcp.bench.echo`, as the executor calls it:
//!   the arguments checked, the call above, and the answer mapped to the
//!   text the model reads (`bub::mcp::content`).
//!
//! The agent's executor path (`agent turn`, small payload only: a large one
//! would be spilled): turns of an agent whose in-process model asks for one
//! call of `mcp_bench_echo` then answers, against the same turns calling an
//! in-process tool returning the same text. The difference of the medians
//! is what the MCP call costs inside a turn (events, policy hook, tape,
//! spill check included in both); minus `direct`, bub's overhead there.
//!
//! `startup`: `McpServers::apply` then `wait_ready` with 0, 1, 5 and 10
//! servers of the fixture (in process): when `apply` returns (servers come
//! up in the background) and when all are ready, the median of
//! `BENCH_MCP_STARTS` starts, and `stop_all`; beside it, the same number of
//! servers started at once by rmcp's own client (spawn, initialize,
//! `tools/list`), what the servers themselves take.
//!
//! `gateway`: the real `bub gateway` (this profile's binary) on a config
//! with a webhook channel and 0, 1, 5, 10 fixture servers, `required =
//! false` and then `true`: from the spawn, polling `/readyz` every 2 ms, the
//! first answer, the first 200 (`ready`) with how many servers were up in
//! it, and the first answer showing every server up. A server that is not
//! `required` should not hold `/readyz` back; a required one should.
//!
//! No figure is asserted. The machine's cores are shared with this process
//! (client, fake model) and the servers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

use async_trait::async_trait;
use bub::agent::{Agent, RunOptions};
use bub::config::mcp::{McpScope, McpServerConfig, McpTransport};
use bub::mcp::{EnvLookup, McpServer, McpServers, ServerState};
use bub::model::{
    ChatRequest, FinishReason, ModelClient, ModelError, ModelEvent, ModelStream, SingleClient, ToolCallRequest,
};
use bub::tape::{InMemoryTapeStore, Tape, TapeName};
use bub::tools::{Tool, ToolContext};
use futures::StreamExt;
use indexmap::IndexMap;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Calls per path before the next path's turn.
const BLOCK: usize = 100;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.trim().parse().ok()).unwrap_or(default)
}

fn list_knob(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(value) => value.split(',').filter_map(|v| v.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn phase(name: &str) -> bool {
    std::env::var("BENCH_MCP_PHASES").map_or(true, |phases| phases.split(',').any(|p| p.trim() == name))
}

/// The fixture server and the interpreter itself (not a shim in front of it).
fn fixture_argv() -> Vec<String> {
    let output = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("the fixture server needs python3");
    let python = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixtures/server.py");
    vec![python, script.display().to_string(), "normal".to_string()]
}

fn fixture_config(argv: &[String], required: bool) -> McpServerConfig {
    McpServerConfig {
        transport: McpTransport::Stdio {
            command: argv[0].clone(),
            args: argv[1..].to_vec(),
            env: IndexMap::new(),
            cwd: None,
        },
        scope: McpScope::Gateway,
        required,
        start_timeout: Duration::from_secs(60),
        call_timeout: Duration::from_secs(60),
        capabilities: None,
        tool_capabilities: IndexMap::new(),
    }
}

fn lookup() -> EnvLookup {
    Arc::new(|name: &str| std::env::var(name).ok())
}

/// An in-process model: when `tool` is set, asks for one call of it with
/// `arguments`, then answers "ok" (the two steps of a turn), and again.
struct InstantModel {
    tool: Option<(String, String)>,
    next_is_answer: AtomicBool,
}

#[async_trait]
impl ModelClient for InstantModel {
    fn provider(&self) -> &str {
        "instant"
    }

    async fn stream(&self, _request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let answer = self.tool.is_none() || self.next_is_answer.fetch_xor(true, Ordering::Relaxed);
        let events = match &self.tool {
            Some((name, arguments)) if !answer => vec![
                Ok(ModelEvent::ToolCall(ToolCallRequest {
                    id: "c".into(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                })),
                Ok(ModelEvent::Finish(FinishReason::ToolCalls)),
            ],
            _ => vec![Ok(ModelEvent::TextDelta("ok".into())), Ok(ModelEvent::Finish(FinishReason::Stop))],
        };
        Ok(futures::stream::iter(events).boxed())
    }
}

fn agent(tool_call: Option<(&str, Value)>, tools: Vec<Tool>) -> Agent {
    let model = InstantModel {
        tool: tool_call.map(|(name, arguments)| (name.to_string(), arguments.to_string())),
        next_is_answer: AtomicBool::new(false),
    };
    Agent::builder()
        .model(Arc::new(SingleClient(Arc::new(model))), "instant:model")
        .tools(tools)
        .system_prompt("You are a benchmark.")
        .build()
}

fn detached_context(workspace: &Path) -> ToolContext {
    let tape = Tape::new(Arc::new(InMemoryTapeStore::new()), TapeName::new("bench-mcp").unwrap());
    ToolContext::detached(tape, workspace)
}

/// One way of making the call, timed per call.
struct Timed<'a> {
    name: &'static str,
    call: Box<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>> + 'a>,
    times: Vec<Duration>,
}

/// Runs `warmup` calls of each path, then `calls` more each, in blocks of
/// [`BLOCK`] taking turns.
async fn measure(paths: &mut [Timed<'_>], warmup: usize, calls: usize) {
    for path in paths.iter() {
        for _ in 0..warmup {
            (path.call)().await;
        }
    }
    let mut done = 0;
    while done < calls {
        let block = BLOCK.min(calls - done);
        for path in paths.iter_mut() {
            for _ in 0..block {
                let started = Instant::now();
                (path.call)().await;
                path.times.push(started.elapsed());
            }
        }
        done += block;
    }
    for path in paths.iter_mut() {
        path.times.sort();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn us(duration: Duration) -> String {
    format!("{:.1} µs", duration.as_secs_f64() * 1e6)
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

fn signed_us(micros: f64) -> String {
    format!("{micros:+.1} µs")
}

/// rmcp's own client over a child process of the fixture.
async fn direct_client(argv: &[String]) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(&argv[0]);
    command.args(&argv[1..]);
    let (transport, _stderr) =
        TokioChildProcess::builder(command).stderr(Stdio::null()).spawn().expect("start the fixture server");
    ().serve(transport).await.expect("initialize the fixture server")
}

async fn calls(argv: &[String]) {
    let warmup = knob("BENCH_MCP_WARMUP", 200);
    let count = knob("BENCH_MCP_CALLS", 2000).max(1);
    let workspace = tempfile::tempdir().unwrap();
    let direct = direct_client(argv).await;
    let target = agent(None, vec![]);
    let servers = McpServers::new(target.clone(), lookup());
    servers.apply(&IndexMap::from([("bench".to_string(), fixture_config(argv, false))])).await;
    servers.wait_ready(Duration::from_secs(60)).await;
    let server: McpServer = servers.server("bench").expect("the bench server");
    assert_eq!(server.state(), ServerState::Ready, "{:?}", server.status());
    let tool = target.tools().get("mcp.bench.echo").cloned().expect("mcp.bench.echo registered");

    println!(
        "\nMCP call overhead: tool `echo` of tests/mcp/fixtures/server.py (python3, stdlib), {count} calls per path \
         after {warmup} warm-up, interleaved in blocks of {BLOCK}"
    );
    println!("{:>9}  {:<38} {:>10} {:>10} {:>14} {:>7}", "payload", "path", "median", "p99", "vs direct", "ratio");
    for size in list_knob("BENCH_MCP_PAYLOADS", &[16, 65536]) {
        let text = "x".repeat(size);
        let arguments: JsonObject = json!({ "text": text }).as_object().cloned().unwrap();
        let value = Value::Object(arguments.clone());
        let peer = direct.peer().clone();
        let (server, tool, workspace) = (&server, &tool, workspace.path());
        let expected = size;
        let mut paths = [
            Timed {
                name: "direct (rmcp client, child process)",
                call: Box::new(|| {
                    let (peer, arguments) = (peer.clone(), arguments.clone());
                    Box::pin(async move {
                        let mut params = CallToolRequestParams::new("echo");
                        params.arguments = Some(arguments);
                        let answer = peer.call_tool(params).await.expect("direct call");
                        assert_eq!(answer.content.len(), 1);
                    })
                }),
                times: Vec::new(),
            },
            Timed {
                name: "bub McpServer::call",
                call: Box::new(|| {
                    let arguments = arguments.clone();
                    Box::pin(async move {
                        let answer = server.call("echo", Some(arguments)).await.expect("McpServer::call");
                        assert_eq!(answer.content.len(), 1);
                    })
                }),
                times: Vec::new(),
            },
            Timed {
                name: "bub Tool::call (mcp.bench.echo)",
                call: Box::new(|| {
                    let value = value.clone();
                    Box::pin(async move {
                        let answer = tool.call(value, detached_context(workspace)).await.expect("Tool::call");
                        assert_eq!(answer.as_str().map(str::len), Some(expected));
                    })
                }),
                times: Vec::new(),
            },
        ];
        measure(&mut paths, warmup, count).await;
        let base = percentile(&paths[0].times, 0.5);
        for path in &paths {
            let median = percentile(&path.times, 0.5);
            let over = median.as_secs_f64() * 1e6 - base.as_secs_f64() * 1e6;
            println!(
                "{:>9}  {:<38} {:>10} {:>10} {:>14} {:>6.2}x",
                format!("{size} B"),
                path.name,
                us(median),
                us(percentile(&path.times, 0.99)),
                if path.name.starts_with("direct") { "-".to_string() } else { signed_us(over) },
                median.as_secs_f64() / base.as_secs_f64()
            );
        }
    }

    agent_turns(&servers, tool.clone(), direct.peer().clone()).await;
    servers.stop_all().await;
    let _ = direct.cancel().await;
}

/// Turns calling the MCP echo against turns calling an in-process one.
async fn agent_turns(servers: &McpServers, mcp_tool: Tool, peer: rmcp::service::Peer<RoleClient>) {
    let turns = knob("BENCH_MCP_TURNS", 1000).max(1);
    let warmup = knob("BENCH_MCP_WARMUP", 200).min(turns);
    let arguments = json!({"text": "hello from the model"});
    let local_tool =
        Tool::new("echo_local", "Echoes the text.", mcp_tool.parameters().clone(), |args: Value, _| async move {
            Ok(Value::String(args["text"].as_str().unwrap_or_default().to_string()))
        });
    let through_mcp = agent(Some(("mcp_bench_echo", arguments.clone())), vec![mcp_tool]);
    let in_process = agent(Some(("echo_local", arguments.clone())), vec![local_tool]);
    let direct_arguments: JsonObject = arguments.as_object().cloned().unwrap();
    let counter = std::cell::Cell::new(0u64);
    let run = |agent: &Agent| {
        counter.set(counter.get() + 1);
        let run = agent.run("echo it", RunOptions::new(format!("bench-{}", counter.get())));
        async move {
            let outcome = run.collect().await;
            assert!(outcome.error.is_none(), "{:?}", outcome.error);
        }
    };
    let mut paths = [
        Timed {
            name: "direct (rmcp client, child process)",
            call: Box::new(|| {
                let (peer, arguments) = (peer.clone(), direct_arguments.clone());
                Box::pin(async move {
                    let mut params = CallToolRequestParams::new("echo");
                    params.arguments = Some(arguments);
                    peer.call_tool(params).await.expect("direct call");
                })
            }),
            times: Vec::new(),
        },
        Timed {
            name: "agent turn, in-process echo tool",
            call: Box::new(|| Box::pin(run(&in_process))),
            times: Vec::new(),
        },
        Timed { name: "agent turn, mcp_bench_echo", call: Box::new(|| Box::pin(run(&through_mcp))), times: Vec::new() },
    ];
    measure(&mut paths, warmup, turns).await;
    let [direct, local, mcp] = &paths;
    let median = |times: &[Duration]| percentile(times, 0.5).as_secs_f64() * 1e6;
    println!(
        "\nMCP call in an agent turn (model in process: one tool call, then an answer; {turns} turns per path after \
         {warmup} warm-up, blocks of {BLOCK})"
    );
    println!("{:<38} {:>10} {:>10}", "path", "median", "p99");
    for path in [direct, local, mcp] {
        println!(
            "{:<38} {:>10} {:>10}",
            path.name,
            us(percentile(&path.times, 0.5)),
            us(percentile(&path.times, 0.99))
        );
    }
    let in_turn = median(&mcp.times) - median(&local.times);
    println!(
        "the MCP call inside a turn (mcp turn - in-process turn): {:.1} µs; bub's overhead on it (minus direct): {} \
         ({:.2}x direct)",
        in_turn,
        signed_us(in_turn - median(&direct.times)),
        in_turn / median(&direct.times)
    );
    let status = servers.status();
    println!("server counters after the run: {} calls, {} errors", status[0].calls, status[0].errors);
}

fn config_with(argv: &[String], count: usize, required: bool) -> IndexMap<String, McpServerConfig> {
    (0..count).map(|n| (format!("fx{n:02}"), fixture_config(argv, required))).collect()
}

fn median_of(mut values: Vec<Duration>) -> Duration {
    values.sort();
    percentile(&values, 0.5)
}

/// `count` servers started by rmcp's own client at once (spawn, initialize,
/// `tools/list`): what the servers themselves take to come up.
async fn direct_start(argv: &[String], count: usize) -> Duration {
    let started = Instant::now();
    let clients = futures::future::join_all((0..count).map(|_| async {
        let client = direct_client(argv).await;
        let tools = client.peer().list_all_tools().await.expect("tools/list");
        assert_eq!(tools.len(), 6);
        client
    }))
    .await;
    let elapsed = started.elapsed();
    for client in clients {
        let _ = client.cancel().await;
    }
    elapsed
}

async fn startup(argv: &[String]) {
    let starts = knob("BENCH_MCP_STARTS", 5).max(1);
    println!(
        "\nstart-up per configured server (in process: McpServers::apply, wait_ready, stop_all; median of {starts})"
    );
    println!(
        "{:>7} {:>14} {:>14} {:>18} {:>12} {:>22}",
        "servers", "apply returns", "all ready", "added per server", "stop_all", "direct (rmcp) all up"
    );
    for count in list_knob("BENCH_MCP_SERVERS", &[0, 1, 5, 10]) {
        let (mut applied, mut ready, mut stopped, mut direct) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..starts {
            direct.push(direct_start(argv, count).await);
            let target = agent(None, vec![]);
            let servers = McpServers::new(target.clone(), lookup());
            let configs = config_with(argv, count, false);
            let started = Instant::now();
            servers.apply(&configs).await;
            applied.push(started.elapsed());
            servers.wait_ready(Duration::from_secs(60)).await;
            ready.push(started.elapsed());
            let up = servers.status().iter().filter(|status| status.state == ServerState::Ready).count();
            assert_eq!(up, count, "{:?}", servers.status());
            assert_eq!(target.tools().iter().filter(|tool| tool.name().starts_with("mcp.")).count(), count * 6);
            let stopping = Instant::now();
            servers.stop_all().await;
            stopped.push(stopping.elapsed());
        }
        let ready = median_of(ready);
        let per_server = if count == 0 { "-".to_string() } else { ms(ready / count as u32) };
        println!(
            "{count:>7} {:>14} {:>14} {:>18} {:>12} {:>22}",
            us(median_of(applied)),
            ms(ready),
            per_server,
            ms(median_of(stopped)),
            ms(median_of(direct))
        );
    }
}

/// What one start of the gateway showed on `/readyz`, from its spawn.
struct GatewayStart {
    first_answer: Duration,
    ready: Duration,
    /// Servers up in the first 200.
    up_when_ready: usize,
    all_up: Duration,
    stop: Duration,
}

async fn gateway_start(home: &Path, config: &Path, servers: usize) -> GatewayStart {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let stderr = std::fs::File::create(home.join("gateway.stderr")).unwrap();
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap();
    let url = format!("http://127.0.0.1:{port}/readyz");
    let spawned = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_bub"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("BUB_HOME", home)
        .env("BUB_LOG", "warn")
        .env("BUB_MODEL", "openai:gpt-bench")
        .env("BUB_OPENAI_API_BASE", "http://127.0.0.1:9/v1")
        .env("BUB_OPENAI_API_KEY", "bench-key")
        .arg("gateway")
        .args(["--listen", &format!("127.0.0.1:{port}"), "--config"])
        .arg(config)
        .current_dir(home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn bub gateway");
    let (mut first_answer, mut ready, mut up_when_ready) = (None, None, 0);
    let deadline = spawned + Duration::from_secs(60);
    let all_up = loop {
        assert!(Instant::now() < deadline, "bub gateway: no full readiness in 60 s; see {}", home.display());
        if let Some(status) = child.try_wait().unwrap() {
            let log = std::fs::read_to_string(home.join("gateway.stderr")).unwrap_or_default();
            panic!("bub gateway exited ({status}): {log}");
        }
        if let Ok(response) = client.get(&url).send().await {
            let at = spawned.elapsed();
            first_answer.get_or_insert(at);
            let is_ready = response.status().is_success();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let up = body["dependencies"].as_array().map_or(0, |deps| deps.iter().filter(|d| d["up"] == true).count());
            if is_ready && ready.is_none() {
                ready = Some(at);
                up_when_ready = up;
            }
            if is_ready && up == servers {
                break at;
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let stopping = Instant::now();
    let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let exited = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    assert!(exited.is_ok(), "bub gateway did not stop within 30 s");
    GatewayStart {
        first_answer: first_answer.unwrap_or_default(),
        ready: ready.unwrap_or_default(),
        up_when_ready,
        all_up,
        stop: stopping.elapsed(),
    }
}

fn gateway_config(argv: &[String], count: usize, required: bool) -> String {
    let mut text = "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"bench-secret\"]\n".to_string();
    let quoted: Vec<String> = argv[1..].iter().map(|arg| format!("{arg:?}")).collect();
    for n in 0..count {
        text.push_str(&format!(
            "\n[mcp.fx{n:02}]\ncommand = {:?}\nargs = [{}]\nrequired = {required}\n",
            argv[0],
            quoted.join(", ")
        ));
    }
    text
}

async fn gateway(argv: &[String]) {
    let starts = knob("BENCH_MCP_STARTS", 5).max(1);
    println!(
        "\nbub gateway start (the bench profile's binary; from the spawn, /readyz polled every 2 ms; median of {starts})"
    );
    println!(
        "{:>7} {:>9} {:>13} {:>13} {:>15} {:>13} {:>10}",
        "servers", "required", "first answer", "ready (200)", "up when ready", "all up", "stop"
    );
    let counts = list_knob("BENCH_MCP_SERVERS", &[0, 1, 5, 10]);
    let variants =
        counts.iter().map(|&count| (count, false)).chain(counts.iter().filter(|&&c| c > 0).map(|&c| (c, true)));
    for (count, required) in variants {
        let mut runs = Vec::new();
        for _ in 0..starts {
            let home = tempfile::tempdir().unwrap();
            let config: PathBuf = home.path().join("bub.toml");
            std::fs::write(&config, gateway_config(argv, count, required)).unwrap();
            runs.push(gateway_start(home.path(), &config, count).await);
        }
        let median = |field: fn(&GatewayStart) -> Duration| median_of(runs.iter().map(field).collect());
        let mut up: Vec<usize> = runs.iter().map(|run| run.up_when_ready).collect();
        up.sort();
        println!(
            "{count:>7} {required:>9} {:>13} {:>13} {:>15} {:>13} {:>10}",
            ms(median(|run| run.first_answer)),
            ms(median(|run| run.ready)),
            format!("{}/{count} (median)", up[up.len() / 2]),
            ms(median(|run| run.all_up)),
            ms(median(|run| run.stop)),
        );
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // The gateway's recorder, so the per-call metrics cost what they cost there.
    let _metrics = bub::http::metrics_handle();
    let argv = fixture_argv();
    runtime.block_on(async {
        if phase("calls") {
            calls(&argv).await;
        }
        if phase("startup") {
            startup(&argv).await;
        }
        if phase("gateway") {
            gateway(&argv).await;
        }
    });
}
