//! Code mode end to end: the switch, what the model sees, `run_code` calling
//! tools through the events, failures, restarts, and concurrent runs.

use crate::support;

use bub::agent::events::{BeforeToolCall, ToolCallDecision};
use bub::agent::{RunOptions, StreamEvent};
use bub::codemode::RunCode;
use bub::codemode::runner::{CallTool, OutputSink};
use bub::db::SqliteTapeStore;
use bub::environment::{Environments, LocalProvider};
use bub::home::BubHome;
use bub::setup::Setup;
use bub::tape::EntryKind;
use bub::tools::{Tool, ToolContext, ToolError};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::fake_model::{FakeModel, Reply};
use tempfile::TempDir;

struct World {
    setup: Setup,
    home: TempDir,
    workspace: TempDir,
}

async fn setup_in(fake: &FakeModel, home: &std::path::Path, workspace: &std::path::Path) -> Setup {
    let bub_home = BubHome::at(home);
    let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
    Setup::build(&bub_home, workspace.to_path_buf(), store, fake.vars("openai:gpt-test")).unwrap()
}

async fn world(fake: &FakeModel) -> World {
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let setup = setup_in(fake, home.path(), workspace.path()).await;
    World { setup, home, workspace }
}

impl World {
    async fn say(&self, text: &str) -> bub::agent::RunOutcome {
        self.setup.agent.run(text, RunOptions::new("ops").workspace(self.workspace.path())).collect().await
    }
}

