//! One live MCP session with a server: a [`Connection`], over a program's
//! stdio, over Streamable HTTP, or over the pipes of a process someone else
//! started (a session's environment, inside its sandbox).
//!
//! Guarantees:
//! - a program bub starts gets a cleared environment: `PATH`, `HOME`, `LANG`
//!   and `TMPDIR` from the lookup it is given, and its table's `env`, never
//!   the rest of the gateway's variables (its model keys);
//! - it leads a process group of its own, and [`Connection::close`] ends
//!   the whole group (`npx` starts `node` children);
//! - its stderr is read line by line, each line cut at [`MAX_STDERR_LINE`],
//!   logged at debug with the server's name; the last [`STDERR_KEPT`] lines
//!   go into the error messages.
//!
//! A connection does no retries: the supervisor (`super::server`) decides.

use super::error::{McpError, McpErrorKind, StderrLines};
use super::http::HttpClient;
use crate::config::mcp::SecretValue;
use crate::environment::{LocalProcess, Process, ProcessControl, ProcessIo};
use http::{HeaderName, HeaderValue};
use indexmap::IndexMap;
use parking_lot::Mutex;
use rmcp::model::ClientConfig;
use rmcp::service::{ClientInitializeError, NotificationContext, Peer, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, BufReader};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// The variables of the gateway a started program gets (beside its table's `env`).
pub const PASSED_VARIABLES: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];
/// A stderr line longer than this is cut (the rest read as further lines).
pub const MAX_STDERR_LINE: u64 = 2048;
/// How many stderr lines an error message carries.
pub const STDERR_KEPT: usize = 8;
/// How long a stopped program has after TERM before KILL.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Reads a variable of the gateway's environment (the binary passes the
/// process environment; nothing in `mcp` reads it itself).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A program to start, its table resolved.
#[derive(Clone)]
pub struct StdioCommand {
    pub command: String,
    pub args: Vec<String>,
    /// Its table's `env`, over the passed variables.
    pub env: IndexMap<String, SecretValue>,
    pub cwd: Option<PathBuf>,
}

/// How long the message of a connection that ended waits for the rest of
/// the program's stderr (its last words, written just before it exited).
const STDERR_DRAIN: Duration = Duration::from_millis(250);

/// The last lines of a server's stderr.
#[derive(Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    /// False while a pipe is being read; true once it ended, or when none is.
    read_to_end: Arc<watch::Sender<bool>>,
}

impl Default for StderrTail {
    fn default() -> StderrTail {
        StderrTail { lines: Arc::default(), read_to_end: Arc::new(watch::Sender::new(true)) }
    }
}

impl StderrTail {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().iter().cloned().collect()
    }

    fn push(&self, line: String) {
        let mut lines = self.lines.lock();
        if lines.len() == STDERR_KEPT {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// Waits, at most `limit`, until the pipe was read to its end: a program
    /// that exited has its last lines read (a child still holding the pipe
    /// open is waited for no longer than `limit`).
    async fn drained(&self, limit: Duration) {
        let mut read_to_end = self.read_to_end.subscribe();
        let _ = tokio::time::timeout(limit, read_to_end.wait_for(|done| *done)).await;
    }

    /// Reads `stderr` to its end in a task of its own.
    fn follow(&self, server: &str, stderr: impl AsyncRead + Send + Unpin + 'static) {
        let (tail, server) = (self.clone(), server.to_string());
        self.read_to_end.send_replace(false);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut reader).take(MAX_STDERR_LINE).read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line).trim_end().to_string();
                        if !text.is_empty() {
                            tracing::debug!(mcp_server = %server, line = %text, "mcp server stderr");
                            tail.push(text);
                        }
                    }
                }
            }
            tail.read_to_end.send_replace(true);
        });
    }
}

/// What a failed start is explained with.
struct Diagnostics {
    stderr: StderrTail,
    /// What the program wrote on stdout that is not JSON-RPC (rmcp skips such lines).
    output: Option<NotJsonRpc>,
    handshake: Duration,
}

