//! `bub run`, `bub chat` and `bub tools`: the agent from the command line.

use super::exit::{self, Exit};
use super::tape::{CliSession, one_line};
use crate::agent::{FailureKind, RunOptions, RunStream, StreamEvent};
use crate::home::BubHome;
use crate::mcp::McpServers;
use crate::setup::Setup;
use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct SessionArgs {
    /// The session to continue; each workspace has its own session of a name.
    #[arg(long, default_value = "cli:local")]
    session: String,
    /// The workspace where shell and file tools work (default: the current directory).
    #[arg(long, short = 'w')]
    workspace: Option<PathBuf>,
    /// `provider:model` for this invocation (default: the session's or BUB_MODEL).
    #[arg(long)]
    model: Option<String>,
    /// The config whose MCP servers (`[mcp.NAME]`) the agent gets (default:
    /// $BUB_HOME/bub.toml when it exists, as for the gateway).
    #[arg(long)]
    config: Option<PathBuf>,
}

impl SessionArgs {
    /// The session in its canonical workspace, and the tape the two name.
    fn resolve(&self) -> Result<CliSession> {
        CliSession::resolve(&self.session, self.workspace.as_deref())
    }

    fn options(&self, session: &CliSession) -> RunOptions {
        let mut options = RunOptions::new(session.tape.as_str());
        options.model = self.model.clone();
        options.workspace = Some(session.workspace.clone());
        options
    }
}

async fn setup(home: &BubHome, workspace: Option<&PathBuf>) -> Result<Setup> {
    let workspace = super::env::workspace_or_cwd(workspace.map(PathBuf::as_path));
    Setup::open(home, workspace, super::env::vars())
        .await
        .map_err(|error| Exit::new(exit::NOT_CONFIGURED, format!("cannot start the agent: {error:#}")).into())
}

/// The config's MCP servers, started for this command with their tools
/// added to the agent, and `,mcp`; waits until each is up or has failed
/// once (at most its start timeout), and says on stderr which are not up.
/// `None`: no config, or no server in it.
pub(crate) async fn start_mcp(home: &BubHome, config: Option<PathBuf>, setup: &Setup) -> Result<Option<McpServers>> {
    let Some(path) = super::gateway::config_file(home, config) else { return Ok(None) };
    let config = crate::config::GatewayConfig::load(&path)
        .map_err(|error| Exit::new(exit::NOT_CONFIGURED, format!("cannot start the agent: {error}")))?;
    if config.mcp.is_empty() {
        return Ok(None);
    }
    let servers = McpServers::new(setup.agent.clone(), std::sync::Arc::new(super::env::mcp_variable));
    setup.agent.add_tool(crate::mcp::command::mcp_tool(servers.clone()));
    servers.apply(&config.mcp).await;
    let longest = config.mcp.values().map(|server| server.start_timeout).max().unwrap_or_default();
    servers.wait_ready(longest).await;
    for status in servers.status() {
        if status.state != crate::mcp::ServerState::Ready {
            let why = status.last_error.map(|error| format!(": {error}")).unwrap_or_default();
            let scope = if status.scope == crate::config::McpScope::Session { " (one per session)" } else { "" };
            let state = match status.state {
                crate::mcp::ServerState::Starting => "is still starting",
                crate::mcp::ServerState::Failed { .. } => "did not start",
                crate::mcp::ServerState::Restarting { .. } => "went down",
                _ => "is not running",
            };
            eprintln!("warning: mcp server `{}`{scope} {state}{why}; its tools are missing", status.name);
        }
    }
    Ok(Some(servers))
}

/// Stops the MCP servers, then the agent's environments and store.
async fn shutdown(setup: &Setup, mcp: Option<&McpServers>) {
    if let Some(mcp) = mcp {
        mcp.stop_all().await;
    }
    setup.shutdown().await;
}

