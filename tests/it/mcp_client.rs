//! bub as an MCP client (`bub::mcp`), against servers nobody here wrote
//! (`@modelcontextprotocol/server-everything` over stdio and Streamable
//! HTTP, pinned in `tests/mcp/`) and against the misbehaving fixture
//! `tests/mcp/fixtures/server.py`: tools become `mcp.SERVER.TOOL` bub
//! tools, results map from MCP content, and each server's faults (a start
//! that never ends, garbage, a crash mid-call, a hang) stay its own.

use crate::support::mcp_servers;
use crate::support::scripted_agent;
use bub::agent::{Agent, RunOptions, StreamEvent};
use bub::config::mcp::{McpScope, McpServerConfig, McpTransport, SecretValue};
use bub::mcp::{EnvLookup, McpServers, ServerState, ServerStatus};
use bub::tape::{InMemoryTapeStore, Tape, TapeName, TapeQuery};
use bub::tools::{Tool, ToolContext, ToolError};
use bub_channel::Secret;
use indexmap::IndexMap;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A table starting `argv` over stdio.
fn stdio(argv: Vec<String>) -> McpServerConfig {
    let (command, args) = argv.split_first().unwrap();
    McpServerConfig {
        transport: McpTransport::Stdio {
            command: command.clone(),
            args: args.to_vec(),
            env: IndexMap::new(),
            cwd: None,
        },
        scope: McpScope::Gateway,
        required: false,
        start_timeout: Duration::from_secs(60),
        call_timeout: Duration::from_secs(30),
        capabilities: None,
        tool_capabilities: IndexMap::new(),
    }
}

fn fixture(mode: &str, state: Option<&Path>) -> McpServerConfig {
    stdio(mcp_servers::fixture(mode, state))
}

/// The gateway's environment as the servers' lookup sees it: the test
/// process's, plus a model key that must never reach a server.
fn lookup() -> EnvLookup {
    Arc::new(|name: &str| match name {
        "OPENAI_API_KEY" => Some("sk-from-the-gateway".to_string()),
        "BUB_TEST_GIVEN" => Some("given to the server".to_string()),
        other => std::env::var(other).ok(),
    })
}

fn table(servers: &[(&str, McpServerConfig)]) -> IndexMap<String, McpServerConfig> {
    servers.iter().map(|(name, config)| (name.to_string(), config.clone())).collect()
}

/// A set applied to `servers`, each up or failed once.
async fn started(agent: &Agent, servers: &[(&str, McpServerConfig)]) -> McpServers {
    let set = McpServers::new(agent.clone(), lookup());
    set.apply(&table(servers)).await;
    set.wait_ready(Duration::from_secs(90)).await;
    set
}

fn status(set: &McpServers, name: &str) -> ServerStatus {
    set.status().into_iter().find(|status| status.name == name).unwrap()
}

fn tool(agent: &Agent, name: &str) -> Tool {
    agent.tools().get(name).cloned().unwrap_or_else(|| panic!("no tool {name}"))
}

/// Calls `tool` outside a run, its workspace `workspace`, as call `call_id`.
async fn call(tool: &Tool, arguments: Value, workspace: &Path) -> Result<String, ToolError> {
    let tape = Tape::new(Arc::new(InMemoryTapeStore::new()), TapeName::new("mcp-client").unwrap());
    let context = ToolContext::detached(tape, workspace);
    tool.call(arguments, context).await.map(|value| value.as_str().unwrap_or_default().to_string())
}

/// Polls `condition` for up to `limit`.
async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    condition()
}

