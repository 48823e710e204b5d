//! Load on the real `bub gateway` (release build) through the webhook channel,
//! with a model that answers at once.
//!
//! ```sh
//! export CARGO_TARGET_DIR=...            # optional
//! cargo bench --bench gateway_load       # builds bub with the bench (release) profile and runs this
//! # knobs (environment): BUB_LOAD_PHASES=throughput,concurrency,long,chat (default all; any subset)
//! #   throughput:  BUB_LOAD_TURNS=20000 BUB_LOAD_SESSIONS=1000 BUB_LOAD_CLIENTS=64
//! #                BUB_LOAD_RATE=1000 BUB_LOAD_RATE_TURNS=10000 (0: no open-loop phase)
//! #                BUB_LOAD_RSS_SESSIONS=10000
//! #                BUB_LOAD_PERF=1: `perf record -g` on the gateway during the measured phase, a short
//! #                self-time report printed, the data kept in $TMPDIR/bub-gateway-load.perf.data
//! #   concurrency: BUB_LOAD_CONCURRENCY=1,16,64 (client counts) BUB_LOAD_LEVEL_TURNS=3000 (turns per
//! #                level, at least 100 per client), over BUB_LOAD_SESSIONS chats
//! #   long:        BUB_LOAD_LONG_ENTRIES=100,1000,10000,100000 (0 or empty: none) BUB_LOAD_LONG_TURNS=50
//! #   chat:        BUB_LOAD_CHAT_TURNS=3000 BUB_LOAD_CHAT_CHARS=200
//! #   all:         BUB_SQLITE_SYNC=normal: the gateway's database without a sync per commit;
//! #                OTEL_*: passed to the gateway (OTEL_EXPORTER_OTLP_ENDPOINT=...: traces exported)
//! ```
//!
//! What it does, in one process on loopback:
//! 1. starts a fake OpenAI-compatible model (in this process) that answers
//!    every request at once with a two-token SSE stream (and, when the request
//!    asks for it with `stream_options.include_usage`, a last chunk with
//!    `usage`: `prompt_tokens` = request bytes / 4, `completion_tokens` 2),
//!    timing each request it handles (from the handler's start to the last byte
//!    of the body handed to the server) and recording its body's length. A
//!    request whose first message starts with "You are compacting" is the
//!    gateway's compaction summary call: it gets the same answer and is counted
//!    apart. The model is `openai:gpt-bench`, a name no window rule knows, so
//!    the gateway's context window is 32,768 tokens and it compacts at 0.75;
//! 2. starts `bub gateway` (`BUB_LOG=warn`) on a fresh `BUB_HOME` and reads its
//!    idle RSS (`VmRSS` in `/proc/<pid>/status`) a second after it listens;
//! 3. warms up with one turn in each of the `BUB_LOAD_SESSIONS` sessions (when
//!    `throughput` or `concurrency` runs).
//!
//! `throughput` (one table):
//! 1. the measured phase: `BUB_LOAD_CLIENTS` concurrent clients send
//!    `BUB_LOAD_TURNS` signed `?mode=sync` requests round-robin over
//!    `BUB_LOAD_SESSIONS` chat ids;
//! 2. open loop: sends `BUB_LOAD_RATE_TURNS` more turns at a steady
//!    `BUB_LOAD_RATE` per second whatever the answers, each timed from when it
//!    was due — the latency at the target rate (the closed-loop phase keeps 64
//!    requests in flight, so its latency is mostly queueing: 64 ÷ turns/s);
//! 3. opens more sessions until `BUB_LOAD_RSS_SESSIONS` distinct ones have had
//!    a turn, and reads RSS again.
//!
//! It prints turns/s and client latency p50/p99; "gateway time" is each
//! request's client latency minus the time the fake model spent on it, so it
//! includes the loopback HTTP hops (client→gateway and gateway→model) and the
//! gateway's own work (signature, inbox insert, session worker, turn, tape
//! fork and merge, outcome transaction). The gateway's own view of the model
//! call (`bub_model_call_seconds`) and turn time (`bub_turn_seconds`) are read
//! from `/metrics`. Targets on a 2-core machine: ≥ 1,000 turns/s, p99 gateway
//! time < 10 ms (at 1,000 turns/s offered), < 50 MB RSS after 10,000 sessions.
//!
//! `concurrency`: for each client count of `BUB_LOAD_CONCURRENCY`, a closed
//! loop of `max(BUB_LOAD_LEVEL_TURNS, 100 × clients)` turns round-robin over
//! the warm sessions; one line per level: clients, turns/s, client latency
//! p50/p99, the gateway's CPU (user + system, `/proc/<pid>/stat`) per turn and
//! this process's (load generator + fake model) CPU per turn.
//!
//! `long`: the cost of a turn on a chat whose tape already holds many entries.
//! A probe chat measures the entries one turn writes (`bub tape list --json`
//! beside the running gateway); then one chat per `BUB_LOAD_LONG_ENTRIES` size
//! is filled, all at once (each chat's turns in sequence), until its tape has
//! about that many entries (compaction anchors and summaries included). Then,
//! one chat at a time, `BUB_LOAD_LONG_TURNS` sequential turns are measured on
//! a fresh chat and on each filled one: client latency mean/p50/p99 and the
//! gateway's CPU per turn (the sum of its threads' `/proc/<pid>/task/*/schedstat`
//! run time, in nanoseconds: a few turns are too short for the 10 ms ticks of
//! `/proc/<pid>/stat`), and their ratios to the fresh chat; with each chat's
//! entries and the entries its context is built from (from the last anchor
//! on, plus those a compaction anchor kept) before the measured turns, and
//! the mean bytes of the measured turns' model requests. The summary calls
//! the fake model saw during the fill and the measurement are printed.
//!
//! `chat`: one chat driven for `BUB_LOAD_CHAT_TURNS` sequential turns with
//! user messages of `BUB_LOAD_CHAT_CHARS` characters; prints the mean bytes of
//! the requests the model got over the first 100 and the last 100 turns, the
//! maximum, the mean per tenth of the chat, and the summary calls (with
//! compaction the size stays within the window instead of growing with the
//! chat).
//!
//! No figure is asserted. The load generator and the fake model share the
//! machine with the gateway, so these figures are a lower bound on what the
//! gateway alone would do.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

