//! Replicas on PostgreSQL against one process on SQLite: real `bub gateway`
//! processes (release build) on loopback, the fake model and load generator
//! of `gateway_load` (`support/load.rs`).
//!
//! ```sh
//! export CARGO_TARGET_DIR=...            # optional
//! cargo bench --bench replicas_load      # builds bub with the bench (release) profile and runs this
//! # knobs (environment): BUB_REPLICAS_PHASES=load,takeover (default both)
//! #   load:     BUB_REPLICAS=1,2,3 (replica counts on PostgreSQL) BUB_LOAD_TURNS=5000 BUB_LOAD_SESSIONS=1000
//! #             BUB_LOAD_CLIENTS=64 BUB_REPLICAS_ROUTE=message|chat (default message: see below)
//! #             BUB_PG_LOG_TURNS=20: after each measured phase, that many turns one at a time with
//! #             `log_statement = all` (route = message: each to a replica that does not hold its chat
//! #             when N > 1), and the statements PostgreSQL ran, counted per turn (0: none)
//! #   takeover: BUB_TAKEOVER_LEASES=10,2 (`[store] lease_seconds`) BUB_TAKEOVER_SAMPLES=3
//! #   all:      BUB_PG_BINDIR (default `pg_config --bindir`), BUB_SQLITE_SYNC (as for gateway_load)
//! ```
//!
//! A throwaway PostgreSQL 15 cluster (`tests/it/support/postgres.rs`, as the
//! `postgres` user when root) runs with `fsync` on, as a production server
//! does, so its commits are as durable as SQLite's default (`FULL`); it is
//! stopped and removed when this process ends.
//!
//! `load`: first one gateway on SQLite, then for each replica count N a
//! fresh database and N gateways on it (`BUB_DATABASE_URL`). Each setup is
//! warmed up with one turn per chat, then `BUB_LOAD_CLIENTS` clients in a
//! closed loop send `BUB_LOAD_TURNS` signed `?mode=sync` turns over
//! `BUB_LOAD_SESSIONS` chats. With `route = message` (the default) message
//! `k` of chat `c` goes to replica `(c + k) mod N`, as a load balancer that
//! knows nothing of chats spreads them: (N−1)/N of the messages reach a
//! replica that does not hold their session, which stores them and answers
//! its caller once the holder (whose sweep runs every 50 ms) has stored the
//! outcome. With `route = chat` every message of a chat reaches the replica
//! holding it (a balancer hashing on the chat). One line per setup: turns/s,
//! client latency p50/p99, and CPU (user + system from `/proc/<pid>/stat`)
//! per turn: the gateways' together, PostgreSQL's (the postmaster, its
//! backends and the backends that exited), and this process's (load
//! generator and fake model), with the ratio of each setup's gateways' CPU to
//! SQLite's.
//!
//! `takeover`: for each lease setting, replica B runs on a fresh database
//! and, per sample, a new replica A: one turn in a fresh chat through A (A
//! now holds the chat's session), then A is killed (SIGKILL) and the chat's
//! next message is sent to B with `?mode=sync`; the time from the kill to
//! B's reply is a takeover. A is killed once it has heartbeated, at a phase
//! of its heartbeat period (a third of `lease_seconds`) that differs from
//! sample to sample; a chat that B's sweep leased before A did is not a
//! takeover, and another chat is tried. B can take the session once A's
//! registration has expired: between 2/3 of `lease_seconds` and
//! `lease_seconds` after the kill, plus B's next sweep and the turn.
//!
//! No figure is asserted. On a two-core machine the replicas, PostgreSQL,
//! the load generator and the fake model all share the CPU.

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
#[allow(dead_code)]
#[path = "../tests/it/support/postgres.rs"]
mod postgres;

use gateway::{GatewayProcess, cpu_time, percentile};
use load::{SECRET, Targets, knob, list_knob, load_client, ms, one_turn, run_phase, start_model, turn_text};
use postgres::PgCluster;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

