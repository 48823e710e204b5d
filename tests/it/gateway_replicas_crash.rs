//! Replicas and failures, on the real binary: three `bub gateway` processes
//! on one PostgreSQL database take 500 webhook messages over 50 chats, each
//! request sent to a random live replica (as a load balancer would), while a
//! seeded schedule SIGKILLs replicas at random moments (each restarted on its
//! home after a short pause) and stops the database cluster once for a
//! moment shorter than the lease. Every message is answered exactly once on
//! the callback URL, each chat's prompts are on its tape once and in the
//! order they were sent, and the inbox and outbox end done and delivered.
//!
//! Two smaller tests pin what a caller sees of a replica's death: a
//! `?mode=sync` caller waiting on one replica for a turn another replica
//! runs still gets its answer when that one is killed mid-turn (from the
//! replica that takes the chat over, within the lease and a few seconds),
//! and the next message of a chat whose replica died is answered by the
//! survivor.
//!
//! The schedule is random but seeded: the seed is printed, and
//! `BUB_REPLICA_CRASH_SEED=<seed> cargo test --test it gateway_replicas_crash:: -- --nocapture`
//! replays the same kills, outage, sending pauses and choice of replicas (the
//! timing of the processes themselves still varies). The replicas' logs are
//! copied to `$TMPDIR/bub-replica-crash-<seed>/` when the test fails, or
//! always with `BUB_REPLICA_CRASH_KEEP_LOGS=1`.

use crate::support;

use parking_lot::Mutex as SyncMutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::fake_model::{FakeModel, Reply};
use support::gateway::{CallbackReceiver, GatewayProcess, client, signed_request};
use support::postgres::PgCluster;
use tokio::sync::Mutex;

const SECRET: &str = "replica-crash-secret";
const REPLICAS: usize = 3;
const CHATS: usize = 50;
const PER_CHAT: usize = 10;
const MESSAGES: usize = CHATS * PER_CHAT;
/// `[store] lease_seconds`: how long a killed replica's chats wait for a taker.
const LEASE_SECONDS: u64 = 3;
/// Every message answered, kills, outage and restarts included (a loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long to keep listening for late duplicates once everything is answered.
const SETTLE: Duration = Duration::from_secs(3);
/// A POST accepted this long before its sender was SIGKILLed may be sent
/// again (see [`DeadWindows`]).
const RECORDING_WINDOW: Duration = Duration::from_secs(2);

fn message_id(k: usize) -> String {
    format!("m{k}")
}

/// Message `k` belongs to chat `k % CHATS`; the chat's `n`th is `n * CHATS + chat`.
fn chat_of(k: usize) -> usize {
    k % CHATS
}

/// A marker that appears once in the message's text, to find it on the tapes.
fn token(k: usize) -> String {
    format!("[[m{k}]]")
}

fn body(k: usize) -> Value {
    let chat = chat_of(k);
    json!({
        "message_id": message_id(k),
        "chat_id": format!("c{chat}"),
        "sender_id": format!("u{chat}"),
        "text": format!("message {} of chat c{chat} {}", k / CHATS, token(k)),
    })
}

/// A replica's config: the webhook channel calling back `callback` (if any)
/// and a short lease. The database comes from `BUB_DATABASE_URL`.
fn replica_config(home: &Path, callback: Option<&CallbackReceiver>) -> PathBuf {
    let callback = callback.map(|receiver| format!("callback_url = \"{}\"\n", receiver.url())).unwrap_or_default();
    let text = format!(
        "[store]\nlease_seconds = {LEASE_SECONDS}\n\n\
         [channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n{callback}"
    );
    let path = home.join("bub.toml");
    std::fs::write(&path, text).expect("write bub.toml");
    path
}

fn replica_env(fake: &FakeModel, url: &str) -> Vec<(String, String)> {
    let mut env = fake.vars("openai:gpt-test");
    env.push(("BUB_DATABASE_URL".into(), url.into()));
    env
}

