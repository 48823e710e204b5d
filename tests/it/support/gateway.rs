//! Helpers for tests of the real `bub gateway` binary over loopback HTTP.
//!
//! - [`GatewayProcess`]: starts `bub gateway --listen 127.0.0.1:0` on a
//!   `BUB_HOME`, waits for its `listening on` line, and stops it gracefully
//!   (SIGTERM) or hard (SIGKILL). Its stderr goes to a file in the home
//!   (`gateway-<n>.stderr`, one per start) and is printed when a start fails.
//! - [`signed_request`]: one signed `POST /webhook/<channel>?mode=<mode>`.
//! - [`CallbackReceiver`]: a callback URL that records every POST (headers,
//!   raw and JSON body), can refuse the first N with 429 or 500 or take its
//!   time to answer, counts POSTs per `Idempotency-Key`, and waits for K
//!   distinct keys.
//!
//! ```ignore
//! let fake = FakeModel::start_answering("hello").await;
//! let receiver = CallbackReceiver::start().await;
//! let mut env = fake.vars("openai:gpt-test");
//! env.push(("BUB_WEBHOOK_SECRET".into(), "s3cret".into()));
//! env.push(("BUB_WEBHOOK_CALLBACK_URL".into(), receiver.url()));
//! let gateway = GatewayProcess::start(home.path(), &env, &[]).await;
//! let body = json!({"message_id": "m1", "chat_id": "c1", "sender_id": "u1", "text": "hi"});
//! let response = signed_request(&client(), gateway.addr, "webhook", "async", &body, "s3cret").await?;
//! assert_eq!(response.status(), 202);
//! assert!(receiver.wait_for_keys(1, Duration::from_secs(60)).await);
//! gateway.stop().await;
//! ```

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::{Mutex, MutexGuard};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a start may take before the test fails (debug binary, loaded CI machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM may take before the process is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The line the gateway prints on stderr once it accepts requests.
const LISTENING: &str = "bub gateway listening on http://";

static STARTS: AtomicUsize = AtomicUsize::new(0);

/// A running `bub gateway`; killed (SIGKILL) when dropped.
pub struct GatewayProcess {
    /// Where it listens (`127.0.0.1:<port>`).
    pub addr: SocketAddr,
    /// Its stderr, for debugging.
    pub stderr_path: PathBuf,
    child: Option<Child>,
}

impl GatewayProcess {
    /// Spawns `bub gateway --listen 127.0.0.1:0 <args>` (no `--listen` is added
    /// when `args` has one) with a clean environment: `PATH`, `HOME` and
    /// `BUB_HOME` set to `home`, `BUB_LOG=info`, then `env` (which may
    /// override any of them). Waits up to [`START_TIMEOUT`] for the
    /// `listening on` line; panics with the stderr when it does not come.
    pub async fn start(home: &Path, env: &[(String, String)], args: &[&str]) -> GatewayProcess {
        GatewayProcess::spawn(home, env, args).wait_listening().await
    }

    /// Waits up to [`START_TIMEOUT`] for the `listening on` line.
    async fn wait_listening(mut self) -> GatewayProcess {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = self.stderr();
            if let Some(addr) = listening_addr(&text) {
                self.addr = addr;
                return self;
            }
            if let Some(status) = self.child_mut().try_wait().expect("poll bub gateway") {
                panic!("bub gateway exited ({status}) before listening; stderr:\n{text}");
            }
            if Instant::now() > deadline {
                self.kill_hard();
                panic!("bub gateway did not listen within {START_TIMEOUT:?}; stderr:\n{}", self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Like [`GatewayProcess::start`] without waiting for the `listening on`
    /// line (`addr` stays unset), to stop a gateway while it is starting.
    pub fn spawn(home: &Path, env: &[(String, String)], args: &[&str]) -> GatewayProcess {
        GatewayProcess::spawn_with(home, env, args, |_| {})
    }

    /// [`GatewayProcess::start`] with the command changed by `customize`
    /// before the spawn (a terminal as its stdin, a session of its own).
    pub async fn start_with(
        home: &Path,
        env: &[(String, String)],
        args: &[&str],
        customize: impl FnOnce(&mut Command),
    ) -> GatewayProcess {
        let process = GatewayProcess::spawn_with(home, env, args, customize);
        process.wait_listening().await
    }

    fn spawn_with(
        home: &Path,
        env: &[(String, String)],
        args: &[&str],
        customize: impl FnOnce(&mut Command),
    ) -> GatewayProcess {
        std::fs::create_dir_all(home).expect("create BUB_HOME");
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let stderr_path = home.join(format!("gateway-{}-{n}.stderr", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).expect("create the gateway's stderr file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_bub"));
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("BUB_HOME", home)
            .env("BUB_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(home)
            .arg("gateway");
        if !args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        command.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        customize(&mut command);
        let child = command.spawn().expect("spawn bub gateway");
        GatewayProcess { addr: SocketAddr::from(([127, 0, 0, 1], 0)), stderr_path, child: Some(child) }
    }

    /// Waits up to `timeout` for the process to exit on its own (it is
    /// killed after that, or once it listens); its status, `None` when it
    /// did not exit, and its stderr.
    pub async fn exit_within(mut self, timeout: Duration) -> (Option<std::process::ExitStatus>, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child_mut().try_wait().expect("poll bub gateway") {
                return (Some(status), self.stderr());
            }
            if Instant::now() > deadline || listening_addr(&self.stderr()).is_some() {
                self.kill_hard();
                return (None, self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits up to `timeout` for a running gateway to exit on its own (it is
    /// killed after that); its status, `None` when it did not exit, and its
    /// stderr.
    pub async fn wait_exit(mut self, timeout: Duration) -> (Option<std::process::ExitStatus>, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child_mut().try_wait().expect("poll bub gateway") {
                return (Some(status), self.stderr());
            }
            if Instant::now() > deadline {
                self.kill_hard();
                return (None, self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The process id (for `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the process wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("the gateway process was already stopped")
    }

    /// Whether the process ended on its own (or was stopped): a supervisor's look.
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => !matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// SIGKILL, then reaps the process.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to [`STOP_TIMEOUT`] (SIGKILL after that);
    /// returns whether it exited successfully on its own.
    pub async fn stop(mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }
}

impl GatewayProcess {
    /// Writes `config_text` to `<home>/bub.toml` and starts on it (see [`GatewayProcess::start`]).
    pub async fn start_with_config(home: &Path, env: &[(String, String)], config_text: &str) -> GatewayProcess {
        let path = home.join("bub.toml");
        std::fs::write(&path, config_text).expect("write bub.toml");
        let path = path.to_str().expect("a UTF-8 temporary path");
        GatewayProcess::start(home, env, &["--config", path]).await
    }
}

/// Runs `bub gateway` on `config_text` (in `<home>/bub.toml`), expecting it to
/// refuse to start; returns its stderr. One that starts instead is killed
/// after [`START_TIMEOUT`] and fails the test (rather than hanging it).
pub fn refused_start(home: &Path, config_text: &str) -> String {
    let path = home.join("bub.toml");
    std::fs::write(&path, config_text).expect("write bub.toml");
    let n = STARTS.fetch_add(1, Ordering::Relaxed);
    let stderr_path = home.join(format!("refused-{}-{n}.stderr", std::process::id()));
    let stderr = std::fs::File::create(&stderr_path).expect("create the gateway's stderr file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_bub"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BUB_HOME", home)
        .args(["gateway", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("run bub gateway");
    let deadline = Instant::now() + START_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("poll bub gateway") {
            break Some(status);
        }
        if Instant::now() > deadline
            || listening_addr(&std::fs::read_to_string(&stderr_path).unwrap_or_default()).is_some()
        {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        status.is_some_and(|status| !status.success()),
        "bub gateway started on a config it should refuse:\n{stderr}"
    );
    stderr
}

/// Runs `bub <args>` (another process, as an admin would beside a running
/// gateway) on `home`; returns (success, stdout, stderr).
pub fn bub_cli(home: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_bub"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("BUB_HOME", home)
        .env("HOME", home)
        .args(args)
        .output()
        .expect("run bub");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

/// The address of the `listening on` line in a gateway's stderr, once it came.
pub fn listening_addr(stderr: &str) -> Option<SocketAddr> {
    let line = stderr.lines().find_map(|line| line.split_once(LISTENING).map(|(_, rest)| rest))?;
    line.split_whitespace().next()?.parse().ok()
}

/// A loopback HTTP client: no proxy, generous timeouts.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("build an HTTP client")
}

/// `POST http://<addr>/webhook/<channel>?mode=<mode>` with `body`, signed
/// with `secret` now. Connection errors are returned, not panicked on, so
/// callers can retry like a real webhook client.
pub async fn signed_request(
    client: &reqwest::Client,
    addr: SocketAddr,
    channel: &str,
    mode: &str,
    body: &Value,
    secret: &str,
) -> reqwest::Result<reqwest::Response> {
    let bytes = serde_json::to_vec(body).expect("encode the webhook body");
    let timestamp = chrono::Utc::now().timestamp();
    let signature = bub_webhook::sign(secret, timestamp, &bytes);
    client
        .post(format!("http://{addr}/webhook/{channel}?mode={mode}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header(bub_webhook::TIMESTAMP_HEADER, timestamp.to_string())
        .header(bub_webhook::SIGNATURE_HEADER, signature)
        .body(bytes)
        .send()
        .await
}

/// The text of an `sse` answer's `delta` events, in order.
pub fn sse_deltas(stream: &str) -> String {
    stream
        .split("\n\n")
        .filter(|event| event.contains("event: delta"))
        .filter_map(|event| event.lines().find_map(|line| line.strip_prefix("data:")))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap()["text"].as_str().unwrap().to_string())
        .collect()
}

/// How a [`CallbackReceiver`] refuses its first requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackFault {
    /// `429 Too Many Requests` with `Retry-After: 1`.
    RateLimited,
    /// `500 Internal Server Error`.
    ServerError,
    /// `400 Bad Request`: a refusal retrying will not change.
    Rejected,
}

/// One POST the receiver got.
#[derive(Debug, Clone)]
pub struct CallbackPost {
    pub headers: HeaderMap,
    pub raw: Bytes,
    /// The JSON body (`Value::Null` when it was not JSON).
    pub body: Value,
    /// The status it was answered with.
    pub status: u16,
    pub at: Instant,
}

impl CallbackPost {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Idempotency-Key` header.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.header(bub_webhook::IDEMPOTENCY_KEY_HEADER)
    }

    /// The body's `reply_to` message ids.
    pub fn reply_to(&self) -> Vec<String> {
        self.body["reply_to"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
    }

    /// Whether the signature headers match the raw body for `secret`.
    pub fn signed_with(&self, secret: &str) -> bool {
        let (Some(timestamp), Some(signature)) =
            (self.header(bub_webhook::TIMESTAMP_HEADER), self.header(bub_webhook::SIGNATURE_HEADER))
        else {
            return false;
        };
        let now = chrono::Utc::now().timestamp();
        bub_webhook::verify(&[secret], timestamp, signature, &self.raw, now, Duration::from_secs(3600)).is_ok()
    }
}

#[derive(Default)]
struct ReceiverState {
    posts: Mutex<Vec<CallbackPost>>,
    fault: Option<CallbackFault>,
    /// Requests still to refuse with `fault`.
    refuse: AtomicUsize,
    /// How long each POST waits, once recorded, before it is answered.
    delay: Option<Duration>,
    /// POSTs recorded and not answered yet.
    unanswered: AtomicUsize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock()
}

/// A callback URL on loopback recording every POST; stops when dropped.
pub struct CallbackReceiver {
    pub addr: SocketAddr,
    state: Arc<ReceiverState>,
    task: tokio::task::JoinHandle<()>,
}

impl CallbackReceiver {
    /// Answers every POST with `200 {"message_id": "cb-<n>"}`.
    pub async fn start() -> CallbackReceiver {
        CallbackReceiver::serve(ReceiverState::default()).await
    }

    /// Answers the first `count` POSTs with `fault`, then like [`CallbackReceiver::start`].
    pub async fn start_failing(fault: CallbackFault, count: usize) -> CallbackReceiver {
        CallbackReceiver::serve(ReceiverState {
            fault: Some(fault),
            refuse: AtomicUsize::new(count),
            ..Default::default()
        })
        .await
    }

    /// Records each POST when it arrives (as a receiver that has taken the
    /// reply), then answers like [`CallbackReceiver::start`] `delay` later.
    pub async fn start_slow(delay: Duration) -> CallbackReceiver {
        CallbackReceiver::serve(ReceiverState { delay: Some(delay), ..Default::default() }).await
    }

    async fn serve(state: ReceiverState) -> CallbackReceiver {
        let state = Arc::new(state);
        let app = Router::new().fallback(record).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the callback receiver");
        let addr = listener.local_addr().expect("callback receiver address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        CallbackReceiver { addr, state, task }
    }

    /// `http://127.0.0.1:<port>/callback`.
    pub fn url(&self) -> String {
        format!("http://{}/callback", self.addr)
    }

    /// Every POST so far, in arrival order (refused ones included).
    pub fn posts(&self) -> Vec<CallbackPost> {
        lock(&self.state.posts).clone()
    }

    /// The POSTs answered with 2xx.
    pub fn accepted(&self) -> Vec<CallbackPost> {
        self.posts().into_iter().filter(|post| (200..300).contains(&post.status)).collect()
    }

    /// The distinct idempotency keys of the accepted POSTs.
    pub fn keys(&self) -> BTreeSet<String> {
        self.accepted().iter().filter_map(|post| post.idempotency_key().map(String::from)).collect()
    }

    /// POSTs recorded but not answered yet (see [`CallbackReceiver::start_slow`]).
    pub fn unanswered(&self) -> usize {
        self.state.unanswered.load(Ordering::SeqCst)
    }

    /// How many POSTs (refused ones included) carried each `Idempotency-Key`.
    pub fn posts_per_key(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for post in self.posts() {
            *counts.entry(post.idempotency_key().unwrap_or("(none)").to_string()).or_default() += 1;
        }
        counts
    }

    /// Waits until `count` distinct keys were accepted; false after `timeout`.
    pub async fn wait_for_keys(&self, count: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |receiver| receiver.keys().len() >= count).await
    }

    /// Waits until `done(self)` holds; false after `timeout`.
    pub async fn wait_until(&self, timeout: Duration, done: impl Fn(&CallbackReceiver) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for CallbackReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(State(state): State<Arc<ReceiverState>>, headers: HeaderMap, raw: Bytes) -> Response {
    let refused = state
        .fault
        .filter(|_| state.refuse.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1)).is_ok());
    let status = match refused {
        Some(CallbackFault::RateLimited) => StatusCode::TOO_MANY_REQUESTS,
        Some(CallbackFault::ServerError) => StatusCode::INTERNAL_SERVER_ERROR,
        Some(CallbackFault::Rejected) => StatusCode::BAD_REQUEST,
        None => StatusCode::OK,
    };
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let n = {
        let mut posts = lock(&state.posts);
        posts.push(CallbackPost { headers, raw, body, status: status.as_u16(), at: Instant::now() });
        posts.len()
    };
    if let Some(delay) = state.delay {
        state.unanswered.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
        state.unanswered.fetch_sub(1, Ordering::SeqCst);
    }
    match refused {
        Some(CallbackFault::RateLimited) => {
            (status, [(header::RETRY_AFTER, "1")], axum::Json(json!({"error": "rate limited", "retry_after": 1})))
                .into_response()
        }
        Some(CallbackFault::ServerError) => (status, axum::Json(json!({"error": "receiver failed"}))).into_response(),
        Some(CallbackFault::Rejected) => (status, axum::Json(json!({"error": "unknown chat"}))).into_response(),
        None => axum::Json(json!({"message_id": format!("cb-{n}")})).into_response(),
    }
}

/// CPU time (user + system) a process (`"self"` or a pid) has used so far, from
/// `/proc/<pid>/stat`, for the load benchmarks' CPU per turn.
#[allow(dead_code)] // the benches'
pub fn cpu_time(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here; 100 ticks/s on Linux.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// The `p`th percentile (nearest rank) of `sorted` durations; zero when empty.
#[allow(dead_code)] // the benches'
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
