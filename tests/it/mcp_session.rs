//! MCP servers of scope `session`: npm's `server-filesystem`, its allowed
//! directory `.`, runs one instance per session environment — in the
//! session's workspace, inside the session's sandbox when it has one — and
//! stops with the environment. Its tools are learnt at start from a probe;
//! one that cannot run in the sandbox is reported, never dropped silently.

use crate::support;

use bub::agent::{Agent, RunOptions};
use bub::config::GatewayConfig;
use bub::environment::sandbox::{SandboxLimits, SandboxProvider, SandboxSettings};
use bub::environment::sessions::DEFAULT_IDLE;
use bub::environment::{EnvironmentProvider, Environments, LocalProvider};
use bub::mcp::{McpServers, ServerState};
use bub::model::SingleClient;
use bub::tape::TapeSettings;
use bub::tools::ToolContext;
use parking_lot::Mutex;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::scripted_model::ScriptedModel;
use tempfile::TempDir;

/// How long a server may take to come up (`npx`-less node, a loaded machine).
const START: Duration = Duration::from_secs(60);

/// An agent whose sessions' environments come from `provider`, under
/// `<home>/workspaces`, with the config's MCP servers started.
struct Bench {
    home: TempDir,
    agent: Agent,
    environments: Arc<Environments>,
    servers: McpServers,
    unavailable: Arc<Mutex<Vec<String>>>,
    store: support::TestStore,
}

impl Bench {
    async fn start(home: TempDir, provider: Arc<dyn EnvironmentProvider>, config: &str) -> Bench {
        let store = support::sqlite_store().await;
        let environments = Arc::new(Environments::new(provider, home.path().join("workspaces"), DEFAULT_IDLE));
        let agent = Agent::builder()
            .store(store.store.clone())
            .model(Arc::new(SingleClient(ScriptedModel::new())), "scripted:test")
            .command_prefix(",")
            .environments(environments.clone())
            .tape_settings(TapeSettings { archive_dir: home.path().join("archives"), ..TapeSettings::default() })
            .system_prompt("You are a test agent.")
            .build();
        let servers = McpServers::new(agent.clone(), Arc::new(|name: &str| std::env::var(name).ok()));
        agent.add_tool(bub::mcp::command::mcp_tool(servers.clone()));
        let unavailable: Arc<Mutex<Vec<String>>> = Arc::default();
        let reported = unavailable.clone();
        servers.on_unavailable(move |error| reported.lock().push(error.to_string()));
        let config = GatewayConfig::parse(config, home.path().join("bub.toml")).expect("a valid config");
        servers.apply(&config.mcp).await;
        servers.wait_ready(START).await;
        Bench { home, agent, environments, servers, unavailable, store }
    }

    async fn run(&self, session: &str, line: &str) -> String {
        self.agent.run(line, RunOptions::new(session)).collect().await.text
    }

    fn workspace(&self, session: &str) -> PathBuf {
        self.environments.workspace_for(session).unwrap()
    }
}

/// A `[mcp.fs]` table of scope session running `server-filesystem` on `roots`.
fn filesystem_table(roots: &[&str]) -> String {
    let argv = support::mcp_servers::filesystem(&roots.iter().map(Path::new).collect::<Vec<_>>());
    format!(
        "[mcp.fs]\ncommand = {}\nargs = {}\nscope = \"session\"\ncapabilities = [\"read\", \"write\"]\n",
        json!(argv[0]),
        json!(argv[1..])
    )
}

