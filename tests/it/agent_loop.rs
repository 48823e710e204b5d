//! The agent loop against an in-process scripted model: what the stream
//! yields, what the model is sent, and what lands on the tape.

use crate::support;

use bub::agent::{FailureKind, RunOptions, StreamEvent};
use bub::model::ModelError;
use bub::tape::{EntryKind, TapeQuery};
use bub::tools::{Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::scripted_agent;
use support::scripted_model::overflow;

/// Echo a word back.
#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The word.
    word: String,
}

fn echo_tool() -> Tool {
    Tool::typed("text.echo", |args: EchoArgs, _ctx: ToolContext| async move {
        Ok::<_, ToolError>(format!("echo: {}", args.word))
    })
}

fn kinds_and_names(entries: &[bub::tape::Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| match e.name() {
            Some(name) => format!("{}:{name}", e.kind),
            None => e.kind.to_string(),
        })
        .collect()
}

#[tokio::test]
async fn a_plain_answer_streams_and_is_recorded_on_the_tape() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.text("Hello there, Ada.");
    let outcome = agent.run("hi", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "Hello there, Ada.");
    assert!(outcome.error.is_none());
    assert!(outcome.events.iter().filter(|e| matches!(e, StreamEvent::Text(_))).count() > 1, "streamed in pieces");
    assert!(matches!(outcome.events.last(), Some(StreamEvent::Final { step: 1, .. })));

    let tape = store.tape("chat");
    let entries = tape.read(&TapeQuery::all()).await.unwrap();
    assert_eq!(
        kinds_and_names(&entries),
        vec![
            "anchor:session/start",
            "event:handoff",
            "event:loop.start",
            "event:loop.step.start",
            "message",
            "system",
            "message",
            "event:run",
            "event:loop.step"
        ]
    );
    let run_id = entries[2].meta["run_id"].clone();
    assert!(entries[2..].iter().all(|e| e.meta["run_id"] == run_id), "every record carries the run id");
    assert_eq!(tape.info().await.unwrap().last_token_usage, Some(15));
}

#[tokio::test]
async fn the_system_prompt_is_recorded_only_when_it_changes() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.text("one");
    model.text("two");
    agent.run("a", RunOptions::new("chat")).collect().await;
    agent.run("b", RunOptions::new("chat")).collect().await;
    let systems = store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::System])).await.unwrap();
    assert_eq!(systems.len(), 1);
    // The model still gets it every time, first.
    for request in model.requests() {
        assert_eq!(request.messages[0], json!({"role": "system", "content": "You are a test agent."}));
    }
}

#[tokio::test]
async fn a_tool_loop_runs_the_tool_and_sends_its_result_back() {
    let (agent, model, store) = scripted_agent(vec![echo_tool()]).await;
    model.tool_calls(&[("text_echo", json!({"word": "ping"}))]);
    model.text("The tool said echo: ping.");
    let outcome = agent.run("use the tool", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "The tool said echo: ping.");
    assert!(outcome.events.contains(&StreamEvent::ToolResult {
        call_id: "call_0".into(),
        name: "text_echo".into(),
        output: "echo: ping".into(),
        is_error: false
    }));
    let requests = model.requests();
    assert_eq!(requests[0].tools[0]["function"]["name"], "text_echo", "the model sees dots as underscores");
    let last = requests[1].messages.last().unwrap();
    assert_eq!(last, &json!({"role": "tool", "content": "echo: ping", "tool_call_id": "call_0", "name": "text_echo"}));
    let context = store.tape("chat").context().await.unwrap();
    assert_eq!(context.iter().filter(|m| m["role"] == "tool").count(), 1);
}

#[tokio::test]
async fn parallel_calls_run_at_once_and_results_keep_call_order() {
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let wait = barrier.clone();
    let slow = Tool::new("slow", "", json!({"type": "object"}), move |_: Value, _| {
        let wait = wait.clone();
        async move {
            wait.wait().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(json!("slow done"))
        }
    });
    let wait = barrier.clone();
    let fast = Tool::new("fast", "", json!({"type": "object"}), move |_: Value, _| {
        let wait = wait.clone();
        async move {
            wait.wait().await;
            Ok(json!("fast done"))
        }
    });
    let (agent, model, _store) = scripted_agent(vec![slow, fast]).await;
    model.tool_calls(&[("slow", json!({})), ("fast", json!({}))]);
    model.text("both done");
    // Each tool waits for the other: run one after the other, they would never finish.
    let outcome = tokio::time::timeout(Duration::from_secs(10), agent.run("go", RunOptions::new("chat")).collect())
        .await
        .expect("the calls ran concurrently");
    let results: Vec<String> = outcome
        .events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results, vec!["slow done", "fast done"]);
}

