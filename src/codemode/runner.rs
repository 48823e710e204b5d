//! The host side of code mode's subprocess protocol: runs model-written Python
//! in an already-started child (see [`child_argv`]) and serves its tool calls.
//!
//! Why a child process: the code needs a real Python, but every `tools.<name>(..)`
//! it makes must run on the host, through the same executor and hooks as a
//! direct tool call. So the child ([`CHILD_SOURCE`], stdlib only) runs the code
//! and forwards each call over its stdio; this module executes the calls through
//! the [`CallTool`] callback and sends the results back.
//!
//! Protocol, JSON lines both ways:
//! - host → child: first `{"type":"run","code","filename","tools"}`, then per
//!   call `{"type":"result","id","value"}` or `{"type":"error","id","message"}`;
//! - child → host: `{"type":"call","id","name","arguments"}`,
//!   `{"type":"output","data"}`, finally `{"type":"done"}` or
//!   `{"type":"failed","error","error_type","message","traceback"}`;
//! - any other stdout line is output (raw writes to the real stdout).
//!
//! What this side guarantees:
//! - lines of any length; tool calls run concurrently, each in its own task, and
//!   results are written back as they finish;
//! - output is collected in order and pushed to the [`OutputSink`] as it arrives;
//! - nothing the child sends can panic the host: malformed protocol messages are
//!   logged with `tracing` and, for calls, answered with an error;
//! - when the run ends (or this future is dropped) outstanding tool calls are
//!   aborted. Killing the process tree stays with the caller, which owns it.

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

/// The child script, run as `python -u -c CHILD_SOURCE`.
pub const CHILD_SOURCE: &str = include_str!("child.py");

/// How much of the child's stderr is kept for crash reports (the newest bytes).
pub const STDERR_CAP: usize = 64 * 1024;
/// After the child exited, how long its remaining stdout may still take to arrive.
const EXIT_DRAIN: Duration = Duration::from_millis(500);
/// After stdout closed without a final message, how long to wait for the exit code.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long stderr may take to reach end of file once the child is gone (a
/// process the code started may hold it open).
const STDERR_GRACE: Duration = Duration::from_millis(250);
/// On timeout, how long to keep taking in output the child already sent.
const TIMEOUT_DRAIN: Duration = Duration::from_millis(100);

/// argv to start the child: `[python, "-u", "-c", CHILD_SOURCE]`.
pub fn child_argv(python: &str) -> Vec<String> {
    vec![python.to_owned(), "-u".to_owned(), "-c".to_owned(), CHILD_SOURCE.to_owned()]
}

/// A tool call from the code: (the name it called, one of the run's `tools`;
/// keyword arguments) → structured result, or an error message (raised as `ToolError` in the code).
pub type CallTool = Arc<dyn Fn(String, Value) -> BoxFuture<'static, Result<Value, String>> + Send + Sync>;

/// Receives printed output as it arrives.
pub type OutputSink = Arc<dyn Fn(String) + Send + Sync>;

/// The stdio of a started child.
pub struct ChildIo {
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
}

/// Why a run produced no result. Every variant carries what the code printed.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// The code ran longer than allowed.
    #[error("timed out after {} seconds", after.as_secs_f64())]
    Timeout { after: Duration, output: String },
    /// The code raised an exception it did not catch. `traceback` holds only
    /// frames of the model's code.
    #[error("raised {}", join_error(error_type, message))]
    Failed { error_type: String, message: String, traceback: String, output: String },
    /// The runner died or broke the protocol. `exit_code` is the child's,
    /// `None` if unknown; `stderr` is its newest [`STDERR_CAP`] bytes.
    #[error("exited unexpectedly {}", exit_text(*exit_code))]
    Crashed { exit_code: Option<i32>, stderr: String, output: String },
}

impl CodeError {
    /// What the code printed before the run ended.
    pub fn output(&self) -> &str {
        match self {
            CodeError::Timeout { output, .. }
            | CodeError::Failed { output, .. }
            | CodeError::Crashed { output, .. } => output,
        }
    }
}