/// The processes whose working directory is `dir` (an instance runs there).
fn processes_in(dir: &Path) -> Vec<u32> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            (std::fs::read_link(entry.path().join("cwd")).ok()? == dir).then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_gets_its_own_instance_in_its_own_workspace_and_it_stops_with_the_environment() {
    let home = tempfile::tempdir().unwrap();
    let bench = Bench::start(home, Arc::new(LocalProvider { confined: true }), &filesystem_table(&["."])).await;
    let fs = bench.servers.session_server("fs").expect("fs is a session-scoped server");
    assert_eq!(fs.state(), ServerState::Ready, "the probe listed the tools: {:?}", fs.status());
    assert!(fs.status().tools.iter().any(|tool| tool == "write_file"), "{:?}", fs.status().tools);
    assert_eq!(fs.sessions(), 0, "the probe is not a session's instance");
    assert!(bench.agent.tools().get("mcp.fs.read_text_file").is_some(), "the tools are registered before any run");

    let wrote = bench.run("chat-a", ",mcp.fs.write_file path=note.txt content=alpha").await;
    assert!(wrote.contains("Successfully"), "{wrote}");
    bench.run("chat-b", ",mcp.fs.write_file path=note.txt content=beta").await;
    let (a, b) = (bench.workspace("chat-a"), bench.workspace("chat-b"));
    assert_eq!(std::fs::read_to_string(a.join("note.txt")).unwrap(), "alpha", "written in chat-a's workspace");
    assert_eq!(std::fs::read_to_string(b.join("note.txt")).unwrap(), "beta", "written in chat-b's workspace");
    assert_eq!(bench.run("chat-a", ",mcp.fs.read_text_file path=note.txt").await, "alpha");
    assert_eq!(bench.run("chat-b", ",mcp.fs.read_text_file path=note.txt").await, "beta");
    let other = a.join("note.txt").display().to_string();
    let stolen = bench.run("chat-b", &format!(",mcp.fs.read_text_file path={other}")).await;
    assert!(!stolen.contains("alpha"), "chat-b's server reads only chat-b's workspace: {stolen}");
    assert!(stolen.to_lowercase().contains("denied"), "{stolen}");
    assert_eq!(fs.sessions(), 2, "one instance per session");
    let status = bench.run("chat-a", ",mcp").await;
    assert!(status.contains("mcp.fs: ready — one per session (2 running)"), "{status}");
    assert!(status.contains("calls: 5, failed: 1"), "{status}");
    let (in_a, in_b) = (processes_in(&a), processes_in(&b));
    assert!(!in_a.is_empty() && !in_b.is_empty(), "each instance runs in its workspace: {in_a:?} {in_b:?}");
    for pid in in_a.iter().chain(&in_b) {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        for variable in environ.split(|byte| *byte == 0).filter(|entry| !entry.is_empty()) {
            let name = String::from_utf8_lossy(variable.split(|byte| *byte == b'=').next().unwrap_or_default());
            assert!(["PATH", "HOME", "LANG", "TMPDIR"].contains(&name.as_ref()), "none of the gateway's: {name}");
        }
    }

    // The session's environment closes (idle, a policy change): its instance goes with it.
    assert!(bench.environments.close_session("chat-a").await);
    assert!(processes_in(&a).is_empty(), "chat-a's instance stopped with its environment");
    assert_eq!(fs.sessions(), 1);
    assert_eq!(processes_in(&b), in_b, "chat-b's instance is untouched");
    assert_eq!(bench.run("chat-a", ",mcp.fs.read_text_file path=note.txt").await, "alpha", "a new one on next use");
    assert!(!processes_in(&a).is_empty());

    // Outside a run with environments: a clear tool error.
    let tool = bench.agent.tools().get("mcp.fs.read_text_file").unwrap().clone();
    let tape = bench.store.tape("detached");
    let error =
        tool.call(json!({"path": "note.txt"}), ToolContext::detached(tape, bench.home.path())).await.unwrap_err();
    assert!(error.to_string().contains("no session environment"), "{error}");

    bench.servers.stop_all().await;
    assert!(processes_in(&a).is_empty() && processes_in(&b).is_empty(), "stop_all stops every session's instance");
    assert!(bench.agent.tools().get("mcp.fs.read_text_file").is_none());
}

