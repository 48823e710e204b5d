//! Code mode's subprocess runner against a real `python3` child: output, tool
//! calls (structured, concurrent, failing), exceptions, timeouts and crashes.

use bub::codemode::runner::{CallTool, ChildIo, CodeError, OutputSink, child_argv, run_code};
use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::{Value, json};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::process::Command;
use tokio::sync::{Barrier, Notify};

/// Generous: these bound liveness, they do not measure speed.
const LONG: Duration = Duration::from_secs(60);

/// The child's process group, killed when the test is done with it.
struct Group(Pid);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = kill_process_group(self.0, Signal::KILL);
    }
}

struct Child {
    io: ChildIo,
    group: Group,
    exit: BoxFuture<'static, Option<i32>>,
}

/// The interpreter `python3` resolves to, asked once: a launcher on PATH (a
/// pyenv shim, say) would double the start-up cost of each of the 50 children.
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let asked = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 runs");
        let path = String::from_utf8_lossy(&asked.stdout).trim().to_owned();
        if path.is_empty() { "python3".to_owned() } else { path }
    })
}

fn spawn_child() -> Child {
    let argv = child_argv(python());
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("python3 starts");
    let pid = child.id().and_then(|id| Pid::from_raw(i32::try_from(id).ok()?)).expect("a pid");
    let io = ChildIo {
        stdin: Box::new(child.stdin.take().expect("stdin")),
        stdout: Box::new(child.stdout.take().expect("stdout")),
        stderr: Box::new(child.stderr.take().expect("stderr")),
    };
    // Exit code, or minus the signal that ended the child.
    let exit = async move {
        let status = child.wait().await.ok()?;
        status.code().or_else(|| status.signal().map(|signal| -signal))
    }
    .boxed();
    Child { io, group: Group(pid), exit }
}

fn no_tools() -> CallTool {
    Arc::new(|name, _| async move { Err(format!("unexpected call to {name}")) }.boxed())
}

/// A sink that records every chunk it receives.
fn recording_sink() -> (OutputSink, Arc<Mutex<Vec<String>>>) {
    let chunks = Arc::new(Mutex::new(Vec::new()));
    let sink_chunks = chunks.clone();
    (Arc::new(move |chunk| sink_chunks.lock().push(chunk)), chunks)
}

async fn run_with(code: &str, tools: &[&str], call_tool: CallTool, timeout: Duration) -> Result<String, CodeError> {
    let child = spawn_child();
    let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
    let (sink, _) = recording_sink();
    let result = run_code(child.io, code, &tools, call_tool, sink, timeout, child.exit).await;
    drop(child.group);
    result
}

fn failed(result: Result<String, CodeError>) -> (String, String, String, String) {
    match result {
        Err(CodeError::Failed { error_type, message, traceback, output }) => (error_type, message, traceback, output),
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn printed_output_is_returned_and_streamed() {
    let child = spawn_child();
    let (sink, chunks) = recording_sink();
    let code = "print('hello')\nprint('world', 42)\nimport subprocess\nsubprocess.run(['echo', 'from a subprocess'])\n";
    let output = run_code(child.io, code, &[], no_tools(), sink, LONG, child.exit).await.expect("the code runs");
    assert_eq!(output, "hello\nworld 42\nfrom a subprocess\n");
    assert_eq!(chunks.lock().concat(), output);
}

#[tokio::test]
async fn a_tool_call_round_trips_structured_values() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_tool = seen.clone();
    let call_tool: CallTool = Arc::new(move |name, arguments: Value| {
        seen_by_tool.lock().push((name, arguments.clone()));
        async move { Ok(json!({"id": arguments["order_id"], "status": "shipped", "items": [1, 2.5, null]})) }.boxed()
    });
    let code = "order = await tools.orders_get(order_id='A1', flags={'x': [1, None, True]})\n\
                print(order['id'], order['status'], order['items'])\n";
    let output = run_with(code, &["orders_get"], call_tool, LONG).await.expect("the code runs");
    assert_eq!(output, "A1 shipped [1, 2.5, None]\n");
    let expected = vec![("orders_get".to_owned(), json!({"order_id": "A1", "flags": {"x": [1, null, true]}}))];
    assert_eq!(*seen.lock(), expected);
}

#[tokio::test]
async fn gathered_calls_run_concurrently() {
    // Each call waits until all three are in flight: served one by one, they would hang.
    let barrier = Arc::new(Barrier::new(3));
    let call_tool: CallTool = Arc::new(move |_, arguments: Value| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            Ok(arguments["n"].clone())
        }
        .boxed()
    });
    let code = "import asyncio\nprint(await asyncio.gather(tools.wait(n=1), tools.wait(n=2), tools.wait(n=3)))\n";
    let output = run_with(code, &["wait"], call_tool, Duration::from_secs(20)).await.expect("the code runs");
    assert_eq!(output, "[1, 2, 3]\n");
}

#[tokio::test]
async fn a_tool_error_raises_and_can_be_caught() {
    let call_tool: CallTool = Arc::new(|_, _| async { Err("no such order".to_owned()) }.boxed());
    let code =
        "try:\n    await tools.orders_get(order_id='B2')\nexcept ToolError as error:\n    print('caught:', error)\n";
    let output = run_with(code, &["orders_get"], call_tool, LONG).await.expect("the code runs");
    assert_eq!(output, "caught: no such order\n");
}

