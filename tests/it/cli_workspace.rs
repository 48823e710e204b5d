//! A session named on the command line belongs to its workspace: the same
//! `--session` in two projects is two conversations, `bub tape list` says
//! which workspace each tape is from, and tapes from before the scoping (and
//! the gateway's) stay readable by their names. The real binary against the
//! fake model, as in `cli_agent.rs`.

use crate::support;

use bub::db::SqliteTapeStore;
use bub::home::BubHome;
use bub::tape::{NewEntry, Tape, TapeName};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use support::fake_model::FakeModel;
use tempfile::TempDir;

/// A `$BUB_HOME` and a directory holding the projects.
struct Env {
    home: TempDir,
    projects: TempDir,
}

impl Env {
    fn new() -> Env {
        Env { home: tempfile::tempdir().unwrap(), projects: tempfile::tempdir().unwrap() }
    }

    /// A project directory, created, by its canonical path.
    fn project(&self, name: &str) -> PathBuf {
        let dir = self.projects.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    /// `bub ARGS` run in `cwd`, talking to `fake` when given.
    fn bub(&self, cwd: &Path, fake: Option<&FakeModel>, args: &[&str]) -> Command {
        support::cli::bub_command(self.home.path(), cwd, fake, args)
    }
}

/// Runs a command off the runtime, so the fake model keeps answering.
async fn run_bub(command: Command) -> Output {
    let mut command = command;
    tokio::task::spawn_blocking(move || command.output().expect("run bub")).await.unwrap()
}

use support::cli::text;

fn succeeded(output: Output) -> String {
    assert!(output.status.success(), "bub failed: {}", text(&output.stderr));
    text(&output.stdout)
}

/// Everything the model was sent in request `index`, as one string.
fn request_text(fake: &FakeModel, index: usize) -> String {
    fake.requests()[index]["messages"].to_string()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(|line| serde_json::from_str(line).expect("one JSON object per line")).collect()
}

/// Writes a tape as bub did before sessions were scoped: a plain name, no workspace.
async fn write_plain_tape(home: &Path, name: &str, said: &str) {
    let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(BubHome::at(home).database()).await.unwrap()));
    let tape = Tape::new(store.clone(), TapeName::new(name).unwrap());
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", said)).await.unwrap();
    tape.append(NewEntry::chat("assistant", "an old answer")).await.unwrap();
    store.close().await;
}

#[tokio::test]
async fn the_same_session_in_two_workspaces_is_two_conversations() {
    let fake = FakeModel::start_answering("ok").await;
    let env = Env::new();
    let (a, b) = (env.project("a"), env.project("b"));
    let run_in = |workspace: &Path, message: &str| {
        env.bub(
            env.projects.path(),
            Some(&fake),
            &["run", "--session", "s", "--workspace", workspace.to_str().unwrap(), message],
        )
    };

    succeeded(run_bub(run_in(&a, "hello A")).await);
    succeeded(run_bub(run_in(&b, "hello B")).await);
    let second = request_text(&fake, 1);
    assert!(second.contains("hello B"), "{second}");
    assert!(!second.contains("hello A"), "project B's request holds project A's turn: {second}");

    succeeded(run_bub(run_in(&a, "hello again A")).await);
    let third = request_text(&fake, 2);
    assert!(third.contains("hello A") && third.contains("hello again A"), "{third}");
    assert!(!third.contains("hello B"), "{third}");
}