fn main() {
    // `cargo bench` passes `--bench`; this target has no filters or options.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let phases = std::env::var("BUB_REPLICAS_PHASES").unwrap_or_default();
    let on = |name: &str| phases.trim().is_empty() || phases.split(',').any(|p| p.trim() == name);
    println!("machine: {} cores, load average {}", cores(), load_average());
    let (model_base, _) = start_model().await;
    let mut env: Vec<(String, String)> = vec![
        ("BUB_MODEL".into(), "openai:gpt-bench".into()),
        ("BUB_OPENAI_API_BASE".into(), model_base),
        ("BUB_OPENAI_API_KEY".into(), "fake-key".into()),
        ("BUB_WEBHOOK_SECRET".into(), SECRET.into()),
        ("BUB_LOG".into(), "warn".into()),
    ];
    env.extend(std::env::vars().filter(|(name, _)| name == "BUB_SQLITE_SYNC"));
    let cluster = tokio::task::spawn_blocking(PgCluster::start_durable).await.expect("start PostgreSQL");
    println!("PostgreSQL on port {} (fsync on), postmaster pid {:?}", cluster.port, cluster.pid());
    if on("load") {
        load(&cluster, &env).await;
    }
    if on("takeover") {
        takeover(&cluster, &env).await;
    }
    cluster.stop();
}

/// One setup's figures.
struct Row {
    setup: String,
    turns: usize,
    failed: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    gateways_cpu: Duration,
    postgres_cpu: Duration,
    load_cpu: Duration,
}

impl Row {
    fn per_turn(&self, cpu: Duration) -> f64 {
        cpu.as_secs_f64() * 1000.0 / self.turns.max(1) as f64
    }
}

/// The `load` phase: SQLite, then each replica count on PostgreSQL; one table.
async fn load(cluster: &PgCluster, env: &[(String, String)]) {
    let counts = list_knob("BUB_REPLICAS", &[1, 2, 3]);
    let turns = knob("BUB_LOAD_TURNS", 5_000).max(1);
    let sessions = knob("BUB_LOAD_SESSIONS", 1_000).max(1);
    let clients = knob("BUB_LOAD_CLIENTS", 64).max(1);
    let by_chat = std::env::var("BUB_REPLICAS_ROUTE").is_ok_and(|route| route.trim() == "chat");
    let log_turns = knob("BUB_PG_LOG_TURNS", 20);
    let route = if by_chat { "chat" } else { "message" };
    println!();
    println!("load: {turns} sync turns, {clients} clients, {sessions} chats, route = {route}");
    let mut rows = Vec::new();
    rows.push(measure("SQLite, 1 process", None, 1, env, turns, sessions, clients, by_chat, 0).await);
    for n in counts {
        let url = cluster.database().await;
        let setup = format!("PostgreSQL, {n} replica{}", if n == 1 { "" } else { "s" });
        rows.push(
            measure(&setup, Some((cluster, url.as_str())), n, env, turns, sessions, clients, by_chat, log_turns).await,
        );
    }
    println!();
    println!("load: {turns} sync turns, {clients} clients, {sessions} chats, route = {route}; CPU in ms per turn");
    println!(
        "| {:<24} | {:>7} | {:>9} | {:>9} | {:>13} | {:>14} | {:>10} | {:>13} | {:>9} | {:>6} |",
        "setup",
        "turns/s",
        "p50",
        "p99",
        "gateways CPU",
        "PostgreSQL CPU",
        "total CPU",
        "vs SQLite",
        "load gen",
        "failed"
    );
    let widths = [26, 9, 11, 11, 15, 16, 12, 15, 11, 8];
    println!("|{}|", widths.map(|w| "-".repeat(w)).join("|"));
    let sqlite = rows[0].per_turn(rows[0].gateways_cpu);
    for row in &rows {
        let (gateways, postgres) = (row.per_turn(row.gateways_cpu), row.per_turn(row.postgres_cpu));
        println!(
            "| {:<24} | {:>7.0} | {:>9} | {:>9} | {:>13.3} | {:>14.3} | {:>10.3} | {:>13} | {:>9.3} | {:>6} |",
            row.setup,
            row.per_second,
            ms(row.p50),
            ms(row.p99),
            gateways,
            postgres,
            gateways + postgres,
            format!("{:.2}x / {:.2}x", gateways / sqlite, (gateways + postgres) / sqlite),
            row.per_turn(row.load_cpu),
            row.failed,
        );
    }
    println!("(vs SQLite: the gateways' CPU per turn, then gateways + PostgreSQL, over the SQLite gateway's)");
}

