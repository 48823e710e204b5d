//! Comma commands: they bypass the model, run through the tool events and are
//! recorded as `command` events.

use crate::support;

use bub::agent::RunOptions;
use bub::agent::events::{BeforeToolCall, ToolCallDecision};
use bub::tape::{EntryKind, TapeQuery};
use bub::tools::{Tool, ToolContext, ToolError};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;
use support::{fake_bash, scripted_agent};

/// Add two numbers.
#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
    #[serde(default)]
    verbose: bool,
}

fn add_tool() -> Tool {
    Tool::typed("math.add", |args: AddArgs, ctx: ToolContext| async move {
        assert!(ctx.command, "commands set the command flag");
        let sum = args.a + args.b;
        Ok::<_, ToolError>(if args.verbose { format!("{} + {} = {sum}", args.a, args.b) } else { sum.to_string() })
    })
}

#[tokio::test]
async fn a_command_runs_the_tool_without_the_model_and_is_recorded() {
    let (agent, model, store) = scripted_agent(vec![add_tool()]).await;
    let outcome = agent.run("  ,math.add 2 b=3 verbose=true", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "2 + 3 = 5");
    assert!(model.requests().is_empty());
    let commands = store.tape("chat").read(&TapeQuery::all().named("command")).await.unwrap();
    let data = commands[0].data().unwrap();
    assert_eq!(data["raw"], "math.add 2 b=3 verbose=true");
    assert_eq!(data["name"], "math.add");
    assert_eq!(data["status"], "ok");
    assert_eq!(data["output"], "2 + 3 = 5");
    assert!(data["elapsed_ms"].is_u64());
    let messages = store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::Message])).await.unwrap();
    assert!(messages.is_empty(), "commands write no messages");
}

#[tokio::test]
async fn model_names_work_as_command_names() {
    let (agent, _model, _store) = scripted_agent(vec![add_tool()]).await;
    assert_eq!(agent.run(",math_add 1 1", RunOptions::new("chat")).collect().await.text, "2");
}

#[tokio::test]
async fn commands_go_through_the_tool_events_so_policy_can_deny_them() {
    let (agent, _model, store) = scripted_agent(vec![add_tool()]).await;
    let flags = Arc::new(Mutex::new(Vec::new()));
    let seen = flags.clone();
    agent.events().on_sync(move |event: &mut BeforeToolCall| {
        seen.lock().push(event.call.command);
        event.decision = Some(ToolCallDecision::Deny("math is closed today".into()));
        Ok(())
    });
    let outcome = agent.run(",math.add 1 2", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "error: math is closed today");
    assert_eq!(*flags.lock(), vec![true]);
    let command = &store.tape("chat").read(&TapeQuery::all().named("command")).await.unwrap()[0];
    assert_eq!(command.data().unwrap()["status"], "error");
}

#[tokio::test]
async fn an_unknown_name_runs_the_whole_line_through_bash() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (agent, _model, _store) = scripted_agent(vec![add_tool(), fake_bash(seen.clone())]).await;
    let outcome = agent.run(",git status --short", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "ran: git status --short");
    assert_eq!(*seen.lock(), vec!["git status --short"]);
}

#[tokio::test]
async fn the_bash_fallback_is_denied_where_bash_is_denied() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (agent, _model, _store) = scripted_agent(vec![fake_bash(seen.clone())]).await;
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        if event.call.tool == "bash" {
            event.decision = Some(ToolCallDecision::Deny("bash is not allowed here".into()));
        }
        Ok(())
    });
    let outcome = agent.run(",rm -rf /tmp/x", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "error: bash is not allowed here");
    assert!(seen.lock().is_empty());
}

#[tokio::test]
async fn without_bash_an_unknown_command_suggests_close_names() {
    let (agent, _model, _store) = scripted_agent(vec![add_tool()]).await;
    let outcome = agent.run(",math.ad 1 2", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "error: unknown command `math.ad`; did you mean math.add?");
}

#[tokio::test]
async fn malformed_commands_get_one_line_errors() {
    let (agent, model, _store) = scripted_agent(vec![add_tool()]).await;
    for (line, expected) in [
        (",math.add a=1 2", "after"),
        (",math.add 1 b=x", "integer"),
        (",math.add 'unterminated", "quote"),
        (",", "empty command"),
    ] {
        let outcome = agent.run(line, RunOptions::new("chat")).collect().await;
        assert!(outcome.text.starts_with("error: "), "{line}: {}", outcome.text);
        assert!(outcome.text.contains(expected), "{line}: {}", outcome.text);
        assert_eq!(outcome.text.lines().count(), 1, "{line}: one line");
    }
    assert!(model.requests().is_empty(), "no command reached the model");
}

#[tokio::test]
async fn tape_compact_summarises_now_and_tape_info_shows_it() {
    let tools = vec![bub::agent::tape_compact_tool(), bub::tools::builtin::tape::tape_info_tool()];
    let (agent, model, store) = scripted_agent(tools).await;
    let outcome = agent.run(",tape.compact", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "nothing to compact yet: the context is only recent turns");
    for turn in 0..3 {
        model.text(&format!("answer {turn}"));
        let outcome =
            agent.run(format!("question {turn} {}", "words ".repeat(200)), RunOptions::new("chat")).collect().await;
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
    }
    model.text("The team asked three questions.");
    let calls = model.requests().len();
    // A small window: the last turn fits the kept part, the first two are summarised.
    let outcome = agent.run(",tape.compact", RunOptions::new("chat").context_window(2_000)).collect().await;
    assert!(outcome.text.starts_with("compacted: entries "), "{}", outcome.text);
    assert!(outcome.text.contains("are kept as they are"), "{}", outcome.text);
    assert_eq!(model.requests().len(), calls + 1, "one summary call");
    let context = store.tape("chat").context().await.unwrap();
    assert!(context[0]["content"].as_str().unwrap().ends_with("The team asked three questions."));
    assert!(context[1]["content"].as_str().unwrap().starts_with("question 2"), "{:?}", context[1]);
    // The run's own window (a chat's policy sets one) is the one shown.
    let info = agent.run(",tape.info", RunOptions::new("chat").context_window(2_000)).collect().await.text;
    assert!(info.contains("last_compaction: #"), "{info}");
    assert!(info.contains("context_tokens: "), "{info}");
    assert!(info.contains("\ncontext_window: 2000 (compacts at 1500; system prompt and tool schemas: "), "{info}");
}
