//! The sandboxed environment, driven through the `Environment` trait and the
//! real `bash` tool as the runtime drives them: a chat user's commands must
//! not see the gateway's files, other sessions, the host's network or more
//! than their limits. None of these tests skip: CI runs on the same kind of
//! machine (root in Docker), and a host that cannot sandbox must fail them.

use crate::support;

use bub::codemode::RunCode;
use bub::codemode::runner::{CallTool, OutputSink};
use bub::environment::sandbox::{SandboxEnvironment, SandboxError, SandboxLimits, SandboxProvider, SandboxSettings};
use bub::environment::{Environment, EnvironmentError, Program, SpawnOptions};
use bub::tools::builtin::{self, ShellManager, WebFetchSettings};
use bub::tools::{ToolContext, ToolRegistry};
use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use support::gone_within;
use tempfile::TempDir;
use tokio::io::AsyncReadExt;

/// A fake `$BUB_HOME` with a database, a config, a secret and two sessions'
/// workspaces; the sandbox is session one's.
struct Home {
    dir: TempDir,
    environment: Arc<SandboxEnvironment>,
}

impl Home {
    async fn new() -> Home {
        Home::with(SandboxSettings::default()).await
    }

    async fn with(mut settings: SandboxSettings) -> Home {
        let dir = tempfile::tempdir().expect("a home");
        std::fs::write(dir.path().join("bub.db"), "SQLite format 3 database-secret").unwrap();
        std::fs::write(dir.path().join("bub.toml"), "webhook_secret = \"config-secret\"").unwrap();
        std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/token"), "token-secret").unwrap();
        std::fs::create_dir_all(dir.path().join("workspaces/two")).unwrap();
        std::fs::write(dir.path().join("workspaces/two/notes.txt"), "session-two-secret").unwrap();
        settings.hidden.push(dir.path().to_path_buf());
        let provider = SandboxProvider::new(settings).await.unwrap_or_else(|e| panic!("the sandbox works here: {e}"));
        let environment = provider.environment(dir.path().join("workspaces/one")).expect("an environment");
        Home { dir, environment: Arc::new(environment) }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().canonicalize().unwrap().join(relative)
    }

    /// Runs `line` through the shell inside; its stdout+stderr and exit code.
    async fn sh(&self, line: &str) -> (String, i32) {
        run(self.environment.as_ref(), Program::Shell(format!("exec 2>&1\n{line}"))).await
    }
}

async fn run(environment: &dyn Environment, command: Program) -> (String, i32) {
    let mut process = environment.spawn(command, SpawnOptions::default()).await.expect("spawn");
    let mut stdout = process.take_io().stdout.expect("stdout");
    let mut text = String::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stdout.read_to_string(&mut text)).await;
    assert!(read.is_ok(), "the command ends: {text}");
    (text, process.wait().await.expect("wait"))
}

#[tokio::test]
async fn the_gateways_files_and_other_sessions_are_invisible() {
    let home = Home::new().await;
    for secret in ["bub.db", "bub.toml", "secrets/token", "workspaces/two/notes.txt"] {
        let path = home.path(secret);
        let (out, code) = home.sh(&format!("cat '{}'", path.display())).await;
        assert_ne!(code, 0, "{secret} is readable: {out}");
        assert!(!out.contains("secret\""), "{out}");
        assert!(!out.contains("-secret"), "{secret}: {out}");
    }
    let (processes, _) = home.sh("ls /proc | grep -c '^[0-9]'").await;
    assert!(processes.trim().parse::<u32>().is_ok_and(|n| n <= 5), "the host's processes show: {processes}");
    let (listing, _) =
        home.sh(&format!("ls -A '{}' '{}'", home.path("").display(), home.path("workspaces").display())).await;
    assert!(!listing.contains("bub.db") && !listing.contains("two"), "{listing}");
}