/// Starts `replicas` gateways (on SQLite when `postgres` is `None`), warms
/// them up, measures the closed loop, stops them.
#[allow(clippy::too_many_arguments)]
async fn measure(
    setup: &str,
    postgres: Option<(&PgCluster, &str)>,
    replicas: usize,
    env: &[(String, String)],
    turns: usize,
    sessions: usize,
    clients: usize,
    by_chat: bool,
    log_turns: usize,
) -> Row {
    let mut env = env.to_vec();
    if let Some((_, url)) = postgres {
        env.push(("BUB_DATABASE_URL".into(), url.to_string()));
    }
    let homes: Vec<tempfile::TempDir> = (0..replicas).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let mut gateways = Vec::new();
    for home in &homes {
        gateways.push(GatewayProcess::start(home.path(), &env, &[]).await);
    }
    let targets = Targets { addrs: gateways.iter().map(|g| g.addr).collect(), by_chat };
    let pids: Vec<String> = gateways.iter().map(|g| g.pid().to_string()).collect();
    let postmaster = postgres.and_then(|(cluster, _)| cluster.pid());
    let (warm, warm_time, warm_failed) =
        run_phase(&targets, 0, sessions, sessions, clients.min(sessions), "warm").await;
    println!(
        "{setup}: warm-up {} turns in {:.1} s, {warm_failed} failed; load average {}",
        warm.len(),
        warm_time.as_secs_f64(),
        load_average()
    );

    let gateways_cpu = || pids.iter().map(|pid| cpu_time(pid)).sum::<Duration>();
    let postgres_cpu = || postmaster.map(cluster_cpu).unwrap_or_default();
    let total = |parts: &BTreeMap<String, Duration>| parts.values().sum::<Duration>();
    let before = (gateways_cpu(), postgres_cpu(), cpu_time("self"));
    let (samples, elapsed, failed) = run_phase(&targets, sessions, turns, sessions, clients, "load").await;
    let after = (gateways_cpu(), postgres_cpu(), cpu_time("self"));
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    let row = Row {
        setup: setup.to_string(),
        turns: samples.len(),
        failed,
        per_second: samples.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        gateways_cpu: after.0.saturating_sub(before.0),
        postgres_cpu: total(&after.1).saturating_sub(total(&before.1)),
        load_cpu: after.2.saturating_sub(before.2),
    };
    println!(
        "{setup}: {} turns in {:.1} s ({:.0}/s), p50 {} p99 {}, {failed} failed; load average {}",
        row.turns,
        elapsed.as_secs_f64(),
        row.per_second,
        ms(row.p50),
        ms(row.p99),
        load_average()
    );
    if postgres.is_some() {
        let by_kind: Vec<String> = after
            .1
            .iter()
            .map(|(kind, cpu)| (kind, cpu.saturating_sub(before.1.get(kind).copied().unwrap_or_default())))
            .filter(|(_, cpu)| !cpu.is_zero())
            .map(|(kind, cpu)| format!("{kind} {:.3}", row.per_turn(cpu)))
            .collect();
        println!("  PostgreSQL CPU ms per turn by process: {}", by_kind.join(", "));
    }
    if let Some((cluster, _)) = postgres
        && log_turns > 0
    {
        statements_per_turn(cluster, &targets, sessions, log_turns).await;
    }
    for gateway in gateways {
        let stderr = gateway.stderr();
        if !gateway.stop().await {
            eprintln!("{setup}: a gateway did not stop cleanly; its stderr:\n{stderr}");
        }
    }
    row
}