impl Diagnostics {
    fn describe(&self) -> String {
        let mut text = String::new();
        if let Some(line) = self.output.as_ref().and_then(|output| output.0.lock().clone()) {
            text.push_str(&format!("; it wrote what is not JSON-RPC: `{line}`"));
        }
        text.push_str(&StderrLines(&self.stderr.lines()).to_string());
        text
    }
}

/// The last line of a server's stdout that is not a JSON message.
#[derive(Clone, Default)]
struct NotJsonRpc(Arc<Mutex<Option<String>>>);

/// How much of a line [`Sniffer`] looks at (and an error message quotes).
const SNIFFED: usize = 200;

/// Passes a server's stdout through, noting a line that is not JSON.
struct Sniffer<R> {
    inner: R,
    line: Vec<u8>,
    seen: NotJsonRpc,
}

/// Notes in `seen` each complete line of `bytes` (its first [`SNIFFED`]
/// bytes gathered in `line`) that does not start like JSON. Reads the
/// bytes in place: a 64 KiB answer is scanned once, never copied.
fn observe(line: &mut Vec<u8>, seen: &NotJsonRpc, mut bytes: &[u8]) {
    let keep = |line: &mut Vec<u8>, part: &[u8]| {
        let room = SNIFFED.saturating_sub(line.len());
        line.extend_from_slice(&part[..part.len().min(room)]);
    };
    while let Some(end) = bytes.iter().position(|&byte| byte == b'\n') {
        keep(line, &bytes[..end]);
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if !text.is_empty() && !text.starts_with('{') && !text.starts_with('[') {
            *seen.0.lock() = Some(text.to_string());
        }
        line.clear();
        bytes = &bytes[end + 1..];
    }
    keep(line, bytes);
}

impl<R: AsyncRead + Unpin> AsyncRead for Sniffer<R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &poll {
            observe(&mut this.line, &this.seen, &buf.filled()[before..]);
        }
        poll
    }
}

/// What the server tells the client between calls.
#[derive(Clone, Default)]
pub(crate) struct Events {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Events {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "bub".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }
}

/// An initialized MCP session. Dropping it cancels the session; call
/// [`Connection::close`] to also end the program and wait for it.
pub struct Connection {
    server: String,
    peer: Peer<RoleClient>,
    cancel: CancellationToken,
    /// True once the session's loop ended (the transport closed).
    done: watch::Receiver<bool>,
    /// The program's exit code (minus the signal), when bub waits for it.
    exit: Option<watch::Receiver<Option<i32>>>,
    control: Option<Arc<dyn ProcessControl>>,
    stderr: StderrTail,
    events: Events,
    pid: Option<u32>,
}

/// Kills a process whose connection never came to be.
struct KillOnDrop(Option<Arc<dyn ProcessControl>>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(control) = self.0.take() {
            control.signal(true);
        }
    }
}

impl Connection {
    /// Starts `command` (see the module's guarantees) and initializes,
    /// the handshake within `handshake`.
    pub async fn stdio(
        server: &str,
        command: &StdioCommand,
        lookup: &EnvLookup,
        handshake: Duration,
    ) -> Result<Connection, McpError> {
        let (process, pid) = spawn_child(server, command, lookup)?;
        let mut connection = Connection::over_process(server, process, handshake).await?;
        connection.pid = Some(pid);
        Ok(connection)
    }