#[tokio::test]
async fn only_the_workspace_is_writable_and_writes_reach_the_host() {
    let home = Home::new().await;
    let gateway_home = std::env::home_dir().expect("a home directory");
    for outside in ["/etc/bub-escape", "/usr/bub-escape", "/bub-escape"]
        .into_iter()
        .map(PathBuf::from)
        .chain([gateway_home.join("bub-escape")])
    {
        let (out, code) = home.sh(&format!("echo x > '{}'", outside.display())).await;
        assert_ne!(code, 0, "{} is writable: {out}", outside.display());
        assert!(!outside.exists(), "{} was written on the host", outside.display());
    }
    let (out, code) = home.sh("echo inside > made.txt && mkdir -p sub && echo deeper > sub/f && echo $PWD").await;
    assert_eq!(code, 0, "{out}");
    let workspace = home.environment.workspace();
    assert_eq!(out.trim(), workspace.to_str().unwrap(), "the working directory is the workspace, same path");
    assert_eq!(std::fs::read_to_string(workspace.join("made.txt")).unwrap(), "inside\n");
    assert_eq!(std::fs::read_to_string(workspace.join("sub/f")).unwrap(), "deeper\n");
    let marker = std::env::temp_dir().join(format!("bub-host-marker-{}", std::process::id()));
    std::fs::write(&marker, "host").unwrap();
    let (tmp, code) = home.sh(&format!("echo scratch > /tmp/x && cat /tmp/x && ls '{}'", marker.display())).await;
    let _ = std::fs::remove_file(&marker);
    assert_ne!(code, 0, "the host's /tmp shows through: {tmp}");
    assert!(tmp.starts_with("scratch\n"), "a fresh, writable /tmp: {tmp}");
}

#[tokio::test]
async fn the_command_runs_unprivileged_with_none_of_the_gateways_variables() {
    let home = Home::new().await;
    let (out, code) = home.sh("id -u; id -g").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.lines().all(|id| id != "0"), "root inside: {out}");
    let (names, _) = home.sh("env | cut -d= -f1 | sort | tr '\\n' ' '").await;
    for leaked in ["CARGO", "RUST", "BUB_"] {
        assert!(!names.split(' ').any(|name| name.starts_with(leaked)), "{leaked}* leaked: {names}");
    }
    let (caps, _) = home.sh("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status").await;
    assert!(caps.contains("CapEff:\t0000000000000000") && caps.contains("NoNewPrivs:\t1"), "{caps}");
}

#[tokio::test]
async fn the_hosts_loopback_is_unreachable_unless_network_is_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");

    let closed = Home::new().await;
    let (out, code) = closed.sh(&connect).await;
    assert_ne!(code, 0, "reached the host: {out}");
    assert!(!out.contains("connected"), "{out}");
    let (own, code) = closed.sh("python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); c=socket.create_connection(s.getsockname()); print('own loopback')\"").await;
    assert_eq!((own.as_str(), code), ("own loopback\n", 0), "the sandbox's own loopback is up");

    let open = Home::with(SandboxSettings { network: true, ..SandboxSettings::default() }).await;
    let (out, code) = open.sh(&connect).await;
    assert_eq!((out.as_str(), code), ("connected\n", 0), "network = true shares the host's");
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_killed() {
    let limits = SandboxLimits { max_processes: 64, ..SandboxLimits::default() };
    let home = Home::with(SandboxSettings { limits, ..SandboxSettings::default() }).await;
    let mut bomb = home
        .environment
        .spawn(Program::Shell("bomb() { bomb | bomb & }; bomb; sleep 30".into()), SpawnOptions::default())
        .await
        .expect("spawn");
    tokio::time::sleep(Duration::from_secs(3)).await;
    bomb.signal(true);
    assert!(gone_within(bomb.as_ref(), Duration::from_secs(10)).await, "the bomb's processes are gone");
    assert!(bomb.wait().await.is_ok());
    // The host is fine: it starts processes, and so does the sandbox.
    assert!(std::process::Command::new("true").status().unwrap().success());
    assert_eq!(home.sh("echo alive").await, ("alive\n".to_string(), 0));
}

#[tokio::test]
async fn forks_past_the_process_limit_are_refused() {
    let limits = SandboxLimits { max_processes: 16, ..SandboxLimits::default() };
    let home = Home::with(SandboxSettings { limits, ..SandboxSettings::default() }).await;
    let forks = "import os, time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('refused after', n, e.strerror)\n";
    let (out, code) = home.sh(&format!("python3 -c \"{forks}\"")).await;
    assert_eq!(code, 0, "{out}");
    let refused_after: usize = out
        .strip_prefix("refused after ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no refusal: {out}"));
    assert!(refused_after < 16, "{out}");
    assert!(out.contains("Resource temporarily unavailable"), "{out}");
}

