//! The gateway's durability promise, tested on the real binary: SIGKILL it at
//! random moments while 200 webhook messages arrive across 20 chats, restart
//! it on the same `BUB_HOME`, and every message is answered exactly once —
//! none lost, none doubled — on the callback URL and on the tapes.
//!
//! The kills are random but seeded: the seed is printed, and
//! `BUB_CRASH_SEED=<seed> cargo test --test it gateway_crash:: -- --nocapture`
//! replays the same kill schedule and sending pauses (the timing of the
//! processes themselves still varies).

use crate::support;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::fake_model::{FakeModel, Reply};
use support::gateway::{CallbackFault, CallbackReceiver, GatewayProcess, client, signed_request};
use tokio::sync::{Mutex, watch};

const SECRET: &str = "crash-test-secret";
const CHATS: usize = 20;
const PER_CHAT: usize = 10;
const MESSAGES: usize = CHATS * PER_CHAT;
/// Every message answered, kills and restarts included (a loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long to keep listening for late duplicates once everything is answered.
const SETTLE: Duration = Duration::from_secs(3);

fn message_id(k: usize) -> String {
    format!("m{k}")
}

/// Message `k` belongs to chat `k % CHATS`, so every chat has messages early and late.
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

fn gateway_env(fake: &FakeModel, receiver: &CallbackReceiver) -> Vec<(String, String)> {
    let mut env = fake.vars("openai:gpt-test");
    env.push(("BUB_WEBHOOK_SECRET".into(), SECRET.into()));
    env.push(("BUB_WEBHOOK_CALLBACK_URL".into(), receiver.url()));
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_webhook_message_is_answered_on_the_callback_url() {
    let fake = FakeModel::start_answering("pong").await;
    let receiver = CallbackReceiver::start().await;
    let home = tempfile::tempdir().unwrap();
    let gateway = GatewayProcess::start(home.path(), &gateway_env(&fake, &receiver), &[]).await;
    let client = client();
    let response = signed_request(&client, gateway.addr, "webhook", "async", &body(0), SECRET).await.unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap_or_default());
    assert!(receiver.wait_for_keys(1, ANSWER_TIMEOUT).await, "no callback; stderr:\n{}", gateway.stderr());
    let post = &receiver.accepted()[0];
    assert_eq!(post.idempotency_key(), Some("reply:webhook:m0"));
    assert_eq!(post.reply_to(), vec!["m0".to_string()]);
    assert_eq!(post.body["chat_id"], "c0");
    assert_eq!(post.body["text"], "pong");
    assert!(post.signed_with(SECRET));

    let again = signed_request(&client, gateway.addr, "webhook", "sync", &body(0), SECRET).await.unwrap();
    assert_eq!(again.status(), 200, "a repeated id is answered with the first outcome");
    let outcome: Value = again.json().await.unwrap();
    assert_eq!(outcome["text"], "pong");
    assert!(gateway.stop().await, "SIGTERM ends the gateway cleanly");
    assert_eq!(receiver.keys().len(), 1);
}