/// Shows a run's events: the answer on stdout, tool calls, results and
/// notices on stderr. On a terminal the answer streams as it comes; into a
/// pipe or file each model step's text is written when the step ends, so a
/// script never reads the fragment of an answer that was cut off and asked
/// again.
struct Printer {
    live: bool,
    /// The current step's text, not yet written (only when not `live`).
    held: String,
    ends_with_newline: bool,
    /// The run's first error.
    error: Option<(FailureKind, String)>,
    /// Steered lines the run ended without reading.
    unread: Vec<String>,
}

impl Printer {
    fn new() -> Printer {
        use std::io::IsTerminal;
        Printer {
            live: std::io::stdout().is_terminal(),
            held: String::new(),
            ends_with_newline: true,
            error: None,
            unread: Vec::new(),
        }
    }

    /// Prints every event of `run` until it ends.
    async fn print_all(&mut self, run: &mut RunStream) {
        while let Some(event) = run.next_event().await {
            self.show(event);
        }
        self.finish();
    }

    /// The run is over: text still held (a step that failed without a
    /// cut, say) is written, and the line ended.
    fn finish(&mut self) {
        let held = std::mem::take(&mut self.held);
        self.write_out(&held);
        self.end_line();
    }

    fn show(&mut self, event: StreamEvent) {
        let mut stderr = std::io::stderr();
        match event {
            StreamEvent::Text(delta) if self.live => self.write_out(&delta),
            StreamEvent::Text(delta) => self.held.push_str(&delta),
            StreamEvent::ToolCall { name, arguments, .. } => {
                self.end_line();
                let _ = writeln!(stderr, "→ {name}({})", one_line(&arguments, 120));
            }
            StreamEvent::ToolResult { name, output, is_error, .. } => {
                let mark = if is_error { "✗" } else { "←" };
                let _ = writeln!(stderr, "{mark} {name}: {}", one_line(&output, 120));
            }
            StreamEvent::Final { .. } => {
                let held = std::mem::take(&mut self.held);
                self.write_out(&held);
                self.end_line();
            }
            StreamEvent::Cut { kind, message, retrying, .. } => {
                // Asked again: the fragment is void. Not asked again: it is
                // all there is, shown as such (the error follows).
                if !retrying {
                    let held = std::mem::take(&mut self.held);
                    self.write_out(&held);
                }
                self.held.clear();
                self.end_line();
                let next = if retrying { "asking the model again" } else { "giving up" };
                let _ = writeln!(stderr, "⚠ the answer was cut off ({kind}: {message}); {next}");
            }
            StreamEvent::Unread(lines) => self.unread.extend(lines),
            StreamEvent::Error { kind, message } if self.error.is_none() => self.error = Some((kind, message)),
            _ => {}
        }
    }

    fn write_out(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut stdout = std::io::stdout();
        self.ends_with_newline = text.ends_with('\n');
        let _ = write!(stdout, "{text}");
        let _ = stdout.flush();
    }

    /// Ends the answer's line, so what follows starts on its own.
    fn end_line(&mut self) {
        if !self.ends_with_newline {
            let _ = writeln!(std::io::stdout());
            self.ends_with_newline = true;
        }
    }

    /// The run's error as `bub run` reports it: a failed comma command has
    /// said so in its output already.
    fn into_result(self) -> Result<()> {
        match self.error {
            None => Ok(()),
            Some((FailureKind::Command, _)) => Err(Exit::quiet(exit::FAILED).into()),
            Some((kind, message)) => Err(Exit::new(exit::for_run_error(kind), message).into()),
        }
    }
}

/// A signal that stops `bub run`.
struct Stopped {
    name: &'static str,
    code: u8,
}

/// Resolves at the first SIGINT or SIGTERM.
async fn stop_signal(
    interrupt: &mut tokio::signal::unix::Signal,
    terminate: &mut tokio::signal::unix::Signal,
) -> Stopped {
    tokio::select! {
        _ = interrupt.recv() => Stopped { name: "SIGINT", code: exit::INTERRUPTED },
        _ = terminate.recv() => Stopped { name: "SIGTERM", code: exit::TERMINATED },
    }
}