#[tokio::test]
async fn cpu_time_file_size_and_output_are_limited() {
    let limits = SandboxLimits {
        cpu_seconds: 1,
        max_file_bytes: 1024 * 1024,
        max_output_bytes: 1000,
        ..SandboxLimits::default()
    };
    let home = Home::with(SandboxSettings { limits, ..SandboxSettings::default() }).await;
    let (_, code) = home.sh("python3 -c 'while True: pass'").await;
    assert_eq!(code, 128 + 24, "SIGXCPU ends a spinning process");
    let (out, code) = home.sh("head -c 2000000 /dev/zero > big; echo $?; stat -c %s big").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("File too large") || out.lines().last() == Some("1048576"), "{out}");
    assert!(std::fs::metadata(home.environment.workspace().join("big")).unwrap().len() <= 1024 * 1024);
    let (out, code) =
        run(home.environment.as_ref(), Program::Shell("head -c 100000 /dev/zero | tr '\\0' x".into())).await;
    assert_eq!(out.len(), 1000, "stdout is cut at the cap");
    assert_ne!(code, 0, "the writer got EPIPE");
}

#[tokio::test]
async fn a_hidden_path_inside_a_shown_directory_is_covered() {
    let shown = tempfile::tempdir().unwrap();
    std::fs::write(shown.path().join("public.txt"), "public").unwrap();
    std::fs::create_dir_all(shown.path().join("private")).unwrap();
    std::fs::write(shown.path().join("private/key"), "private-key").unwrap();
    let settings = SandboxSettings {
        read_only: vec![shown.path().to_path_buf()],
        hidden: vec![shown.path().join("private")],
        ..SandboxSettings::default()
    };
    let home = Home::with(settings).await;
    let shown = shown.path().canonicalize().unwrap();
    let (out, code) = home.sh(&format!("cat '{}'", shown.join("public.txt").display())).await;
    assert_eq!((out.as_str(), code), ("public", 0));
    let (out, code) = home.sh(&format!("cat '{}/private/key'", shown.display())).await;
    assert!(code != 0 && !out.contains("private-key"), "{out}");
    let (listing, code) = home.sh(&format!("ls -A '{}/private'", shown.display())).await;
    assert_eq!((listing.as_str(), code), ("", 0), "covered by an empty directory");
    let (out, code) = home.sh(&format!("touch '{}/x'", shown.display())).await;
    assert_ne!(code, 0, "read-only: {out}");
}

#[tokio::test]
async fn the_bash_tools_timeout_stops_a_sandboxed_command() {
    let home = Home::new().await;
    let store = support::memory_store().await;
    let tools = builtin::tools(Arc::new(ShellManager::new()), WebFetchSettings::default())
        .into_iter()
        .fold(ToolRegistry::new(), ToolRegistry::with);
    let mut context = ToolContext::detached(store.tape("chat"), home.environment.workspace());
    context.environment = Some(home.environment.clone());
    let tool = tools.get("bash").expect("bash");
    let args = json!({"cmd": "echo started; sleep 1003", "timeout_seconds": 2});
    let out = tool.call(args, context).await.map(|value| tool.render(&value)).unwrap();
    assert!(out.starts_with("timed out after 2 seconds"), "{out}");
    let (left, _) = run(
        &bub::environment::LocalEnvironment::new(home.path(""), false).unwrap(),
        Program::Shell("pgrep -f 'sleep 100[3]' || echo none".into()),
    )
    .await;
    assert_eq!(left.trim(), "none");
}

#[tokio::test]
async fn a_memory_hog_is_stopped() {
    let limits = SandboxLimits { memory_bytes: 512 * 1024 * 1024, ..SandboxLimits::default() };
    let home = Home::with(SandboxSettings { limits, ..SandboxSettings::default() }).await;
    let (out, code) = home.sh("python3 -c 'x = bytearray(2 * 1024 ** 3); print(\"allocated\")'").await;
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("MemoryError") && !out.contains("allocated"), "{out}");
    let (out, code) = home.sh("x=$(head -c 2147483648 /dev/zero | tr '\\0' a); echo ${#x}").await;
    assert_ne!((out.trim(), code), ("2147483648", 0), "{out}");
    assert_eq!(home.sh("echo fine").await, ("fine\n".to_string(), 0));
}