    /// Initializes over a started process's pipes; the connection owns the
    /// process (it waits for it, and ends its group on close).
    pub async fn over_process(
        server: &str,
        mut process: Box<dyn Process>,
        handshake: Duration,
    ) -> Result<Connection, McpError> {
        let ProcessIo { stdin, stdout, stderr } = process.take_io();
        let control = process.control();
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            control.signal(true);
            return Err(McpError::new(
                server,
                McpErrorKind::Start,
                "the process was started without piped stdin and stdout",
            ));
        };
        let (exit_tx, exit_rx) = watch::channel(None);
        tokio::spawn(async move {
            let code = process.wait().await.unwrap_or(-1);
            let _ = exit_tx.send(Some(code));
        });
        let mut connection = Connection::over_pipes(server, stdout, stdin, stderr, control, handshake).await?;
        connection.exit = Some(exit_rx);
        Ok(connection)
    }

    /// Initializes over `reader` (the server's stdout) and `writer` (its
    /// stdin) of a process someone else started; `stderr`, when given, is
    /// followed; `control` ends the process on [`Connection::close`] (and
    /// when the handshake fails or takes longer than `handshake`). The
    /// caller reaps the process.
    pub async fn over_pipes(
        server: &str,
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
        stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
        control: Arc<dyn ProcessControl>,
        handshake: Duration,
    ) -> Result<Connection, McpError> {
        let tail = StderrTail::default();
        if let Some(stderr) = stderr {
            tail.follow(server, stderr);
        }
        // A start given up on (its timeout) drops this future: the process goes with it.
        let mut guard = KillOnDrop(Some(control.clone()));
        let output = NotJsonRpc::default();
        let reader = Sniffer { inner: reader, line: Vec::new(), seen: output.clone() };
        let transport = AsyncRwTransport::new_client(reader, writer);
        let diagnostics = Diagnostics { stderr: tail, output: Some(output), handshake };
        let connection = Connection::initialize(server, transport, diagnostics, Some(control)).await?;
        guard.0 = None;
        Ok(connection)
    }

    /// Connects to `url` over Streamable HTTP with `headers`, and
    /// initializes within `handshake`.
    pub async fn http(
        server: &str,
        url: &str,
        headers: &IndexMap<String, SecretValue>,
        lookup: &EnvLookup,
        client: reqwest::Client,
        handshake: Duration,
    ) -> Result<Connection, McpError> {
        let mut custom = HashMap::new();
        for (name, value) in headers {
            let secret = value.resolve(|variable| lookup(variable)).map_err(|why| config_error(server, name, &why))?;
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| config_error(server, name, "not a valid header name"))?;
            let mut value = HeaderValue::from_str(secret.expose())
                .map_err(|_| config_error(server, name, "its value is not a valid header value"))?;
            value.set_sensitive(true);
            custom.insert(header, value);
        }
        let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
        let transport = StreamableHttpClientTransport::with_client(HttpClient::new(client), config);
        let diagnostics = Diagnostics { stderr: StderrTail::default(), output: None, handshake };
        Connection::initialize(server, transport, diagnostics, None).await
    }

    async fn initialize<T, E, A>(
        server: &str,
        transport: T,
        diagnostics: Diagnostics,
        control: Option<Arc<dyn ProcessControl>>,
    ) -> Result<Connection, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let events = Events::default();
        let cancel = CancellationToken::new();
        let handshake = events.clone().serve_with_ct(transport, cancel.clone());
        let message = match tokio::time::timeout(diagnostics.handshake, handshake).await {
            Ok(Ok(service)) => Ok(service),
            Ok(Err(ClientInitializeError::ConnectionClosed(_))) => {
                Err("closed the connection during the handshake".to_string())
            }
            Ok(Err(other)) => Err(format!("the handshake failed: {other}")),
            Err(_) => Err(format!("did not answer initialize within {}s", diagnostics.handshake.as_secs_f64())),
        };
        let service = match message {
            Ok(service) => service,
            Err(message) => {
                cancel.cancel();
                // Give stderr a moment: a program that failed says why there.
                diagnostics.stderr.drained(Duration::from_millis(100)).await;
                return Err(McpError::new(server, McpErrorKind::Start, format!("{message}{}", diagnostics.describe())));
            }
        };
        let stderr = diagnostics.stderr;
        let peer = service.peer().clone();
        let (done_tx, done) = watch::channel(false);
        // The session's loop ends when the transport does, or when `cancel` is.
        tokio::spawn(async move {
            let _ = service.waiting().await;
            let _ = done_tx.send(true);
        });
        Ok(Connection {
            server: server.to_string(),
            peer,
            cancel,
            done,
            exit: None,
            control,
            stderr,
            events,
            pid: None,
        })
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The program's process id, when bub started it ([`Connection::stdio`]).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The session's peer, to list tools and call them (cheap to clone).
    pub fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    pub fn stderr(&self) -> &StderrTail {
        &self.stderr
    }

    /// Resolves when the server sent `notifications/tools/list_changed`
    /// (one stored, when none was waiting).
    pub async fn tools_changed(&self) {
        self.events.tools_changed.notified().await
    }

    /// Resolves when the connection ended by itself: why, naming how the
    /// program exited when bub started it, with its last stderr lines.
    pub async fn ended(&self) -> String {
        let mut done = self.done.clone();
        let mut exit = self.exit.clone();
        let exited = async {
            match exit.as_mut() {
                Some(exit) => {
                    let _ = exit.wait_for(Option::is_some).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = done.wait_for(|closed| *closed) => {}
            _ = exited => {}
        }
        // The exit code follows the closed pipe closely.
        let code = match self.exit.clone() {
            Some(mut exit) => tokio::time::timeout(Duration::from_millis(500), exit.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|code| code.ok().and_then(|code| *code)),
            None => None,
        };
        let how = match code {
            Some(code) if code < 0 => format!("was killed by signal {}", -code),
            Some(code) => format!("exited with code {code}"),
            None => "closed the connection".to_string(),
        };
        self.stderr.drained(STDERR_DRAIN).await;
        format!("the server {how}{}", StderrLines(&self.stderr.lines()))
    }

    /// True once the connection ended by itself or was closed.
    pub fn is_closed(&self) -> bool {
        *self.done.borrow() || self.exit.as_ref().is_some_and(|exit| exit.borrow().is_some())
    }

    /// Ends the session and the program (TERM to its group, KILL after a
    /// grace), waiting for it when bub started it.
    pub async fn close(mut self) {
        self.cancel.cancel();
        let mut done = self.done.clone();
        let _ = tokio::time::timeout(STOP_GRACE, done.wait_for(|closed| *closed)).await;
        let Some(control) = self.control.take() else { return };
        control.signal(false);
        let gone = async {
            match self.exit.as_mut() {
                Some(exit) => {
                    let _ = exit.wait_for(Option::is_some).await;
                }
                None => {
                    while control.is_running() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(STOP_GRACE, gone).await;
        // What is left of the tree (children that ignored TERM) goes too.
        control.signal(true);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(control) = self.control.take() {
            control.signal(true);
        }
    }
}

fn config_error(server: &str, key: &str, why: &str) -> McpError {
    McpError::new(server, McpErrorKind::Config, format!("`{key}`: {why}"))
}

/// Starts `command` in a process group of its own, with the cleared
/// environment of the module's guarantees.
pub fn spawn(server: &str, command: &StdioCommand, lookup: &EnvLookup) -> Result<Box<dyn Process>, McpError> {
    spawn_child(server, command, lookup).map(|(process, _)| process)
}

fn spawn_child(server: &str, command: &StdioCommand, lookup: &EnvLookup) -> Result<(Box<dyn Process>, u32), McpError> {
    let mut process = tokio::process::Command::new(&command.command);
    process.args(&command.args).env_clear();
    for variable in PASSED_VARIABLES {
        if let Some(value) = lookup(variable) {
            process.env(variable, value);
        }
    }
    for (name, value) in &command.env {
        let secret = value.resolve(|variable| lookup(variable)).map_err(|why| config_error(server, name, &why))?;
        process.env(name, secret.expose());
    }
    if let Some(cwd) = &command.cwd {
        process.current_dir(cwd);
    }
    process.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(false);
    let mut child = process.spawn().map_err(|error| {
        McpError::new(server, McpErrorKind::Start, format!("cannot start `{}`: {error}", command.command))
    })?;
    let pgid = child.id().and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).ok()?)).ok_or_else(|| {
        McpError::new(server, McpErrorKind::Start, format!("`{}` exited as it started", command.command))
    })?;
    let io = ProcessIo {
        stdin: child.stdin.take().map(|pipe| Box::new(pipe) as _),
        stdout: child.stdout.take().map(|pipe| Box::new(pipe) as _),
        stderr: child.stderr.take().map(|pipe| Box::new(pipe) as _),
    };
    Ok((Box::new(LocalProcess::leading(child, pgid, io)), pgid.as_raw_pid().unsigned_abs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::CallToolRequestParams;
    use std::path::Path;

    /// Lines split across reads are judged whole; JSON lines are not noted.
    #[test]
    fn the_sniffer_notes_the_last_line_that_is_not_json() {
        let (mut line, seen) = (Vec::new(), NotJsonRpc::default());
        observe(&mut line, &seen, b"{\"jsonrpc\":\"2.0\"}\nWarn");
        assert_eq!(*seen.0.lock(), None);
        observe(&mut line, &seen, b"ing: npm is old\n{\"id\":1}\n");
        assert_eq!(seen.0.lock().as_deref(), Some("Warning: npm is old"));
        observe(&mut line, &seen, &[b'x'; 5000]);
        observe(&mut line, &seen, b"\n");
        assert_eq!(seen.0.lock().as_deref().map(str::len), Some(SNIFFED), "a long line is kept to its start");
    }

    /// A plain process's pid as a kill handle, the way a caller with its
    /// own process type hands one in.
    struct PidControl(rustix::process::Pid);

    impl ProcessControl for PidControl {
        fn signal(&self, kill: bool) {
            let signal = if kill { rustix::process::Signal::KILL } else { rustix::process::Signal::TERM };
            let _ = rustix::process::kill_process(self.0, signal);
        }

        fn is_running(&self) -> bool {
            rustix::process::test_kill_process(self.0).is_ok()
        }
    }

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixtures/server.py")
    }

    #[tokio::test]
    async fn a_process_started_elsewhere_is_spoken_to_over_its_pipes_and_ended_on_close() {
        let mut child = tokio::process::Command::new("python3")
            .arg(fixture())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = rustix::process::Pid::from_raw(child.id().unwrap() as i32).unwrap();
        let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let stderr: Box<dyn AsyncRead + Send + Unpin> = Box::new(child.stderr.take().unwrap());
        let control = Arc::new(PidControl(pid));
        let connection = Connection::over_pipes("piped", stdout, stdin, Some(stderr), control, Duration::from_secs(30))
            .await
            .unwrap();
        let tools = connection.peer().list_all_tools().await.unwrap();
        assert!(tools.iter().any(|tool| tool.name == "echo"));
        let mut params = CallToolRequestParams::new("echo");
        params.arguments = serde_json::json!({"text": "through the pipes"}).as_object().cloned();
        let answer = connection.peer().call_tool(params).await.unwrap();
        assert_eq!(serde_json::to_value(&answer.content).unwrap()[0]["text"], "through the pipes");
        assert_eq!(connection.stderr().lines(), ["fixture: started in mode normal"]);
        connection.close().await;
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await.unwrap().unwrap();
        assert!(!status.success(), "ended by a signal, not by itself: {status:?}");
    }

    #[tokio::test]
    async fn the_tail_has_a_programs_last_words_once_its_stderr_is_drained() {
        use tokio::io::AsyncWriteExt;
        let (mut stderr, reader) = tokio::io::duplex(1024);
        let tail = StderrTail::default();
        tail.follow("fx", reader);
        stderr.write_all(b"started\ncrashing now\n").await.unwrap();
        drop(stderr);
        tail.drained(Duration::from_secs(10)).await;
        assert_eq!(tail.lines(), ["started", "crashing now"]);

        // A pipe some child still holds open is waited for no longer than asked.
        let (_held, reader) = tokio::io::duplex(1024);
        let tail = StderrTail::default();
        tail.follow("fx", reader);
        let started = std::time::Instant::now();
        tail.drained(Duration::from_millis(100)).await;
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
