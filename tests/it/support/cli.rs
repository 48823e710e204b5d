//! The `bub` binary as a user runs it: its own home and workspace, configured
//! only through environment variables, against the fake model.

use super::fake_model::FakeModel;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use tempfile::TempDir;

/// A fresh `BUB_HOME` and a workspace (the current directory of each command).
pub struct CliEnv {
    pub home: TempDir,
    pub workspace: TempDir,
}

impl CliEnv {
    pub fn new() -> CliEnv {
        CliEnv { home: tempfile::tempdir().expect("home"), workspace: tempfile::tempdir().expect("workspace") }
    }

    /// `bub <args>` in the workspace, talking to `fake` when given.
    pub fn command(&self, fake: Option<&FakeModel>, args: &[&str]) -> Command {
        bub_command(self.home.path(), self.workspace.path(), fake, args)
    }

    /// Runs `bub <args>` to the end, off the async runtime.
    pub async fn run(&self, fake: Option<&FakeModel>, args: &[&str]) -> Output {
        let mut command = self.command(fake, args);
        tokio::task::spawn_blocking(move || command.output().expect("run bub")).await.expect("join")
    }

    /// The entries of the only non-sidecar tape, as `bub tape export` writes them.
    pub async fn only_tape(&self) -> Vec<Value> {
        let name = self.only_tape_name().await;
        let export = self.run(None, &["tape", "export", &name]).await;
        text(&export.stdout).lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
    }

    /// The name of the only non-sidecar tape, as `bub tape list` prints it.
    pub async fn only_tape_name(&self) -> String {
        let list = self.run(None, &["tape", "list", "--json"]).await;
        let names: Vec<String> = text(&list.stdout)
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
            .map(|tape| tape["name"].as_str().expect("a name").to_string())
            .collect();
        assert_eq!(names.len(), 1, "one tape: {names:?}");
        names[0].clone()
    }
}

/// `bub <args>` with only `PATH`, `HOME` and `BUB_HOME` (= `home`) set, run
/// in `cwd`, talking to `fake` as `openai:gpt-test` when given.
pub fn bub_command(home: &Path, cwd: &Path, fake: Option<&FakeModel>, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bub"));
    command.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("HOME", home);
    command.env("BUB_HOME", home).current_dir(cwd).args(args);
    if let Some(fake) = fake {
        command.envs(fake.vars("openai:gpt-test"));
    }
    command
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