/// A sandbox dies with the thread that forked it (its parent-death signal,
/// so that it dies with a killed gateway): a command must outlive the
/// runtime's blocking threads, which retire after ten idle seconds.
#[tokio::test]
async fn a_long_command_outlives_the_thread_that_started_it() {
    let home = Home::new().await;
    let (out, code) = home.sh("sleep 13; echo finished").await;
    assert_eq!((out.trim(), code), ("finished", 0));
}

#[tokio::test]
async fn close_kills_everything_the_environment_started() {
    let home = Home::new().await;
    let sleeper = home
        .environment
        .spawn(Program::Shell("setsid sleep 1001 & sleep 1001".into()), SpawnOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(sleeper.is_running());
    home.environment.close().await;
    assert!(gone_within(sleeper.as_ref(), Duration::from_secs(5)).await);
    let (out, _) = run(
        &bub::environment::LocalEnvironment::new(home.path(""), false).unwrap(),
        Program::Shell("pgrep -f 'sleep 100[1]' || echo none".into()),
    )
    .await;
    assert_eq!(out.trim(), "none", "nothing of the sandbox survives, setsid or not");
}

#[tokio::test]
async fn stdin_and_stdout_pipes_work_as_on_the_host() {
    let home = Home::new().await;
    let mut process = home.environment.spawn(Program::Argv(vec!["cat".into()]), SpawnOptions::default()).await.unwrap();
    let io = process.take_io();
    let (mut stdin, mut stdout) = (io.stdin.unwrap(), io.stdout.unwrap());
    use tokio::io::AsyncWriteExt;
    stdin.write_all(b"through the sandbox\n").await.unwrap();
    drop(stdin);
    let mut text = String::new();
    stdout.read_to_string(&mut text).await.unwrap();
    assert_eq!(text, "through the sandbox\n");
    assert_eq!(process.wait().await.unwrap(), 0);
}

#[tokio::test]
async fn the_bash_tool_runs_inside_and_background_shells_die_with_close() {
    let home = Home::new().await;
    let store = support::memory_store().await;
    let shells = Arc::new(ShellManager::new());
    let tools =
        builtin::tools(shells, WebFetchSettings::default()).into_iter().fold(ToolRegistry::new(), ToolRegistry::with);
    let call = |args: Value| {
        let mut context = ToolContext::detached(store.tape("chat"), home.environment.workspace());
        context.environment = Some(home.environment.clone());
        let tool = tools.get("bash").expect("bash");
        async move { tool.call(args, context).await.map(|value| tool.render(&value)) }
    };
    let secret = home.path("bub.toml");
    let out = call(json!({"cmd": format!("id -u; cat {} || echo refused", secret.display())})).await.unwrap();
    assert!(out.contains("refused") && !out.contains("config-secret"), "{out}");
    let started = call(json!({"cmd": "sleep 1002", "background": true})).await.unwrap();
    assert!(started.starts_with("started: "), "{started}");
    home.environment.close().await;
    let (out, _) = run(
        &bub::environment::LocalEnvironment::new(home.path(""), false).unwrap(),
        Program::Shell("sleep 0.5; pgrep -f 'sleep 100[2]' || echo none".into()),
    )
    .await;
    assert_eq!(out.trim(), "none");
}

#[tokio::test]
async fn run_code_works_inside_with_a_tool_call_back_to_the_host() {
    let home = Home::new().await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = calls.clone();
    let call_tool: CallTool = Arc::new(move |name, arguments: Value| {
        seen.lock().push(name);
        async move { Ok(json!({"echo": arguments["text"]})) }.boxed()
    });
    let sink: OutputSink = Arc::new(|_| {});
    let secret = home.path("bub.toml");
    let code = format!(
        "import os\nreply = await tools.echo(text='hi')\nprint(reply['echo'], os.getuid() != 0)\n\
         try:\n    open({:?}).read()\n    print('leaked')\nexcept OSError:\n    print('hidden')\n",
        secret.display().to_string()
    );
    let output = home
        .environment
        .run_code(&code, &["echo".to_string()], call_tool, sink, Duration::from_secs(60))
        .await
        .expect("the code runs");
    assert_eq!(output, "hi True\nhidden\n");
    assert_eq!(*calls.lock(), vec!["echo".to_string()]);
}

#[tokio::test]
async fn host_side_file_access_stays_in_the_workspace() {
    let home = Home::new().await;
    let env = home.environment.as_ref();
    let written = env.write_text("notes/a.txt", "hello").await.unwrap();
    assert_eq!(env.read_text("notes/a.txt").await.unwrap(), "hello");
    assert_eq!(
        home.sh("cat notes/a.txt && echo more >> notes/a.txt").await.1,
        0,
        "the sandbox may change what fs.write made"
    );
    assert!(written.starts_with(env.workspace()));
    for escape in ["../two/notes.txt", "../../bub.toml", "/etc/passwd"] {
        let error = env.read_text(escape).await.unwrap_err();
        assert!(matches!(error, EnvironmentError::Path(_)), "{escape}: {error}");
    }
    // A link made inside, pointing at the gateway's config: the host refuses it.
    let (_, code) = home
        .sh(&format!("ln -s '{}' link && ln -s '{}' dir", home.path("bub.toml").display(), home.path("").display()))
        .await;
    assert_eq!(code, 0);
    assert!(env.read_text("link").await.is_err());
    assert!(env.read_text("dir/bub.toml").await.is_err());
    assert!(env.write_text("dir/planted", "x").await.is_err());
    assert!(!home.path("planted").exists());
    // A FIFO under a file's name would hang a reader: refused at once.
    assert_eq!(home.sh("mkfifo trap").await.1, 0);
    let read = tokio::time::timeout(Duration::from_secs(5), env.read_text("trap")).await;
    assert!(matches!(read, Ok(Err(_))), "{read:?}");
}

#[tokio::test]
async fn a_cwd_outside_the_workspace_is_refused() {
    let home = Home::new().await;
    let options =
        SpawnOptions { cwd: Some(home.path("workspaces/two").display().to_string()), ..SpawnOptions::default() };
    let error = home.environment.spawn(Program::Shell("pwd".into()), options).await.err().expect("refused");
    assert!(matches!(error, EnvironmentError::Path(_)), "{error}");
}

#[tokio::test]
async fn an_unusable_interpreter_fails_the_provider() {
    let settings =
        SandboxSettings { python: Some(Path::new("/nonexistent/python3").into()), ..SandboxSettings::default() };
    let error = SandboxProvider::new(settings).await.unwrap_err();
    assert!(matches!(error, SandboxError::Python { .. }), "{error}");
}

#[tokio::test]
async fn the_probe_finds_what_the_sandbox_needs() {
    let report = bub::environment::sandbox::probe();
    assert!(report.is_ready(), "{report}");
    assert!(report.to_string().contains("user namespaces: ok"), "{report}");
}

#[tokio::test]
async fn namespaces_and_mounts_are_refused_inside_but_threads_work() {
    let home = Home::new().await;
    let (out, code) = home.sh("unshare -U true").await;
    assert_ne!(code, 0, "a nested user namespace: {out}");
    assert!(out.contains("Operation not permitted"), "{out}");
    let (out, code) = home.sh("mount -t tmpfs none /tmp").await;
    assert_ne!(code, 0, "{out}");
    let threads = "import threading\nt = threading.Thread(target=print, args=('from a thread',))\nt.start(); t.join()";
    let (out, code) = home.sh(&format!("python3 -c \"{threads}\"")).await;
    assert_eq!((out.as_str(), code), ("from a thread\n", 0));
    let (out, code) = home.sh("grep Seccomp: /proc/self/status").await;
    assert_eq!((out.as_str(), code), ("Seccomp:\t2\n", 0), "filter mode");
}

#[tokio::test]
async fn a_run_code_timeout_kills_the_sandboxed_interpreter() {
    let home = Home::new().await;
    let call_tool: CallTool = Arc::new(|_, _| async { Ok(Value::Null) }.boxed());
    let sink: OutputSink = Arc::new(|_| {});
    let code = "import subprocess\nsubprocess.Popen(['sleep', '1004'])\nimport time\ntime.sleep(1004)\n";
    let result = home.environment.run_code(code, &[], call_tool, sink, Duration::from_secs(2)).await;
    assert!(matches!(result, Err(bub::codemode::runner::CodeError::Timeout { .. })), "{result:?}");
    // The host's every process is searched: the pattern is the command the code
    // started, as a bare `1004` is also in other tests' ports and paths.
    let (left, _) = run(
        &bub::environment::LocalEnvironment::new(home.path(""), false).unwrap(),
        Program::Shell("sleep 0.5; pgrep -f 'sleep 100[4]' || echo none".into()),
    )
    .await;
    assert_eq!(left.trim(), "none");
}

#[tokio::test]
async fn the_provider_serves_the_per_session_registry() {
    let home = tempfile::tempdir().unwrap();
    let settings = SandboxSettings { hidden: vec![home.path().to_path_buf()], ..SandboxSettings::default() };
    let provider = Arc::new(SandboxProvider::new(settings).await.expect("a provider"));
    let environments =
        bub::environment::Environments::new(provider, home.path().join("workspaces"), Duration::from_secs(60));
    let environment = environments.get("telegram:42", None).await.expect("an environment");
    let (out, code) = run(environment.as_ref(), Program::Shell("echo hi > f && id -u".into())).await;
    assert_eq!((out.trim(), code), ("1000", 0));
    assert!(environment.workspace().join("f").is_file());
    environments.close_all().await;
}

#[tokio::test]
async fn a_sandbox_that_cannot_be_built_runs_nothing() {
    let shown = tempfile::tempdir().unwrap();
    let settings = SandboxSettings { read_only: vec![shown.path().to_path_buf()], ..SandboxSettings::default() };
    let home = Home::with(settings).await;
    // What the sandbox shows vanishes after its blueprint was made: the bind fails.
    std::fs::remove_dir_all(shown.path()).unwrap();
    let marker = home.environment.workspace().join("ran");
    let command = Program::Shell(format!("touch '{}'", marker.display()));
    let error = home.environment.spawn(command, SpawnOptions::default()).await.err().expect("refused");
    assert!(matches!(error, EnvironmentError::Spawn { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("building the sandbox failed while binding"), "{message}");
    assert!(!marker.exists(), "the command ran without its sandbox");
}

/// The host side's writes into the workspace (`fs.write`) keep to its quota too.
#[tokio::test]
async fn a_host_side_write_past_the_quota_is_refused() {
    const MIB: usize = 1024 * 1024;
    let limits = SandboxLimits { workspace_bytes: 2 * MIB as u64, ..SandboxLimits::default() };
    let home = Home::with(SandboxSettings { limits, ..SandboxSettings::default() }).await;
    home.environment.write_bytes("small.txt", &[b'x'; MIB / 2]).await.expect("fits");
    let refused = home.environment.write_bytes("big.bin", &vec![b'x'; 3 * MIB]).await;
    assert!(refused.is_err_and(|e| e.to_string().contains("do not fit")), "past the quota");
    assert!(!home.path("workspaces/one/big.bin").exists());
}

/// The cgroup directory of the hierarchy that caps processes, from a
/// `/proc/<pid>/cgroup` text: v1's `pids` line, else v2's `0::` line.
fn pids_cgroup(text: &str) -> Option<PathBuf> {
    let line = |wanted: &dyn Fn(&str) -> bool| {
        text.lines().find_map(|l| {
            let mut fields = l.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            wanted(controllers).then(|| path.trim_start_matches('/').to_string())
        })
    };
    if let Some(path) = line(&|c| c.split(',').any(|c| c == "pids")) {
        return Some(Path::new("/sys/fs/cgroup/pids").join(path));
    }
    line(&str::is_empty).map(|path| Path::new("/sys/fs/cgroup").join(path))
}

/// Every command of a session runs in the session's cgroup (so they share
/// its caps), and the cgroup goes away with the session's environment.
#[tokio::test]
async fn a_sessions_commands_share_its_cgroup_which_goes_with_it() {
    let home = Home::new().await;
    let (first, _) = home.sh("cat /proc/self/cgroup").await;
    let (second, _) = home.sh("cat /proc/self/cgroup").await;
    let dir = pids_cgroup(&first).expect("a cgroup line");
    assert_eq!(Some(&dir), pids_cgroup(&second).as_ref(), "one cgroup for the session");
    assert!(dir.to_string_lossy().contains("bub-sandboxes-"), "{first}");
    assert_eq!(std::fs::read_to_string(dir.join("pids.max")).unwrap().trim(), "256");
    drop(home);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dir.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!dir.exists(), "{} was left", dir.display());
}
