//! Route 2: tools that are not for the model (`code_mode`, `model`, `quit`,
//! `policy`, `help`) were offered to nobody but ran when a model call named
//! them: `code_mode enable=true`, then `run_code` with `subprocess`.

use super::agent::{World, tool_results};
use crate::support::fake_model::{FakeModel, Reply};
use bub::agent::RunOptions;
use serde_json::json;

#[tokio::test]
async fn a_model_call_to_a_command_only_tool_is_an_unknown_tool() {
    let fake = FakeModel::start().await;
    for (tool, args) in [
        ("code_mode", json!({"enable": true})),
        ("model", json!({"model_id": "openai:evil"})),
        ("quit", json!({})),
        ("policy", json!({})),
        ("help", json!({})),
        ("reasoning_effort", json!({"reasoning_effort": "high"})),
    ] {
        fake.push(Reply::tool_calls(vec![(tool, args)])).push(Reply::text("done"));
    }
    let world = World::new(&fake).await;
    for tool in ["code_mode", "model", "quit", "policy", "help", "reasoning_effort"] {
        let outcome = world.say("chat", "do it").await;
        let results = tool_results(&outcome);
        assert_eq!(results.len(), 1, "{tool}: {results:?}");
        let (output, is_error) = &results[0];
        assert!(*is_error, "{tool} ran from a model call: {output}");
        assert!(output.contains(&format!("unknown tool `{tool}`")), "{tool}: {output}");
    }
    assert!(world.events_named("chat", "code_mode_switch").await.is_empty(), "code mode was not switched on");
    assert!(world.events_named("chat", "model_switch").await.is_empty(), "the model was not switched");
    assert!(world.events_named("chat", "reasoning_effort_switch").await.is_empty());
    // None of them was offered either.
    for request in fake.requests() {
        let offered: Vec<&str> =
            request["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
        for tool in ["code_mode", "model", "quit", "policy", "help", "reasoning_effort"] {
            assert!(!offered.contains(&tool), "{tool} offered: {offered:?}");
        }
    }
}

/// In code mode the model sees only the preserved tools and `run_code`; a
/// direct call to a tool that lives inside `run_code` is refused too (it is
/// reachable from code, through the same events, not around them).
#[tokio::test]
async fn in_code_mode_a_direct_call_reaches_only_what_the_model_was_shown() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("tape_reset", json!({}))])).push(Reply::text("done"));
    let world = World::new(&fake).await;
    world.say("chat", ",tape.handoff name=keep").await;
    assert_eq!(
        world.say("chat", ",code_mode enable=true").await.text,
        "code mode on for this session from the next turn"
    );
    let before = world.entries("chat").await.len();
    let outcome = world.say("chat", "wipe it").await;
    let (output, is_error) = &tool_results(&outcome)[0];
    assert!(*is_error && output.contains("unknown tool `tape_reset`"), "{output}");
    assert!(world.entries("chat").await.len() > before, "the tape was not reset");
}

/// From code, a command-only tool does not exist either.
#[tokio::test]
async fn code_cannot_call_a_command_only_tool() {
    let fake = FakeModel::start().await;
    let code = "try:\n    await tools.code_mode(enable=True)\nexcept Exception as e:\n    print('refused:', e)\n";
    fake.push(Reply::tool_calls(vec![("run_code", json!({"code": code, "timeout_seconds": 30}))]))
        .push(Reply::text("done"));
    let world = World::new(&fake).await;
    world.say("chat", ",code_mode enable=true").await;
    let outcome = world.say("chat", "switch it").await;
    let (output, _) = &tool_results(&outcome)[0];
    assert!(output.contains("refused:"), "{output}");
    assert_eq!(world.events_named("chat", "code_mode_switch").await.len(), 1, "only the operator's switch");
}

/// A subagent's prompt is text the model wrote: it never runs as a comma
/// command (`,code_mode enable=true`, or the shell fallback `,id`).
#[tokio::test]
async fn a_subagent_prompt_is_never_a_command() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("subagent", json!({"prompt": ",code_mode enable=true", "session": "inherit"}))]))
        .push(Reply::text("the child answered"))
        .push(Reply::text("done"));
    let world = World::new(&fake).await;
    let outcome = world.run("delegate", RunOptions::new("chat")).await;
    let (output, is_error) = &tool_results(&outcome)[0];
    assert!(!is_error && output.contains("the child answered"), "{output}");
    assert!(world.events_named("chat", "code_mode_switch").await.is_empty(), "no switch from a subagent prompt");
    let child_prompt = fake.requests()[1]["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(child_prompt, ",code_mode enable=true", "the prompt went to the model as text");
}
