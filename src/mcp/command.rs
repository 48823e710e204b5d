//! `,mcp`: the MCP servers from inside a chat (or `bub chat`): each
//! server's state, its tools, its calls and its last error.
//!
//! - `,mcp`: one block per server.
//! - `,mcp NAME`: that server, with the model name of each tool.
//!
//! Command-only and read-only (it shows; it starts and stops nothing). Not
//! among the commands everyone may run: a server's errors can name paths and
//! hosts, so only operators allowed `mcp` see them.

use super::server::{ServerState, ServerStatus};
use super::servers::McpServers;
use crate::config::McpScope;
use crate::tools::{Capability, Tool, ToolContext, ToolError, model_name};
use schemars::JsonSchema;
use serde::Deserialize;
use std::fmt::Write;
use std::time::Duration;

/// Show the MCP servers: their state, tools and last error.
#[derive(Deserialize, JsonSchema)]
pub struct McpArgs {
    /// One server's name, to list its tools by the names the model calls.
    #[serde(default)]
    pub server: Option<String>,
}

/// The `mcp` command tool, showing `servers`.
pub fn mcp_tool(servers: McpServers) -> Tool {
    Tool::typed("mcp", move |args: McpArgs, _ctx: ToolContext| {
        let servers = servers.clone();
        async move {
            let statuses = servers.status();
            if statuses.is_empty() {
                return Ok("no MCP servers are configured (add [mcp.NAME] tables to the config)".to_string());
            }
            match args.server.as_deref().map(str::trim).filter(|name| !name.is_empty()) {
                None => Ok(statuses.iter().map(|status| describe(status, false)).collect::<Vec<_>>().join("\n\n")),
                Some(name) => match statuses.iter().find(|status| status.name == name) {
                    Some(status) => Ok(describe(status, true)),
                    None => {
                        let names: Vec<&str> = statuses.iter().map(|status| status.name.as_str()).collect();
                        Err(ToolError::invalid_input(format!(
                            "no MCP server `{name}`; the servers are {}",
                            names.join(", ")
                        )))
                    }
                },
            }
        }
    })
    .command_only()
    .with_capabilities([Capability::Read])
}

/// One server's block: a head line, its numbers, its tools, its last error.
fn describe(status: &ServerStatus, tool_names: bool) -> String {
    let mut text = format!("mcp.{}: {}", status.name, state(&status.state));
    if status.required {
        text.push_str(" (required for readiness)");
    }
    if status.scope == McpScope::Session {
        let _ = write!(text, " — one per session ({} running)", status.sessions);
    }
    if status.calls > 0 {
        let _ = write!(text, "\n  calls: {}, failed: {}", status.calls, status.errors);
        if let Some(latency) = status.last_call_latency {
            let _ = write!(text, ", last took {}", millis(latency));
        }
    }
    if !status.tools.is_empty() {
        let _ = write!(text, "\n  tools ({}):", status.tools.len());
        if tool_names {
            for tool in &status.tools {
                let _ = write!(
                    text,
                    "\n    mcp.{}.{tool} ({})",
                    status.name,
                    model_name(&format!("mcp.{}.{tool}", status.name))
                );
            }
        } else {
            let _ = write!(text, " {}", status.tools.join(", "));
        }
    }
    if let Some(error) = &status.last_error {
        let _ = write!(text, "\n  last error: {error}");
    }
    text
}

fn state(state: &ServerState) -> String {
    match state {
        ServerState::Restarting { attempt, retry_in } => {
            format!("restarting (attempt {attempt}, next in {})", millis(*retry_in))
        }
        ServerState::Failed { attempt, retry_in } => {
            format!("failed to start (attempt {attempt}, next in {})", millis(*retry_in))
        }
        other => other.label().to_string(),
    }
}

fn millis(duration: Duration) -> String {
    if duration >= Duration::from_secs(1) {
        format!("{:.1} s", duration.as_secs_f64())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: ServerState) -> ServerStatus {
        ServerStatus {
            name: "github".into(),
            state,
            tools: vec!["search".into(), "create-issue".into()],
            calls: 3,
            errors: 1,
            last_call_latency: Some(Duration::from_millis(120)),
            last_error: Some("exited with status 1: bad token".into()),
            pid: None,
            required: true,
            scope: McpScope::Gateway,
            sessions: 0,
        }
    }

    #[test]
    fn a_block_says_state_numbers_tools_and_last_error() {
        let text = describe(&status(ServerState::Restarting { attempt: 2, retry_in: Duration::from_secs(4) }), false);
        assert_eq!(
            text,
            "mcp.github: restarting (attempt 2, next in 4.0 s) (required for readiness)\n  calls: 3, failed: 1, \
             last took 120 ms\n  tools (2): search, create-issue\n  last error: exited with status 1: bad token"
        );
        let text = describe(&status(ServerState::Ready), true);
        assert!(text.contains("\n    mcp.github.create-issue (mcp_github_create-issue)"), "{text}");
    }
}
