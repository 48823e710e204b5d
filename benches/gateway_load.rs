//! Load on the real `bub gateway` (release build) through the webhook channel,
//! with a model that answers at once.
//!
//! ```sh
//! export CARGO_TARGET_DIR=...            # optional
//! cargo bench --bench gateway_load       # builds bub with the bench (release) profile and runs this
//! # knobs (environment): BUB_LOAD_TURNS=20000 BUB_LOAD_SESSIONS=1000 BUB_LOAD_CLIENTS=64
//! #                      BUB_LOAD_RATE=1000 BUB_LOAD_RATE_TURNS=10000 (0: no open-loop phase)
//! #                      BUB_LOAD_RSS_SESSIONS=10000
//! #                      BUB_SQLITE_SYNC=normal: the gateway's database without a sync per commit
//! #                      BUB_LOAD_PERF=1: `perf record -g` on the gateway during the measured phase, a short
//! #                      self-time report printed, the data kept in $TMPDIR/bub-gateway-load.perf.data
//! ```
//!
//! What it does, in one process on loopback:
//! 1. starts a fake OpenAI-compatible model (in this process) that answers
//!    every request at once with a two-token SSE stream, timing each request
//!    it handles (from the handler's start to the last byte of the body
//!    handed to the server);
//! 2. starts `bub gateway` (`BUB_LOG=warn`) on a fresh `BUB_HOME` and reads its
//!    idle RSS (`VmRSS` in `/proc/<pid>/status`) a second after it listens;
//! 3. warms up with one turn in each of the sessions, then runs the measured
//!    phase: `BUB_LOAD_CLIENTS` concurrent clients send `BUB_LOAD_TURNS` signed
//!    `?mode=sync` requests round-robin over `BUB_LOAD_SESSIONS` chat ids;
//! 4. open loop: sends `BUB_LOAD_RATE_TURNS` more turns at a steady
//!    `BUB_LOAD_RATE` per second whatever the answers, each timed from when it
//!    was due — the latency at the target rate (the closed-loop phase keeps 64
//!    requests in flight, so its latency is mostly queueing: 64 ÷ turns/s);
//! 5. opens more sessions until `BUB_LOAD_RSS_SESSIONS` distinct ones have had
//!    a turn, and reads RSS again.
//!
//! It prints turns/s and client latency p50/p99; "gateway time" is each
//! request's client latency minus the time the fake model spent on it, so it
//! includes the loopback HTTP hops (client→gateway and gateway→model) and the
//! gateway's own work (signature, inbox insert, session worker, turn, tape
//! fork and merge, outcome transaction). The gateway's own view of the model
//! call (`bub_model_call_seconds`) and turn time (`bub_turn_seconds`) are read
//! from `/metrics`. Targets on a 2-core machine: ≥ 1,000 turns/s, p99 gateway
//! time < 10 ms (at 1,000 turns/s offered), < 50 MB RSS after 10,000 sessions. The load generator and
//! the fake model share the machine with the gateway, so these figures are a
//! lower bound on what the gateway alone would do.

#[allow(dead_code)]
#[path = "../tests/support/gateway.rs"]
mod gateway;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use gateway::{GatewayProcess, cpu_time, percentile, signed_request};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "load-secret";

/// The gateway's `/metrics` text.
async fn fetch_metrics(gateway: &GatewayProcess) -> String {
    gateway::client()
        .get(format!("{}/metrics", gateway.base_url()))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .unwrap_or_default()
}

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// The fake model: per message id (found in the prompt as `[[id]]`), how long it took.
#[derive(Default)]
struct ModelTimes {
    by_message: Mutex<HashMap<String, Duration>>,
    requests: AtomicUsize,
}

