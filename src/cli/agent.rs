//! `bub run`, `bub chat` and `bub tools`: the agent from the command line.

use super::tape::{CliSession, one_line};
use crate::agent::{RunOptions, RunStream, StreamEvent};
use crate::home::BubHome;
use crate::setup::{Setup, workspace_or_cwd};
use anyhow::{Context, Result, bail};
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
    let workspace = workspace_or_cwd(workspace.map(PathBuf::as_path));
    Setup::from_env(home, workspace).await.context("cannot start the agent")
}

/// Streams one run; returns the error if it failed.
async fn stream_run(mut run: RunStream) -> Option<(String, String)> {
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    let mut error = None;
    let mut ends_with_newline = true;
    while let Some(event) = run.next_event().await {
        match event {
            StreamEvent::Text(delta) => {
                ends_with_newline = delta.ends_with('\n');
                let _ = write!(stdout, "{delta}");
                let _ = stdout.flush();
            }
            StreamEvent::ToolCall { name, arguments, .. } => {
                let _ = writeln!(stderr, "→ {name}({})", one_line(&arguments, 120));
            }
            StreamEvent::ToolResult { name, output, is_error, .. } => {
                let mark = if is_error { "✗" } else { "←" };
                let _ = writeln!(stderr, "{mark} {name}: {}", one_line(&output, 120));
            }
            StreamEvent::Final { .. } if !ends_with_newline => {
                let _ = writeln!(stdout);
                ends_with_newline = true;
            }
            StreamEvent::Error { kind, message } if error.is_none() => error = Some((kind, message)),
            _ => {}
        }
    }
    error
}

pub(crate) async fn run_once(home: &BubHome, message: &str, session: SessionArgs) -> Result<()> {
    let scoped = session.resolve()?;
    let setup = setup(home, session.workspace.as_ref()).await?;
    let error = stream_run(setup.agent.run(message, session.options(&scoped))).await;
    scoped.note_workspace(setup.store.clone()).await;
    setup.shutdown().await;
    if let Some((_, message)) = error {
        bail!("{message}");
    }
    Ok(())
}

pub(crate) async fn chat(home: &BubHome, session: SessionArgs) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let scoped = session.resolve()?;
    let setup = setup(home, session.workspace.as_ref()).await?;
    // Installed once: from here on Ctrl-C never kills the program.
    let mut interrupts = signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?;
    let mut lines = prompt_lines(home.root().join("history"));
    let prefix = setup.agent.command_prefix().unwrap_or(",").to_string();
    eprintln!("bub chat — session {} in {} (tape {})", scoped.session, scoped.workspace.display(), scoped.tape);
    eprintln!("Ctrl-C cancels a turn, {prefix}quit or Ctrl-D leaves");
    while let Some(line) = lines.recv().await {
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if text == format!("{prefix}quit") || text == format!("{prefix}exit") {
            break;
        }
        let run = setup.agent.run(text, session.options(&scoped));
        tokio::select! {
            error = stream_run(run) => {
                if let Some((_, message)) = error {
                    eprintln!("error: {message}");
                }
            }
            _ = interrupts.recv() => eprintln!("\n(turn cancelled)"),
        }
        scoped.note_workspace(setup.store.clone()).await;
    }
    setup.shutdown().await;
    Ok(())
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

pub(crate) async fn list_tools(home: &BubHome, json: bool) -> Result<()> {
    let setup = setup(home, None).await?;
    let mut out = std::io::stdout().lock();
    for tool in setup.agent.tools().iter() {
        let audience = if tool.agent_use() { "model+command" } else { "command" };
        if json {
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
        } else {
            let flags = if tool.preserve() { format!("{audience},preserve") } else { audience.to_string() };
            let summary = tool.description().lines().next().unwrap_or_default();
            let can = tool.capabilities().to_string();
            writeln!(out, "{:<14} {:<14} {:<24} {:<10} {summary}", tool.name(), tool.model_name(), flags, can)?;
        }
    }
    setup.store.close().await;
    Ok(())
}
