//! The load generator and fake model the gateway benches share
//! (`gateway_load`, `replicas_load`): a model that answers at once, signed
//! `?mode=sync` webhook turns, closed loops of clients over many chats.

use crate::gateway::signed_request;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The webhook secret every bench gateway is started with.
pub const SECRET: &str = "load-secret";

pub fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// A comma-separated list of numbers (`default` when unset; zeros dropped, so `0` or empty: none).
pub fn list_knob(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(value) => value.split(',').filter_map(|v| v.trim().parse().ok()).filter(|n| *n > 0).collect(),
        Err(_) => default.to_vec(),
    }
}

/// The fake model: per message id (found in the prompt as `[[id]]`), how long
/// it took and how long the request body was; the summary calls apart.
#[derive(Default)]
pub struct ModelTimes {
    pub by_message: Mutex<HashMap<String, Duration>>,
    pub bytes_by_message: Mutex<HashMap<String, usize>>,
    pub requests: AtomicUsize,
    pub summaries: AtomicUsize,
}

const SSE_ANSWER: &str = concat!(
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",",
    "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",",
    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
);

/// The compaction prompt's first words (src/agent/compaction/prompt.md).
const SUMMARY_PROMPT: &str = "You are compacting";

async fn answer(State(times): State<Arc<ModelTimes>>, body: Bytes) -> impl IntoResponse {
    let started = Instant::now();
    times.requests.fetch_add(1, Ordering::Relaxed);
    let text = String::from_utf8_lossy(&body);
    // The first message's content is the first `"content":"` of the body (model, then messages).
    let summary =
        text.find("\"content\":\"").is_some_and(|at| text[at + "\"content\":\"".len()..].starts_with(SUMMARY_PROMPT));
    // The last `[[...]]` in a turn's body is the newest user message's id (a
    // summary call's transcript holds older ones).
    let id = (!summary)
        .then(|| text.rfind("[[").and_then(|at| text[at + 2..].split_once("]]").map(|(id, _)| id.to_string())))
        .flatten();
    let mut stream = String::with_capacity(SSE_ANSWER.len() + 200);
    stream.push_str(SSE_ANSWER);
    if text.contains("\"include_usage\":true") {
        let prompt = body.len() / 4;
        stream.push_str(&format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"m\",\"choices\":[],\
             \"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":2,\"total_tokens\":{}}}}}\n\n",
            prompt + 2
        ));
    }
    stream.push_str("data: [DONE]\n\n");
    let response = ([(header::CONTENT_TYPE, "text/event-stream")], stream);
    if summary {
        times.summaries.fetch_add(1, Ordering::Relaxed);
    } else if let Some(id) = id {
        times.bytes_by_message.lock().insert(id.clone(), body.len());
        times.by_message.lock().insert(id, started.elapsed());
    }
    response
}

pub async fn start_model() -> (String, Arc<ModelTimes>) {
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

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

pub struct Sample {
    pub id: String,
    pub latency: Duration,
}

/// The text of message `id`: `turn <id> [[<id>]]`, padded with words to about
/// `chars` characters (no padding when shorter).
pub fn turn_text(id: &str, chars: usize) -> String {
    const WORDS: [&str; 16] = [
        "deploy", "the", "billing", "service", "after", "review", "of", "branch", "release", "notes", "for", "ticket",
        "cache", "latency", "tomorrow", "please",
    ];
    let mut text = format!("turn {id}");
    let tail = format!(" [[{id}]]");
    let mut i = id.bytes().map(usize::from).sum::<usize>();
    while text.len() + tail.len() < chars {
        text.push(' ');
        text.push_str(WORDS[i % WORDS.len()]);
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    text.push_str(&tail);
    text
}

/// One signed `?mode=sync` turn, message `id` with `text` in chat `chat`
/// (sender `user-<chat>`); true when it was replied.
pub async fn one_turn(
    client: &reqwest::Client,
    addr: SocketAddr,
    id: &str,
    chat: &str,
    text: String,
    failures: &AtomicUsize,
) -> bool {
    let body = json!({
        "message_id": id,
        "chat_id": chat,
        "sender_id": format!("user-{chat}"),
        "text": text,
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

/// Turn `id` of the numbered chat `chat-<n>`, short text.
pub async fn numbered_turn(
    client: &reqwest::Client,
    addr: SocketAddr,
    id: &str,
    n: usize,
    failures: &AtomicUsize,
) -> bool {
    one_turn(client, addr, id, &format!("chat-{n}"), turn_text(id, 0), failures).await
}

/// Turns `<prefix>-<first>..<prefix>-<first + count>` one after the other in
/// chat `chat`, each text about `chars` characters.
pub async fn run_sequential(
    addr: SocketAddr,
    chat: &str,
    prefix: &str,
    first: usize,
    count: usize,
    chars: usize,
) -> (Vec<Sample>, Duration, usize) {
    let client = load_client(1);
    let failures = AtomicUsize::new(0);
    let mut samples = Vec::with_capacity(count);
    let started = Instant::now();
    for i in first..first + count {
        let id = format!("{prefix}-{i}");
        let sent = Instant::now();
        if one_turn(&client, addr, &id, chat, turn_text(&id, chars), &failures).await {
            samples.push(Sample { id, latency: sent.elapsed() });
        }
    }
    (samples, started.elapsed(), failures.load(Ordering::Relaxed))
}

/// A client for the gateway keeping up to `idle` connections open.
pub fn load_client(idle: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(idle)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// Where a closed loop sends its turns: one gateway, or several replicas.
#[derive(Clone)]
pub struct Targets {
    pub addrs: Vec<SocketAddr>,
    /// Every message of a chat to the same replica (`addrs[chat % n]`), as a
    /// load balancer hashing on the chat would; otherwise message `k` of
    /// chat `c` goes to `addrs[(c + k) % n]`, as a balancer that knows
    /// nothing of chats spreads them.
    pub by_chat: bool,
}

impl Targets {
    pub fn one(addr: SocketAddr) -> Targets {
        Targets { addrs: vec![addr], by_chat: true }
    }

    /// The gateway turn `i` of chat `chat` goes to (`sessions`: the chats the turns go round).
    fn pick(&self, i: usize, chat: usize, sessions: usize) -> SocketAddr {
        let round = if self.by_chat { 0 } else { i / sessions.max(1) };
        self.addrs[(chat + round) % self.addrs.len()]
    }
}

/// Sends turns `first..first + count` (`load-<i>` in chat `i % sessions`, or
/// chat `i` when `sessions` is 0) from `clients` concurrent clients, to the
/// gateways of `targets`.
pub async fn run_phase(
    targets: &Targets,
    first: usize,
    count: usize,
    sessions: usize,
    clients: usize,
    prefix: &str,
) -> (Vec<Sample>, Duration, usize) {
    let next = Arc::new(AtomicUsize::new(first));
    let failures = Arc::new(AtomicUsize::new(0));
    let end = first + count;
    let targets = Arc::new(targets.clone());
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let next = next.clone();
            let targets = targets.clone();
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
                    let addr = targets.pick(i, chat, sessions);
                    let ok = numbered_turn(&client, addr, &id, chat, &failures).await;
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