/// CPU time of a PostgreSQL cluster by process kind: its live children's
/// (backends, the WAL writer, the checkpointer...) and the postmaster's own,
/// with that of the children it reaped (autovacuum workers come and go).
fn cluster_cpu(postmaster: u32) -> BTreeMap<String, Duration> {
    let stat = |pid: &str| -> Vec<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').map(str::to_string).collect()).unwrap_or_default()
    };
    // After the command name: ppid is the 2nd field, utime/stime the 12th and 13th, cutime/cstime the 14th and 15th.
    let ticks = |fields: &[String], which: &[usize]| -> Duration {
        Duration::from_millis(which.iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum::<u64>() * 10)
    };
    let mut parts = BTreeMap::new();
    parts
        .insert("postmaster and exited children".to_string(), ticks(&stat(&postmaster.to_string()), &[11, 12, 13, 14]));
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let fields = stat(pid);
        if fields.get(1).and_then(|ppid| ppid.parse::<u32>().ok()) != Some(postmaster) {
            continue;
        }
        // The process title: `postgres: bub test_1 127.0.0.1(40000) idle` for a backend.
        let title = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let title = title.trim_end_matches('\0').trim_start_matches("postgres: ").trim();
        let kind = if title.contains('(') {
            "backends".to_string()
        } else if title.starts_with("autovacuum worker") {
            "autovacuum workers".to_string()
        } else {
            title.to_string()
        };
        *parts.entry(kind).or_default() += ticks(&fields, &[11, 12]);
    }
    parts
}

/// Runs `turns` turns one at a time with `log_statement = all` and prints
/// the statements PostgreSQL executed meanwhile, counted per turn (the
/// replicas' sweeps included: they run whether turns come or not).
async fn statements_per_turn(cluster: &PgCluster, targets: &Targets, sessions: usize, turns: usize) {
    let log = cluster.dir.join("server.log");
    let set = |value: &'static str| async move {
        let admin = format!("{}/postgres", cluster.base_url);
        let mut conn = <sqlx_postgres::PgConnection as sqlx_core::connection::Connection>::connect(&admin)
            .await
            .expect("connect to the cluster");
        for sql in [format!("ALTER SYSTEM SET log_statement = '{value}'"), "SELECT pg_reload_conf()".to_string()] {
            sqlx_core::query::query::<sqlx_postgres::Postgres>(&sql)
                .execute(&mut conn)
                .await
                .expect("set log_statement");
        }
        // The reload reaches the backends at their next statement.
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    set("all").await;
    let from = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) as usize;
    let started = Instant::now();
    let (samples, _, _) = run_phase(targets, 1_001 * sessions, turns, sessions, 1, "logged").await;
    let elapsed = started.elapsed();
    set("none").await;
    let text = std::fs::read(&log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text[from.min(text.len())..]);
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for line in text.lines() {
        let Some((_, statement)) = line.split_once("LOG:  statement: ").or_else(|| line.split_once("LOG:  execute "))
        else {
            continue;
        };
        // `execute <name>: <sql>`: the prepared statement's name is not the statement.
        let statement = match statement.split_once(": ") {
            Some((name, sql)) if !name.contains(' ') => sql,
            _ => statement,
        };
        if statement.contains("log_statement") || statement.contains("pg_reload_conf") {
            continue;
        }
        let words: Vec<&str> = statement.split_whitespace().collect();
        let mut key = words.join(" ");
        if key.len() > 110 {
            let mut end = 110;
            while !key.is_char_boundary(end) {
                end -= 1;
            }
            key.truncate(end);
        }
        *counts.entry(key).or_default() += 1;
    }
    let total: usize = counts.values().sum();
    let n = samples.len().max(1) as f64;
    println!(
        "  statements PostgreSQL ran over {} turns sent one at a time ({:.2} s, sweeps included): {:.1} per turn",
        samples.len(),
        elapsed.as_secs_f64(),
        total as f64 / n
    );
    let mut sorted: Vec<(String, usize)> = counts.into_iter().collect();
    sorted.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
    for (statement, count) in sorted {
        println!("  {:>6.2}  {statement}", count as f64 / n);
    }
}