/// Three replicas, each on its home, restarted on it after a kill.
struct Fleet {
    env: Vec<(String, String)>,
    homes: Vec<tempfile::TempDir>,
    configs: Vec<PathBuf>,
    replicas: Vec<Mutex<Option<GatewayProcess>>>,
    /// Where each replica listens while it is up: where the senders go.
    live: SyncMutex<Vec<Option<SocketAddr>>>,
    /// Every stderr file, in start order.
    logs: SyncMutex<Vec<PathBuf>>,
    /// When each SIGKILL was sent.
    kills: SyncMutex<Vec<Instant>>,
    /// When the database was stopped, and when it answered again.
    outages: SyncMutex<Vec<(Instant, Instant)>>,
    /// Replicas that ended without being killed (a fenced replica stops).
    unplanned_exits: AtomicUsize,
}

impl Fleet {
    async fn start(env: Vec<(String, String)>, receiver: &CallbackReceiver) -> Fleet {
        let homes: Vec<_> = (0..REPLICAS).map(|_| tempfile::tempdir().expect("home")).collect();
        let configs = homes.iter().map(|home| replica_config(home.path(), Some(receiver))).collect();
        let fleet = Fleet {
            env,
            homes,
            configs,
            replicas: (0..REPLICAS).map(|_| Mutex::new(None)).collect(),
            live: SyncMutex::new(vec![None; REPLICAS]),
            logs: SyncMutex::default(),
            kills: SyncMutex::default(),
            outages: SyncMutex::default(),
            unplanned_exits: AtomicUsize::new(0),
        };
        // One after another: the first one migrates the database.
        for n in 0..REPLICAS {
            let mut slot = fleet.replicas[n].lock().await;
            *slot = Some(fleet.launch(n).await);
        }
        fleet
    }

    async fn launch(&self, n: usize) -> GatewayProcess {
        let config = self.configs[n].to_str().expect("a UTF-8 temporary path");
        let process = GatewayProcess::start(self.homes[n].path(), &self.env, &["--config", config]).await;
        self.logs.lock().push(process.stderr_path.clone());
        self.live.lock()[n] = Some(process.addr);
        process
    }

    /// A replica that is up, chosen by `rng`.
    fn pick(&self, rng: &mut StdRng) -> Option<SocketAddr> {
        let live: Vec<SocketAddr> = self.live.lock().iter().flatten().copied().collect();
        (!live.is_empty()).then(|| live[rng.random_range(0..live.len())])
    }

    /// SIGKILL replica `n`, then start it again on its home `down_for` later.
    async fn kill_and_restart(&self, n: usize, down_for: Duration) {
        let mut slot = self.replicas[n].lock().await;
        self.live.lock()[n] = None;
        if let Some(process) = slot.as_mut() {
            process.kill_hard();
        }
        self.kills.lock().push(Instant::now());
        tokio::time::sleep(down_for).await;
        *slot = Some(self.launch(n).await);
    }

    /// Restarts the replicas that ended on their own; how many.
    async fn revive(&self) -> usize {
        let mut revived = 0;
        for n in 0..REPLICAS {
            let Ok(mut slot) = self.replicas[n].try_lock() else { continue };
            if slot.as_mut().is_some_and(|process| !process.exited()) {
                continue;
            }
            self.live.lock()[n] = None;
            self.unplanned_exits.fetch_add(1, Ordering::Relaxed);
            println!("replica {n} ended on its own; restarting it");
            *slot = Some(self.launch(n).await);
            revived += 1;
        }
        revived
    }

    /// SIGTERM to every replica; whether all stopped cleanly.
    async fn stop(&self) -> bool {
        let mut clean = true;
        for n in 0..REPLICAS {
            let process = self.replicas[n].lock().await.take();
            self.live.lock()[n] = None;
            if let Some(process) = process {
                clean &= process.stop().await;
            }
        }
        clean
    }

    fn print_log_tails(&self, lines: usize) {
        for path in self.logs.lock().iter() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(lines).collect();
            println!("--- tail of {} ---", path.display());
            for line in tail.into_iter().rev() {
                println!("{line}");
            }
        }
    }

    /// Copies every stderr file to a folder that outlives the test, and says where.
    fn keep_logs(&self, seed: u64) {
        let kept = std::env::temp_dir().join(format!("bub-replica-crash-{seed}"));
        let _ = std::fs::create_dir_all(&kept);
        for (n, path) in self.logs.lock().iter().enumerate() {
            let _ = std::fs::copy(path, kept.join(format!("start-{n}.stderr")));
        }
        println!("the replicas' logs are kept in {}", kept.display());
    }

    fn all_logs(&self) -> String {
        self.logs.lock().iter().map(|path| std::fs::read_to_string(path).unwrap_or_default()).collect()
    }
}