#[tokio::test]
async fn an_uncaught_exception_fails_with_a_traceback_of_the_code() {
    let code = "print('before')\ndef check(value):\n    raise ValueError(f'bad value {value}')\ncheck(7)\n";
    let result = run_with(code, &[], no_tools(), LONG).await;
    assert_eq!(result.as_ref().err().map(ToString::to_string).as_deref(), Some("raised ValueError: bad value 7"));
    let (error_type, message, traceback, output) = failed(result);
    assert_eq!((error_type.as_str(), message.as_str(), output.as_str()), ("ValueError", "bad value 7", "before\n"));
    assert!(traceback.starts_with("Traceback (most recent call last):"), "{traceback}");
    assert!(traceback.contains("line 4, in <module>") && traceback.contains("check(7)"), "{traceback}");
    assert!(traceback.contains("line 3, in check") && traceback.contains("raise ValueError"), "{traceback}");
    assert!(traceback.ends_with("ValueError: bad value 7\n"), "{traceback}");
    // Only the model's code: neither the runner (`-c` source is "<string>") nor asyncio.
    let frames = traceback.lines().filter(|line| line.trim_start().starts_with("File ")).count();
    assert_eq!(frames, 2, "{traceback}");
    assert!(!traceback.contains("<string>") && !traceback.contains("asyncio"), "{traceback}");
}

#[tokio::test]
async fn positional_arguments_are_rejected() {
    let (error_type, message, _, _) = failed(run_with("await tools.echo('A1')\n", &["echo"], no_tools(), LONG).await);
    assert_eq!(error_type, "TypeError");
    assert!(message.contains("tools.echo() takes keyword arguments only"), "{message}");
}

#[tokio::test]
async fn an_unknown_tool_names_the_available_ones() {
    let tools = ["tape_info", "orders_get"];
    let (error_type, message, _, _) = failed(run_with("await tools.tape_infos()\n", &tools, no_tools(), LONG).await);
    assert_eq!(error_type, "AttributeError");
    assert!(message.contains("'tape_infos'") && message.contains("orders_get, tape_info"), "{message}");
}

#[tokio::test]
async fn a_timeout_returns_the_output_printed_before_it() {
    // The clock includes Python's start-up, which a loaded 2-core machine can
    // stretch past a second: 5 s leaves room for the print before the timeout.
    let code = "import time\nprint('started')\ntime.sleep(60)\nprint('never')\n";
    match run_with(code, &[], no_tools(), Duration::from_secs(5)).await {
        Err(CodeError::Timeout { after, output }) => {
            assert_eq!(after, Duration::from_secs(5));
            assert_eq!(output, "started\n");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test]
async fn a_child_killed_from_outside_is_a_crash_with_its_exit_code() {
    let child = spawn_child();
    let ready = Arc::new(Notify::new());
    let notify = ready.clone();
    let sink: OutputSink = Arc::new(move |_| notify.notify_one());
    let Group(pid) = child.group;
    let killer = tokio::spawn(async move {
        ready.notified().await;
        kill_process_group(pid, Signal::KILL).expect("the group is there");
    });
    let code = "import time\nprint('ready')\ntime.sleep(30)\n";
    let result = run_code(child.io, code, &[], no_tools(), sink, LONG, child.exit).await;
    killer.await.expect("the killer ran");
    match result {
        Err(CodeError::Crashed { exit_code, output, .. }) => {
            assert_eq!(exit_code, Some(-9));
            assert_eq!(output, "ready\n");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
}

#[tokio::test]
async fn a_runner_that_exits_reports_its_code_and_stderr() {
    let code = "import os, sys\nprint('partial')\nsys.stdout.flush()\nsys.stderr.write('dying\\n')\nos._exit(7)\n";
    let result = run_with(code, &[], no_tools(), LONG).await;
    assert_eq!(result.as_ref().err().map(ToString::to_string).as_deref(), Some("exited unexpectedly with code 7"));
    match result {
        Err(CodeError::Crashed { exit_code: Some(7), stderr, output }) => {
            assert_eq!(stderr, "dying\n");
            assert_eq!(output, "partial\n");
        }
        other => panic!("expected a crash, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_do_not_mix_outputs() {
    let call_tool: CallTool = Arc::new(|_, arguments: Value| async move { Ok(arguments["n"].clone()) }.boxed());
    let runs: Vec<_> = (0..50)
        .map(|n| {
            let call_tool = call_tool.clone();
            tokio::spawn(async move {
                let code = format!(
                    "for k in range(3):\n    print('run {n} line', k)\nprint('echo', await tools.echo(n={n}))\n"
                );
                let output = run_with(&code, &["echo"], call_tool, LONG).await;
                (n, output)
            })
        })
        .collect();
    for run in runs {
        let (n, output) = run.await.expect("the run task");
        let expected = format!("run {n} line 0\nrun {n} line 1\nrun {n} line 2\necho {n}\n");
        assert_eq!(output.expect("the code runs"), expected);
    }
}