fn exit_text(exit_code: Option<i32>) -> String {
    exit_code.map_or_else(|| "(exit code unknown)".to_owned(), |code| format!("with code {code}"))
}

fn join_error(error_type: &str, message: &str) -> String {
    if message.is_empty() { error_type.to_owned() } else { format!("{error_type}: {message}") }
}

/// Runs `code` in an already-started child (see [`child_argv`]) and returns
/// everything it printed.
///
/// `tools` are the names the code may call as `tools.<name>` (Python
/// identifiers: code mode's session names them, see
/// [`super::stub::code_names`]); each call goes to `call_tool`. Output is also pushed to `write` as it arrives.
/// `wait_exit` resolves with the child's exit code when it exits (the caller
/// owns the process and kills its whole tree afterwards in every case).
pub async fn run_code(
    io: ChildIo,
    code: &str,
    tools: &[String],
    call_tool: CallTool,
    write: OutputSink,
    timeout: Duration,
    wait_exit: impl Future<Output = Option<i32>> + Send,
) -> Result<String, CodeError> {
    let deadline = tokio::time::sleep(timeout);
    let ChildIo { stdin, stdout, stderr } = io;

    let stderr_tail = Arc::new(Mutex::new(Tail::new(STDERR_CAP)));
    let mut stderr_task = AbortOnDrop(tokio::spawn(collect_stderr(stderr, stderr_tail.clone()).in_current_span()));
    let (to_child, lines_to_child) = mpsc::unbounded_channel();
    let _writer = AbortOnDrop(tokio::spawn(write_lines(stdin, lines_to_child).in_current_span()));

    let filename = format!("<run_code-{:08x}>", rand::random::<u32>());
    let run_message = json!({"type": "run", "code": code, "filename": filename, "tools": tools});
    let mut run = Run {
        output: String::new(),
        write,
        to_child,
        tools: tools.iter().cloned().collect(),
        call_tool,
        calls: JoinSet::new(),
    };
    run.send(&run_message);

    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    let wait_exit = wait_exit.fuse();
    tokio::pin!(deadline, wait_exit);
    let exit_drain = tokio::time::sleep(Duration::MAX);
    tokio::pin!(exit_drain);
    let mut exited: Option<Option<i32>> = None;

    loop {
        tokio::select! {
            read = stdout.read_until(b'\n', &mut line) => match read {
                Ok(0) => break,
                Ok(_) => {
                    let message = classify(&line);
                    line.clear();
                    match message {
                        Incoming::Output(data) => run.push_output(data),
                        Incoming::Call { id, name, arguments } => run.start_call(id, name, arguments),
                        Incoming::Done => return Ok(run.output),
                        Incoming::Failed { error_type, message, traceback } => {
                            return Err(CodeError::Failed { error_type, message, traceback, output: run.output });
                        }
                        Incoming::Anomaly { problem, reply_to } => run.anomaly(problem, reply_to),
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "code mode: reading the child's stdout failed");
                    break;
                }
            },
            Some(joined) = run.calls.join_next(), if !run.calls.is_empty() => run.finish_call(joined),
            code = &mut wait_exit, if exited.is_none() => {
                exited = Some(code);
                exit_drain.as_mut().reset(Instant::now() + EXIT_DRAIN);
            }
            () = &mut exit_drain, if exited.is_some() => {
                tracing::warn!("code mode: the child exited but its stdout stayed open");
                break;
            }
            () = &mut deadline => {
                run.drain_output(&mut stdout, &mut line).await;
                return Err(CodeError::Timeout { after: timeout, output: run.output });
            }
        }
    }

    // Stdout closed (or broke) without a final message: the runner died.
    drop(run.calls);
    let exit_code = match exited {
        Some(code) => code,
        None => tokio::time::timeout(EXIT_WAIT, wait_exit).await.unwrap_or(None),
    };
    let _ = tokio::time::timeout(STDERR_GRACE, &mut stderr_task.0).await;
    let stderr = stderr_tail.lock().render();
    Err(CodeError::Crashed { exit_code, stderr, output: run.output })
}