/// The sandbox of the tests in `sandbox.rs`, hiding `home` and showing the
/// installed MCP servers read-only (`[sandbox] read_only` in a config), with
/// room for Node (`[sandbox] memory_bytes`: V8 does not start its heap in
/// the default 1 GiB of address space).
async fn sandbox(home: &Path) -> Arc<dyn EnvironmentProvider> {
    let settings = SandboxSettings {
        hidden: vec![home.to_path_buf()],
        read_only: vec![support::mcp_servers::installed().to_path_buf()],
        limits: SandboxLimits { memory_bytes: 2 << 30, ..SandboxLimits::default() },
        ..SandboxSettings::default()
    };
    Arc::new(SandboxProvider::new(settings).await.unwrap_or_else(|e| panic!("the sandbox works here: {e}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_sessions_instance_runs_inside_its_sandbox() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("secret.txt"), "gateway-secret").unwrap();
    let home_path = home.path().canonicalize().unwrap();
    let provider = sandbox(&home_path).await;
    // Allowed: the workspace and the home; the sandbox shows the home empty.
    let table = filesystem_table(&[".", &home_path.display().to_string()]);
    let bench = Bench::start(home, provider, &table).await;
    let fs = bench.servers.session_server("fs").unwrap();
    assert_eq!(fs.state(), ServerState::Ready, "the probe ran in a sandbox: {:?}", fs.status());

    let wrote = bench.run("chat-a", ",mcp.fs.write_file path=note.txt content=inside").await;
    assert!(wrote.contains("Successfully"), "{wrote}");
    assert_eq!(std::fs::read_to_string(bench.workspace("chat-a").join("note.txt")).unwrap(), "inside");
    let secret = home_path.join("secret.txt").display().to_string();
    let read = bench.run("chat-a", &format!(",mcp.fs.read_text_file path={secret}")).await;
    assert!(!read.contains("gateway-secret"), "the sandboxed server cannot read the hidden home: {read}");
    let listed = bench.run("chat-a", &format!(",mcp.fs.list_directory path={}", home_path.display())).await;
    assert!(!listed.contains("secret.txt") && !listed.contains("bub.db"), "the home is hidden: {listed}");
    assert_eq!(fs.sessions(), 1);
    bench.environments.close_all().await;
    assert_eq!(fs.sessions(), 0, "the instance stopped with the sandbox");
    bench.servers.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_run_in_the_sandbox_is_reported_at_start_and_in_mcp() {
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().canonicalize().unwrap();
    // On the host it runs; in the sandbox the home, where it lies, is hidden.
    let argv = support::mcp_servers::filesystem(&[Path::new(".")]);
    let script = home_path.join("bin/fs-server");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(&script, format!("#!/bin/sh\nexec {} \"$@\"\n", argv.join(" "))).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let table = format!("[mcp.hidden]\ncommand = {}\nargs = [\".\"]\nscope = \"session\"\n", json!(script));
    let provider = sandbox(&home_path).await;
    let bench = Bench::start(home, provider, &table).await;

    let server = bench.servers.session_server("hidden").unwrap();
    assert!(matches!(server.state(), ServerState::Failed { .. }), "{:?}", server.status());
    let reported = bench.unavailable.lock().clone();
    assert_eq!(reported.len(), 1, "reported once at start: {reported:?}");
    assert!(reported[0].starts_with("mcp server `hidden`: cannot run in the sessions' environment"), "{reported:?}");
    assert!(reported[0].contains("fs-server"), "the reason names the program: {reported:?}");
    let status = bench.run("chat-a", ",mcp").await;
    assert!(status.contains("mcp.hidden: failed to start"), "{status}");
    assert!(status.contains("last error: cannot run in the sessions' environment"), "{status}");
    assert!(bench.agent.tools().iter().all(|tool| !tool.name().starts_with("mcp.hidden.")), "no tools, none stale");
    bench.servers.stop_all().await;
}