pub(crate) async fn run_once(home: &BubHome, message: &str, session: SessionArgs) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let scoped = session.resolve()?;
    let setup = setup(home, Some(&scoped.workspace)).await?;
    let mcp = start_mcp(home, session.config.clone(), &setup).await?;
    // From here a signal stops the run (its tools killed, the interruption
    // recorded) before bub exits; the default action would orphan the tools.
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let mut run = setup.agent.run(message, session.options(&scoped));
    let mut printer = Printer::new();
    let stopped = tokio::select! {
        biased;
        stopped = stop_signal(&mut interrupt, &mut terminate) => Some(stopped),
        () = printer.print_all(&mut run) => None,
    };
    if let Some(Stopped { name, code }) = stopped {
        printer.end_line();
        run.cancel(&format!("{name} in bub run")).await;
        scoped.note_workspace(setup.store.clone()).await;
        shutdown(&setup, mcp.as_ref()).await;
        return Err(
            Exit::new(code, format!("interrupted by {name}; the run was stopped and recorded as interrupted")).into()
        );
    }
    scoped.note_workspace(setup.store.clone()).await;
    shutdown(&setup, mcp.as_ref()).await;
    printer.into_result()
}

/// What `bub chat` does with a line typed while a turn runs.
enum Typed {
    /// Joins the running turn before its next model step.
    Steered,
    /// Runs after the turn, in the order typed (a command, `,quit` too, or
    /// a line the turn could no longer take).
    Queued(String),
}

pub(crate) async fn chat(home: &BubHome, session: SessionArgs) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let scoped = session.resolve()?;
    let setup = setup(home, Some(&scoped.workspace)).await?;
    let mcp = start_mcp(home, session.config.clone(), &setup).await?;
    // Installed once: from here on Ctrl-C never kills the program.
    let mut interrupts = signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?;
    let mut lines = prompt_lines(home.root().join("history"));
    let prefix = setup.agent.command_prefix().unwrap_or(",").to_string();
    let is_quit = |text: &str| text == format!("{prefix}quit") || text == format!("{prefix}exit");
    eprintln!("bub chat — session {} in {} (tape {})", scoped.session, scoped.workspace.display(), scoped.tape);
    eprintln!("Ctrl-C cancels a turn, {prefix}quit or Ctrl-D leaves");
    let mut queued: std::collections::VecDeque<String> = Default::default();
    let mut input_open = true;
    'turns: loop {
        let line = match queued.pop_front() {
            Some(line) => line,
            None if input_open => match lines.recv().await {
                Some(line) => line,
                None => break,
            },
            None => break,
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if is_quit(text) {
            break;
        }
        let options = session.options(&scoped);
        let tape = options.tape.clone();
        let mut run = setup.agent.run(text, options);
        let mut printer = Printer::new();
        loop {
            tokio::select! {
                biased;
                _ = interrupts.recv() => {
                    printer.end_line();
                    // What the turn had not read yet is typed input all the same: it runs next.
                    let unread = run.cancel("Ctrl-C in bub chat").await;
                    scoped.note_workspace(setup.store.clone()).await;
                    eprintln!("(turn cancelled)");
                    for line in unread.into_iter().rev() {
                        queued.push_front(line);
                    }
                    continue 'turns;
                }
                line = lines.recv(), if input_open => {
                    let Some(line) = line else {
                        // Ctrl-D: the turn finishes, then bub leaves.
                        input_open = false;
                        continue;
                    };
                    match typed_during_turn(&setup, &tape, &prefix, line, !queued.is_empty()) {
                        Typed::Steered => eprintln!("(added to the running turn)"),
                        Typed::Queued(line) => queued.push_back(line),
                    }
                }
                event = run.next_event() => match event {
                    Some(event) => printer.show(event),
                    None => break,
                },
            }
        }
        printer.finish();
        scoped.note_workspace(setup.store.clone()).await;
        // Lines the turn ended without reading run next, before any typed later.
        for line in printer.unread.drain(..).rev() {
            queued.push_front(line);
        }
        if let Some((kind, message)) = printer.error.take()
            && kind != FailureKind::Command
        {
            eprintln!("error: {message}");
        }
    }
    shutdown(&setup, mcp.as_ref()).await;
    Ok(())
}

