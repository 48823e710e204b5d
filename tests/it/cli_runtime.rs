//! Issue 13 through the real binary: what `bub run` and `bub chat` print,
//! how they exit, and what the tape records, when an answer is cut off, a
//! run is interrupted, a command fails or a line is typed mid-turn.

use crate::support;

use serde_json::{Value, json};
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;
use support::cli::{CliEnv, text};
use support::fake_model::{FakeModel, Reply};

/// Every message content the model was sent in request `index`.
fn contents(fake: &FakeModel, index: usize) -> Vec<String> {
    fake.requests()[index]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn of_kind<'a>(entries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["kind"] == kind).collect()
}

#[tokio::test]
async fn a_cut_answer_is_asked_again_and_the_tape_keeps_the_fragment_as_an_error() {
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("first words ")).push(Reply::text("Complete reply.")).push(Reply::text("ok"));
    let env = CliEnv::new();
    let output = env.run(Some(&fake), &["run", "tell me"]).await;
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Complete reply.\n", "the fragment never reaches a script");
    assert!(text(&output.stderr).contains("the answer was cut off"), "{}", text(&output.stderr));
    assert!(!contents(&fake, 1).iter().any(|c| c.contains("first words")), "the retry does not replay the fragment");

    let entries = env.only_tape().await;
    let errors = of_kind(&entries, "error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["payload"]["details"]["cut"], true);
    assert_eq!(errors[0]["payload"]["details"]["partial_text"], "first words ");
    let said: Vec<&Value> =
        of_kind(&entries, "message").into_iter().filter(|m| m["payload"]["role"] == "assistant").collect();
    assert_eq!(said.len(), 1);
    assert_eq!(said[0]["payload"]["content"], "Complete reply.");
    let shown = env.run(None, &["tape", "show", "--exact", &env.only_tape_name().await]).await;
    let shown = text(&shown.stdout);
    let line = r#"cut: cut off after "first words ": openai stopped mid-answer: connection lost"#;
    assert!(shown.contains(line), "`bub tape show` reads as what happened: {shown}");

    let next = env.run(Some(&fake), &["run", "and now?"]).await;
    assert!(next.status.success(), "stderr: {}", text(&next.stderr));
    let context = contents(&fake, 2);
    assert!(context.iter().any(|c| c == "Complete reply."), "{context:?}");
    assert!(!context.iter().any(|c| c.contains("first words")), "the next turn never reads the fragment: {context:?}");
}

#[tokio::test]
async fn an_answer_cut_twice_fails_the_run_and_says_so() {
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("first words ")).push(Reply::cut_mid_stream("again words "));
    let env = CliEnv::new();
    let output = env.run(Some(&fake), &["run", "tell me"]).await;
    assert_eq!(output.status.code(), Some(1), "stderr: {}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "again words \n", "what came before the last cut is shown as what it is");
    let stderr = text(&output.stderr);
    assert!(stderr.contains("giving up") && stderr.contains("error: the model's answer was cut off"), "{stderr}");

    let entries = env.only_tape().await;
    let fragments: Vec<&Value> =
        of_kind(&entries, "error").iter().map(|e| &e["payload"]["details"]["partial_text"]).collect();
    assert_eq!(fragments, [&json!("first words "), &json!("again words ")]);
    assert!(
        !of_kind(&entries, "message").iter().any(|m| m["payload"]["role"] == "assistant"),
        "no answer was recorded"
    );
}

#[tokio::test]
async fn a_stream_that_stalls_past_the_timeout_is_cut_and_asked_again() {
    let fake = FakeModel::start().await;
    fake.push(Reply::stall_mid_stream("slow start ", Duration::from_secs(20))).push(Reply::text("Recovered."));
    let env = CliEnv::new();
    let mut command = env.command(Some(&fake), &["run", "tell me"]);
    command.env("BUB_MODEL_TIMEOUT_SECONDS", "1");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Recovered.\n");
    assert!(text(&output.stderr).contains("cut off (timeout"), "{}", text(&output.stderr));
    let entries = env.only_tape().await;
    let errors = of_kind(&entries, "error");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["payload"]["kind"], "timeout");
    assert_eq!(errors[0]["payload"]["details"]["partial_text"], "slow start ");
}

/// Waits (up to 30 s) until `path` exists.
async fn wait_for(path: &std::path::Path) {
    for _ in 0..3000 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test]