/// The state of one run while it is being served.
struct Run {
    output: String,
    write: OutputSink,
    to_child: mpsc::UnboundedSender<Vec<u8>>,
    tools: HashSet<String>,
    call_tool: CallTool,
    calls: JoinSet<(Value, Result<Value, String>)>,
}

impl Run {
    fn push_output(&mut self, data: String) {
        if data.is_empty() {
            return;
        }
        self.output.push_str(&data);
        (self.write)(data);
    }

    fn send(&self, message: &Value) {
        match serde_json::to_vec(message) {
            Ok(mut bytes) => {
                bytes.push(b'\n');
                // Fails only once the writer stopped (the child closed stdin);
                // stdout's end of file follows and ends the run.
                let _ = self.to_child.send(bytes);
            }
            Err(error) => tracing::error!(%error, "code mode: a message for the child does not serialize"),
        }
    }

    fn reply_error(&self, id: Value, message: String) {
        self.send(&json!({"type": "error", "id": id, "message": message}));
    }

    fn start_call(&mut self, id: Value, name: String, arguments: Value) {
        if !self.tools.contains(&name) {
            tracing::warn!(tool = %name, "code mode: the child called a tool outside this run's tools");
            self.reply_error(id, format!("no tool named {name:?} in this run"));
            return;
        }
        if !arguments.is_object() {
            tracing::warn!(tool = %name, "code mode: tool call arguments are not an object");
            self.reply_error(id, format!("the arguments of tools.{name} must be a JSON object"));
            return;
        }
        let call_tool = self.call_tool.clone();
        let calling = async move {
            let call = AssertUnwindSafe(async { call_tool(name.clone(), arguments).await });
            let outcome = call.catch_unwind().await.unwrap_or_else(|_| Err(format!("tool {name} panicked")));
            (id, outcome)
        };
        self.calls.spawn(calling.in_current_span());
    }

    fn finish_call(&mut self, joined: Result<(Value, Result<Value, String>), JoinError>) {
        match joined {
            Ok((id, Ok(value))) => self.send(&json!({"type": "result", "id": id, "value": value})),
            Ok((id, Err(message))) => self.reply_error(id, message),
            // Calls catch their panics and are aborted only when the run ends.
            Err(error) => tracing::error!(%error, "code mode: a tool call task failed"),
        }
    }

    fn anomaly(&mut self, problem: String, reply_to: Option<Value>) {
        tracing::warn!(%problem, "code mode: malformed message from the child");
        if let Some(id) = reply_to {
            self.reply_error(id, format!("malformed tool call: {problem}"));
        }
    }

    /// Takes in output the child already sent when the run times out; stops at
    /// end of file, at a final message or after [`TIMEOUT_DRAIN`].
    async fn drain_output(&mut self, stdout: &mut (impl AsyncBufReadExt + Unpin), line: &mut Vec<u8>) {
        let until = Instant::now() + TIMEOUT_DRAIN;
        while let Ok(Ok(read)) = tokio::time::timeout_at(until, stdout.read_until(b'\n', line)).await {
            if read == 0 {
                return;
            }
            let message = classify(line);
            line.clear();
            match message {
                Incoming::Output(data) => self.push_output(data),
                Incoming::Done | Incoming::Failed { .. } => return,
                Incoming::Call { .. } | Incoming::Anomaly { .. } => {}
            }
        }
    }
}

/// A protocol message from the child, as sent.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum ChildMessage {
    Call {
        id: Value,
        name: String,
        #[serde(default)]
        arguments: Value,
    },
    Output {
        data: String,
    },
    Done,
    Failed {
        #[serde(default)]
        error: String,
        #[serde(default)]
        error_type: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        traceback: String,
    },
}

/// One stdout line of the child, understood.
#[derive(Debug, PartialEq)]
enum Incoming {
    Output(String),
    Call {
        id: Value,
        name: String,
        arguments: Value,
    },
    Done,
    Failed {
        error_type: String,
        message: String,
        traceback: String,
    },
    /// A protocol message that does not decode; a call with an id gets an error reply.
    Anomaly {
        problem: String,
        reply_to: Option<Value>,
    },
}