#[tokio::test]
async fn unknown_tools_and_bad_arguments_come_back_to_the_model() {
    let (agent, model, _store) = scripted_agent(vec![echo_tool()]).await;
    model.tool_calls(&[("text_ecko", json!({"word": "x"}))]);
    model.raw_tool_call("text_echo", "{not json");
    model.tool_calls(&[("text_echo", json!({"wrong": 1}))]);
    model.text("gave up");
    let outcome = agent.run("try", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "gave up", "the run went on");
    let outputs: Vec<(String, bool)> = outcome
        .events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert!(outputs.iter().all(|(_, is_error)| *is_error));
    assert!(outputs[0].0.contains("unknown tool `text_ecko`; did you mean `text_echo`?"), "{}", outputs[0].0);
    assert!(outputs[1].0.contains("arguments are not valid JSON"), "{}", outputs[1].0);
    assert!(
        outputs[2].0.contains("invalid_input") && outputs[2].0.contains("missing field `word`"),
        "{}",
        outputs[2].0
    );
}

#[tokio::test]
async fn a_context_overflow_hands_off_once_and_retries_the_prompt() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.error(overflow());
    model.text("Ada asked for a summary of everything.");
    model.text("short answer");
    // Longer than the summary: a summary is never longer than what it replaces.
    let prompt = "summarise everything we said about the release plan, the budget, the people and the dates";
    let outcome = agent.run(prompt, RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "short answer");
    assert!(outcome.error.is_none());
    // The handoff asked for a summary of the refused context, and the retry reads it.
    let summary_call = &model.requests()[1];
    assert!(summary_call.tools.is_empty());
    assert!(summary_call.messages[1]["content"].as_str().unwrap().contains("summarise everything"));
    let retry = &model.requests()[2];
    let note = retry.messages[1]["content"].as_str().unwrap();
    assert!(note.starts_with("[Anchor created: auto_handoff/context_overflow]"), "{note}");
    assert!(note.ends_with("Ada asked for a summary of everything."), "{note}");
    assert_eq!(retry.messages[2], json!({"role": "user", "content": prompt}));
    let info = store.tape("chat").info().await.unwrap();
    assert_eq!(info.last_anchor.as_deref(), Some("auto_handoff/context_overflow"));
    let steps = store.tape("chat").read(&TapeQuery::all().named("loop.step")).await.unwrap();
    assert_eq!(steps[0].data().unwrap()["status"], "auto_handoff");
}

#[tokio::test]
async fn a_second_overflow_fails_the_run() {
    let (agent, model, _store) = scripted_agent(vec![]).await;
    model.error(overflow());
    model.text("a summary");
    model.error(overflow());
    let outcome = agent.run("too big", RunOptions::new("chat")).collect().await;
    let (kind, message) = outcome.error.expect("an error");
    assert_eq!(kind, "context_overflow");
    assert!(message.contains("maximum context length"), "{message}");
}

#[tokio::test]
async fn model_errors_reach_the_user_typed_and_are_recorded() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.error(ModelError::RateLimited {
        provider: "scripted".into(),
        message: "slow down".into(),
        retry_after: Some(Duration::from_secs(20)),
    });
    let outcome = agent.run("hi", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "");
    assert_eq!(
        outcome.error,
        Some((bub::agent::FailureKind::RateLimited, "scripted rate limit: slow down (retry after 20s)".to_string()))
    );
    let errors = store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::Error])).await.unwrap();
    assert_eq!(errors[0].payload["kind"], "rate_limited");
    let messages = store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::Message])).await.unwrap();
    assert_eq!(messages[0].payload["content"], "hi", "the prompt is kept");
}

