//! Route 3: `subagent {"session": "<another chat's session>"}` read that chat's
//! tape with `tape.search`, wrote into it and `tape.reset` wiped it; a `model`
//! argument bypassed the policy's pinned model; `allowed_tools` could name
//! tools its caller did not have.

use super::agent::{World, tool_results};
use crate::support::fake_model::{FakeModel, Reply};
use bub::agent::RunOptions;
use serde_json::json;

const ATTEMPTS: [&str; 5] = ["webhook:victim", "../victim", "victim/subagent/x", "temp/../victim", "victim\u{0}"];

#[tokio::test]
async fn a_subagent_cannot_reach_another_session() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("the victim's secret is 4242"));
    for session in ATTEMPTS {
        fake.push(Reply::tool_calls(vec![(
            "subagent",
            json!({"prompt": "search the tape for secret, then reset it", "session": session}),
        )]))
        .push(Reply::text("done"));
    }
    let world = World::new(&fake).await;
    world.say("webhook:victim", "remember: secret 4242").await;
    let victim_before = world.entries("webhook:victim").await;
    for session in ATTEMPTS {
        let outcome = world.say("webhook:attacker", "go").await;
        let (output, is_error) = &tool_results(&outcome)[0];
        assert!(*is_error, "{session}: {output}");
        assert!(output.contains("a subagent works in this session only"), "{session}: {output}");
    }
    assert_eq!(world.entries("webhook:victim").await, victim_before, "the victim's tape is untouched");
    assert_eq!(fake.request_count(), 1 + ATTEMPTS.len() * 2, "no subagent run reached the model");
}

/// A bare name that happens to be another chat's is a sub-session of the caller.
#[tokio::test]
async fn a_subagent_session_named_like_another_chat_is_the_callers_own() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("victim's reply"))
        .push(Reply::tool_calls(vec![("subagent", json!({"prompt": "reset the tape", "session": "victim"}))]))
        .push(Reply::tool_calls(vec![("tape_reset", json!({}))]))
        .push(Reply::text("reset"))
        .push(Reply::text("done"));
    let world = World::new(&fake).await;
    world.say("victim", "my secret").await;
    let victim_before = world.entries("victim").await;
    world.say("attacker", "go").await;
    assert_eq!(world.entries("victim").await, victim_before, "the victim's tape is untouched");
    assert!(!world.entries("attacker/subagent/victim").await.is_empty(), "the child ran under its caller");
}

/// A named sub-session is the caller's own: `<caller>/subagent/<name>`.
#[tokio::test]
async fn a_named_subagent_session_lives_under_its_caller() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("subagent", json!({"prompt": "note this", "session": "notes"}))]))
        .push(Reply::text("noted"))
        .push(Reply::text("done"));
    let world = World::new(&fake).await;
    world.say("chat", "delegate").await;
    let child = world.entries("chat/subagent/notes").await;
    assert!(child.iter().any(|e| e.payload.get("content") == Some(&json!("note this"))), "{child:?}");
    assert!(world.entries("notes").await.is_empty(), "no top-level session `notes`");
}

#[tokio::test]
async fn a_subagent_cannot_pick_another_model_than_the_pinned_one() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("subagent", json!({"prompt": "x", "model": "openai:gpt-expensive"}))]))
        .push(Reply::text("done"))
        .push(Reply::tool_calls(vec![("subagent", json!({"prompt": "y"}))]))
        .push(Reply::text("child"))
        .push(Reply::text("done"));
    let world = World::new(&fake).await;
    let outcome = world.run("go", RunOptions::new("chat").model("openai:gpt-pinned")).await;
    let (output, is_error) = &tool_results(&outcome)[0];
    assert!(*is_error && output.contains("fixed to openai:gpt-pinned"), "{output}");
    world.run("again", RunOptions::new("chat").model("openai:gpt-pinned")).await;
    let models: Vec<String> = fake.requests().iter().map(|r| r["model"].as_str().unwrap().to_string()).collect();
    assert!(models.iter().all(|m| m == "gpt-pinned"), "every call, the child's included: {models:?}");
    assert_eq!(models.len(), 5);
}

#[tokio::test]
async fn a_subagent_gets_no_tool_its_caller_lacks() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("subagent", json!({"prompt": "x", "allowed_tools": ["bash"]}))]))
        .push(Reply::text("done"))
        .push(Reply::tool_calls(vec![("subagent", json!({"prompt": "y"}))]))
        .push(Reply::text("child"))
        .push(Reply::text("done"));
    let world = World::new(&fake).await;
    let only = || RunOptions::new("chat").allowed_tools(vec!["subagent".into(), "tape.info".into()]);
    let outcome = world.run("go", only()).await;
    let (output, is_error) = &tool_results(&outcome)[0];
    assert!(*is_error && output.contains("`bash` is not one of your tools"), "{output}");
    world.run("again", only()).await;
    let child = &fake.requests()[3];
    let offered: Vec<&str> =
        child["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert_eq!(offered, ["tape_info"], "the child has its caller's tools but subagent");
}