fn classify(line: &[u8]) -> Incoming {
    let body = line.strip_suffix(b"\n").unwrap_or(line);
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    match serde_json::from_slice::<ChildMessage>(body) {
        Ok(ChildMessage::Output { data }) => Incoming::Output(data),
        Ok(ChildMessage::Call { id, name, arguments }) => Incoming::Call { id, name, arguments },
        Ok(ChildMessage::Done) => Incoming::Done,
        Ok(ChildMessage::Failed { error, error_type, message, traceback }) => {
            let (error_type, message) = match (error_type.is_empty(), message.is_empty()) {
                // An older child sends only `error` ("<Type>: <message>").
                (true, true) => match error.split_once(": ") {
                    Some((kind, text)) => (kind.to_owned(), text.to_owned()),
                    None => (error, String::new()),
                },
                _ => (error_type, message),
            };
            Incoming::Failed { error_type, message, traceback }
        }
        Err(error) => match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(object))
                if matches!(
                    object.get("type").and_then(Value::as_str),
                    Some("call" | "output" | "done" | "failed")
                ) =>
            {
                let is_call = object.get("type").and_then(Value::as_str) == Some("call");
                let reply_to = object.get("id").filter(|_| is_call).cloned();
                Incoming::Anomaly { problem: error.to_string(), reply_to }
            }
            _ => Incoming::Output(String::from_utf8_lossy(line).into_owned()),
        },
    }
}

async fn write_lines(mut stdin: Box<dyn AsyncWrite + Send + Unpin>, mut lines: mpsc::UnboundedReceiver<Vec<u8>>) {
    while let Some(line) = lines.recv().await {
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(error) = written.await {
            tracing::debug!(%error, "code mode: the child stopped reading its stdin");
            return;
        }
    }
}

async fn collect_stderr(mut stderr: Box<dyn AsyncRead + Send + Unpin>, tail: Arc<Mutex<Tail>>) {
    let mut chunk = vec![0; 8 * 1024];
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => tail.lock().push(&chunk[..read]),
        }
    }
}

/// The newest `cap` bytes of a stream, and how many were dropped before them.
struct Tail {
    cap: usize,
    bytes: Vec<u8>,
    dropped: usize,
}

impl Tail {
    fn new(cap: usize) -> Tail {
        Tail { cap, bytes: Vec::new(), dropped: 0 }
    }

    fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
        // Trim in batches so a chatty stream does not shift the buffer on every read.
        if self.bytes.len() > self.cap * 2 {
            self.trim();
        }
    }

    fn trim(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.cap);
        self.bytes.drain(..excess);
        self.dropped += excess;
    }

    fn render(&mut self) -> String {
        self.trim();
        let text = String::from_utf8_lossy(&self.bytes);
        if self.dropped == 0 {
            text.into_owned()
        } else {
            format!("[{} earlier bytes of stderr omitted]\n{text}", self.dropped)
        }
    }
}

