//! Shell tools: `bash`, `bash.output`, `bash.kill`, and the [`ShellManager`]
//! that keeps background shells per session.
//!
//! - [`process`]: one shell in its own process group (spawn, output, terminate).
//! - [`output`]: the capped, lossily decoded output buffer.
//!
//! Every command runs in a process group of its own, so stopping it (timeout,
//! `bash.kill`, `,quit`) stops everything it started. A foreground command's
//! group is ended when the command ends: anything meant to keep running (a
//! server, a watcher) must be started with `background=true`.

pub mod output;
pub mod process;

use crate::environment::Environment;
use crate::tape::TapeName;
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use indexmap::IndexMap;
use output::DEFAULT_OUTPUT_CAP;
use parking_lot::{Mutex, MutexGuard};
use process::{ShellProcess, ShellStatus};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The background shells of every session. Share one per runtime (`Arc`);
/// a session only ever sees its own shells, keyed by its tape name.
#[derive(Debug)]
pub struct ShellManager {
    sessions: Mutex<HashMap<TapeName, IndexMap<String, Arc<ShellProcess>>>>,
    output_cap: usize,
}

impl Default for ShellManager {
    fn default() -> ShellManager {
        ShellManager::with_output_cap(DEFAULT_OUTPUT_CAP)
    }
}

impl ShellManager {
    pub fn new() -> ShellManager {
        ShellManager::default()
    }

    /// Keeps at most `bytes` of the newest output per shell (default 1 MiB).
    pub fn with_output_cap(bytes: usize) -> ShellManager {
        ShellManager { sessions: Mutex::default(), output_cap: bytes }
    }

    /// Stops every background shell of `session` (for `,quit`) and forgets
    /// them. Returns how many there were.
    pub async fn kill_session(&self, session: &TapeName) -> usize {
        let shells = self.lock().remove(session).unwrap_or_default();
        terminate_all(shells.into_values()).await
    }

    /// Stops every background shell of every session (shutdown).
    pub async fn kill_all(&self) -> usize {
        let sessions = std::mem::take(&mut *self.lock());
        terminate_all(sessions.into_values().flat_map(IndexMap::into_values)).await
    }

    /// The ids of a session's background shells, oldest first.
    pub fn shell_ids(&self, session: &TapeName) -> Vec<String> {
        self.lock().get(session).map(|shells| shells.keys().cloned().collect()).unwrap_or_default()
    }

    fn insert(&self, session: &TapeName, shell: ShellProcess) -> String {
        let mut sessions = self.lock();
        let shells = sessions.entry(session.clone()).or_default();
        let id = loop {
            let id = format!("bash-{:08x}", rand::random::<u32>());
            if !shells.contains_key(&id) {
                break id;
            }
        };
        shells.insert(id.clone(), Arc::new(shell));
        id
    }