/// A line typed while a turn runs steers it, as in the gateway (busy =
/// steer); a command (`,quit` included: it leaves once the turn is over) or
/// an empty line does not, nor any line typed after one that waits
/// (`behind`): lines reach the model in the order they were typed.
fn typed_during_turn(setup: &Setup, tape: &str, prefix: &str, line: String, behind: bool) -> Typed {
    let text = line.trim();
    if behind || text.is_empty() || crate::command::is_command(text, prefix) {
        return Typed::Queued(line);
    }
    if setup.agent.steer(tape, text) { Typed::Steered } else { Typed::Queued(line) }
}

/// Lines typed at the prompt, read on a blocking thread with history. A closed
/// channel means end of input.
fn prompt_lines(history: PathBuf) -> tokio::sync::mpsc::Receiver<String> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        let Ok(mut editor) = rustyline::DefaultEditor::new() else { return };
        let _ = editor.load_history(&history);
        loop {
            match editor.readline("› ") {
                Ok(line) => {
                    let _ = editor.add_history_entry(line.as_str());
                    let _ = editor.save_history(&history);
                    if tx.blocking_send(line).is_err() {
                        break;
                    }
                }
                Err(rustyline::error::ReadlineError::Interrupted) => continue,
                Err(_) => break,
            }
        }
    });
    rx
}

pub(crate) async fn list_tools(home: &BubHome, json: bool, config: Option<PathBuf>) -> Result<()> {
    let setup = setup(home, None).await?;
    let mcp = start_mcp(home, config, &setup).await?;
    let mut out = std::io::stdout().lock();
    if json {
        for tool in setup.agent.tools().iter() {
            let line = serde_json::json!({
                "name": tool.name(),
                "model_name": tool.model_name(),
                "agent_use": tool.agent_use(),
                "preserve": tool.preserve(),
                "capabilities": tool.capabilities().iter().map(|c| c.name()).collect::<Vec<_>>(),
                "description": tool.description(),
                "parameters": tool.parameters(),
            });
            writeln!(out, "{line}")?;
        }
    } else {
        let rows: Vec<[String; 5]> = setup
            .agent
            .tools()
            .iter()
            .map(|tool| {
                let audience = if tool.agent_use() { "model+command" } else { "command" };
                let flags = if tool.preserve() { format!("{audience},preserve") } else { audience.to_string() };
                let summary = tool.description().lines().next().unwrap_or_default().to_string();
                [tool.name().to_string(), tool.model_name(), flags, tool.capabilities().to_string(), summary]
            })
            .collect();
        let header = ["TOOL", "MODEL NAME", "USE", "CAPABILITIES", "DESCRIPTION"].map(String::from);
        write_columns(&mut out, std::iter::once(&header).chain(&rows))?;
    }
    if let Some(mcp) = mcp {
        mcp.stop_all().await;
    }
    setup.store.close().await;
    Ok(())
}

/// Writes rows as left-aligned columns, each as wide as its widest cell (in
/// characters) plus two spaces; the last column is not padded.
fn write_columns<'a>(out: &mut impl Write, rows: impl Iterator<Item = &'a [String; 5]> + Clone) -> std::io::Result<()> {
    let mut widths = [0usize; 5];
    for row in rows.clone() {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[index]));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}