#[allow(dead_code)]
#[path = "../tests/it/support/gateway.rs"]
mod gateway;
#[allow(dead_code)]
#[path = "support/load.rs"]
mod load;

use gateway::{GatewayProcess, bub_cli, cpu_time, percentile};
use load::{
    ModelTimes, SECRET, Sample, Targets, knob, list_knob, load_client, ms, numbered_turn, run_phase, run_sequential,
    start_model, turn_text,
};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

/// Which phases run (`BUB_LOAD_PHASES`, comma-separated; default all).
struct Phases {
    throughput: bool,
    concurrency: bool,
    long: bool,
    chat: bool,
}

fn phases() -> Phases {
    let value = std::env::var("BUB_LOAD_PHASES").unwrap_or_default();
    let names: Vec<&str> = value.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    let on = |name: &str| names.is_empty() || names.contains(&name);
    for name in &names {
        if !["throughput", "concurrency", "long", "chat"].contains(name) {
            eprintln!("BUB_LOAD_PHASES: unknown phase {name:?} (throughput, concurrency, long, chat)");
        }
    }
    Phases { throughput: on("throughput"), concurrency: on("concurrency"), long: on("long"), chat: on("chat") }
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

/// The run time of `pid`'s live threads, in nanoseconds (the first field of
/// each `/proc/<pid>/task/<tid>/schedstat`): finer than `/proc/<pid>/stat`'s
/// 10 ms ticks, but a thread that exits takes its time with it.
fn threads_cpu(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Duration::ZERO };
    let ns: u64 = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Entries per tape, from `bub tape list --json` on `home` (beside the running gateway).
async fn tape_entries(home: &Path) -> HashMap<String, u64> {
    let home = home.to_path_buf();
    let (ok, stdout, stderr) =
        tokio::task::spawn_blocking(move || bub_cli(&home, &["tape", "list", "--json"])).await.expect("bub tape list");
    if !ok {
        eprintln!("bub tape list failed: {stderr}");
    }
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|line| Some((line["name"].as_str()?.to_string(), line["entries"].as_u64()?)))
        .collect()
}

/// The name and entries of the tape of webhook chat `chat` (the tape whose
/// name is the chat id or ends in `:<chat>`).
fn chat_tape(tapes: &HashMap<String, u64>, chat: &str) -> Option<(String, u64)> {
    tapes
        .iter()
        .find(|(name, _)| name.as_str() == chat || name.ends_with(&format!(":{chat}")))
        .map(|(name, entries)| (name.clone(), *entries))
}