/// What the senders saw.
#[derive(Default)]
struct SendStats {
    attempts: AtomicUsize,
    connection_errors: AtomicUsize,
    unavailable: AtomicUsize,
    accepted: AtomicUsize,
    duplicate_done: AtomicUsize,
    in_progress: AtomicUsize,
}

/// Sends chat `chat`'s messages in order, each to a random live replica,
/// the next once the previous one is stored; each is retried with the same
/// id (on another random replica) until one has it.
async fn send_chat(chat: usize, seed: u64, fleet: Arc<Fleet>, stats: Arc<SendStats>) {
    let client = client();
    let mut rng = StdRng::seed_from_u64(seed ^ (chat as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for k in (chat..MESSAGES).step_by(CHATS) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..1500))).await;
        let body = body(k);
        let started = Instant::now();
        loop {
            assert!(started.elapsed() < ANSWER_TIMEOUT, "m{k} was never accepted");
            let Some(target) = fleet.pick(&mut rng) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            stats.attempts.fetch_add(1, Ordering::Relaxed);
            match signed_request(&client, target, "webhook", "async", &body, SECRET).await {
                Ok(response) => match response.status().as_u16() {
                    202 => {
                        stats.accepted.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    200 => {
                        stats.duplicate_done.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    409 => {
                        stats.in_progress.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    503 => {
                        stats.unavailable.fetch_add(1, Ordering::Relaxed);
                    }
                    status => {
                        let text = response.text().await.unwrap_or_default();
                        panic!("m{k}: unexpected {status}: {text}");
                    }
                },
                Err(_) => {
                    stats.connection_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One failure the schedule injects, after `after` of quiet.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL replica `replica`, restart it `down_for` later.
    Kill { after: Duration, replica: usize, down_for: Duration },
    /// Stop the database cluster (every connection drops) for `down_for`.
    DatabaseDown { after: Duration, down_for: Duration },
}

fn schedule(rng: &mut StdRng) -> Vec<Fault> {
    let kills = rng.random_range(3..=5usize);
    let mut faults: Vec<Fault> = (0..kills)
        .map(|_| Fault::Kill {
            after: Duration::from_millis(rng.random_range(700..2200)),
            replica: rng.random_range(0..REPLICAS),
            down_for: Duration::from_millis(rng.random_range(100..1000)),
        })
        .collect();
    let at = rng.random_range(0..=faults.len());
    faults.insert(
        at,
        Fault::DatabaseDown {
            after: Duration::from_millis(rng.random_range(700..2200)),
            down_for: Duration::from_millis(rng.random_range(1000..1500)),
        },
    );
    faults
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_killed_at_random_and_a_database_outage_lose_and_double_nothing() {
    let seed: u64 = match std::env::var("BUB_REPLICA_CRASH_SEED") {
        Ok(text) => text.trim().parse().expect("BUB_REPLICA_CRASH_SEED must be a number"),
        Err(_) => rand::random(),
    };
    println!("replica crash test seed: {seed} (replay with BUB_REPLICA_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let faults = schedule(&mut rng);
    println!("faults: {faults:?}");
    let began = Instant::now();
    let clock = (began, std::time::SystemTime::now());

    // A cluster of its own: this test stops it.
    let cluster = tokio::task::spawn_blocking(PgCluster::start).await.expect("start a cluster");
    let url = cluster.database().await;
    let cluster = Arc::new(SyncMutex::new(cluster));
    // Each turn takes a moment at the model so kills land mid-turn too.
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::slow_first_token(Duration::from_millis(150), Reply::text("answered")));
    let receiver = Arc::new(CallbackReceiver::start().await);
    let fleet = Arc::new(Fleet::start(replica_env(&fake, &url), &receiver).await);

    let stats = Arc::new(SendStats::default());
    let senders: Vec<_> =
        (0..CHATS).map(|chat| tokio::spawn(send_chat(chat, seed, fleet.clone(), stats.clone()))).collect();
    let supervisor = {
        let fleet = fleet.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                fleet.revive().await;
            }
        })
    };
    let injector = {
        let fleet = fleet.clone();
        let cluster = cluster.clone();
        let stats = stats.clone();
        let receiver = receiver.clone();
        tokio::spawn(async move {
            for (n, fault) in faults.into_iter().enumerate() {
                let progress = || {
                    let stored = stats.accepted.load(Ordering::Relaxed) + stats.duplicate_done.load(Ordering::Relaxed);
                    format!("{stored} messages stored, {} replies received", receiver.keys().len())
                };
                match fault {
                    Fault::Kill { after, replica, down_for } => {
                        tokio::time::sleep(after).await;
                        println!("fault {}: SIGKILL replica {replica} at {:?}; {}", n + 1, began.elapsed(), progress());
                        fleet.kill_and_restart(replica, down_for).await;
                    }
                    Fault::DatabaseDown { after, down_for } => {
                        tokio::time::sleep(after).await;
                        println!("fault {}: database down at {:?}; {}", n + 1, began.elapsed(), progress());
                        let cluster = cluster.clone();
                        let down_at = Instant::now();
                        tokio::task::spawn_blocking(move || {
                            cluster.lock().stop();
                            std::thread::sleep(down_for);
                            cluster.lock().restart();
                        })
                        .await
                        .expect("stop and restart the cluster");
                        fleet.outages.lock().push((down_at, Instant::now()));
                        println!("database up again at {:?}", began.elapsed());
                    }
                }
            }
        })
    };

    for sender in senders {
        sender.await.expect("a sender failed");
    }
    println!("every message stored at {:?}", began.elapsed());
    injector.await.expect("the fault injector failed");
    let everything_answered = |receiver: &CallbackReceiver| {
        let answered: BTreeSet<String> = receiver.accepted().iter().flat_map(|post| post.reply_to()).collect();
        answered.len() >= MESSAGES
    };
    let answered_in_time = receiver.wait_until(ANSWER_TIMEOUT, everything_answered).await;
    println!("every message answered at {:?}: {answered_in_time}", began.elapsed());
    tokio::time::sleep(SETTLE).await;
    supervisor.abort();
    let _ = supervisor.await;
    let stopped_cleanly = fleet.stop().await;

    let dead = DeadWindows::new(&fleet, clock);
    let mut failures = Vec::new();
    let callbacks = analyse_callbacks(&receiver, &dead, &mut failures);
    let tapes = check_tapes(&url, &mut failures).await;
    let tables = check_inbox_outbox(&url, &mut failures).await;
    let logs = fleet.all_logs();
    println!(
        "senders: {} requests, {} connection errors, {} 503, {} accepted (202), {} duplicates done (200), \
         {} in progress (409)",
        stats.attempts.load(Ordering::Relaxed),
        stats.connection_errors.load(Ordering::Relaxed),
        stats.unavailable.load(Ordering::Relaxed),
        stats.accepted.load(Ordering::Relaxed),
        stats.duplicate_done.load(Ordering::Relaxed),
        stats.in_progress.load(Ordering::Relaxed),
    );
    println!("{callbacks}\n{tapes}\n{tables}");
    println!(
        "replicas: {} starts, {} ended on their own, {} fenced; {} takeovers of messages nobody ran, \
         {} turns found on the tape and answered from it; took {:?}",
        fleet.logs.lock().len(),
        fleet.unplanned_exits.load(Ordering::Relaxed),
        logs.matches("was taken for dead").count(),
        logs.matches("taking over messages nobody runs").count(),
        logs.matches("turn was on the tape").count(),
        began.elapsed(),
    );
    if !answered_in_time {
        failures.push(format!("not every message was answered within {ANSWER_TIMEOUT:?}"));
    }
    if !stopped_cleanly {
        failures.push("a replica did not stop cleanly on SIGTERM".into());
    }
    if !failures.is_empty() {
        fleet.print_log_tails(20);
    }
    if !failures.is_empty() || std::env::var_os("BUB_REPLICA_CRASH_KEEP_LOGS").is_some() {
        fleet.keep_logs(seed);
    }
    cluster.lock().stop();
    assert!(failures.is_empty(), "seed {seed}: {} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Per idempotency key: the reply_to lists seen, the chat ids seen, when each accepted POST came.
type KeySeen = (BTreeSet<Vec<String>>, BTreeSet<String>, Vec<Instant>);

/// When a replica was taken for dead with replies in flight: a reply POSTed
/// then may come again. A replica that POSTs a reply and dies (SIGKILL)
/// before it records the delivery leaves the reply pending, and whoever
/// takes its work over sends it again under the same `Idempotency-Key`; so
/// does one that was taken for dead (the database was out too long:
/// "fenced") while it was POSTing, and it cannot know. That is delivery at
/// least once, as on one process: no store can record "the receiver took
/// it" atomically with the receiver taking it. Any other repeat is a bug.
struct DeadWindows {
    kills: Vec<Instant>,
    /// The database down, then up again: a delivery POSTed meanwhile is
    /// recorded only once it is back (and the pool has reconnected).
    outages: Vec<(Instant, Instant)>,
    /// Around each fence: a replica is taken for dead up to a lease before
    /// it learns it, and its last deliveries drain for a few seconds after.
    fenced: Vec<(Instant, Instant)>,
}

/// How long after the database is back a pool may take to reconnect (its backoff).
const RECONNECT: Duration = Duration::from_secs(3);

impl DeadWindows {
    /// The fleet's kills and outages, and its fences as the replicas logged
    /// them (UTC timestamps, placed on `clock`: an instant and the wall time then).
    fn new(fleet: &Fleet, clock: (Instant, std::time::SystemTime)) -> DeadWindows {
        let mut fenced = Vec::new();
        for line in fleet.all_logs().lines().filter(|line| line.contains("was taken for dead")) {
            let Some(stamp) = line.split_whitespace().next() else { continue };
            let Ok(at) = chrono::DateTime::parse_from_rfc3339(stamp) else { continue };
            let Ok(after) = std::time::SystemTime::from(at).duration_since(clock.1) else { continue };
            let at = clock.0 + after;
            fenced.push((at - Duration::from_secs(LEASE_SECONDS + 3), at + Duration::from_secs(5)));
        }
        DeadWindows { kills: fleet.kills.lock().clone(), outages: fleet.outages.lock().clone(), fenced }
    }

    /// Whether a reply first POSTed at `first` may have been sent again.
    fn explain(&self, first: Instant) -> bool {
        let recorded_by = self
            .outages
            .iter()
            .filter(|(down, up)| (*down - RECORDING_WINDOW..=*up).contains(&first))
            .map(|(_, up)| *up + RECORDING_WINDOW + RECONNECT)
            .max()
            .unwrap_or(first + RECORDING_WINDOW);
        self.kills.iter().any(|kill| (first..=recorded_by).contains(kill))
            || self.fenced.iter().any(|(from, to)| (*from..=*to).contains(&first))
    }
}

/// "Every message answered exactly once" on the callback URL: each message
/// under one key, each key POSTed once, or again only as [`DeadWindows`] says.
fn analyse_callbacks(receiver: &CallbackReceiver, dead: &DeadWindows, failures: &mut Vec<String>) -> String {
    let posts = receiver.posts();
    let accepted = receiver.accepted();
    let mut keys: BTreeMap<String, KeySeen> = BTreeMap::new();
    for post in &accepted {
        let Some(key) = post.idempotency_key() else {
            failures.push(format!("a callback POST without Idempotency-Key: {}", post.body));
            continue;
        };
        if !post.signed_with(SECRET) {
            failures.push(format!("key {key}: callback not signed with the channel's secret"));
        }
        let entry = keys.entry(key.to_string()).or_default();
        entry.0.insert(post.reply_to());
        entry.1.insert(post.body["chat_id"].as_str().unwrap_or("?").to_string());
        entry.2.push(post.at);
    }
    let mut answering: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut explained, mut unexplained) = (0, 0);
    for (key, (lists, chats, times)) in &keys {
        if lists.len() > 1 {
            failures.push(format!("key {key} was POSTed with different reply_to lists: {lists:?}"));
        }
        if chats.len() > 1 {
            failures.push(format!("key {key} was POSTed to several chats: {chats:?}"));
        }
        if times.len() > 1 {
            if dead.explain(times[0]) {
                explained += times.len() - 1;
            } else {
                unexplained += times.len() - 1;
                failures.push(format!(
                    "key {key} was POSTed {} times, and no replica was taken for dead just after the first",
                    times.len()
                ));
            }
        }
        for id in lists.iter().flatten() {
            answering.entry(id.clone()).or_default().insert(key.clone());
            let k: usize = id.trim_start_matches('m').parse().unwrap_or(usize::MAX);
            let chat = chats.iter().next().cloned().unwrap_or_default();
            if k >= MESSAGES || chat != format!("c{}", chat_of(k)) {
                failures.push(format!("key {key} (chat {chat}) answers {id}, a message of another chat"));
            }
        }
    }
    let mut lost = Vec::new();
    for k in 0..MESSAGES {
        match answering.get(&message_id(k)) {
            None => lost.push(message_id(k)),
            Some(keys) if keys.len() > 1 => {
                failures.push(format!("m{k} (chat c{}) answered under {} keys: {keys:?}", chat_of(k), keys.len()))
            }
            Some(_) => {}
        }
    }
    if !lost.is_empty() {
        failures.push(format!("{} messages never answered: {lost:?}", lost.len()));
    }
    let batched = keys.values().filter(|(lists, _, _)| lists.iter().any(|l| l.len() > 1)).count();
    format!(
        "callbacks: {} POSTs ({} refused), {} distinct keys, {} replies answering several messages, \
         {explained} sent again after their sender was taken for dead, {unexplained} sent again otherwise",
        posts.len(),
        posts.len() - accepted.len(),
        keys.len(),
        batched
    )
}

/// Each chat's tape holds each of its prompts exactly once, in sending order.
async fn check_tapes(url: &str, failures: &mut Vec<String>) -> String {
    use bub::tape::{EntryKind, Tape, TapeName, TapeQuery, TapeStore};
    let store: Arc<dyn TapeStore> = Arc::new(bub::db::PgTapeStore::connect(url).await.expect("open the tapes"));
    let names: BTreeSet<String> = store.list().await.expect("list tapes").into_iter().map(|t| t.name).collect();
    let mut user_entries = 0;
    for chat in 0..CHATS {
        let session = format!("webhook:c{chat}");
        if !names.contains(&session) {
            failures.push(format!("no tape {session}"));
            continue;
        }
        let tape = Tape::new(store.clone(), TapeName::new(&session).expect("tape name"));
        let entries = tape.read(&TapeQuery::all().kinds([EntryKind::Message])).await.expect("read tape");
        let texts: Vec<String> = entries
            .iter()
            .filter(|e| e.payload.get("role").and_then(Value::as_str) == Some("user"))
            .map(|e| e.payload.get("content").map(content_text).unwrap_or_default())
            .collect();
        user_entries += texts.len();
        // The chat's tokens in tape order (a turn's prompt may hold several, in order).
        let mut seen = Vec::new();
        for text in &texts {
            let mut rest = text.as_str();
            while let Some(start) = rest.find("[[m") {
                let Some(end) = rest[start..].find("]]") else { break };
                seen.push(rest[start + 3..start + end].parse::<usize>().unwrap_or(usize::MAX));
                rest = &rest[start + end + 2..];
            }
        }
        let expected: Vec<usize> = (chat..MESSAGES).step_by(CHATS).collect();
        if seen != expected {
            let doubled: Vec<usize> =
                expected.iter().copied().filter(|k| seen.iter().filter(|s| *s == k).count() > 1).collect();
            let missing: Vec<usize> = expected.iter().copied().filter(|k| !seen.contains(k)).collect();
            failures.push(format!(
                "tape {session}: prompts {seen:?}, sent {expected:?} (doubled {doubled:?}, missing {missing:?})"
            ));
        }
    }
    format!("tapes: {user_entries} user entries over {CHATS} sessions")
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        other => other.to_string(),
    }
}

/// Every inbox row is done with a reply, every outbox row delivered.
async fn check_inbox_outbox(url: &str, failures: &mut Vec<String>) -> String {
    use sqlx_core::connection::Connection;
    use sqlx_core::query_as::query_as;
    use sqlx_postgres::{PgConnection, Postgres};
    let mut conn = PgConnection::connect(url).await.expect("connect to the database");
    let inbox: Vec<(String, i64)> =
        query_as::<Postgres, (String, i64)>("SELECT state, count(*) FROM gateway_inbox GROUP BY state ORDER BY state")
            .fetch_all(&mut conn)
            .await
            .expect("read the inbox");
    let outbox: Vec<(String, i64)> =
        query_as::<Postgres, (String, i64)>("SELECT state, count(*) FROM gateway_outbox GROUP BY state ORDER BY state")
            .fetch_all(&mut conn)
            .await
            .expect("read the outbox");
    let not_replied: Vec<(String, String)> = query_as::<Postgres, (String, String)>(
        "SELECT message_id, coalesce(outcome, '') FROM gateway_inbox \
         WHERE outcome IS NULL OR outcome::jsonb ->> 'status' <> 'replied' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("read the outcomes");
    if inbox != [("done".to_string(), MESSAGES as i64)] {
        failures.push(format!("inbox states {inbox:?}, expected all {MESSAGES} done"));
    }
    if outbox.iter().any(|(state, _)| state != "delivered") {
        failures.push(format!("outbox states {outbox:?}, expected all delivered"));
    }
    if !not_replied.is_empty() {
        failures.push(format!("messages whose outcome is not `replied`: {not_replied:?}"));
    }
    format!("inbox {inbox:?}, outbox {outbox:?}")
}

/// Two replicas on a fresh database of the shared cluster, no callback URL
/// (sync callers only).
struct Pair {
    first: GatewayProcess,
    second: GatewayProcess,
    url: String,
    _homes: [tempfile::TempDir; 2],
}

async fn two_replicas(fake: &FakeModel) -> Pair {
    let url = support::postgres::fresh_database().await;
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let env = replica_env(fake, &url);
    let mut started = Vec::new();
    for home in &homes {
        let config = replica_config(home.path(), None);
        let args = ["--config", config.to_str().unwrap()];
        started.push(GatewayProcess::start(home.path(), &env, &args).await);
    }
    let second = started.pop().unwrap();
    let first = started.pop().unwrap();
    Pair { first, second, url, _homes: homes }
}

/// A [`Pair`] once chat `c1` is leased.
struct Leased {
    holder: GatewayProcess,
    other: GatewayProcess,
    url: String,
    _homes: [tempfile::TempDir; 2],
}

impl Pair {
    /// The chat `c1`'s first message, answered; then the pair as (the
    /// replica that leased the chat, the other). Whichever replica it is
    /// sent to, the other one's sweep may see the stored message first and
    /// lease the chat: the lease table says which did.
    async fn lease_chat(self) -> Leased {
        let (status, outcome) = ask(self.second.addr, "m0", "first").await;
        assert_eq!((status, outcome["text"].as_str()), (200, Some("answered")), "{outcome}");
        use sqlx_core::connection::Connection;
        let mut conn = sqlx_postgres::PgConnection::connect(&self.url).await.expect("connect to the database");
        let holder: String = sqlx_core::query_scalar::query_scalar::<sqlx_postgres::Postgres, String>(
            "SELECT holder FROM gateway_leases WHERE name = 'session:webhook:c1'",
        )
        .fetch_one(&mut conn)
        .await
        .expect("the chat is leased");
        let registered = |process: &GatewayProcess| process.stderr().contains(&format!("replica={holder} "));
        let Pair { first, second, url, _homes } = self;
        match (registered(&first), registered(&second)) {
            (true, false) => Leased { holder: first, other: second, url, _homes },
            (false, true) => Leased { holder: second, other: first, url, _homes },
            _ => panic!("lease holder {holder} is not one replica's:\n{}\n{}", first.stderr(), second.stderr()),
        }
    }
}

fn sync_body(id: &str, text: &str) -> Value {
    json!({ "message_id": id, "chat_id": "c1", "sender_id": "u1", "text": text })
}

/// `?mode=sync` on `addr`: the status and the outcome.
async fn ask(addr: SocketAddr, id: &str, text: &str) -> (u16, Value) {
    let response = signed_request(&client(), addr, "webhook", "sync", &sync_body(id, text), SECRET)
        .await
        .expect("the replica answers the request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

/// How long after a holder's death a survivor may take to answer: the
/// lease, then a sweep and a turn, with room for a loaded machine.
fn takeover_limit() -> Duration {
    Duration::from_secs(LEASE_SECONDS + 5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_caller_is_answered_when_the_replica_running_its_turn_is_killed() {
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::text("answered"));
    let Leased { holder: mut running_on, other: waiting_on, url, _homes } =
        two_replicas(&fake).await.lease_chat().await;

    // The next message is sent to the other replica and runs where the chat
    // is leased; its turn waits 3 s at the model, and is killed there.
    fake.push(Reply::slow_first_token(Duration::from_secs(3), Reply::text("never sent")));
    let addr = waiting_on.addr;
    let caller = tokio::spawn(async move { ask(addr, "m1", "second [[slow]]").await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.request_count() < 2 {
        assert!(Instant::now() < deadline, "the slow turn never reached the model:\n{}", running_on.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running_on.kill_hard();
    let killed = Instant::now();
    let (status, outcome) = caller.await.unwrap();
    let waited = killed.elapsed();
    println!("the caller was answered {waited:?} after the kill (lease {LEASE_SECONDS} s)");
    let stderr = waiting_on.stderr();
    assert_eq!(status, 200, "{outcome}\n{stderr}");
    assert_eq!(outcome["text"], "answered", "the turn ran again on the survivor: {outcome}");
    assert!(waited < takeover_limit(), "answered {waited:?} after the kill:\n{stderr}");
    assert_eq!(fake.request_count(), 3, "the killed turn ran again once");

    // Stored once: asking again gets the same outcome, and the tape holds it once.
    let (status, again) = ask(waiting_on.addr, "m1", "second [[slow]]").await;
    assert_eq!((status, &again), (200, &outcome), "a repeat gets the stored outcome");
    assert_eq!(fake.request_count(), 3, "a repeat runs no turn");
    assert!(waiting_on.stop().await, "the survivor stops cleanly");
    let store = bub::db::PgTapeStore::connect(&url).await.unwrap();
    let texts = user_texts(&store, "webhook:c1").await;
    assert_eq!(texts.iter().filter(|text| text.contains("[[slow]]")).count(), 1, "tape: {texts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_message_of_a_chat_whose_replica_died_is_answered_by_the_survivor() {
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::text("answered"));
    let Leased { mut holder, other: survivor, _homes, .. } = two_replicas(&fake).await.lease_chat().await;
    holder.kill_hard();
    let killed = Instant::now();
    let (status, outcome) = ask(survivor.addr, "m1", "second").await;
    let waited = killed.elapsed();
    println!("takeover: the survivor answered {waited:?} after the holder died (lease {LEASE_SECONDS} s)");
    let stderr = survivor.stderr();
    assert_eq!((status, outcome["text"].as_str()), (200, Some("answered")), "{outcome}\n{stderr}");
    assert!(waited < takeover_limit(), "answered {waited:?} after the kill:\n{stderr}");
    // The holder's last heartbeat (one every sixth of the lease) keeps its lease a lease longer.
    let held_at_least = Duration::from_secs(LEASE_SECONDS) - Duration::from_millis(LEASE_SECONDS * 1000 / 6 + 100);
    assert!(
        waited >= held_at_least,
        "the lease held while its holder could still have been alive: answered after {waited:?}\n\
         survivor:\n{stderr}\nholder:\n{}",
        holder.stderr()
    );
    assert!(survivor.stop().await, "the survivor stops cleanly");
}

/// The user messages of tape `name`, in tape order.
async fn user_texts(store: &bub::db::PgTapeStore, name: &str) -> Vec<String> {
    use bub::tape::{TapeName, TapeQuery, TapeStore};
    let name = TapeName::new(name).unwrap();
    let entries = store.read(&name, &TapeQuery::all()).await.unwrap();
    entries
        .iter()
        .filter(|entry| entry.payload.get("role").and_then(Value::as_str) == Some("user"))
        .map(|entry| entry.payload.get("content").map(content_text).unwrap_or_default())
        .collect()
}