const SSE_ANSWER: &str = concat!(
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",",
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

async fn answer(State(times): State<Arc<ModelTimes>>, body: Bytes) -> impl IntoResponse {
    let started = Instant::now();
    times.requests.fetch_add(1, Ordering::Relaxed);
    // The last `[[...]]` in the body is the newest user message's id.
    let text = String::from_utf8_lossy(&body);
    let id = text.rfind("[[").and_then(|at| text[at + 2..].split_once("]]").map(|(id, _)| id.to_string()));
    let response = ([(header::CONTENT_TYPE, "text/event-stream")], SSE_ANSWER);
    if let Some(id) = id {
        times.by_message.lock().unwrap_or_else(|p| p.into_inner()).insert(id, started.elapsed());
    }
    response
}

async fn start_model() -> (String, Arc<ModelTimes>) {
    let times = Arc::new(ModelTimes::default());
    let app = Router::new().route("/v1/chat/completions", post(answer)).with_state(times.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the fake model");
    let addr = listener.local_addr().expect("fake model address");
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
        let _ = stream.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), times)
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mb(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 / 1024.0)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

struct Sample {
    id: String,
    latency: Duration,
}

/// One signed `?mode=sync` turn `load-<i>`-style id in `chat`; true when it was replied.
async fn one_turn(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    id: &str,
    chat: usize,
    failures: &AtomicUsize,
) -> bool {
    let body = json!({
        "message_id": id,
        "chat_id": format!("chat-{chat}"),
        "sender_id": format!("user-{chat}"),
        "text": format!("turn {id} [[{id}]]"),
    });
    let ok = match signed_request(client, addr, "webhook", "sync", &body, SECRET).await {
        Ok(response) if response.status() == 200 => {
            let outcome: Value = response.json().await.unwrap_or(Value::Null);
            outcome["status"] == "replied"
        }
        Ok(response) => {
            if failures.load(Ordering::Relaxed) < 5 {
                eprintln!("{id}: {} {}", response.status(), response.text().await.unwrap_or_default());
            }
            false
        }
        Err(error) => {
            if failures.load(Ordering::Relaxed) < 5 {
                eprintln!("{id}: {error}");
            }
            false
        }
    };
    if !ok {
        failures.fetch_add(1, Ordering::Relaxed);
    }
    ok
}

/// A client for the gateway keeping up to `idle` connections open.
fn load_client(idle: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(idle)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// Open loop: `count` turns sent at `rate` per second whatever the answers
/// (round-robin over `sessions` chats), each timed from the moment it was
/// due, so a slow gateway cannot hide its delays by slowing the sender.
async fn run_at_rate(
    addr: std::net::SocketAddr,
    count: usize,
    sessions: usize,
    rate: f64,
) -> (Vec<Sample>, Duration, usize) {
    let client = load_client(256);
    let failures = Arc::new(AtomicUsize::new(0));
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due).await;
        let (client, failures) = (client.clone(), failures.clone());
        tasks.spawn(async move {
            let id = format!("rate-{i}");
            let ok = one_turn(&client, addr, &id, i % sessions.max(1), &failures).await;
            ok.then(|| Sample { id, latency: due.elapsed() })
        });
    }
    let mut samples = Vec::with_capacity(count);
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.expect("a request task panicked"));
    }
    (samples, started.elapsed(), failures.load(Ordering::Relaxed))
}

/// Sends turns `first..first + count` (`load-<i>` in chat `i % sessions`, or
/// chat `i` when `sessions` is 0) from `clients` concurrent clients.
async fn run_phase(
    addr: std::net::SocketAddr,
    first: usize,
    count: usize,
    sessions: usize,
    clients: usize,
    prefix: &str,
) -> (Vec<Sample>, Duration, usize) {
    let next = Arc::new(AtomicUsize::new(first));
    let failures = Arc::new(AtomicUsize::new(0));
    let end = first + count;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let next = next.clone();
            let failures = failures.clone();
            let prefix = prefix.to_string();
            tokio::spawn(async move {
                let client = load_client(4);
                let mut samples = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        return samples;
                    }
                    let chat = if sessions == 0 { i } else { i % sessions };
                    let id = format!("{prefix}-{i}");
                    let sent = Instant::now();
                    let ok = one_turn(&client, addr, &id, chat, &failures).await;
                    if ok {
                        samples.push(Sample { id, latency: sent.elapsed() });
                    }
                }
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(count);
    for task in tasks {
        samples.extend(task.await.expect("a client task panicked"));
    }
    (samples, started.elapsed(), failures.load(Ordering::Relaxed))
}