/// "Undelivered replies are sent once" also covers a callback URL that fails
/// for a moment (5xx, or 429 with Retry-After): the reply comes later, under the same key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_callback_is_sent_again_later() {
    for fault in [CallbackFault::ServerError, CallbackFault::RateLimited] {
        let fake = FakeModel::start_answering("pong").await;
        let receiver = CallbackReceiver::start_failing(fault, 1).await;
        let home = tempfile::tempdir().unwrap();
        let env = gateway_env(&fake, &receiver);
        let gateway = GatewayProcess::start(home.path(), &env, &[]).await;
        let response = signed_request(&client(), gateway.addr, "webhook", "async", &body(0), SECRET).await.unwrap();
        assert_eq!(response.status(), 202);
        let delivered = receiver.wait_for_keys(1, Duration::from_secs(60)).await;
        let stderr = gateway.stderr();
        gateway.stop().await;
        let posts = receiver.posts();
        let statuses: Vec<u16> = posts.iter().map(|post| post.status).collect();
        assert!(delivered, "{fault:?}: callback statuses {statuses:?}; the reply never arrived; stderr:\n{stderr}");
        assert_eq!(statuses.len(), 2, "{fault:?}: one refused POST, then one accepted: {statuses:?}");
        assert_eq!(posts[0].idempotency_key(), posts[1].idempotency_key(), "the retry reuses the key");
        assert_eq!(posts[1].body["text"], "pong");
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

/// Sends chat `chat`'s messages in order; each one is retried with the same id
/// until the gateway has it (202, or 200/409 for a duplicate), as a webhook
/// client would after a dropped connection or a 503.
async fn send_chat(chat: usize, seed: u64, addr: watch::Receiver<SocketAddr>, stats: Arc<SendStats>) {
    let client = client();
    let mut rng = StdRng::seed_from_u64(seed ^ (chat as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for k in (chat..MESSAGES).step_by(CHATS) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..250))).await;
        let body = body(k);
        let started = Instant::now();
        loop {
            assert!(started.elapsed() < ANSWER_TIMEOUT, "m{k} was never accepted");
            stats.attempts.fetch_add(1, Ordering::Relaxed);
            let target = *addr.borrow();
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
                        // Stored and still being handled: the gateway has it.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_and_doubles_nothing() {
    let seed: u64 = match std::env::var("BUB_CRASH_SEED") {
        Ok(text) => text.trim().parse().expect("BUB_CRASH_SEED must be a number"),
        Err(_) => rand::random(),
    };
    println!("crash test seed: {seed} (replay with BUB_CRASH_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let kills = rng.random_range(3..=5usize);
    let schedule: Vec<(Duration, Duration)> = (0..kills)
        .map(|_| (Duration::from_millis(rng.random_range(150..1200)), Duration::from_millis(rng.random_range(0..300))))
        .collect();
    println!("kill schedule (run for, then down for): {schedule:?}");

    // Each turn takes a moment at the model so kills land mid-turn too.
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::slow_first_token(Duration::from_millis(15), Reply::text("answered")));
    let receiver = Arc::new(CallbackReceiver::start().await);
    let home = tempfile::tempdir().unwrap();
    let env = gateway_env(&fake, &receiver);

    let first = GatewayProcess::start(home.path(), &env, &[]).await;
    let (addr_tx, addr_rx) = watch::channel(first.addr);
    let gateway = Arc::new(Mutex::new(first));
    let stats = Arc::new(SendStats::default());
    let senders: Vec<_> =
        (0..CHATS).map(|chat| tokio::spawn(send_chat(chat, seed, addr_rx.clone(), stats.clone()))).collect();

    let killer = {
        let gateway = gateway.clone();
        let home = home.path().to_path_buf();
        let env = env.clone();
        let stats = stats.clone();
        let receiver = receiver.clone();
        tokio::spawn(async move {
            let mut stderr_logs = Vec::new();
            for (n, (run_for, down_for)) in schedule.into_iter().enumerate() {
                tokio::time::sleep(run_for).await;
                let mut current = gateway.lock().await;
                current.kill_hard();
                stderr_logs.push(current.stderr_path.clone());
                println!(
                    "kill {}: SIGKILL after {run_for:?}; {} messages accepted by then, {} replies received",
                    n + 1,
                    stats.accepted.load(Ordering::Relaxed) + stats.duplicate_done.load(Ordering::Relaxed),
                    receiver.keys().len(),
                );
                tokio::time::sleep(down_for).await;
                *current = GatewayProcess::start(&home, &env, &[]).await;
                addr_tx.send_replace(current.addr);
            }
            stderr_logs
        })
    };

    for sender in senders {
        sender.await.expect("a sender failed");
    }
    let stderr_logs = killer.await.expect("the killer failed");
    let everything_answered = |receiver: &CallbackReceiver| {
        let answered: BTreeSet<String> = receiver.accepted().iter().flat_map(|post| post.reply_to()).collect();
        answered.len() >= MESSAGES
    };
    let answered_in_time = receiver.wait_until(ANSWER_TIMEOUT, everything_answered).await;
    tokio::time::sleep(SETTLE).await;
    let last = Arc::try_unwrap(gateway).ok().expect("the killer let go of the gateway").into_inner();
    let last_stderr = last.stderr();
    let stopped_cleanly = last.stop().await;
    let before_restart = receiver.posts().len();

    // One more start after everything was delivered: it must send nothing again.
    let again = GatewayProcess::start(home.path(), &env, &[]).await;
    tokio::time::sleep(SETTLE).await;
    let resent_after_clean_restart = receiver.posts().len() - before_restart;
    again.stop().await;

    let report = analyse(&receiver, home.path()).await;
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
    println!("{}", report.summary);
    let logs: String = std::fs::read_dir(home.path())
        .unwrap()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "stderr"))
        .map(|path| std::fs::read_to_string(path).unwrap_or_default())
        .collect();
    println!(
        "recovery: {} starts resumed work, {} turns found on the tape and answered from it, {} replies not delivered",
        logs.matches("resuming unfinished work").count(),
        logs.matches("turn was on the tape").count(),
        logs.matches("reply not delivered").count(),
    );
    let mut failures = report.failures;
    if !answered_in_time {
        failures.push(format!("not every message was answered within {ANSWER_TIMEOUT:?}"));
    }
    if !stopped_cleanly {
        failures.push("the last gateway did not stop cleanly on SIGTERM".into());
    }
    if resent_after_clean_restart > 0 {
        failures.push(format!("{resent_after_clean_restart} callback POSTs after a clean restart with nothing to do"));
    }
    if !failures.is_empty() {
        for path in &stderr_logs {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            println!("--- tail of {} ---", path.display());
            for line in tail.into_iter().rev() {
                println!("{line}");
            }
        }
        println!("--- last gateway's stderr (tail) ---");
        for line in last_stderr.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev() {
            println!("{line}");
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} failures:\n{}", failures.len(), failures.join("\n"));
}

