//! Session environments on the host: spawning, whole-tree signals, files,
//! confinement and one environment per session.

use crate::support;

use bub::environment::{
    Environment, EnvironmentError, Environments, LocalEnvironment, LocalProvider, PathError, Program, SpawnOptions,
};
use std::sync::Arc;
use std::time::Duration;
use support::gone_within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn output_of(environment: &LocalEnvironment, command: Program, options: SpawnOptions) -> (String, i32) {
    let mut process = environment.spawn(command, options).await.expect("spawn");
    let mut stdout = process.take_io().stdout.expect("stdout");
    let mut text = String::new();
    stdout.read_to_string(&mut text).await.expect("read");
    (text, process.wait().await.expect("wait"))
}

#[tokio::test]
async fn strings_run_through_the_shell_and_lists_as_argv() {
    let dir = tempfile::tempdir().unwrap();
    let environment = LocalEnvironment::new(dir.path(), false).unwrap();
    let (text, code) =
        output_of(&environment, Program::Shell("echo $((2+3)) | sed s/5/five/".into()), SpawnOptions::default()).await;
    assert_eq!((text.as_str(), code), ("five\n", 0));
    let argv = Program::Argv(vec!["printf".into(), "%s|".into(), "a b".into(), "$HOME".into()]);
    let (text, _) = output_of(&environment, argv, SpawnOptions::default()).await;
    assert_eq!(text, "a b|$HOME|", "no shell expansion for argv");
    let (text, code) = output_of(&environment, Program::Shell("exit 3".into()), SpawnOptions::default()).await;
    assert_eq!((text.as_str(), code), ("", 3));
}

#[tokio::test]
async fn cwd_and_env_are_layered_over_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    let environment = LocalEnvironment::new(dir.path(), false).unwrap();
    let options = SpawnOptions {
        cwd: Some("sub".into()),
        env: vec![("GREETING".into(), "hej".into())],
        ..SpawnOptions::default()
    };
    let (text, _) =
        output_of(&environment, Program::Shell("echo $GREETING $(basename $PWD) ${PATH:+has-path}".into()), options)
            .await;
    assert_eq!(text, "hej sub has-path\n");
}

#[tokio::test]
async fn stdin_reaches_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let environment = LocalEnvironment::new(dir.path(), false).unwrap();
    let mut process = environment.spawn(Program::Argv(vec!["cat".into()]), SpawnOptions::default()).await.unwrap();
    let mut io = process.take_io();
    let mut stdin = io.stdin.take().unwrap();
    stdin.write_all(b"through the pipe").await.unwrap();
    drop(stdin);
    let mut text = String::new();
    io.stdout.unwrap().read_to_string(&mut text).await.unwrap();
    assert_eq!(text, "through the pipe");
}

#[tokio::test]
async fn a_signal_reaches_the_whole_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    let environment = LocalEnvironment::new(dir.path(), false).unwrap();
    let mut process =
        environment.spawn(Program::Shell("sleep 100 & sleep 100".into()), SpawnOptions::default()).await.unwrap();
    assert!(process.is_running());
    process.signal(false);
    assert!(gone_within(process.as_ref(), Duration::from_secs(5)).await, "a child of the shell survived TERM");
    assert_eq!(process.wait().await.unwrap(), -15);
    process.signal(true); // already gone: not an error
}

#[tokio::test]
async fn close_kills_what_the_environment_started() {
    let dir = tempfile::tempdir().unwrap();
    let environment = LocalEnvironment::new(dir.path(), false).unwrap();
    let process = environment.spawn(Program::Shell("sleep 100 & wait".into()), SpawnOptions::default()).await.unwrap();
    environment.close().await;
    assert!(gone_within(process.as_ref(), Duration::from_secs(5)).await);
}

#[tokio::test]
async fn write_text_creates_parents_and_read_text_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let environment = LocalEnvironment::new(dir.path().join("ws"), false).unwrap();
    let written = environment.write_text("deep/er/notes.md", "Grüße 🦀").await.unwrap();
    assert!(written.ends_with("ws/deep/er/notes.md"));
    assert_eq!(environment.read_text("deep/er/notes.md").await.unwrap(), "Grüße 🦀");
    let missing = environment.read_text("nope.txt").await.unwrap_err().to_string();
    assert!(missing.contains("nope.txt"), "{missing}");
}

#[tokio::test]
async fn a_confined_environment_refuses_every_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path(), ws.join("up")).unwrap();
    let environment = LocalEnvironment::new(&ws, true).unwrap();
    let outside = dir.path().join("secret.txt");
    for path in ["../secret.txt", outside.to_str().unwrap(), "up/secret.txt"] {
        let error = environment.read_text(path).await.unwrap_err();
        assert!(matches!(error, EnvironmentError::Path(PathError::OutsideWorkspace { .. })), "{path}: {error}");
        assert!(error.to_string().contains(path), "names the path: {error}");
        assert!(environment.write_text(path, "x").await.is_err());
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside", "nothing was written outside");
    let escape = SpawnOptions { cwd: Some("..".into()), ..SpawnOptions::default() };
    assert!(environment.spawn(Program::Shell("pwd".into()), escape).await.is_err(), "cwd is confined too");
    environment.write_text("inside.txt", "fine").await.unwrap();
}

#[tokio::test]
async fn each_session_gets_one_environment_in_its_own_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let environments = Environments::new(Arc::new(LocalProvider::default()), dir.path(), Duration::from_secs(3600));
    let first = environments.get("telegram:-100/7", None).await.unwrap();
    let again = environments.get("telegram:-100/7", None).await.unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    let other = environments.get("telegram:-100%2F7", None).await.unwrap();
    assert_ne!(first.workspace(), other.workspace(), "safe names do not collide");
    assert!(first.workspace().starts_with(dir.path()) && first.workspace().is_dir());
    assert!(!first.workspace().file_name().unwrap().to_str().unwrap().contains('/'));
    let custom = environments.get("cli:local", Some(dir.path().join("elsewhere"))).await.unwrap();
    assert_eq!(custom.workspace(), dir.path().join("elsewhere"));
    assert_eq!(environments.len().await, 3);
}

#[tokio::test]
async fn idle_environments_are_closed_and_their_processes_killed() {
    let dir = tempfile::tempdir().unwrap();
    let environments = Environments::new(Arc::new(LocalProvider::default()), dir.path(), Duration::ZERO);
    let environment = environments.get("chat", None).await.unwrap();
    let process = environment.spawn(Program::Shell("sleep 100".into()), SpawnOptions::default()).await.unwrap();
    assert_eq!(environments.close_idle().await, 1);
    assert!(environments.is_empty().await);
    assert!(gone_within(process.as_ref(), Duration::from_secs(5)).await);
}

#[tokio::test]
async fn the_sweeper_closes_idle_environments_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let environments =
        Arc::new(Environments::new(Arc::new(LocalProvider::default()), dir.path(), Duration::from_millis(50)));
    let sweeper = environments.sweep_idle(Duration::from_millis(20));
    environments.get("chat", None).await.unwrap();
    for _ in 0..250 {
        if environments.is_empty().await {
            sweeper.abort();
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the idle environment was never closed");
}