fn tool_names(request: &Value) -> Vec<String> {
    let mut names: Vec<String> = request["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

fn tool_result(outcome: &bub::agent::RunOutcome) -> (String, bool) {
    outcome
        .events
        .iter()
        .find_map(|e| match e {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .expect("a tool result")
}

fn run_code(code: &str, timeout_seconds: u64) -> Reply {
    Reply::tool_calls(vec![("run_code", json!({"code": code, "timeout_seconds": timeout_seconds}))])
}

#[tokio::test]
async fn the_switch_changes_what_the_model_sees_from_the_next_turn() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("direct")).push(Reply::text("in code mode"));
    let world = world(&fake).await;
    world.say("before").await;
    assert!(!tool_names(&fake.requests()[0]).contains(&"run_code".to_string()), "no run_code outside code mode");
    assert!(tool_names(&fake.requests()[0]).contains(&"tape_info".to_string()));

    let switched = world.say(",code_mode enable=true").await.text;
    assert_eq!(switched, "code mode on for this session from the next turn");
    world.say("after").await;
    let request = &fake.requests()[1];
    assert_eq!(
        tool_names(request),
        vec!["bash", "bash_kill", "bash_output", "fs_edit", "fs_read", "fs_write", "run_code", "spill_read"]
    );
    let system = request["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("<code_mode>") && system.contains("tape_info"), "{system}");
    let stub_path = system.split("Read the typed stub ").nth(1).unwrap().split(" (with fs_read)").next().unwrap();
    assert!(stub_path.starts_with(world.home.path().join("codemode").to_str().unwrap()), "{stub_path}");
    let stub = std::fs::read_to_string(stub_path).unwrap();
    assert!(stub.contains("async def tape_info(") && stub.contains("async def web_fetch("), "{stub}");
    assert!(!stub.contains("async def bash("), "preserved tools stay out of the stub");
}

#[tokio::test]
async fn run_code_calls_tools_through_the_events_with_structured_results() {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    world.setup.agent.events().on_sync(move |event: &mut BeforeToolCall| {
        log.lock().push((event.call.tool.clone(), event.call.code_mode));
        Ok(())
    });
    world.say(",code_mode enable=true").await;
    let code = "import asyncio\nhandoff, info = await asyncio.gather(tools.tape_handoff(name='phase-1', summary='s'), tools.tape_info())\nprint(handoff)\nprint('entries' in info)";
    fake.push(run_code(code, 30)).push(Reply::text("done"));
    let outcome = world.say("use code").await;
    assert_eq!(outcome.text, "done");
    let (output, is_error) = tool_result(&outcome);
    assert!(!is_error, "{output}");
    assert_eq!(output, "handoff created: phase-1\nTrue\n");
    let seen = seen.lock().clone();
    assert!(seen.contains(&("run_code".to_string(), false)));
    assert!(seen.contains(&("tape.info".to_string(), true)), "{seen:?}");
    assert!(seen.contains(&("tape.handoff".to_string(), true)), "{seen:?}");
}

/// A handler denies `tape.reset`; in code mode the model's code calls it
/// (catching the error and printing it). Returns the world and the outcome.
async fn reset_denied_inside_code() -> (World, bub::agent::RunOutcome) {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    world.setup.agent.events().on_sync(|event: &mut BeforeToolCall| {
        if event.call.tool == "tape.reset" {
            event.decision = Some(ToolCallDecision::Deny("resets are for operators".into()));
        }
        Ok(())
    });
    world.say(",code_mode enable=true").await;
    let code =
        "try:\n    await tools.tape_reset(archive=False)\nexcept Exception as error:\n    print('refused:', error)";
    fake.push(run_code(code, 30)).push(Reply::text("ok"));
    let outcome = world.say("reset please").await;
    (world, outcome)
}

#[tokio::test]
async fn a_tool_denied_by_a_handler_stays_denied_inside_code() {
    let (_world, outcome) = reset_denied_inside_code().await;
    let (output, _) = tool_result(&outcome);
    assert_eq!(output.trim(), "refused: resets are for operators");
}

#[tokio::test]
async fn failures_come_back_with_output_traceback_and_timeouts_keep_what_was_printed() {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    world.say(",code_mode enable=true").await;
    fake.push(run_code("print('step 1')\nraise ValueError('bad input')", 30))
        .push(run_code("import time\nprint('before the wait', flush=True)\ntime.sleep(60)", 15))
        .push(Reply::text("ok"));
    let outcome = world.say("try twice").await;
    let results: Vec<(String, bool)> = outcome
        .events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect();
    let (failed, timed_out) = (&results[0], &results[1]);
    assert!(failed.1 && timed_out.1);
    let failed: Value = serde_json::from_str(&failed.0).unwrap();
    assert_eq!(failed["message"], "raised ValueError: bad input");
    assert_eq!(failed["details"]["output"], "step 1\n");
    assert!(failed["details"]["traceback"].as_str().unwrap().contains("raise ValueError"));
    let timed_out: Value = serde_json::from_str(&timed_out.0).unwrap();
    assert_eq!(timed_out["message"], "timed out after 15 seconds");
    assert_eq!(timed_out["details"]["output"], "before the wait\n");
}

/// A result whose serialization fails, as a value holding a non-JSON map key would.
#[derive(JsonSchema)]
struct NotJson {}

impl Serialize for NotJson {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("key must be a string"))
    }
}

/// A result that cannot become JSON.
#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[tokio::test]
async fn a_result_that_is_not_json_fails_only_that_call() {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    let broken = Tool::typed("broken", |_: NoArgs, _: ToolContext| async { Ok::<_, ToolError>(NotJson {}) });
    world.setup.agent.add_tool(broken);
    world.say(",code_mode enable=true").await;
    let code = "try:\n    await tools.broken()\nexcept Exception as error:\n    print('failed:', error)\nprint(await tools.tape_anchors())";
    fake.push(run_code(code, 30)).push(Reply::text("ok"));
    let (output, is_error) = tool_result(&world.say("go").await);
    assert!(!is_error, "{output}");
    assert!(output.starts_with("failed: result is not JSON"), "{output}");
    assert!(output.contains("session/start"), "the next call still worked: {output}");
}

#[tokio::test]
async fn code_mode_survives_a_restart() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("after restart"));
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = setup_in(&fake, home.path(), workspace.path()).await;
    first.agent.run(",code_mode enable=true", RunOptions::new("ops").workspace(workspace.path())).collect().await;
    first.shutdown().await;
    drop(first);
    let second = setup_in(&fake, home.path(), workspace.path()).await;
    second.agent.run("hello again", RunOptions::new("ops").workspace(workspace.path())).collect().await;
    assert!(tool_names(&fake.requests()[0]).contains(&"run_code".to_string()));
}