fn chat_entries(tapes: &HashMap<String, u64>, chat: &str) -> Option<u64> {
    chat_tape(tapes, chat).map(|(_, entries)| entries)
}

/// How many entries the next context of `tape` is built from (all kinds):
/// from its last anchor on (`bub tape show --since-anchor --json`), plus,
/// after a compaction anchor, the entries it kept from before it (its state's
/// `keep_from`), which `--since-anchor` does not show.
async fn context_entries(home: &Path, tape: &str) -> Option<u64> {
    let (home, tape) = (home.to_path_buf(), tape.to_string());
    let (ok, stdout, _) = tokio::task::spawn_blocking(move || {
        bub_cli(&home, &["tape", "show", &tape, "--exact", "--since-anchor", "--json"])
    })
    .await
    .ok()?;
    let entries: Vec<Value> = stdout.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let first = entries.first()?;
    let last_id = entries.last()?["id"].as_u64()?;
    match first.pointer("/payload/state/keep_from").and_then(Value::as_u64) {
        Some(keep_from) if keep_from > 0 && keep_from <= last_id => Some(last_id - keep_from + 1),
        _ => ok.then_some(entries.len() as u64),
    }
}

fn mb(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 / 1024.0)
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
            let ok = numbered_turn(&client, addr, &id, i % sessions.max(1), &failures).await;
            ok.then(|| Sample { id, latency: due.elapsed() })
        });
    }
    let mut samples = Vec::with_capacity(count);
    while let Some(done) = tasks.join_next().await {
        samples.extend(done.expect("a request task panicked"));
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
    let phases = phases();
    let sessions = knob("BUB_LOAD_SESSIONS", 1_000).max(1);
    let clients = knob("BUB_LOAD_CLIENTS", 64).max(1);

    let (model_base, model_times) = start_model().await;
    let home = tempfile::tempdir().expect("tempdir");
    let mut env: Vec<(String, String)> = vec![
        ("BUB_MODEL".into(), "openai:gpt-bench".into()),
        ("BUB_OPENAI_API_BASE".into(), model_base),
        ("BUB_OPENAI_API_KEY".into(), "fake-key".into()),
        ("BUB_WEBHOOK_SECRET".into(), SECRET.into()),
        ("BUB_LOG".into(), "warn".into()),
    ];
    // Passed through so durability, allocator and trace export settings can be compared.
    for (name, value) in std::env::vars() {
        if name == "BUB_SQLITE_SYNC"
            || name.starts_with("OTEL_")
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

    if phases.throughput || phases.concurrency {
        let warm_clients = clients.min(sessions).max(1);
        let (warm, warm_time, warm_failed) =
            run_phase(&Targets::one(gateway.addr), 0, sessions, sessions, warm_clients, "warm").await;
        println!(
            "warm-up: {} turns (one per session) in {:.2} s, {warm_failed} failed",
            warm.len(),
            warm_time.as_secs_f64()
        );
    }
    let (after_warm_rss, _) = rss_kib(pid);
    if phases.throughput {
        throughput(&gateway, &model_times, sessions, clients, idle_rss, after_warm_rss).await;
    }
    if phases.concurrency {
        concurrency(&gateway, sessions).await;
    }
    if phases.long {
        long_chats(&gateway, home.path(), &model_times).await;
    }
    if phases.chat {
        long_talk(&gateway, &model_times).await;
    }
    gateway.stop().await;
    println!(
        "fake model requests: {} (summary calls: {})",
        model_times.requests.load(Ordering::Relaxed),
        model_times.summaries.load(Ordering::Relaxed)
    );
}

/// The `throughput` phase: the measured closed loop, the open loop, more sessions; one table.
async fn throughput(
    gateway: &GatewayProcess,
    model_times: &ModelTimes,
    sessions: usize,
    clients: usize,
    idle_rss: u64,
    after_warm_rss: u64,
) {
    let pid = gateway.pid();
    let turns = knob("BUB_LOAD_TURNS", 20_000);
    let rss_sessions = knob("BUB_LOAD_RSS_SESSIONS", 10_000);
    let perf = std::env::var("BUB_LOAD_PERF").is_ok_and(|v| v == "1");
    let rate = knob("BUB_LOAD_RATE", 1_000).max(1) as f64;
    let rate_turns = knob("BUB_LOAD_RATE_TURNS", 10_000);
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
    let (samples, elapsed, failed) = run_phase(&Targets::one(gateway.addr), 0, turns, sessions, clients, "load").await;
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
    let metrics = fetch_metrics(gateway).await;

    let model_time: HashMap<String, Duration> = std::mem::take(&mut *model_times.by_message.lock());
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
    let rate_model: HashMap<String, Duration> = std::mem::take(&mut *model_times.by_message.lock());
    let mut rate_gateway: Vec<Duration> = rate_samples
        .iter()
        .map(|s| s.latency.saturating_sub(rate_model.get(&s.id).copied().unwrap_or_default()))
        .collect();
    rate_gateway.sort();

    // More sessions, one turn each, until `rss_sessions` distinct ones exist.
    let extra = rss_sessions.saturating_sub(sessions);
    let (opened, open_time, open_failed) =
        run_phase(&Targets::one(gateway.addr), sessions, extra, 0, clients, "open").await;
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
    let active = metric_lines(&fetch_metrics(gateway).await, "bub_sessions_active").join(" ");

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
    println!("RSS after {rss_sessions} sessions: {}", rss_parts.join(", "));
    for line in
        metric_lines(&metrics, "bub_turn_seconds").into_iter().chain(metric_lines(&metrics, "bub_model_call_seconds"))
    {
        println!("  {line}");
    }
}

fn sorted_latencies(samples: &[Sample]) -> Vec<Duration> {
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    latencies
}

fn mean(durations: &[Duration]) -> Duration {
    durations.iter().sum::<Duration>() / durations.len().max(1) as u32
}

/// `numerator / denominator` as `N.NNx` (`-` when the denominator is zero).
fn ratio(numerator: f64, denominator: f64) -> String {
    if denominator > 0.0 { format!("{:.2}x", numerator / denominator) } else { "-".into() }
}

/// The `concurrency` phase: one closed loop per client count, one line each.
async fn concurrency(gateway: &GatewayProcess, sessions: usize) {
    let levels = list_knob("BUB_LOAD_CONCURRENCY", &[1, 16, 64]);
    let base = knob("BUB_LOAD_LEVEL_TURNS", 3_000).max(1);
    let pid = gateway.pid().to_string();
    println!();
    println!("concurrency: closed loop round-robin over {sessions} warm sessions; CPU is user + system time");
    println!(
        "| {:>7} | {:>6} | {:>7} | {:>9} | {:>9} | {:>20} | {:>20} | {:>6} |",
        "clients", "turns", "turns/s", "p50", "p99", "gateway CPU ms/turn", "load gen CPU ms/turn", "failed"
    );
    println!(
        "|{}|{}|{}|{}|{}|{}|{}|{}|",
        "-".repeat(9),
        "-".repeat(8),
        "-".repeat(9),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(22),
        "-".repeat(22),
        "-".repeat(8)
    );
    let mut first = 0;
    for clients in levels {
        let count = base.max(100 * clients);
        let before = (cpu_time(&pid), cpu_time("self"));
        let (samples, elapsed, failed) =
            run_phase(&Targets::one(gateway.addr), first, count, sessions, clients, &format!("c{clients}")).await;
        let after = (cpu_time(&pid), cpu_time("self"));
        first += count;
        let latencies = sorted_latencies(&samples);
        let per_turn = |d: Duration| format!("{:.3}", d.as_secs_f64() * 1000.0 / samples.len().max(1) as f64);
        println!(
            "| {clients:>7} | {:>6} | {:>7.0} | {:>9} | {:>9} | {:>20} | {:>20} | {failed:>6} |",
            samples.len(),
            samples.len() as f64 / elapsed.as_secs_f64().max(1e-9),
            ms(percentile(&latencies, 50.0)),
            ms(percentile(&latencies, 99.0)),
            per_turn(after.0 - before.0),
            per_turn(after.1 - before.1),
        );
    }
}

/// The `long` phase: a turn on chats whose tapes hold many entries, against a fresh chat.
async fn long_chats(gateway: &GatewayProcess, home: &Path, model: &ModelTimes) {
    let sizes = list_knob("BUB_LOAD_LONG_ENTRIES", &[100, 1_000, 10_000, 100_000]);
    if sizes.is_empty() {
        return;
    }
    let measured = knob("BUB_LOAD_LONG_TURNS", 50).max(1);
    let (addr, pid) = (gateway.addr, gateway.pid());
    println!();

    // How many entries one turn writes.
    let (probe, _, _) = run_sequential(addr, "long-probe", "long-probe", 0, 20, 0).await;
    let tapes = tape_entries(home).await;
    let Some(probe_entries) = chat_entries(&tapes, "long-probe").filter(|n| *n > 0) else {
        let names: Vec<&String> = tapes.keys().take(5).collect();
        panic!("long chats: no tape found for chat long-probe (some tapes: {names:?}): the phase cannot measure");
    };
    let per_turn = probe_entries as f64 / probe.len().max(1) as f64;
    println!("long chats: one turn writes {per_turn:.2} entries ({probe_entries} after {} turns)", probe.len());

    // Fill every chat at once (each chat's turns in sequence), topping up until each is near its size.
    let summaries_before = model.summaries.load(Ordering::Relaxed);
    let fill_started = Instant::now();
    let mut sent = vec![0usize; sizes.len()];
    let mut fill_failed = 0;
    for round in 0..4 {
        let tapes = if round == 0 { HashMap::new() } else { tape_entries(home).await };
        let mut tasks = tokio::task::JoinSet::new();
        for (k, &size) in sizes.iter().enumerate() {
            let chat = format!("long-{size}");
            let missing = size as f64 - chat_entries(&tapes, &chat).unwrap_or(0) as f64;
            if missing < per_turn || missing < size as f64 * 0.02 {
                continue;
            }
            let count = (missing / per_turn).ceil() as usize;
            let first = sent[k];
            sent[k] += count;
            tasks.spawn(async move { run_sequential(addr, &chat, &chat, first, count, 0).await });
        }
        if tasks.is_empty() {
            break;
        }
        while let Some(done) = tasks.join_next().await {
            fill_failed += done.expect("a fill task panicked").2;
        }
    }
    let fill_time = fill_started.elapsed();
    let fill_summaries = model.summaries.load(Ordering::Relaxed) - summaries_before;
    // Let background compactions finish before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tapes = tape_entries(home).await;
    println!(
        "long chats: filled in {:.1} s ({} turns, {fill_failed} failed), {fill_summaries} summary calls",
        fill_time.as_secs_f64(),
        sent.iter().sum::<usize>()
    );

    // Measure, one chat at a time: the fresh chat first.
    struct Row {
        chat: String,
        entries: u64,
        context: u64,
        request_bytes: f64,
        latencies: Vec<Duration>,
        cpu: Duration,
        summaries: usize,
        failed: usize,
    }
    let mut rows = Vec::new();
    let (stat_before, threads_before) = (cpu_time(&pid.to_string()), threads_cpu(pid));
    for chat in std::iter::once("long-fresh".to_string()).chain(sizes.iter().map(|size| format!("long-{size}"))) {
        let (entries, context) = match chat_tape(&tapes, &chat) {
            Some((tape, entries)) => (entries, context_entries(home, &tape).await.unwrap_or(0)),
            None => (0, 0),
        };
        let summaries = model.summaries.load(Ordering::Relaxed);
        let cpu = threads_cpu(pid);
        let prefix = format!("{chat}-m");
        let (samples, _, failed) = run_sequential(addr, &chat, &prefix, 0, measured, 0).await;
        let request_bytes = {
            let by_message = model.bytes_by_message.lock();
            let seen: Vec<usize> = samples.iter().filter_map(|s| by_message.get(&s.id).copied()).collect();
            seen.iter().sum::<usize>() as f64 / seen.len().max(1) as f64
        };
        let cpu = threads_cpu(pid).saturating_sub(cpu);
        let summaries = model.summaries.load(Ordering::Relaxed) - summaries;
        rows.push(Row {
            chat,
            entries,
            context,
            request_bytes,
            latencies: sorted_latencies(&samples),
            cpu,
            summaries,
            failed,
        });
    }
    let (stat_cpu, threads_cpu_all) =
        (cpu_time(&pid.to_string()) - stat_before, threads_cpu(pid).saturating_sub(threads_before));

    println!("long chats: {measured} sequential turns per chat, one chat at a time; ratios against the fresh chat");
    println!(
        "| {:<12} | {:>9} | {:>9} | {:>10} | {:>9} | {:>9} | {:>9} | {:>13} | {:>10} | {:>10} | {:>9} | {:>9} | {:>6} |",
        "chat",
        "entries",
        "context",
        "request KB",
        "mean",
        "p50",
        "p99",
        "CPU ms/turn",
        "mean ratio",
        "p50 ratio",
        "CPU ratio",
        "summaries",
        "failed"
    );
    println!(
        "|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|",
        "-".repeat(14),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(12),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(15),
        "-".repeat(12),
        "-".repeat(12),
        "-".repeat(11),
        "-".repeat(11),
        "-".repeat(8)
    );
    let cpu_per_turn = |row: &Row| row.cpu.as_secs_f64() * 1000.0 / row.latencies.len().max(1) as f64;
    let fresh = (mean(&rows[0].latencies), percentile(&rows[0].latencies, 50.0), cpu_per_turn(&rows[0]));
    for row in &rows {
        let (m, p50) = (mean(&row.latencies), percentile(&row.latencies, 50.0));
        println!(
            "| {:<12} | {:>9} | {:>9} | {:>10.1} | {:>9} | {:>9} | {:>9} | {:>13.3} | {:>10} | {:>10} | {:>9} | {:>9} | {:>6} |",
            row.chat,
            row.entries,
            row.context,
            row.request_bytes / 1000.0,
            ms(m),
            ms(p50),
            ms(percentile(&row.latencies, 99.0)),
            cpu_per_turn(row),
            ratio(m.as_secs_f64(), fresh.0.as_secs_f64()),
            ratio(p50.as_secs_f64(), fresh.1.as_secs_f64()),
            ratio(cpu_per_turn(row), fresh.2),
            row.summaries,
            row.failed,
        );
    }
    println!(
        "long chats: gateway CPU over all measured turns: {:.0} ms by thread run time (schedstat), {:.0} ms by /proc/<pid>/stat",
        threads_cpu_all.as_secs_f64() * 1000.0,
        stat_cpu.as_secs_f64() * 1000.0
    );
}

/// The `chat` phase: one chat for many turns; the bytes the model is sent per turn.
async fn long_talk(gateway: &GatewayProcess, model: &ModelTimes) {
    let turns = knob("BUB_LOAD_CHAT_TURNS", 3_000).max(1);
    let chars = knob("BUB_LOAD_CHAT_CHARS", 200);
    let pid = gateway.pid().to_string();
    println!();
    let summaries = model.summaries.load(Ordering::Relaxed);
    let cpu = cpu_time(&pid);
    let (samples, elapsed, failed) = run_sequential(gateway.addr, "talk", "talk", 0, turns, chars).await;
    let cpu = cpu_time(&pid) - cpu;
    let summaries = model.summaries.load(Ordering::Relaxed) - summaries;
    let bytes: Vec<Option<usize>> = {
        let by_message = model.bytes_by_message.lock();
        (0..turns).map(|i| by_message.get(&format!("talk-{i}")).copied()).collect()
    };
    let mean_bytes = |range: std::ops::Range<usize>| {
        let seen: Vec<usize> = bytes[range].iter().flatten().copied().collect();
        seen.iter().sum::<usize>() as f64 / seen.len().max(1) as f64
    };
    let window = 100.min(turns);
    let (max_at, max) =
        bytes.iter().enumerate().filter_map(|(i, b)| Some((i, (*b)?))).max_by_key(|(_, b)| *b).unwrap_or((0, 0));
    println!(
        "chat: {turns} sequential turns in one chat, user messages of {} characters, in {:.1} s ({failed} failed, {summaries} summary calls)",
        turn_text("talk-0", chars).chars().count(),
        elapsed.as_secs_f64()
    );
    println!(
        "chat: request bytes per turn: mean over the first {window} turns {:.0}, over the last {window} turns {:.0}, max {max} (turn {max_at}); {} turns' requests seen",
        mean_bytes(0..window),
        mean_bytes(turns - window..turns),
        bytes.iter().flatten().count()
    );
    let tenths: Vec<String> = (0..10)
        .map(|k| (k * turns / 10, (k + 1) * turns / 10))
        .filter(|(from, to)| from < to)
        .map(|(from, to)| format!("{:.0}", mean_bytes(from..to)))
        .collect();
    println!("chat: mean request bytes per tenth of the chat: {}", tenths.join(" "));
    let latencies = |range: std::ops::Range<usize>| {
        sorted_latencies(&samples[range.start.min(samples.len())..range.end.min(samples.len())])
    };
    let (early, late) = (latencies(0..window), latencies(samples.len().saturating_sub(window)..samples.len()));
    println!(
        "chat: latency p50/p99 over the first {window} turns {} / {}, over the last {window} {} / {}; gateway CPU {:.3} ms/turn",
        ms(percentile(&early, 50.0)),
        ms(percentile(&early, 99.0)),
        ms(percentile(&late, 50.0)),
        ms(percentile(&late, 99.0)),
        cpu.as_secs_f64() * 1000.0 / samples.len().max(1) as f64
    );
}