    fn get(&self, session: &TapeName, id: &str) -> Result<Arc<ShellProcess>, ToolError> {
        self.lock().get(session).and_then(|shells| shells.get(id.trim())).cloned().ok_or_else(|| {
            ToolError::invalid_input(format!(
                "no background shell {id:?} in this session; use the id `bash` returned as \"started: <id>\""
            ))
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TapeName, IndexMap<String, Arc<ShellProcess>>>> {
        // Every critical section is a single map operation: a poisoned map is whole.
        self.sessions.lock()
    }
}

async fn terminate_all(shells: impl Iterator<Item = Arc<ShellProcess>>) -> usize {
    let stops: Vec<_> = shells.map(|shell| async move { shell.terminate().await }).collect();
    futures::future::join_all(stops).await.len()
}

fn default_timeout() -> u64 {
    30
}

/// Run a shell command with bash (sh when bash is missing) in the session's
/// workspace and return its combined stdout and stderr. A non-zero exit is an
/// error carrying the exit code and the output. In the foreground the command
/// is stopped, with everything it started, after `timeout_seconds`; anything
/// it leaves running in the background is stopped when it finishes. For
/// servers, watchers and long jobs use `background=true`, then read the output
/// with `bash_output` and stop it with `bash_kill`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashArgs {
    /// The command line, run as `bash -c <cmd>`.
    pub cmd: String,
    /// Directory to run in. Relative paths start at the workspace; `~` is the home directory. Default: the workspace.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Seconds to wait for a foreground command before stopping it (and returning the output so far).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Start the command and return `started: <shell_id>` at once instead of waiting for it.
    #[serde(default)]
    pub background: bool,
}

/// `bash`: foreground or background commands (see [`BashArgs`]).
pub fn bash_tool(shells: Arc<ShellManager>) -> Tool {
    Tool::typed("bash", move |args: BashArgs, ctx: ToolContext| {
        let shells = shells.clone();
        async move { run_bash(&shells, args, ctx).await }
    })
    .preserved()
    .with_capabilities([Capability::Exec])
}

async fn run_bash(shells: &ShellManager, args: BashArgs, ctx: ToolContext) -> Result<String, ToolError> {
    if args.timeout_seconds == 0 && !args.background {
        return Err(ToolError::invalid_input("timeout_seconds must be at least 1"));
    }
    let environment = ctx.environment()?;
    let cwd = working_dir(environment.as_ref(), args.cwd.as_deref()).await?;
    let session = ctx.tape.name();
    let shell = ShellProcess::spawn(environment.as_ref(), &args.cmd, args.cwd.as_deref(), shells.output_cap)
        .await
        .map_err(|error| ToolError::failed(format!("cannot start a shell in {}: {error}", cwd.display())))?;
    if args.background {
        let id = shells.insert(session, shell);
        tracing::info!(tool = "bash", session = %session, shell_id = %id, "background shell started");
        return Ok(format!("started: {id}"));
    }
    let timeout = Duration::from_secs(args.timeout_seconds);
    match tokio::time::timeout(timeout, shell.wait()).await {
        Ok(status) => {
            let output = full_output(&shell);
            let code = status.exit_code().unwrap_or(-1);
            tracing::debug!(tool = "bash", session = %session, exit_code = code, "command finished");
            if code != 0 {
                return Err(ToolError::failed(format!("exit code {code}"))
                    .with_details(json!({"exit_code": code, "output": output})));
            }
            Ok(if output.is_empty() { "(no output)".to_string() } else { output })
        }
        Err(_) => {
            shell.terminate().await;
            tracing::info!(tool = "bash", session = %session, timeout_seconds = args.timeout_seconds, "command timed out and was stopped");
            let output = full_output(&shell);
            let mut text = format!("timed out after {} seconds", args.timeout_seconds);
            if !output.is_empty() {
                text.push('\n');
                text.push_str(&output);
            }
            Ok(text)
        }
    }
}

/// The directory a command runs in (checked before the shell starts, so a
/// missing `cwd` is reported as such rather than as a missing shell).
async fn working_dir(environment: &dyn Environment, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(cwd) = cwd else {
        return Ok(environment.workspace().to_path_buf());
    };
    let dir = environment.resolve_path(cwd).map_err(|error| ToolError::invalid_input(error.to_string()))?;
    match tokio::fs::metadata(&dir).await {
        Ok(meta) if meta.is_dir() => Ok(dir),
        Ok(_) => Err(ToolError::invalid_input(format!("cwd {} is not a directory", dir.display()))),
        Err(error) => Err(ToolError::invalid_input(format!("cwd {}: {error}", dir.display()))),
    }
}

/// Everything kept of a shell's output, with a note when the front was dropped.
fn full_output(shell: &ShellProcess) -> String {
    let output = shell.output();
    match output.dropped_chars() {
        0 => output.text().to_string(),
        dropped => format!("[output trimmed: the first {dropped} characters were dropped]\n{}", output.text()),
    }
}

/// Read the output of a background shell started by `bash`, from a character
/// offset. Poll again with the returned `next_offset` to get only what is new.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashOutputArgs {
    /// The id from `started: <shell_id>`, like `bash-1a2b3c4d`.
    pub shell_id: String,
    /// Character offset to read from (0 = the beginning).
    #[serde(default)]
    pub offset: usize,
    /// Most characters to return. Default: everything from `offset`.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `bash.output`: status and an output slice of a background shell.
pub fn bash_output_tool(shells: Arc<ShellManager>) -> Tool {
    Tool::typed("bash.output", move |args: BashOutputArgs, ctx: ToolContext| {
        let shells = shells.clone();
        async move {
            let shell = shells.get(ctx.tape.name(), &args.shell_id)?;
            let status = shell.status();
            let slice = shell.output().slice(args.offset, args.limit);
            let mut text = status_block(&args.shell_id, status);
            let _ = writeln!(text, "next_offset: {}", slice.next_offset);
            if slice.dropped_before > 0 {
                let _ = writeln!(
                    text,
                    "note: {} earlier characters were dropped (only the newest output is kept); showing from offset {}",
                    slice.dropped_before,
                    args.offset + slice.dropped_before
                );
            }
            let _ = write!(text, "output:\n{}", slice.text);
            Ok::<_, ToolError>(text)
        }
    })
    .preserved()
    .with_capabilities([Capability::Exec])
}

/// Stop a background shell started by `bash`, and everything it started:
/// TERM first, KILL after 3 seconds. Its output stays readable with `bash_output`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BashKillArgs {
    /// The id from `started: <shell_id>`, like `bash-1a2b3c4d`.
    pub shell_id: String,
}

/// `bash.kill`: terminates a background shell's process group.
pub fn bash_kill_tool(shells: Arc<ShellManager>) -> Tool {
    Tool::typed("bash.kill", move |args: BashKillArgs, ctx: ToolContext| {
        let shells = shells.clone();
        async move {
            let shell = shells.get(ctx.tape.name(), &args.shell_id)?;
            let status = shell.terminate().await;
            tracing::info!(tool = "bash.kill", session = %ctx.tape.name(), shell_id = %args.shell_id, "background shell stopped");
            Ok::<_, ToolError>(status_block(&args.shell_id, status).trim_end().to_string())
        }
    })
    .preserved()
    .with_capabilities([Capability::Exec])
}

fn status_block(id: &str, status: ShellStatus) -> String {
    let code = status.exit_code().map_or("null".to_string(), |code| code.to_string());
    format!("id: {}\nstatus: {}\nexit_code: {code}\n", id.trim(), status.as_str())
}