#[tokio::test]
async fn without_run_code_in_the_allowed_tools_the_turn_calls_tools_directly() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("direct"));
    let world = world(&fake).await;
    world.say(",code_mode enable=true").await;
    let options = RunOptions::new("ops")
        .workspace(world.workspace.path())
        .allowed_tools(vec!["tape.info".into(), "fs.read".into()]);
    world.setup.agent.run("restricted", options).collect().await;
    assert_eq!(tool_names(&fake.requests()[0]), vec!["fs_read", "tape_info"]);
}

#[tokio::test]
async fn fifty_concurrent_runs_in_different_sessions_do_not_interfere() {
    let dir = tempfile::tempdir().unwrap();
    let environments =
        Arc::new(Environments::new(Arc::new(LocalProvider::default()), dir.path(), Duration::from_secs(600)));
    let runs = (0..50).map(|n| {
        let environments = environments.clone();
        async move {
            let environment = environments.get(&format!("session-{n}"), None).await.unwrap();
            let call_tool: CallTool = Arc::new(move |name, args| {
                Box::pin(async move { Ok(json!({"session": n, "tool": name, "args": args})) })
            });
            let write: OutputSink = Arc::new(|_| {});
            let code = "r = await tools.whoami(x=1)\nprint(r['session'], r['tool'], r['args']['x'])";
            let output =
                environment.run_code(code, &["whoami".to_string()], call_tool, write, Duration::from_secs(60)).await;
            (n, output)
        }
    });
    for (n, output) in futures::future::join_all(runs).await {
        assert_eq!(output.unwrap(), format!("{n} whoami 1\n"));
    }
    environments.close_all().await;
}

/// `test.echo(text)` → `{"said": text}`; `test.add(a, b)` → `a + b`.
#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

fn add_test_tools(world: &World) {
    world.setup.agent.add_tool(Tool::typed("test.echo", |args: EchoArgs, _: ToolContext| async move {
        Ok::<_, ToolError>(json!({"said": args.text}))
    }));
    world.setup.agent.add_tool(Tool::typed("test.add", |args: AddArgs, _: ToolContext| async move {
        Ok::<_, ToolError>(args.a + args.b)
    }));
}

async fn tape_entries(world: &World) -> Vec<bub::tape::Entry> {
    let tape = bub::tape::Tape::new(world.setup.store.clone(), bub::tape::TapeName::new("ops").unwrap());
    tape.read(&bub::tape::TapeQuery::all()).await.unwrap()
}

fn from_code(entries: &[bub::tape::Entry]) -> Vec<bub::tape::Entry> {
    entries.iter().filter(|e| e.meta.get("code_mode") == Some(&json!(true))).cloned().collect()
}

/// The id of the newest `run_code` call the model made, and the tape ids of
/// its `tool_call` entry and of the `tool_result` entry after it.
fn run_code_call(entries: &[bub::tape::Entry]) -> (String, u64, u64) {
    let call = entries
        .iter()
        .rev()
        .find(|e| e.kind == EntryKind::ToolCall && e.payload["calls"][0]["function"]["name"] == "run_code")
        .expect("a run_code call on the tape");
    let result = entries
        .iter()
        .find(|e| e.id > call.id && e.kind == EntryKind::ToolResult && e.meta.get("code_mode").is_none())
        .expect("the run_code result on the tape");
    (call.payload["calls"][0]["id"].as_str().unwrap().to_string(), call.id, result.id)
}

