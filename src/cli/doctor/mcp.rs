//! The config's MCP servers, started as the gateway starts them (the same
//! supervisor, the same cleared environment) and stopped again: each one up
//! with its tools, or why not. A server that does not come up fails the run
//! when the config makes it `required`, and warns otherwise (the gateway
//! runs without its tools). Session-scoped servers start in each session's
//! environment, which only the gateway makes: they are named, not tried.

use super::Finding;
use super::config::Checked;
use crate::agent::Agent;
use crate::config::{McpScope, McpServerConfig};
use crate::mcp::{McpServers, ServerState};
use indexmap::IndexMap;
use std::sync::Arc;

pub(crate) async fn check(config: Option<&Checked>) -> Vec<Finding> {
    let Some(config) = config.map(|checked| &checked.config).filter(|config| !config.mcp.is_empty()) else {
        return Vec::new();
    };
    let servers = McpServers::new(Agent::builder().build(), Arc::new(crate::cli::env::mcp_variable));
    let gateway_scoped = config.mcp.iter().filter(|(_, server)| server.scope == McpScope::Gateway);
    let gateway_scoped: IndexMap<String, McpServerConfig> =
        gateway_scoped.map(|(name, server)| (name.clone(), server.clone())).collect();
    servers.apply(&gateway_scoped).await;
    let longest = config.mcp.values().map(|server| server.start_timeout).max().unwrap_or_default();
    servers.wait_ready(longest).await;
    let statuses = servers.status();
    servers.stop_all().await;
    let mut findings = Vec::new();
    for (name, server) in &config.mcp {
        let check = format!("mcp {name}");
        if server.scope == McpScope::Session {
            findings
                .push(Finding::ok(check, "scope = \"session\": started in each session's environment, not tried here"));
            continue;
        }
        let Some(status) = statuses.iter().find(|status| &status.name == name) else { continue };
        if status.state == ServerState::Ready {
            let tools = status.tools.len();
            findings.push(Finding::ok(check, format!("up, {tools} tool{}", if tools == 1 { "" } else { "s" })));
            continue;
        }
        let why = status.last_error.clone().unwrap_or_else(|| format!("{} after {:?}", status.state.label(), longest));
        let fix = format!(
            "check `command`/`args` (or `url` and `headers`) of [mcp.{name}] and run it by hand; raise \
             start_timeout_seconds if it is only slow"
        );
        findings.push(match server.required {
            true => Finding::fail(
                check,
                format!("did not start: {why} (required: the gateway is not ready without it)"),
                fix,
            ),
            false => Finding::warn(check, format!("did not start: {why} (the gateway runs without its tools)"), fix),
        });
    }
    findings
}