/// Aborts a spawned task when the run ends, however it ends.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, duplex};

    #[test]
    fn lines_that_are_not_protocol_messages_are_output() {
        assert_eq!(classify(b"hello\n"), Incoming::Output("hello\n".into()));
        assert_eq!(classify(b"[1, 2]\n"), Incoming::Output("[1, 2]\n".into()));
        assert_eq!(classify(b"{\"type\":\"other\"}\n"), Incoming::Output("{\"type\":\"other\"}\n".into()));
        assert_eq!(classify(b"\xff\xfe\n"), Incoming::Output("\u{fffd}\u{fffd}\n".into()));
        assert_eq!(classify(b"{\"type\":\"output\",\"data\":\"x\"}\n"), Incoming::Output("x".into()));
    }

    #[test]
    fn malformed_protocol_messages_are_anomalies() {
        let call = classify(b"{\"type\":\"call\",\"id\":7,\"name\":3}\n");
        assert!(matches!(call, Incoming::Anomaly { reply_to: Some(Value::Number(_)), .. }), "{call:?}");
        let output = classify(b"{\"type\":\"output\"}\n");
        assert!(matches!(output, Incoming::Anomaly { reply_to: None, .. }), "{output:?}");
    }

    #[test]
    fn a_failure_with_only_error_is_split() {
        let failed = classify(b"{\"type\":\"failed\",\"error\":\"KeyError: 'x'\",\"traceback\":\"tb\"}");
        let expected =
            Incoming::Failed { error_type: "KeyError".into(), message: "'x'".into(), traceback: "tb".into() };
        assert_eq!(failed, expected);
    }

    #[test]
    fn the_stderr_tail_keeps_the_newest_bytes() {
        let mut tail = Tail::new(4);
        for chunk in [b"abc".as_slice(), b"defgh", b"ij"] {
            tail.push(chunk);
        }
        assert_eq!(tail.render(), "[6 earlier bytes of stderr omitted]\nghij");
    }

    /// A scripted child on in-memory pipes: returns its ends of stdin and stdout.
    fn fake_child() -> (ChildIo, BufReader<DuplexStream>, DuplexStream) {
        let (stdin, child_stdin) = duplex(1 << 16);
        let (child_stdout, stdout) = duplex(1 << 16);
        let (_, stderr) = duplex(64);
        let io = ChildIo { stdin: Box::new(stdin), stdout: Box::new(stdout), stderr: Box::new(stderr) };
        (io, BufReader::new(child_stdin), child_stdout)
    }

    fn echo_tool() -> CallTool {
        Arc::new(|_, arguments| async move { Ok(arguments) }.boxed())
    }

    async fn next_message(stdin: &mut BufReader<DuplexStream>) -> Value {
        let mut line = String::new();
        stdin.read_line(&mut line).await.expect("a line from the host");
        serde_json::from_str(&line).expect("JSON from the host")
    }

    #[tokio::test]
    async fn bad_calls_get_error_replies_and_a_silent_exit_is_a_crash() {
        let (io, mut stdin, mut stdout) = fake_child();
        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
        let child = async move {
            let run = next_message(&mut stdin).await;
            assert_eq!(run["type"], "run");
            assert_eq!(run["tools"], json!(["echo"]));
            assert!(run["filename"].as_str().is_some_and(|f| f.starts_with("<run_code-")));
            stdout.write_all(b"{\"type\":\"call\",\"id\":1,\"name\":\"echo\",\"arguments\":[1]}\n").await.unwrap();
            stdout.write_all(b"{\"type\":\"call\",\"id\":2,\"name\":\"rm\",\"arguments\":{}}\n").await.unwrap();
            stdout.write_all(b"{\"type\":\"call\",\"id\":3,\"name\":null}\n").await.unwrap();
            stdout
                .write_all(b"{\"type\":\"call\",\"id\":4,\"name\":\"echo\",\"arguments\":{\"a\":1}}\n")
                .await
                .unwrap();
            let mut replies = Vec::new();
            for _ in 0..4 {
                replies.push(next_message(&mut stdin).await);
            }
            replies.sort_by_key(|reply| reply["id"].as_i64());
            stdout.write_all(b"partial line, then the child dies").await.unwrap();
            drop(stdout);
            let _ = exit_tx.send(3);
            replies
        };
        let tools = ["echo".to_owned()];
        let (replies, result) = tokio::join!(
            child,
            run_code(io, "", &tools, echo_tool(), Arc::new(|_| {}), Duration::from_secs(20), async {
                exit_rx.await.ok()
            })
        );
        let kinds: Vec<&str> = replies.iter().map(|r| r["type"].as_str().unwrap_or("")).collect();
        assert_eq!(kinds, ["error", "error", "error", "result"]);
        assert_eq!(replies[3]["value"], json!({"a": 1}));
        match result {
            Err(CodeError::Crashed { exit_code: Some(3), output, .. }) => {
                assert_eq!(output, "partial line, then the child dies")
            }
            other => panic!("expected a crash, got {other:?}"),
        }
    }
}