/// `name_sum / name_count` from the Prometheus text, in seconds.
fn metric_mean(metrics: &str, name: &str) -> Option<f64> {
    let value = |suffix: &str| -> f64 {
        metrics
            .lines()
            .filter(|line| line.starts_with(&format!("{name}{suffix}")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let count = value("_count");
    (count > 0.0).then(|| value("_sum") / count)
}

fn metric_lines<'a>(metrics: &'a str, name: &str) -> Vec<&'a str> {
    metrics.lines().filter(|line| line.starts_with(name)).collect()
}

fn main() {
    // `cargo bench` passes `--bench`; this target has no filters or options.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let turns = knob("BUB_LOAD_TURNS", 20_000);
    let sessions = knob("BUB_LOAD_SESSIONS", 1_000);
    let clients = knob("BUB_LOAD_CLIENTS", 64);
    let rss_sessions = knob("BUB_LOAD_RSS_SESSIONS", 10_000);
    let perf = std::env::var("BUB_LOAD_PERF").is_ok_and(|v| v == "1");
    let rate = knob("BUB_LOAD_RATE", 1_000).max(1) as f64;
    let rate_turns = knob("BUB_LOAD_RATE_TURNS", 10_000);

    let (model_base, model_times) = start_model().await;
    let home = tempfile::tempdir().expect("tempdir");
    let mut env: Vec<(String, String)> = vec![
        ("BUB_MODEL".into(), "openai:gpt-bench".into()),
        ("BUB_OPENAI_API_BASE".into(), model_base),
        ("BUB_OPENAI_API_KEY".into(), "fake-key".into()),
        ("BUB_WEBHOOK_SECRET".into(), SECRET.into()),
        ("BUB_LOG".into(), "warn".into()),
    ];
    // Passed through so durability and allocator settings can be compared.
    for (name, value) in std::env::vars() {
        if name == "BUB_SQLITE_SYNC"
            || name.starts_with("MALLOC_")
            || name.starts_with("MIMALLOC_")
            || name.starts_with("TOKIO_")
        {
            env.push((name, value));
        }
    }
    let gateway = GatewayProcess::start(home.path(), &env, &[]).await;
    let pid = gateway.pid();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (idle_rss, _) = rss_kib(pid);
    println!("bub gateway pid {pid} on {}; idle RSS {}", gateway.addr, mb(idle_rss));

    let warm_clients = clients.min(sessions).max(1);
    let (warm, warm_time, warm_failed) = run_phase(gateway.addr, 0, sessions, sessions, warm_clients, "warm").await;
    println!(
        "warm-up: {} turns (one per session) in {:.2} s, {warm_failed} failed",
        warm.len(),
        warm_time.as_secs_f64()
    );
    let (after_warm_rss, _) = rss_kib(pid);

    let perf_child = perf.then(|| {
        let data = std::env::temp_dir().join("bub-gateway-load.perf.data");
        println!("perf record -g -p {pid} -o {}", data.display());
        std::process::Command::new("perf")
            .args(["record", "-F", "499", "-g", "-p", &pid.to_string(), "-o"])
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start perf")
    });
    let cpu_before = (cpu_time(&pid.to_string()), cpu_time("self"));
    let (samples, elapsed, failed) = run_phase(gateway.addr, 0, turns, sessions, clients, "load").await;
    let cpu_after = (cpu_time(&pid.to_string()), cpu_time("self"));
    if let Some(child) = perf_child {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
        let _ = child.wait_with_output();
        let report = std::process::Command::new("perf")
            .args([
                "report",
                "--no-children",
                "--sort",
                "dso,sym",
                "--stdio",
                "-g",
                "none",
                "--percent-limit",
                "1.5",
                "-i",
            ])
            .arg(std::env::temp_dir().join("bub-gateway-load.perf.data"))
            .output()
            .expect("perf report");
        let text = String::from_utf8_lossy(&report.stdout);
        println!("--- perf report (self time, ≥ 1.5 %) ---");
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).take(40) {
            println!("{line}");
        }
    }
    let (after_load_rss, _) = rss_kib(pid);
    let metrics = fetch_metrics(&gateway).await;

    let model_time: HashMap<String, Duration> =
        std::mem::take(&mut *model_times.by_message.lock().unwrap_or_else(|p| p.into_inner()));
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    let mut in_model: Vec<Duration> = samples.iter().filter_map(|s| model_time.get(&s.id).copied()).collect();
    let mut in_gateway: Vec<Duration> =
        samples.iter().map(|s| s.latency.saturating_sub(model_time.get(&s.id).copied().unwrap_or_default())).collect();
    latencies.sort();
    in_model.sort();
    in_gateway.sort();

    // Open loop at the target rate: the latency a steady 1,000 turns/s sees.
    let (rate_samples, rate_elapsed, rate_failed) = if rate_turns > 0 {
        run_at_rate(gateway.addr, rate_turns, sessions, rate).await
    } else {
        (Vec::new(), Duration::ZERO, 0)
    };
    let rate_model: HashMap<String, Duration> =
        std::mem::take(&mut *model_times.by_message.lock().unwrap_or_else(|p| p.into_inner()));
    let mut rate_gateway: Vec<Duration> = rate_samples
        .iter()
        .map(|s| s.latency.saturating_sub(rate_model.get(&s.id).copied().unwrap_or_default()))
        .collect();
    rate_gateway.sort();

    // More sessions, one turn each, until `rss_sessions` distinct ones exist.
    let extra = rss_sessions.saturating_sub(sessions);
    let (opened, open_time, open_failed) = run_phase(gateway.addr, sessions, extra, 0, clients, "open").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (sessions_rss, peak_rss) = rss_kib(pid);
    let rss_parts: Vec<String> = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("RssAnon") || line.starts_with("RssFile"))
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Threads:").map(|n| n.trim().to_string()))
        .unwrap_or_default();
    let active = metric_lines(&fetch_metrics(&gateway).await, "bub_sessions_active").join(" ");
    gateway.stop().await;

    let sustained = samples.len() as f64 / elapsed.as_secs_f64();
    let row = |name: &str, value: String, target: &str| println!("| {name:<44} | {value:>14} | {target:<14} |");
    println!();
    println!("bub gateway load: {turns} sync turns, {clients} clients, {sessions} sessions, webhook channel");
    println!("| {:<44} | {:>14} | {:<14} |", "measure", "value", "target");
    println!("|{}|{}|{}|", "-".repeat(46), "-".repeat(16), "-".repeat(16));
    row("sustained turns/s", format!("{sustained:.0}"), ">= 1000");
    row("turns ok / failed", format!("{} / {failed}", samples.len()), "");
    row("client latency p50", ms(percentile(&latencies, 50.0)), "");
    row("client latency p99", ms(percentile(&latencies, 99.0)), "");
    row("fake model time p50 (its handler)", ms(percentile(&in_model, 50.0)), "");
    row("fake model time p99 (its handler)", ms(percentile(&in_model, 99.0)), "");
    row("gateway time p50 (latency - model)", ms(percentile(&in_gateway, 50.0)), "");
    row("gateway time p99 (latency - model)", ms(percentile(&in_gateway, 99.0)), "(queueing)");
    row("gateway time max", ms(in_gateway.last().copied().unwrap_or_default()), "");
    if rate_turns > 0 {
        let achieved = rate_samples.len() as f64 / rate_elapsed.as_secs_f64().max(1e-9);
        row(&format!("open loop: {rate_turns} turns offered at {rate:.0}/s"), format!("{achieved:.0}/s"), "");
        row("open loop: turns ok / failed", format!("{} / {rate_failed}", rate_samples.len()), "");
        row("open loop: gateway time p50", ms(percentile(&rate_gateway, 50.0)), "");
        row("open loop: gateway time p99", ms(percentile(&rate_gateway, 99.0)), "< 10 ms");
        row("open loop: gateway time max", ms(rate_gateway.last().copied().unwrap_or_default()), "");
    }
    if let Some(mean) = metric_mean(&metrics, "bub_model_call_seconds") {
        row("model call as the gateway saw it (mean)", ms(Duration::from_secs_f64(mean)), "");
    }
    if let Some(mean) = metric_mean(&metrics, "bub_turn_seconds") {
        row("turn inside the gateway (mean)", ms(Duration::from_secs_f64(mean)), "");
    }
    let per_turn = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0 / samples.len().max(1) as f64);
    row("gateway CPU per turn (user + system)", per_turn(cpu_after.0 - cpu_before.0), "");
    row("load generator + fake model CPU per turn", per_turn(cpu_after.1 - cpu_before.1), "");
    row("idle RSS", mb(idle_rss), "");
    row(&format!("RSS after warm-up ({sessions} sessions)"), mb(after_warm_rss), "");
    row("RSS after the measured run", mb(after_load_rss), "");
    row(&format!("RSS after {rss_sessions} sessions"), mb(sessions_rss), "< 50 MB");
    row("peak RSS (VmHWM)", mb(peak_rss), "");
    row("gateway threads at the end", threads, "");
    println!();
    println!(
        "opening sessions: {} turns in {:.2} s ({:.0}/s), {open_failed} failed; {active}",
        opened.len(),
        open_time.as_secs_f64(),
        opened.len() as f64 / open_time.as_secs_f64().max(1e-9)
    );
    println!("fake model requests: {}", model_times.requests.load(Ordering::Relaxed));
    println!("RSS after {rss_sessions} sessions: {}", rss_parts.join(", "));
    for line in
        metric_lines(&metrics, "bub_turn_seconds").into_iter().chain(metric_lines(&metrics, "bub_model_call_seconds"))
    {
        println!("  {line}");
    }
}
