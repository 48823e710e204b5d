//! MCP servers with `bub tools`, `bub run` and `bub chat`: the same
//! `[mcp.NAME]` tables the gateway reads (`--config`, default
//! `$BUB_HOME/bub.toml`), started for the command and stopped after it.

use crate::support;

use serde_json::json;
use std::path::Path;
use std::process::{Command, Output};
use support::cli::{bub_command, text};
use support::fake_model::{FakeModel, Reply};

/// A config with one webhook channel (the file must be a whole gateway
/// config) and `servers`.
fn config(dir: &Path, servers: &str) -> std::path::PathBuf {
    let path = dir.join("bub.toml");
    let channel = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"]\n";
    std::fs::write(&path, format!("{channel}{servers}")).unwrap();
    path
}

/// `[mcp.NAME]` for a program given as argv.
fn server(name: &str, argv: &[String]) -> String {
    let (command, args) = argv.split_first().unwrap();
    format!("[mcp.{name}]\ncommand = {}\nargs = {}\n", json!(command), json!(args))
}

async fn run(command: Command) -> Output {
    let mut command = command;
    tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
}

#[tokio::test]
async fn bub_tools_lists_a_configured_servers_tools() {
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let file = config(home.path(), &server("fx", &support::mcp_servers::fixture("normal", None)));
    let args = ["tools", "--json", "--config", file.to_str().unwrap()];
    let output = run(bub_command(home.path(), workspace.path(), None, &args)).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let echo = text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|tool| tool["name"] == "mcp.fx.echo")
        .unwrap_or_else(|| panic!("no mcp.fx.echo in {}", text(&output.stdout)));
    assert_eq!(echo["model_name"], "mcp_fx_echo");
    assert_eq!(echo["description"], "Echoes the text.");
    // Undeclared: every capability, so every rule treats it on its closed side.
    assert_eq!(echo["capabilities"], json!(["read", "write", "exec", "network", "session"]));
}

/// The model's call reaches the server; a server that cannot start is named
/// on stderr and the run goes on without its tools. The home's `bub.toml` is
/// read without `--config`.
#[tokio::test]
async fn bub_run_calls_a_servers_tool_and_names_one_that_did_not_start() {
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let broken = "[mcp.gone]\ncommand = \"/nonexistent/mcp-server\"\nstart_timeout_seconds = 2\n";
    config(home.path(), &format!("{}{broken}", server("fx", &support::mcp_servers::fixture("normal", None))));
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("mcp_fx_echo", json!({"text": "from the server"}))]))
        .push(Reply::text("The server said so."));
    let output = run(bub_command(home.path(), workspace.path(), Some(&fake), &["run", "ask the server"])).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "The server said so.\n");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("warning: mcp server `gone` did not start: "), "{stderr}");
    assert!(stderr.contains("/nonexistent/mcp-server"), "the reason names the program: {stderr}");
    let requests = fake.requests();
    let offered: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(
        offered.contains(&"mcp_fx_echo") && !offered.iter().any(|name| name.starts_with("mcp_gone")),
        "{offered:?}"
    );
    let result = requests[1]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(result["content"], "from the server");
}