#[tokio::test]
async fn calls_from_code_are_recorded_on_the_tape_but_not_shown_to_the_model() {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    add_test_tools(&world);
    world.say(",code_mode enable=true").await;
    let code = "import asyncio, json\n\
                results = await asyncio.gather(tools.test_echo(text='one'), tools.test_echo(text='two'), tools.test_add(a=2, b=3))\n\
                print(json.dumps(results))";
    fake.push(run_code(code, 30)).push(Reply::text("done"));
    let outcome = world.say("use code").await;
    assert_eq!(outcome.text, "done");
    let (printed, is_error) = tool_result(&outcome);
    assert!(!is_error, "{printed}");
    let printed: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(printed, json!([{"said": "one"}, {"said": "two"}, 5]));

    let entries = tape_entries(&world).await;
    let (run_code_id, run_code_entry, run_code_result) = run_code_call(&entries);
    let recorded = from_code(&entries);
    assert_eq!(recorded.len(), 6, "a call and a result per nested call: {recorded:#?}");
    let mut calls = Vec::new();
    for pair in recorded.chunks(2) {
        let (call, result) = (&pair[0], &pair[1]);
        assert_eq!((call.kind, result.kind), (EntryKind::ToolCall, EntryKind::ToolResult));
        for entry in pair {
            assert!(!entry.in_context(), "hidden from the model: {entry:?}");
            assert_eq!(entry.meta["parent_call_id"], json!(run_code_id));
            assert!(run_code_entry < entry.id && entry.id < run_code_result, "inside the run_code call");
        }
        let request = &call.payload["calls"][0];
        assert_eq!(request["type"], "function");
        assert_eq!(result.meta["call_id"], request["id"], "the result names its call");
        let arguments: Value = serde_json::from_str(request["function"]["arguments"].as_str().unwrap()).unwrap();
        let name = request["function"]["name"].as_str().unwrap().to_string();
        calls.push((
            request["id"].as_str().unwrap().to_string(),
            name,
            arguments,
            result.payload["results"][0].clone(),
        ));
    }
    let ids: std::collections::HashSet<&String> = calls.iter().map(|c| &c.0).collect();
    assert_eq!(ids.len(), 3, "every nested call has its own id: {calls:?}");
    let mut seen: Vec<(String, Value, Value)> = calls.into_iter().map(|(_, n, a, r)| (n, a, r)).collect();
    seen.sort_by_key(|c| c.1.to_string());
    assert_eq!(
        seen,
        vec![
            ("test_add".to_string(), json!({"a": 2, "b": 3}), json!(5)),
            ("test_echo".to_string(), json!({"text": "one"}), json!({"said": "one"})),
            ("test_echo".to_string(), json!({"text": "two"}), json!({"said": "two"})),
        ]
    );

    // The next request is a valid chat: the run_code call, then its result only.
    let messages = fake.requests()[1]["messages"].as_array().cloned().unwrap();
    let call_at = messages.iter().position(|m| m["tool_calls"][0]["id"] == json!(run_code_id)).unwrap();
    assert_eq!(messages[call_at]["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(messages[call_at + 1]["role"], "tool");
    assert_eq!(messages[call_at + 1]["tool_call_id"], json!(run_code_id));
    let about_tools = messages.iter().filter(|m| m["role"] == "tool" || m.get("tool_calls").is_some()).count();
    let text = serde_json::to_string(&messages).unwrap();
    assert!(about_tools == 2 && !text.contains("/code-"), "no nested call reaches the model: {text}");

    let lines: Vec<String> = recorded.iter().map(bub::cli::summarize).collect();
    assert!(lines.contains(&r#"[from code] test_echo({"text":"one"})"#.to_string()), "{lines:#?}");
    assert!(lines.contains(&r#"[from code] {"said":"one"}"#.to_string()), "{lines:#?}");
    assert!(lines.contains(&"[from code] 5".to_string()), "{lines:#?}");
}

#[tokio::test]
async fn a_call_from_code_that_is_denied_is_recorded_with_its_error() {
    let (world, _) = reset_denied_inside_code().await;

    let entries = tape_entries(&world).await;
    let (run_code_id, _, _) = run_code_call(&entries);
    let recorded = from_code(&entries);
    assert_eq!(recorded.len(), 2, "{recorded:#?}");
    let call = &recorded[0].payload["calls"][0];
    assert_eq!(call["function"]["name"], "tape_reset");
    assert_eq!(call["function"]["arguments"], r#"{"archive":false}"#);
    assert_eq!(recorded[1].kind, EntryKind::ToolResult);
    assert_eq!(recorded[1].payload["results"], json!([{"kind": "denied", "message": "resets are for operators"}]));
    assert_eq!(recorded[1].meta["is_error"], json!(true));
    assert!(recorded.iter().all(|e| !e.in_context() && e.meta["parent_call_id"] == json!(run_code_id)));
}

/// Put on a run's turn state: `freed` turns true once nothing holds the
/// state any more (its extensions are dropped with it).
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A code-mode turn state (`code_mode = true`) carrying a [`DropFlag`], and
/// the flag. The caller drops its handle on the state when the run is done.
fn flagged_state() -> (bub::agent::TurnState, Arc<std::sync::atomic::AtomicBool>) {
    let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let state = bub::agent::TurnState::new();
    state.set("code_mode", json!(true));
    state.insert_extension(DropFlag(freed.clone()));
    (state, freed)
}

/// Whether `freed` turns true within a few seconds (the run's task may
/// finish dropping what it held just after its stream ended).
async fn freed_within(freed: &std::sync::atomic::AtomicBool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if freed.load(std::sync::atomic::Ordering::SeqCst) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A code-mode run keeps a session on its turn state whose calls go back
/// through the run: that must not keep the state (nor the run's tape and the
/// agent behind it) alive once the run has ended, however it ends.
#[tokio::test]
async fn a_code_mode_run_frees_its_turn_state_however_it_ends() {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    let options =
        |state: &bub::agent::TurnState| RunOptions::new("ops").workspace(world.workspace.path()).state(state.clone());

    // Finished, after code that called a tool (and a subagent, whose run
    // works on a fork of this state) from inside `run_code`.
    let code = "print('entries' in await tools.tape_info())\nprint(await tools.subagent(prompt='hi'))";
    fake.push(run_code(code, 30)).push(Reply::text("from the child")).push(Reply::text("done"));
    let (state, freed) = flagged_state();
    let outcome = world.setup.agent.run("use code", options(&state)).collect().await;
    assert_eq!(outcome.text, "done");
    assert_eq!(tool_result(&outcome), ("True\nfrom the child\n".to_string(), false));
    drop(state);
    assert!(freed_within(&freed).await, "a finished run's turn state is still held");

    // Outside code mode, for comparison.
    fake.push(Reply::text("direct"));
    let (state, freed) = flagged_state();
    state.set("code_mode", json!(false));
    assert_eq!(world.setup.agent.run("no code", options(&state)).collect().await.text, "direct");
    drop(state);
    assert!(freed_within(&freed).await, "a direct run's turn state is still held");

    // Failed: the model refuses the request.
    fake.push(Reply::error(400, "bad request"));
    let (state, freed) = flagged_state();
    let outcome = world.setup.agent.run("fail", options(&state)).collect().await;
    assert!(outcome.error.is_some(), "{outcome:?}");
    drop(state);
    assert!(freed_within(&freed).await, "a failed run's turn state is still held");

    // Cancelled, and dropped, while the model is thinking.
    for cancel in [true, false] {
        let asked = fake.request_count();
        fake.push(Reply::slow_first_token(Duration::from_secs(30), Reply::text("too late")));
        let (state, freed) = flagged_state();
        let stream = world.setup.agent.run("wait", options(&state));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while fake.request_count() == asked && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(fake.request_count() > asked, "the model was not asked");
        if cancel {
            stream.cancel("stop").await;
        } else {
            drop(stream);
        }
        drop(state);
        assert!(freed_within(&freed).await, "a stopped run's turn state is still held (cancel: {cancel})");
    }
}

/// A subagent runs on a copy of its caller's turn state, code-mode session
/// included: without `run_code` among its tools it is not in code mode, and
/// its model is not told it is.
#[tokio::test]
async fn a_subagent_without_run_code_is_not_told_about_code_mode() {
    let fake = FakeModel::start().await;
    let world = world(&fake).await;
    world.say(",code_mode enable=true").await;
    let code = "print(await tools.subagent(prompt='hi', allowed_tools=['tape_info']))";
    fake.push(run_code(code, 30)).push(Reply::text("from the child")).push(Reply::text("done"));
    let outcome = world.say("delegate").await;
    assert_eq!(tool_result(&outcome), ("from the child\n".to_string(), false));
    let child = &fake.requests()[1];
    assert_eq!(tool_names(child), ["tape_info"]);
    assert!(!child["messages"].to_string().contains("<code_mode>"), "{child}");
    assert!(fake.requests()[0]["messages"].to_string().contains("<code_mode>"));
}