#[tokio::test]
async fn tape_list_shows_each_workspace_and_old_tapes_stay_readable() {
    let fake = FakeModel::start_answering("ok").await;
    let env = Env::new();
    let (a, b) = (env.project("a"), env.project("b"));
    write_plain_tape(env.home.path(), "s", "from before the scoping").await;
    write_plain_tape(env.home.path(), "telegram:-100/7", "a gateway chat").await;
    for (workspace, message) in [(&a, "hello A"), (&b, "hello B")] {
        succeeded(run_bub(env.bub(workspace, Some(&fake), &["run", "--session", "s", message])).await);
    }
    assert!(!request_text(&fake, 0).contains("from before the scoping"), "a new session starts empty");

    let list = json_lines(&succeeded(run_bub(env.bub(&a, None, &["tape", "list", "--json"])).await));
    let workspace_of = |name: &str| list.iter().find(|t| t["name"] == name).map(|t| t["workspace"].clone());
    assert_eq!(list.len(), 4, "{list:?}");
    let scoped: Vec<&Value> = list.iter().filter(|t| t["workspace"].is_string()).collect();
    let mut workspaces: Vec<&str> = scoped.iter().map(|t| t["workspace"].as_str().unwrap()).collect();
    workspaces.sort();
    assert_eq!(workspaces, vec![a.to_str().unwrap(), b.to_str().unwrap()]);
    for tape in scoped {
        assert!(tape["name"].as_str().unwrap().starts_with("s@"), "the session stays readable: {tape}");
    }
    assert_eq!(workspace_of("s"), Some(Value::Null), "{list:?}");
    assert_eq!(workspace_of("telegram:-100/7"), Some(Value::Null), "{list:?}");

    let table = succeeded(run_bub(env.bub(&a, None, &["tape", "list"])).await);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("TAPE") && lines[0].ends_with("WORKSPACE"), "{table}");
    let row = |start: &str| lines.iter().find(|l| l.starts_with(start)).copied().unwrap_or_default();
    assert!(row("s@").ends_with(a.to_str().unwrap()) || row("s@").ends_with(b.to_str().unwrap()), "{table}");
    assert!(row("s ").ends_with(" -"), "an old tape has no known workspace: {table}");
    assert!(row("telegram:-100/7").ends_with(" -"), "{table}");

    // In A, `s` is the session run there; elsewhere, and with --exact, the old tape.
    let show = |cwd: &Path, args: &[&str]| {
        let mut all = vec!["tape", "show"];
        all.extend_from_slice(args);
        env.bub(cwd, None, &all)
    };
    let here = run_bub(show(&a, &["s"])).await;
    assert!(text(&here.stderr).contains("--exact"), "names the other tape: {}", text(&here.stderr));
    let here = succeeded(here);
    assert!(here.contains("user: hello A") && !here.contains("before the scoping"), "{here}");
    let old = succeeded(run_bub(show(&a, &["s", "--exact"])).await);
    assert!(old.contains("user: from before the scoping") && !old.contains("hello A"), "{old}");
    let elsewhere = succeeded(run_bub(show(env.home.path(), &["s"])).await);
    assert!(elsewhere.contains("user: from before the scoping"), "{elsewhere}");
    let b_from_a = succeeded(run_bub(show(&a, &["s", "--workspace", b.to_str().unwrap()])).await);
    assert!(b_from_a.contains("user: hello B") && !b_from_a.contains("hello A"), "{b_from_a}");
    let chat = succeeded(run_bub(show(&a, &["telegram:-100/7"])).await);
    assert!(chat.contains("user: a gateway chat"), "{chat}");
}

#[tokio::test]
async fn a_relative_path_a_symlink_and_the_current_directory_name_one_workspace() {
    let fake = FakeModel::start_answering("ok").await;
    let env = Env::new();
    let a = env.project("a");
    let link = env.projects.path().join("link-to-a");
    std::os::unix::fs::symlink(&a, &link).unwrap();

    let projects = env.projects.path();
    succeeded(run_bub(env.bub(projects, Some(&fake), &["run", "-w", "./a", "first turn"])).await);
    succeeded(run_bub(env.bub(projects, Some(&fake), &["run", "-w", link.to_str().unwrap(), "second turn"])).await);
    succeeded(run_bub(env.bub(&link, Some(&fake), &["run", "third turn"])).await);
    succeeded(run_bub(env.bub(&a, Some(&fake), &["run", "fourth turn"])).await);
    let last = request_text(&fake, 3);
    for turn in ["first turn", "second turn", "third turn"] {
        assert!(last.contains(turn), "{turn} is missing: {last}");
    }

    let list = json_lines(&succeeded(run_bub(env.bub(projects, None, &["tape", "list", "--json"])).await));
    assert_eq!(list.len(), 1, "one tape: {list:?}");
    assert_eq!(list[0]["workspace"], a.to_str().unwrap());
    assert!(list[0]["name"].as_str().unwrap().starts_with("cli:local@"), "{list:?}");
    // `bub tape show` finds the session the same way.
    let shown = succeeded(run_bub(env.bub(&link, None, &["tape", "show", "cli:local", "--kind", "message"])).await);
    assert_eq!(shown.lines().count(), 8, "four turns: {shown}");
}

#[tokio::test]
async fn a_workspace_that_is_not_a_directory_is_a_clear_error() {
    let env = Env::new();
    let missing = env.projects.path().join("missing");
    let output = run_bub(env.bub(env.projects.path(), None, &["run", "-w", missing.to_str().unwrap(), ",help"])).await;
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("cannot use") && stderr.contains("missing"), "{stderr}");

    let output = run_bub(env.bub(env.projects.path(), None, &["tape", "show", "s", "-w", "missing"])).await;
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("missing"), "{}", text(&output.stderr));

    let long = "x".repeat(500);
    let output = run_bub(env.bub(env.projects.path(), None, &["run", "--session", &long, ",help"])).await;
    assert!(!output.status.success());
    assert!(text(&output.stderr).contains("495"), "{}", text(&output.stderr));
}

#[tokio::test]
async fn chat_names_its_session_and_workspace() {
    let fake = FakeModel::start_answering("ok").await;
    let env = Env::new();
    let a = env.project("a");
    let mut command = env.bub(&a, Some(&fake), &["chat", "--session", "notes"]);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().unwrap();
        child.stdin.take().unwrap().write_all(b"hello\n,quit\n").unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let banner = stderr.lines().next().unwrap_or_default();
    assert!(banner.contains("session notes") && banner.contains(a.to_str().unwrap()), "{banner}");

    let list = json_lines(&succeeded(run_bub(env.bub(&a, None, &["tape", "list", "--json"])).await));
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["workspace"], a.to_str().unwrap());
    assert_eq!(banner.split("(tape ").nth(1).and_then(|t| t.strip_suffix(')')), list[0]["name"].as_str());
}