#[tokio::test]
async fn max_steps_ends_a_run_that_keeps_calling_tools() {
    let store = support::sqlite_store().await;
    let model = support::scripted_model::ScriptedModel::new();
    let agent = bub::agent::Agent::builder()
        .store(store.store.clone())
        .model(Arc::new(bub::model::SingleClient(model.clone())), "scripted:test")
        .tool(echo_tool())
        .max_steps(2)
        .build();
    for _ in 0..3 {
        model.tool_calls(&[("text_echo", json!({"word": "again"}))]);
    }
    let outcome = agent.run("loop forever", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error.as_ref().map(|e| e.0.as_str()), Some("max_steps"));
    assert_eq!(outcome.error.unwrap().1, "max_steps reached (2)");
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test]
async fn an_empty_prompt_is_an_error_that_opens_no_tape() {
    let (agent, _model, store) = scripted_agent(vec![]).await;
    let outcome = agent.run("   ", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, Some((bub::agent::FailureKind::InvalidInput, "empty prompt".to_string())));
    assert!(store.store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn without_a_model_the_error_names_the_variable_to_set() {
    let store = support::sqlite_store().await;
    let agent = bub::agent::Agent::builder().store(store.store.clone()).build();
    let outcome = agent.run("hello?", RunOptions::new("chat")).collect().await;
    let (kind, message) = outcome.error.unwrap();
    assert_eq!(kind, "not_configured");
    assert!(message.contains("BUB_MODEL"), "{message}");
}

#[tokio::test]
async fn dropping_the_stream_stops_the_run_and_keeps_what_was_recorded() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.hang_after("partial");
    let mut stream = agent.run("start and stop", RunOptions::new("chat"));
    assert_eq!(stream.next_event().await, Some(StreamEvent::Text("partial".into())));
    drop(stream);
    let tape = store.tape("chat");
    for _ in 0..1000 {
        let messages = tape.read(&TapeQuery::all().kinds([EntryKind::Message])).await.unwrap();
        if !messages.is_empty() {
            assert_eq!(messages[0].payload["content"], "start and stop");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the fork was not merged after the stream was dropped");
}

#[tokio::test]
async fn a_cancelled_run_with_discard_if_cancelled_leaves_no_trace() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    let stream_dropped = model.hang_after_noting_drop("partial");
    let mut stream = agent.run("start and stop", RunOptions::new("chat").discard_if_cancelled());
    assert_eq!(stream.next_event().await, Some(StreamEvent::Text("partial".into())));
    drop(stream);
    let _ = stream_dropped.await;
    // The fork is dropped or merged right after the model stream; a merge would show within this time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tape = store.tape("chat");
    let messages = tape.read(&TapeQuery::all().kinds([EntryKind::Message])).await.unwrap_or_default();
    assert!(messages.is_empty(), "the cancelled run was merged: {messages:?}");
}

#[tokio::test]
async fn merge_back_false_and_temp_sessions_leave_no_trace() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.text("forgotten");
    model.text("scratch");
    agent.run("x", RunOptions::new("chat").discard()).collect().await;
    agent.run("y", RunOptions::new("temp/abc")).collect().await;
    assert!(store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::Message])).await.unwrap().is_empty());
    assert!(store.tape("temp/abc").read(&TapeQuery::all().kinds([EntryKind::Message])).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_message_steered_in_mid_run_reaches_the_next_step() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let entered = Arc::new(tokio::sync::Notify::new());
    let (opened, inside) = (gate.clone(), entered.clone());
    let wait = Tool::new("wait", "", json!({"type": "object"}), move |_: Value, _| {
        let (opened, inside) = (opened.clone(), inside.clone());
        async move {
            inside.notify_one();
            opened.notified().await;
            Ok(json!("waited"))
        }
    });
    let (agent, model, _store) = scripted_agent(vec![wait]).await;
    model.tool_calls(&[("wait", json!({}))]);
    model.text("noted both");
    let run = agent.run("first", RunOptions::new("chat"));
    entered.notified().await;
    assert!(!agent.steer("other-chat", "nobody runs there"));
    assert!(agent.steer("chat", "and also this"));
    gate.notify_one();
    let outcome = run.collect().await;
    assert_eq!(outcome.text, "noted both");
    let second = &model.requests()[1];
    assert_eq!(second.messages.last().unwrap(), &json!({"role": "user", "content": "and also this"}));
}

#[tokio::test]
async fn a_large_tool_result_is_spilled_and_the_model_gets_a_preview() {
    let big = Tool::new("big", "", json!({"type": "object"}), |_: Value, _| async { Ok(json!("z".repeat(50_000))) });
    let (agent, model, _store) = scripted_agent(vec![big]).await;
    model.tool_calls(&[("big", json!({}))]);
    model.text("read the preview");
    agent.run("go", RunOptions::new("chat")).collect().await;
    let tool_message = model.requests()[1].messages.last().unwrap().clone();
    let content = tool_message["content"].as_str().unwrap();
    assert!(content.starts_with("[tool result spilled: 50000 chars"), "{content}");
    assert!(content.len() < 2_000);
}