struct Report {
    summary: String,
    failures: Vec<String>,
}

/// Per idempotency key: the reply_to lists seen, the chat ids seen, the POST count.
type KeySeen = (BTreeSet<Vec<String>>, BTreeSet<String>, usize);

/// Checks the callbacks and the database against "every message answered exactly once".
async fn analyse(receiver: &CallbackReceiver, home: &Path) -> Report {
    let mut failures = Vec::new();
    let posts = receiver.posts();
    let accepted = receiver.accepted();
    let mut keys: BTreeMap<String, KeySeen> = BTreeMap::new();
    for post in &accepted {
        let Some(key) = post.idempotency_key() else {
            failures.push(format!("a callback POST without Idempotency-Key: {}", post.body));
            continue;
        };
        if post.body["idempotency_key"].as_str() != Some(key) {
            failures.push(format!("key {key}: header and body disagree: {}", post.body));
        }
        if !post.signed_with(SECRET) {
            failures.push(format!("key {key}: callback not signed with the channel's secret"));
        }
        let entry = keys.entry(key.to_string()).or_default();
        entry.0.insert(post.reply_to());
        entry.1.insert(post.body["chat_id"].as_str().unwrap_or("?").to_string());
        entry.2 += 1;
    }
    let mut answering: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (key, (lists, chats, _)) in &keys {
        if lists.len() > 1 {
            failures.push(format!("key {key} was POSTed with different reply_to lists: {lists:?}"));
        }
        if chats.len() > 1 {
            failures.push(format!("key {key} was POSTed to several chats: {chats:?}"));
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
    let retransmissions: usize = keys.values().map(|(_, _, count)| count - 1).sum();
    let batched = keys.values().filter(|(lists, _, _)| lists.iter().any(|l| l.len() > 1)).count();

    let (tape_failures, tape_summary) = check_tapes(home).await;
    failures.extend(tape_failures);
    let (db_failures, db_summary) = check_inbox_outbox(home).await;
    failures.extend(db_failures);
    let summary = format!(
        "callbacks: {} POSTs ({} refused), {} distinct keys, {} retransmissions (same key again), \
         {} replies answering several messages\n{tape_summary}\n{db_summary}",
        posts.len(),
        posts.len() - accepted.len(),
        keys.len(),
        retransmissions,
        batched
    );
    Report { summary, failures }
}

/// Each session's tape holds each of its user messages exactly once.
async fn check_tapes(home: &Path) -> (Vec<String>, String) {
    use bub::db::SqliteTapeStore;
    use bub::tape::{EntryKind, Tape, TapeName, TapeQuery, TapeStore};
    let mut failures = Vec::new();
    let store = Arc::new(SqliteTapeStore::open(home.join("bub.db")).await.expect("open bub.db"));
    let names: BTreeSet<String> = store.list().await.expect("list tapes").into_iter().map(|t| t.name).collect();
    let mut user_entries = 0;
    for chat in 0..CHATS {
        let session = format!("webhook:c{chat}");
        if !names.contains(&session) {
            failures.push(format!("no tape {session}; tapes: {names:?}"));
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
        for k in 0..MESSAGES {
            let seen: usize = texts.iter().map(|text| text.matches(&token(k)).count()).sum();
            let expected = usize::from(chat_of(k) == chat);
            if seen != expected {
                failures.push(format!("tape {session} holds m{k} {seen} times (expected {expected})"));
            }
        }
    }
    store.close().await;
    (failures, format!("tapes: {user_entries} user entries over {CHATS} sessions"))
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        other => other.to_string(),
    }
}

/// Every inbox row is done and every outbox row delivered.
async fn check_inbox_outbox(home: &Path) -> (Vec<String>, String) {
    let mut failures = Vec::new();
    let conn = rusqlite::Connection::open_with_flags(home.join("bub.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open bub.db read-only");
    let pairs = |sql: &str, what: &str| -> Vec<(String, String)> {
        let mut select = conn.prepare(sql).expect(what);
        let rows = select.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).expect(what);
        rows.collect::<Result<_, _>>().expect(what)
    };
    let counts = |sql: &str, what: &str| -> Vec<(String, i64)> {
        let mut select = conn.prepare(sql).expect(what);
        let rows = select.query_map([], |row| Ok((row.get("state")?, row.get("n")?))).expect(what);
        rows.collect::<Result<_, _>>().expect(what)
    };
    let inbox: Vec<(String, i64)> =
        counts("SELECT state, count(*) AS n FROM gateway_inbox GROUP BY state ORDER BY state", "read the inbox");
    let outbox: Vec<(String, i64)> =
        counts("SELECT state, count(*) AS n FROM gateway_outbox GROUP BY state ORDER BY state", "read the outbox");
    if inbox != [("done".to_string(), MESSAGES as i64)] {
        failures.push(format!("inbox states {inbox:?}, expected all {MESSAGES} done"));
    }
    if outbox.iter().any(|(state, _)| state != "delivered") {
        failures.push(format!("outbox states {outbox:?}, expected all delivered"));
    }
    let not_replied: Vec<(String, String)> = pairs(
        "SELECT message_id, outcome FROM gateway_inbox WHERE json_extract(outcome, '$.status') <> 'replied'",
        "read outcomes",
    );
    if !not_replied.is_empty() {
        failures.push(format!("messages whose outcome is not `replied`: {not_replied:?}"));
    }
    (failures, format!("inbox {inbox:?}, outbox {outbox:?}"))
}

/// A stop does not wait for a model call of an hour: past `shutdown_grace_seconds`
/// the turn is abandoned, its waiting caller is answered 503 at once, and the
/// next start runs it again — asking again with the same message_id gets that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_abandons_a_turn_past_its_grace_and_the_next_start_answers_it() {
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_secs(3600), Reply::text("too late")));
    fake.answer_all(Reply::text("answered after the restart"));
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("bub.toml");
    std::fs::write(
        &config,
        format!(
            "[http]\nshutdown_grace_seconds = 1\n\n[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n"
        ),
    )
    .unwrap();
    let args = ["--config", config.to_str().unwrap()];
    let env = fake.vars("openai:gpt-test");
    let gateway = GatewayProcess::start(home.path(), &env, &args).await;

    let addr = gateway.addr;
    let waiting =
        tokio::spawn(async move { signed_request(&client(), addr, "webhook", "sync", &body(0), SECRET).await });
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    while fake.request_count() == 0 {
        assert!(Instant::now() < deadline, "the turn never called the model; stderr:\n{}", gateway.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stderr_path = gateway.stderr_path.clone();
    assert!(gateway.stop().await, "SIGTERM ends the gateway within its grace: {}", read(&stderr_path));
    let answer = waiting.await.unwrap().expect("the waiting caller gets an answer, not a reset");
    assert_eq!(answer.status(), 503);
    let answer: Value = answer.json().await.unwrap();
    assert_eq!(answer["error"], "unavailable", "{answer}");
    assert!(read(&stderr_path).contains("the next start runs them again"), "the abandoned turn is logged");

    let again = GatewayProcess::start(home.path(), &env, &args).await;
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    let outcome = loop {
        let response = signed_request(&client(), again.addr, "webhook", "sync", &body(0), SECRET).await.unwrap();
        if response.status() == 200 {
            break response.json::<Value>().await.unwrap();
        }
        assert_eq!(response.status(), 409, "only 'still running' may come before the answer");
        assert!(Instant::now() < deadline, "the abandoned turn was never run again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        outcome["text"],
        "answered after the restart",
        "{outcome} requests {} stderr {}",
        fake.request_count(),
        again.stderr()
    );
    assert!(again.stop().await);
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `[channels.webhook]` calling back `receiver`, with a stop grace of 0: a
/// stop abandons every turn at once, even one whose reply is being POSTed.
fn zero_grace_config(home: &Path, receiver: &CallbackReceiver) -> std::path::PathBuf {
    let path = home.join("bub.toml");
    let text = format!(
        "[http]\nshutdown_grace_seconds = 0\n\n[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\
         callback_url = \"{}\"\n",
        receiver.url()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Without a crash or a failed POST, a graceful stop never makes a callback
/// repeat. The receiver takes 2 s to answer, so each SIGTERM lands while POSTs
/// are in flight: the first while turns deliver their replies and while other
/// replies wait for their chat's turn; the second while the next start sends
/// what the first left. Every
/// message is still answered, and each `Idempotency-Key` arrives exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stops_mid_delivery_send_every_callback_exactly_once() {
    let fake = FakeModel::start_answering("answered").await;
    let receiver = CallbackReceiver::start_slow(Duration::from_secs(2)).await;
    let home = tempfile::tempdir().unwrap();
    let config = zero_grace_config(home.path(), &receiver);
    let args = ["--config", config.to_str().unwrap()];
    let env = fake.vars("openai:gpt-test");
    // Prompts in one chat (one turn at a time, later ones queued into one
    // turn); commands in another, each its own turn at once, their replies
    // sent one after another.
    let messages: Vec<Value> = (0..12)
        .map(|k| {
            let (chat, text) =
                if k % 3 == 0 { ("prompts", format!("question {k}")) } else { ("commands", ",help".into()) };
            json!({"message_id": message_id(k), "chat_id": chat, "sender_id": "u1", "text": text})
        })
        .collect();
    let ids: BTreeSet<String> = (0..messages.len()).map(message_id).collect();
    // Messages queued behind a turn are answered together, under the first one's key.
    let answered = |receiver: &CallbackReceiver| -> BTreeSet<String> {
        receiver.posts().iter().flat_map(|post| post.reply_to()).collect()
    };

    let mut gateway = GatewayProcess::start(home.path(), &env, &args).await;
    for body in &messages {
        let response = signed_request(&client(), gateway.addr, "webhook", "async", body, SECRET).await.unwrap();
        assert_eq!(response.status(), 202, "{}", response.text().await.unwrap_or_default());
    }
    let mut logs = Vec::new();
    for round in 1..=2 {
        // Stop as soon as the receiver holds a POST it has not answered yet
        // (or once everything is answered: the next start has nothing to do).
        let in_flight = receiver.wait_until(ANSWER_TIMEOUT, |r| r.unanswered() > 0 || answered(r) == ids).await;
        assert!(in_flight, "round {round}: no callback came; stderr:\n{}", gateway.stderr());
        logs.push(gateway.stderr_path.clone());
        assert!(gateway.stop().await, "round {round}: SIGTERM ends the gateway cleanly");
        gateway = GatewayProcess::start(home.path(), &env, &args).await;
    }
    let all_in = receiver.wait_until(ANSWER_TIMEOUT, |r| answered(r) == ids).await;
    logs.push(gateway.stderr_path.clone());
    assert!(gateway.stop().await, "the last gateway stops cleanly");

    let counts = receiver.posts_per_key();
    let repeated: BTreeMap<&String, &usize> = counts.iter().filter(|(_, n)| **n > 1).collect();
    let stderr: String = logs.iter().map(|path| read(path)).collect::<Vec<_>>().join("\n---\n");
    assert!(all_in, "every message is answered: {:?} of {ids:?}\n{stderr}", answered(&receiver));
    assert!(repeated.is_empty(), "callbacks repeated without a crash or a failed POST: {repeated:?}\n{stderr}");
}