/// The `takeover` phase: the time from a holder's SIGKILL to the reply of
/// the next message of its chat through another replica.
async fn takeover(cluster: &PgCluster, env: &[(String, String)]) {
    let leases = list_knob("BUB_TAKEOVER_LEASES", &[10, 2]);
    let samples = knob("BUB_TAKEOVER_SAMPLES", 3).max(1);
    let client = load_client(2);
    let failures = AtomicUsize::new(0);
    let mut lines = Vec::new();
    for lease in leases {
        let url = cluster.database().await;
        let mut env = env.to_vec();
        env.push(("BUB_DATABASE_URL".into(), url.clone()));
        let config = format!(
            "[store]\nlease_seconds = {lease}\n\n[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n"
        );
        let home_b = tempfile::tempdir().expect("tempdir");
        let b = GatewayProcess::start_with_config(home_b.path(), &env, &config).await;
        let mut times = Vec::new();
        let mut sample = 0;
        let mut tries = 0;
        while sample < samples && tries < 3 * samples {
            tries += 1;
            let home_a = tempfile::tempdir().expect("tempdir");
            let mut a = GatewayProcess::start_with_config(home_a.path(), &env, &config).await;
            let registered = Instant::now();
            let chat = format!("takeover-{lease}-{tries}");
            let first = format!("{chat}-1");
            if !one_turn(&client, a.addr, &first, &chat, turn_text(&first, 0), &failures).await {
                eprintln!("takeover: the first turn through A failed; stderr:\n{}", a.stderr());
                continue;
            }
            // B's sweep may lease a fresh chat before A does (A then answers from B's outcome): not a takeover.
            let a_id = std::fs::read_to_string(home_a.path().join("replica")).unwrap_or_default();
            if leases_of(&url, a_id.trim()).await == 0 {
                println!("lease_seconds = {lease}: B leased the chat before A did; another chat");
                continue;
            }
            // A heartbeats every third of the lease from its start: kill it once it has, at a phase of the
            // next third that differs from sample to sample (its registration expires a lease after its last beat).
            let third = Duration::from_secs(lease as u64) / 3;
            let phase = (sample as f64 + 0.5) / samples as f64;
            tokio::time::sleep_until((registered + third + third.mul_f64(phase)).into()).await;
            a.kill_hard();
            let killed = Instant::now();
            let next = format!("{chat}-2");
            let answered = one_turn(&client, b.addr, &next, &chat, turn_text(&next, 0), &failures).await;
            let took = killed.elapsed();
            println!(
                "lease_seconds = {lease}: killed {:.2} of a heartbeat period after A's first beat; takeover {} ({})",
                phase,
                ms(took),
                if answered { "replied" } else { "FAILED" }
            );
            if answered {
                times.push(took);
            }
            sample += 1;
        }
        b.stop().await;
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len().max(1) as u32;
        lines.push(format!(
            "| {lease:>13} | {:>7} | {:>10} | {:>10} | {:>10} |",
            times.len(),
            ms(times.first().copied().unwrap_or_default()),
            ms(mean),
            ms(times.last().copied().unwrap_or_default())
        ));
    }
    println!();
    println!("takeover: SIGKILL of the replica holding a chat, to the reply of its next message through another");
    println!("| lease_seconds | samples | {:>10} | {:>10} | {:>10} |", "min", "mean", "max");
    println!("|---------------|---------|------------|------------|------------|");
    for line in lines {
        println!("{line}");
    }
}

/// How many leases replica `id` holds in the database at `url`.
async fn leases_of(url: &str, id: &str) -> i64 {
    let mut conn = <sqlx_postgres::PgConnection as sqlx_core::connection::Connection>::connect(url)
        .await
        .expect("connect to the database");
    sqlx_core::query_scalar::query_scalar::<sqlx_postgres::Postgres, i64>(
        "SELECT count(*) FROM gateway_leases WHERE holder = $1",
    )
    .bind(id)
    .fetch_one(&mut conn)
    .await
    .expect("count the leases")
}

fn cores() -> usize {
    std::thread::available_parallelism().map(usize::from).unwrap_or(0)
}

/// `/proc/loadavg`'s first three fields.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
