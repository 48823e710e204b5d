//! `bub run`, `bub chat` and `bub tools` as a user runs them: the real binary,
//! configured only through environment variables, against the fake model.

use crate::support;

use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Output, Stdio};
use support::fake_model::{FakeModel, Reply};
use tempfile::TempDir;

struct Env {
    home: TempDir,
    workspace: TempDir,
}

fn env() -> Env {
    Env { home: tempfile::tempdir().unwrap(), workspace: tempfile::tempdir().unwrap() }
}

fn bub(env: &Env, fake: Option<&FakeModel>, args: &[&str]) -> Command {
    support::cli::bub_command(env.home.path(), env.workspace.path(), fake, args)
}

fn run(mut command: Command) -> Output {
    command.output().expect("run bub")
}

use support::cli::text;

#[tokio::test]
async fn bub_run_streams_the_reply_and_records_the_session() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("Hello from the fake model."));
    let env = env();
    let output = tokio::task::spawn_blocking({
        let command = bub(&env, Some(&fake), &["run", "hi there"]);
        move || run(command)
    })
    .await
    .unwrap();
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Hello from the fake model.\n");
    assert_eq!(fake.requests()[0]["messages"].as_array().unwrap().last().unwrap()["content"], "hi there");

    let show = run(bub(&env, None, &["tape", "show", "cli:local", "--kind", "message", "--json"]));
    let lines: Vec<Value> = text(&show.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["payload"]["content"], "Hello from the fake model.");
}

#[tokio::test]
async fn bub_run_runs_tools_in_the_workspace() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("fs_read", json!({"path": "notes.txt"}))])).push(Reply::text("It says hello."));
    let env = env();
    std::fs::write(env.workspace.path().join("notes.txt"), "hello from the workspace\n").unwrap();
    let command = bub(&env, Some(&fake), &["run", "what is in notes.txt?"]);
    let output = tokio::task::spawn_blocking(move || run(command)).await.unwrap();
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "It says hello.\n");
    assert!(text(&output.stderr).contains("→ fs_read"), "{}", text(&output.stderr));
    let tool_message = fake.requests()[1]["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(tool_message["content"].as_str().unwrap().contains("hello from the workspace"));
}

#[tokio::test]
async fn bub_run_exits_non_zero_with_the_error() {
    let fake = FakeModel::start().await;
    fake.push(Reply::error(401, "Incorrect API key provided"));
    let env = env();
    let command = bub(&env, Some(&fake), &["run", "hi"]);
    let output = tokio::task::spawn_blocking(move || run(command)).await.unwrap();
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("Incorrect API key provided"), "{stderr}");
}

#[test]
fn without_a_model_prompts_name_the_variable_and_commands_still_work() {
    let env = env();
    let output = run(bub(&env, None, &["run", "hello?"]));
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("BUB_MODEL"), "{}", text(&output.stderr));

    let output = run(bub(&env, None, &["run", ",fs.write notes.txt 'written by a command'"]));
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let written = std::fs::read_to_string(env.workspace.path().join("notes.txt")).unwrap();
    assert_eq!(written, "written by a command");
}

#[test]
fn an_unknown_provider_lists_the_known_ones() {
    let env = env();
    let mut command = bub(&env, None, &["run", "hi"]);
    command.env("BUB_MODEL", "nosuch:model");
    let output = run(command);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("openai") && stderr.contains("anthropic") && stderr.contains("openrouter"), "{stderr}");
}

#[test]
fn bub_tools_lists_model_names_and_flags() {
    let env = env();
    let output = run(bub(&env, None, &["tools", "--json"]));
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let tools: Vec<Value> = text(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |name: &str| tools.iter().find(|t| t["name"] == name).cloned().unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(find("fs.read")["model_name"], "fs_read");
    assert_eq!(find("fs.read")["preserve"], true);
    assert_eq!(find("help")["agent_use"], false);
    for name in [
        "bash",
        "bash.output",
        "bash.kill",
        "fs.write",
        "fs.edit",
        "tape.info",
        "tape.search",
        "tape.anchors",
        "tape.handoff",
        "tape.reset",
        "spill.read",
        "skill",
        "web.fetch",
        "subagent",
        "model",
        "quit",
    ] {
        find(name);
    }
    let plain = run(bub(&env, None, &["tools"]));
    assert!(text(&plain.stdout).lines().any(|l| l.starts_with("fs.read") && l.contains("fs_read")));
}

#[tokio::test]
async fn bub_chat_keeps_one_session_across_lines() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("first answer")).push(Reply::text("second answer"));
    let env = env();
    let mut command = bub(&env, Some(&fake), &["chat"]);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    // Typed once the model has the first line: whether it joins the first
    // turn (if that still runs) or starts the next, the model reads it after
    // the first answer.
    for _ in 0..3000 {
        if fake.request_count() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    stdin.write_all(b"and again\n,quit\n").unwrap();
    drop(stdin);
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("first answer") && stdout.contains("second answer"), "{stdout}");
    let second = fake.requests()[1]["messages"].as_array().unwrap().clone();
    assert!(second.iter().any(|m| m["content"] == "first answer"), "the second turn saw the first");
}

#[tokio::test]
async fn ctrl_c_in_chat_cancels_the_turn_not_the_program() {
    use std::time::Duration;
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_secs(30), Reply::text("too late")))
        .push(Reply::text("still alive"));
    let env = env();
    let mut command = bub(&env, Some(&fake), &["chat"]);
    command.env("BUB_MODEL_TIMEOUT_SECONDS", "60");
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"take your time\n").unwrap();
    for _ in 0..3000 {
        if fake.request_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(fake.request_count(), 1, "the first turn reached the model");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    stdin.write_all(b"are you there?\n,quit\n").unwrap();
    drop(stdin);
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert!(text(&output.stderr).contains("(turn cancelled)"), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("still alive"), "{}", text(&output.stdout));
    assert!(!text(&output.stdout).contains("too late"));
}

/// Lines typed ahead, faster than a turn starts, reach the model in the
/// order typed, whether they join the running turn or wait for the next.
/// The race this pins lost in 1 to 5 runs of 8: each run here types four
/// lines at once.
#[tokio::test]
async fn lines_typed_ahead_reach_the_model_in_the_order_typed() {
    for attempt in 0..8 {
        let fake = FakeModel::start_answering("ok").await;
        let env = env();
        let mut command = bub(&env, Some(&fake), &["chat"]);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"first\nsecond\nthird\nfourth\n,quit\n").unwrap();
        drop(stdin);
        let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
        assert!(output.status.success(), "stderr: {}", text(&output.stderr));
        let requests = fake.requests();
        let last = requests.last().expect("the model was asked")["messages"].as_array().unwrap().clone();
        let typed: Vec<&str> =
            last.iter().filter(|m| m["role"] == "user").filter_map(|m| m["content"].as_str()).collect();
        assert_eq!(typed, ["first", "second", "third", "fourth"], "attempt {attempt}");
    }
}