async fn a_signal_stops_bub_run_with_its_tool_and_the_tape_says_so() {
    for (signal, status) in [(rustix::process::Signal::INT, 130), (rustix::process::Signal::TERM, 143)] {
        let fake = FakeModel::start().await;
        let cmd = "touch started; sleep 3; echo done > marker";
        fake.push(Reply::tool_calls(vec![("bash", json!({"cmd": cmd}))])).push(Reply::text("never asked"));
        let env = CliEnv::new();
        let mut command = env.command(Some(&fake), &["run", "work slowly"]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = command.spawn().unwrap();
        wait_for(&env.workspace.path().join("started")).await;
        rustix::process::kill_process(rustix::process::Pid::from_raw(child.id() as i32).unwrap(), signal).unwrap();
        let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
        assert_eq!(output.status.code(), Some(status), "{signal:?}: {}", text(&output.stderr));
        assert!(text(&output.stderr).contains("interrupted"), "{}", text(&output.stderr));

        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(!env.workspace.path().join("marker").exists(), "{signal:?}: the shell was killed with bub");
        assert_eq!(fake.request_count(), 1);
        let entries = env.only_tape().await;
        let errors = of_kind(&entries, "error");
        assert_eq!(errors.len(), 1, "{entries:?}\n{}", text(&output.stderr));
        assert_eq!(errors[0]["payload"]["kind"], "interrupted");
        let results = of_kind(&entries, "tool_result");
        assert_eq!(results.len(), 1, "the call has a result that says it was interrupted");
        assert!(results[0]["payload"]["results"][0].as_str().unwrap().contains("interrupted"), "{results:?}");
    }
}

#[tokio::test]
async fn bub_run_exits_with_a_status_that_says_what_failed() {
    let env = CliEnv::new();
    let fake = FakeModel::start().await;
    let failed = env.run(Some(&fake), &["run", ",false"]).await;
    assert_eq!(failed.status.code(), Some(1), "a failed command: {}", text(&failed.stderr));
    assert!(text(&failed.stdout).contains("exit code 1"), "{}", text(&failed.stdout));

    let ok = env.run(Some(&fake), &["run", ",true"]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));

    fake.push(Reply::error(401, "Incorrect API key provided"));
    let model_error = env.run(Some(&fake), &["run", "hello"]).await;
    assert_eq!(model_error.status.code(), Some(1), "a model error: {}", text(&model_error.stderr));

    let empty = env.run(Some(&fake), &["run", " "]).await;
    assert_eq!(empty.status.code(), Some(2), "an empty message: {}", text(&empty.stderr));
    let usage = env.run(Some(&fake), &["run", "--no-such-flag", "x"]).await;
    assert_eq!(usage.status.code(), Some(2));

    let unconfigured = env.run(None, &["run", "hello"]).await;
    assert_eq!(unconfigured.status.code(), Some(3), "no model: {}", text(&unconfigured.stderr));
    assert!(text(&unconfigured.stderr).contains("BUB_MODEL"), "{}", text(&unconfigured.stderr));
}

#[tokio::test]
async fn a_line_typed_in_bub_chat_while_a_turn_runs_steers_it() {
    let fake = FakeModel::start().await;
    let cmd = "touch started; sleep 2";
    fake.push(Reply::tool_calls(vec![("bash", json!({"cmd": cmd}))])).push(Reply::text("done, with your note"));
    let env = CliEnv::new();
    let mut command = env.command(Some(&fake), &["chat"]);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"start the work\n").unwrap();
    wait_for(&env.workspace.path().join("started")).await;
    stdin.write_all(b"also mention the deadline\n").unwrap();
    // Ctrl-D: the turn finishes, then chat leaves.
    drop(stdin);
    let output = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    assert!(text(&output.stderr).contains("(added to the running turn)"), "{}", text(&output.stderr));
    assert_eq!(fake.request_count(), 2, "one turn, not two");
    let second = contents(&fake, 1);
    assert_eq!(second.last().unwrap(), "also mention the deadline", "joined before the next step: {second:?}");
    assert!(text(&output.stdout).contains("done, with your note"), "{}", text(&output.stdout));
}

#[tokio::test]
async fn bub_tools_columns_line_up() {
    let fake = FakeModel::start().await;
    let env = CliEnv::new();
    let output = env.run(Some(&fake), &["tools"]).await;
    assert!(output.status.success(), "stderr: {}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<Vec<char>> = stdout.lines().map(|l| l.chars().collect()).collect();
    let header: String = lines[0].iter().collect();
    assert!(header.starts_with("TOOL"), "{header}");
    let lengths: std::collections::BTreeSet<usize> =
        stdout.lines().skip(1).map(|l| l.split_whitespace().next().unwrap().chars().count()).collect();
    assert!(lengths.len() > 1, "names of different lengths");
    for column in ["MODEL NAME", "USE", "CAPABILITIES"] {
        let at = header.find(column).unwrap();
        for line in &lines[1..] {
            let row: String = line.iter().collect();
            assert!(line[at - 1] == ' ' && line[at] != ' ', "{column} starts at {at} in: {row}");
        }
    }
}