/// What the tool calls of a run returned, as the model read them.
fn results(outcome: &bub::agent::RunOutcome) -> Vec<(String, String, bool)> {
    outcome
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolResult { name, output, is_error, .. } => Some((name.clone(), output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

fn offered(request: &bub::model::ChatRequest) -> Vec<String> {
    request.tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect()
}

/// The checks both transports of server-everything pass.
async fn everything_tools_work(agent: &Agent, workspace: &Path) {
    let echo = tool(agent, "mcp.everything.echo");
    assert_eq!(echo.model_name(), "mcp_everything_echo");
    assert_eq!(echo.source(), Some("mcp.everything"));
    assert!(echo.description().to_lowercase().contains("echo"), "{}", echo.description());
    assert_eq!(echo.parameters()["type"], "object");
    assert!(echo.parameters()["properties"]["message"].is_object(), "{}", echo.parameters());
    assert_eq!(call(&echo, json!({"message": "hello"}), workspace).await.unwrap(), "Echo: hello");

    let sum = tool(agent, "mcp.everything.get-sum");
    assert_eq!(sum.model_name(), "mcp_everything_get-sum");
    assert!(call(&sum, json!({"a": 2, "b": 3}), workspace).await.unwrap().contains('5'));
    // The server's `isError` answer to bad arguments: a tool error the model reads.
    let wrong = call(&sum, json!({"a": "two", "b": 3}), workspace).await.unwrap_err();
    assert_eq!(wrong.kind, bub::tools::ToolErrorKind::Tool);
    assert!(wrong.message.contains("Invalid arguments for tool get-sum"), "{wrong}");
    assert_eq!(wrong.details, Some(json!({"mcp_server": "everything"})));
}

#[tokio::test]
async fn server_everything_over_stdio_gives_bub_tools_and_their_results() {
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let set = started(&agent, &[("everything", stdio(mcp_servers::everything_stdio()))]).await;
    assert_eq!(status(&set, "everything").state, ServerState::Ready, "{:?}", status(&set, "everything"));
    let workspace = store.dir.path();
    everything_tools_work(&agent, workspace).await;

    // An image is written into the workspace and named in the text.
    let image = call(&tool(&agent, "mcp.everything.get-tiny-image"), json!({}), workspace).await.unwrap();
    assert!(image.contains("[image image/png, "), "{image}");
    assert!(image.contains("saved as mcp/everything/detached-1.png"), "{image}");
    let png = std::fs::read(workspace.join("mcp/everything/detached-1.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");

    let weather =
        call(&tool(&agent, "mcp.everything.get-structured-content"), json!({"location": "New York"}), workspace)
            .await
            .unwrap();
    let weather: Value = serde_json::from_str(&weather).unwrap();
    assert_eq!(weather["temperature"], 33);

    let status = status(&set, "everything");
    assert!(status.calls >= 5 && status.errors >= 1, "{status:?}");
    assert!(status.last_call_latency.is_some());
    set.stop_all().await;
    assert!(agent.tools().get("mcp.everything.echo").is_none(), "a stopped set takes its tools away");
}

/// server-everything serving Streamable HTTP on `port`, until dropped.
async fn everything_on(port: u16) -> tokio::process::Child {
    let argv = mcp_servers::everything_streamable_http();
    let server = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let listening =
        eventually(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await;
    assert!(listening, "server-everything did not listen on port {port}");
    server
}

#[tokio::test]
async fn server_everything_over_streamable_http_gives_the_same_tools_and_comes_back_after_it_went_away() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = everything_on(port).await;
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let mut config = stdio(vec!["unused".into()]);
    let headers = IndexMap::from([("X-Bub-Test".to_string(), SecretValue::Value(Secret::new("not printed")))]);
    config.transport = McpTransport::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers };
    config.call_timeout = Duration::from_secs(5);
    let set = started(&agent, &[("everything", config)]).await;
    assert_eq!(status(&set, "everything").state, ServerState::Ready, "{:?}", status(&set, "everything"));
    everything_tools_work(&agent, store.dir.path()).await;

    server.kill().await.unwrap();
    let echo = tool(&agent, "mcp.everything.echo");
    let error = call(&echo, json!({"message": "anyone?"}), store.dir.path()).await.unwrap_err();
    assert!(error.message.starts_with("mcp server `everything`: "), "{error}");
    let noticed = eventually(Duration::from_secs(15), || status(&set, "everything").state != ServerState::Ready).await;
    assert!(noticed, "the broken session was noticed: {:?}", status(&set, "everything"));

    let _back = everything_on(port).await;
    let recovered =
        eventually(Duration::from_secs(30), || status(&set, "everything").state == ServerState::Ready).await;
    assert!(recovered, "{:?}", status(&set, "everything"));
    assert_eq!(call(&echo, json!({"message": "back"}), store.dir.path()).await.unwrap(), "Echo: back");
    set.stop_all().await;
}

#[tokio::test]
async fn a_model_calls_an_mcp_tool_the_call_is_on_the_tape_and_a_huge_result_is_spilled() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    let set = started(&agent, &[("everything", stdio(mcp_servers::everything_stdio()))]).await;
    let huge = "word ".repeat(40_000);
    model.tool_calls(&[("mcp_everything_echo", json!({"message": "from the model"}))]);
    model.tool_calls(&[("mcp_everything_echo", json!({"message": huge}))]);
    model.text("Done.");
    let outcome = agent.run("echo twice", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, None);
    let results = results(&outcome);
    assert_eq!(results[0], ("mcp_everything_echo".to_string(), "Echo: from the model".to_string(), false));
    assert!(results[1].1.contains("spill_read(handle="), "the huge result was spilled: {}", &results[1].1[..200]);
    assert!(results[1].1.len() < huge.len() / 4);
    assert!(offered(&model.requests()[0]).contains(&"mcp_everything_echo".to_string()));

    let entries = store.tape("chat").read(&TapeQuery::all()).await.unwrap();
    let recorded = serde_json::to_string(&entries.iter().map(|entry| &entry.payload).collect::<Vec<_>>()).unwrap();
    assert!(recorded.contains("mcp_everything_echo") && recorded.contains("Echo: from the model"), "{recorded:.2000}");
    set.stop_all().await;
}

#[tokio::test]
async fn the_other_pinned_servers_start_and_list_their_tools() {
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let root = store.dir.path();
    let set = started(
        &agent,
        &[("files", stdio(mcp_servers::filesystem(&[root]))), ("memory", stdio(mcp_servers::memory()))],
    )
    .await;
    assert!(status(&set, "files").tools.contains(&"read_text_file".to_string()), "{:?}", status(&set, "files"));
    assert!(status(&set, "memory").tools.contains(&"create_entities".to_string()), "{:?}", status(&set, "memory"));
    assert!(agent.tools().get("mcp_files_list_directory").is_some());
    set.stop_all().await;
}

#[tokio::test]
async fn a_server_that_never_answers_initialize_fails_its_start_by_name_and_keeps_retrying() {
    let (agent, _model, _store) = scripted_agent(vec![]).await;
    let mut silent = fixture("silent", None);
    // Long enough for python to start and say so on stderr on a busy machine.
    silent.start_timeout = Duration::from_secs(2);
    let set = started(&agent, &[("mute", silent)]).await;
    let mute = status(&set, "mute");
    assert!(matches!(mute.state, ServerState::Failed { attempt: 1, .. }), "{mute:?}");
    let why = mute.last_error.unwrap();
    assert!(why.starts_with("did not answer initialize within 2s"), "{why}");
    assert!(why.contains("its last lines on stderr: fixture: started in mode silent"), "{why}");
    let error = set.server("mute").unwrap().call("echo", None).await.unwrap_err();
    assert!(error.to_string().starts_with("mcp server `mute`: has not started"), "{error}");
    let retried = eventually(Duration::from_secs(15), || {
        matches!(status(&set, "mute").state, ServerState::Failed { attempt: 2.., .. })
    })
    .await;
    assert!(retried, "a failed start is tried again");
    set.stop_all().await;
}

#[tokio::test]
async fn a_server_answering_garbage_gives_an_error_naming_it() {
    let (agent, _model, _store) = scripted_agent(vec![]).await;
    let mut garbage = fixture("garbage", None);
    garbage.start_timeout = Duration::from_secs(2);
    let set = started(&agent, &[("noise", garbage)]).await;
    let status = status(&set, "noise");
    assert!(matches!(status.state, ServerState::Failed { .. }), "{status:?}");
    let why = status.last_error.unwrap();
    assert!(why.contains("it wrote what is not JSON-RPC: `this is not JSON-RPC <html>`"), "{why}");
    let error = set.server("noise").unwrap().call("echo", None).await.unwrap_err();
    assert!(error.to_string().starts_with("mcp server `noise`: has not started"), "{error}");
    assert!(error.to_string().contains("not JSON-RPC"), "{error}");
    set.stop_all().await;
}

#[tokio::test]
async fn a_crash_mid_call_is_a_clear_error_and_the_next_call_after_the_restart_succeeds() {
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let marker = store.dir.path().join("crashed-once");
    let set =
        started(&agent, &[("flaky", fixture("normal", Some(&marker))), ("healthy", fixture("normal", None))]).await;
    let healthy_pid = status(&set, "healthy").pid.unwrap();
    let flaky_pid = status(&set, "flaky").pid.unwrap();
    let crash = tool(&agent, "mcp.flaky.crash");
    let echo = tool(&agent, "mcp.healthy.echo");

    let (crashed, echoed) = tokio::join!(
        call(&crash, json!({}), store.dir.path()),
        call(&echo, json!({"text": "still here"}), store.dir.path())
    );
    let error = crashed.unwrap_err().to_string();
    assert!(error.contains("mcp server `flaky`: went down during the call of crash"), "{error}");
    assert!(error.contains("exited with code 3") && error.contains("crashing during the call"), "{error}");
    assert_eq!(echoed.unwrap(), "still here");

    let restarted = eventually(Duration::from_secs(10), || status(&set, "flaky").state == ServerState::Ready).await;
    assert!(restarted, "{:?}", status(&set, "flaky"));
    assert_ne!(status(&set, "flaky").pid, Some(flaky_pid));
    assert_eq!(call(&crash, json!({}), store.dir.path()).await.unwrap(), "survived", "the same tool works again");
    assert_eq!(call(&echo, json!({"text": "again"}), store.dir.path()).await.unwrap(), "again");
    assert_eq!(status(&set, "healthy").pid, Some(healthy_pid), "the healthy server was never touched");
    let flaky = status(&set, "flaky");
    assert_eq!((flaky.calls, flaky.errors), (2, 1));
    set.stop_all().await;
    assert!(!Path::new(&format!("/proc/{healthy_pid}")).exists(), "stopping ended the program");
}

#[tokio::test]
async fn a_hanging_call_times_out_and_the_server_keeps_answering() {
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let mut config = fixture("normal", None);
    config.call_timeout = Duration::from_millis(500);
    let set = started(&agent, &[("slow", config)]).await;
    let error = call(&tool(&agent, "mcp.slow.hang"), json!({}), store.dir.path()).await.unwrap_err();
    assert_eq!(error.to_string(), "[tool] mcp server `slow`: hang did not answer within 0.5s");
    assert_eq!(call(&tool(&agent, "mcp.slow.echo"), json!({"text": "ok"}), store.dir.path()).await.unwrap(), "ok");
    assert_eq!(status(&set, "slow").state, ServerState::Ready);
    set.stop_all().await;
}

#[tokio::test]
async fn is_error_is_a_tool_error_the_model_reads() {
    let (agent, model, _store) = scripted_agent(vec![]).await;
    let set = started(&agent, &[("fx", fixture("normal", None))]).await;
    model.tool_calls(&[("mcp_fx_fail", json!({}))]);
    model.text("It failed.");
    let outcome = agent.run("try it", RunOptions::new("chat")).collect().await;
    let (name, output, is_error) = &results(&outcome)[0];
    assert_eq!((name.as_str(), *is_error), ("mcp_fx_fail", true));
    assert!(output.contains("it went wrong"), "{output}");
    set.stop_all().await;
}

#[tokio::test]
async fn a_tool_list_change_takes_effect_for_the_next_run_not_the_running_one() {
    // `wait_for_list` holds the turn until the new list reached the
    // registry, so the turn's next call sees whether it kept its tools.
    let handle: Arc<std::sync::OnceLock<Agent>> = Arc::new(std::sync::OnceLock::new());
    let watched = handle.clone();
    let wait_for_list = Tool::new("wait_for_list", "waits", json!({"type": "object"}), move |_, _| {
        let watched = watched.clone();
        async move {
            let agent = watched.get().cloned().unwrap();
            let landed = eventually(Duration::from_secs(10), || agent.tools().get("mcp.lists.added").is_some()).await;
            Ok::<_, ToolError>(json!(landed))
        }
    });
    let (agent, model, _store) = scripted_agent(vec![wait_for_list]).await;
    let _ = handle.set(agent.clone());
    let set = started(&agent, &[("lists", fixture("normal", None))]).await;
    model.tool_calls(&[("mcp_lists_change", json!({}))]);
    model.tool_calls(&[("wait_for_list", json!({}))]);
    model.tool_calls(&[("mcp_lists_added", json!({}))]);
    model.text("Changed.");
    let first = agent.run("change it", RunOptions::new("chat")).collect().await;
    let first = results(&first);
    assert_eq!(first[0].1, "changing");
    assert_eq!(first[1].1, "true", "the new list reached the registry during the turn");
    assert!(first[2].2 && first[2].1.contains("not_found"), "the running turn kept its tools: {:?}", first[2]);
    assert!(model.requests().iter().all(|r| !offered(r).contains(&"mcp_lists_added".to_string())));

    model.tool_calls(&[("mcp_lists_added", json!({}))]);
    model.text("Used it.");
    let second = agent.run("use the new one", RunOptions::new("chat")).collect().await;
    assert_eq!(results(&second)[0].1, "added here");
    assert!(offered(model.requests().last().unwrap()).contains(&"mcp_lists_added".to_string()));
    assert!(status(&set, "lists").tools.contains(&"added".to_string()));
    set.stop_all().await;
}

#[tokio::test]
async fn apply_restarts_only_the_changed_server_and_removes_a_removed_ones_tools() {
    let (agent, _model, _store) = scripted_agent(vec![]).await;
    let (a, b) = (fixture("normal", None), fixture("normal", None));
    let set = started(&agent, &[("a", a.clone()), ("b", b.clone())]).await;
    let (a_pid, b_pid) = (status(&set, "a").pid.unwrap(), status(&set, "b").pid.unwrap());

    let mut changed = b.clone();
    changed.call_timeout = Duration::from_secs(7);
    set.apply(&table(&[("a", a.clone()), ("b", changed.clone())])).await;
    set.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(status(&set, "a").pid, Some(a_pid), "the unchanged server kept its process");
    let b_now = status(&set, "b");
    assert_eq!(b_now.state, ServerState::Ready);
    assert_ne!(b_now.pid, Some(b_pid), "the changed server was restarted");
    assert!(!Path::new(&format!("/proc/{b_pid}")).exists(), "its old program ended");

    set.apply(&table(&[("b", changed)])).await;
    assert!(agent.tools().get("mcp.a.echo").is_none(), "a removed server's tools are gone");
    assert!(agent.tools().get("mcp.b.echo").is_some());
    assert_eq!(set.status().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["b"]);
    assert!(!Path::new(&format!("/proc/{a_pid}")).exists());

    let mut session = fixture("normal", None);
    session.scope = McpScope::Session;
    set.apply(&table(&[("b", b), ("per-session", session)])).await;
    let listed = status(&set, "per-session");
    assert_eq!((listed.state, listed.scope), (ServerState::Stopped, McpScope::Session));
    assert!(agent.tools().get("mcp.per-session.echo").is_none(), "a session server is not started by the set");
    set.stop_all().await;
}

#[tokio::test]
async fn a_server_gets_only_the_passed_variables_and_its_own_env() {
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let mut config = fixture("normal", None);
    let McpTransport::Stdio { env, .. } = &mut config.transport else { unreachable!() };
    env.insert("GIVEN".into(), SecretValue::Env { variable: "BUB_TEST_GIVEN".into(), prefix: String::new() });
    let set = started(&agent, &[("envs", config)]).await;
    let names = call(&tool(&agent, "mcp.envs.env"), json!({}), store.dir.path()).await.unwrap();
    let names: Vec<String> = serde_json::from_str(&names).unwrap();
    assert!(names.contains(&"GIVEN".to_string()) && names.contains(&"PATH".to_string()), "{names:?}");
    assert!(!names.contains(&"OPENAI_API_KEY".to_string()), "the gateway's model key reached the server: {names:?}");
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok() && !names.contains(&"CARGO_MANIFEST_DIR".to_string()));
    // Python may set LC_CTYPE itself (PEP 538); nothing else comes in.
    let allowed = ["GIVEN", "PATH", "HOME", "LANG", "TMPDIR", "LC_CTYPE"];
    assert!(names.iter().all(|name| allowed.contains(&name.as_str())), "{names:?}");
    set.stop_all().await;
}

#[tokio::test]
async fn tools_get_the_configured_capabilities_and_a_refused_set_is_the_servers_last_error() {
    use bub::tools::{Capabilities, Capability};
    let taken = Tool::new("mcp.dup.echo", "a builtin holding the name", json!({"type": "object"}), |_, _| async {
        Ok::<_, ToolError>(json!("builtin"))
    });
    let (agent, _model, _store) = scripted_agent(vec![taken]).await;
    let mut declared = fixture("normal", None);
    declared.capabilities = Some(Capabilities::of([Capability::Read]));
    declared.tool_capabilities.insert("crash".into(), Capabilities::of([Capability::Exec, Capability::Network]));
    let set =
        started(&agent, &[("caps", declared), ("open", fixture("normal", None)), ("dup", fixture("normal", None))])
            .await;
    assert_eq!(tool(&agent, "mcp.caps.echo").capabilities(), Capabilities::of([Capability::Read]));
    assert_eq!(
        tool(&agent, "mcp.caps.crash").capabilities(),
        Capabilities::of([Capability::Exec, Capability::Network])
    );
    assert_eq!(tool(&agent, "mcp.open.echo").capabilities(), Capabilities::ALL, "undeclared: every capability");

    let dup = status(&set, "dup");
    assert_eq!(dup.state, ServerState::Ready);
    let why = dup.last_error.unwrap();
    assert!(why.contains("mcp.dup.echo") && why.contains("taken"), "{why}");
    assert_eq!(tool(&agent, "mcp.dup.echo").source(), None, "the builtin kept its name");
    assert!(agent.tools().get("mcp.dup.env").is_none(), "all or nothing");
    set.stop_all().await;
}