/// Issue 13.1: a page of a spilled result reaches the model as text, never as
/// another spill notice, even when it asks for more than fits in one result.
#[tokio::test]
async fn the_model_reads_a_spilled_result_page_by_page() {
    let (agent, model, _store) = scripted_agent(vec![bub::tools::builtin::spill::spill_read_tool()]).await;
    let text: String = (0..4_000).map(|i| format!("{i:09}\n")).collect();
    let tape = agent.tape("chat").unwrap();
    let bub::tape::SpillOutcome::Spilled { handle, .. } = tape.spill_if_large("bash", text.clone()).await else {
        panic!("40 000 characters spill");
    };
    model.tool_calls(&[("spill.read", json!({"handle": handle, "cursor": 0, "count": 2}))]);
    model.tool_calls(&[("spill.read", json!({"handle": handle, "cursor": 1, "count": 1}))]);
    model.text("read it all");
    let outcome = agent.run("read the big result", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, None);
    let first = model.requests()[1].messages.last().unwrap()["content"].as_str().unwrap().to_string();
    let second = model.requests()[2].messages.last().unwrap()["content"].as_str().unwrap().to_string();
    for page in [&first, &second] {
        assert!(!page.contains("tool result spilled"), "a page is never spilled again: {page}");
    }
    assert!(first.starts_with(&format!("[spill {handle}: chunks 0-0 of 3")), "{first}");
    assert!(first.contains(&text[..16 * 1024]), "the first chunk's text itself");
    assert!(second.contains(&text[16 * 1024..32 * 1024]), "the second chunk's text itself");
}

/// Issue 13.2 through the library: a cut answer is asked again, the outcome's
/// text is the whole answer only, and the tape keeps the fragment as an error.
#[tokio::test]
async fn a_cut_answer_is_asked_again_and_kept_out_of_the_text_and_the_context() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.cut_after("half an ans");
    model.text("A whole answer.");
    let outcome = agent.run("question", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.text, "A whole answer.");
    assert!(
        outcome
            .events
            .iter()
            .any(|e| matches!(e, StreamEvent::Cut { kind: FailureKind::Cut, partial, retrying: true, .. } if partial == "half an ans"))
    );
    let tape = store.tape("chat");
    let errors = tape.read(&TapeQuery::all().kinds([EntryKind::Error])).await.unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].payload["details"]["partial_text"], "half an ans");
    let context = tape.context().await.unwrap();
    assert!(!context.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("half an ans"))), "{context:?}");
    assert_eq!(context.last().unwrap()["content"], "A whole answer.");
}

/// Issue 13.3 through the library: `RunStream::cancel` returns once the run
/// has stopped and recorded the interruption, with what was steered in unread.
#[tokio::test]
async fn cancel_waits_for_the_run_records_the_interruption_and_returns_unread_messages() {
    let (agent, model, store) = scripted_agent(vec![]).await;
    model.hang_after("partial");
    let mut stream = agent.run("start", RunOptions::new("chat"));
    assert_eq!(stream.next_event().await, Some(StreamEvent::Text("partial".into())));
    assert!(agent.steer("chat", "one more thing"));
    let unread = stream.cancel("the test stopped it").await;
    assert_eq!(unread, vec!["one more thing".to_string()]);
    let errors = store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::Error])).await.unwrap();
    assert_eq!(errors.len(), 1, "recorded before cancel returned");
    assert_eq!(errors[0].payload["kind"], "interrupted");
    assert_eq!(errors[0].payload["message"], "interrupted: the test stopped it");
    assert_eq!(errors[0].payload["details"]["partial_text"], "partial", "what it had said when stopped");
}

#[tokio::test]
async fn an_agent_told_no_stub_directory_refuses_code_mode_instead_of_writing_under_the_home() {
    let store = support::sqlite_store().await;
    let model = support::scripted_model::ScriptedModel::new();
    // No `codemode_dir`: the library writes no stub anywhere it was not told.
    let agent = bub::agent::Agent::builder()
        .store(store.store.clone())
        .model(Arc::new(bub::model::SingleClient(model.clone())), "scripted:test")
        .tool(echo_tool())
        .tool(bub::codemode::run_code_tool())
        .build();
    let state = bub::agent::TurnState::new();
    state.set("code_mode", json!(true));
    let outcome = agent.run("use code", RunOptions::new("chat").state(state)).collect().await;
    let (kind, message) = outcome.error.expect("the run fails");
    assert_eq!(kind, bub::agent::FailureKind::CodeMode);
    assert_eq!(
        message,
        "cannot write the code-mode stub: no directory for code-mode stubs is set (AgentBuilder::codemode_dir)"
    );
    assert!(model.requests().is_empty(), "the model is not asked");
}
