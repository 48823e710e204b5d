//! The agent loop end to end over HTTP: the real OpenAI and Anthropic clients
//! (with retries) against the scripted fake model server.

use crate::support;

use bub::agent::events::{BeforeToolCall, ToolCallDecision};
use bub::agent::{Agent, RunOptions, StreamEvent};
use bub::tape::{EntryKind, TapeQuery};
use bub::tools::{Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use support::fake_model::{FakeModel, Reply};
use support::{TestStore, sqlite_store};

/// Look up the weather in a city.
#[derive(Deserialize, JsonSchema)]
struct WeatherArgs {
    /// City name.
    city: String,
}

fn weather_tool() -> Tool {
    Tool::typed("weather.lookup", |args: WeatherArgs, _ctx: ToolContext| async move {
        Ok::<_, ToolError>(json!({"city": args.city, "sky": "clear"}))
    })
}

async fn agent_on(fake: &FakeModel, spec: &str, max_steps: usize) -> (Agent, TestStore) {
    let store = sqlite_store().await;
    let agent = Agent::builder()
        .store(store.store.clone())
        .model(Arc::new(fake.settings(spec)), spec)
        .tool(weather_tool())
        .command_prefix(",")
        .max_steps(max_steps)
        .workspace(store.dir.path())
        .system_prompt("You are bub.")
        .build();
    (agent, store)
}

fn tool_outputs(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_multi_step_tool_loop_over_openai_streaming() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("weather_lookup", json!({"city": "Lisbon"}))]))
        .push(Reply::text("Clear skies in Lisbon.").with_usage(40, 6));
    let (agent, store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run("weather in Lisbon?", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "Clear skies in Lisbon.");
    assert_eq!(tool_outputs(&outcome.events), vec![r#"{"city":"Lisbon","sky":"clear"}"#]);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["model"], "gpt-test");
    assert_eq!(requests[0]["tools"][0]["function"]["name"], "weather_lookup");
    let second = requests[1]["messages"].as_array().unwrap();
    assert_eq!(second[0], json!({"role": "system", "content": "You are bub."}));
    let tool_message = second.last().unwrap();
    assert_eq!(tool_message["role"], "tool");
    assert_eq!(tool_message["tool_call_id"], second[second.len() - 2]["tool_calls"][0]["id"]);
    assert_eq!(store.tape("chat").info().await.unwrap().last_token_usage, Some(46));
}

#[tokio::test]
async fn parallel_tool_calls_assembled_from_interleaved_chunks() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![
        ("weather_lookup", json!({"city": "Oslo"})),
        ("weather_lookup", json!({"city": "Rome"})),
    ]))
    .push(Reply::text("Both clear."));
    let (agent, _store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run("Oslo and Rome?", RunOptions::new("chat")).collect().await;
    let outputs = tool_outputs(&outcome.events);
    assert!(outputs[0].contains("Oslo") && outputs[1].contains("Rome"), "{outputs:?}");
    let tools: Vec<Value> =
        fake.requests()[1]["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").cloned().collect();
    assert_eq!(tools.len(), 2);
}

#[tokio::test]
async fn deny_and_replace_through_events_over_http() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![
        ("weather_lookup", json!({"city": "Paris"})),
        ("weather_lookup", json!({"city": "Berlin"})),
    ]))
    .push(Reply::text("ok"));
    let (agent, _store) = agent_on(&fake, "openai:gpt-test", 10).await;
    agent.events().on_sync(|event: &mut BeforeToolCall| {
        event.decision = match event.call.arguments["city"].as_str() {
            Some("Paris") => Some(ToolCallDecision::Deny("no weather for Paris".into())),
            _ => Some(ToolCallDecision::Replace(json!("cached: cloudy"))),
        };
        Ok(())
    });
    let outcome = agent.run("Paris and Berlin?", RunOptions::new("chat")).collect().await;
    let outputs = tool_outputs(&outcome.events);
    assert!(outputs[0].contains("denied") && outputs[0].contains("no weather for Paris"));
    assert_eq!(outputs[1], "cached: cloudy");
}

#[tokio::test]
async fn a_context_overflow_from_the_provider_hands_off_and_retries() {
    let fake = FakeModel::start().await;
    fake.push(Reply::context_overflow()).push(Reply::text("A long question was asked.")).push(Reply::text("fits now"));
    let (agent, store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run("long question", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "fits now");
    let anchors = store.tape("chat").anchors(5).await.unwrap();
    let anchor = anchors.last().unwrap();
    assert_eq!(anchor.name(), Some("auto_handoff/context_overflow"));
    assert_eq!(anchor.payload["state"]["summary"], "A long question was asked.");
    let retry = fake.requests()[2]["messages"].as_array().unwrap().clone();
    assert_eq!(retry.last().unwrap(), &json!({"role": "user", "content": "long question"}));
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried_before_the_first_token() {
    let fake = FakeModel::start().await;
    fake.push(Reply::rate_limited(0)).push(Reply::server_error(503)).push(Reply::text("third time"));
    let (agent, store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run("hello", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "third time");
    assert_eq!(fake.request_count(), 3);
    let runs = store.tape("chat").read(&TapeQuery::all().named("run")).await.unwrap();
    assert_eq!(runs.len(), 1, "one model call as far as the tape is concerned");
}

#[tokio::test]
async fn exhausted_retries_reach_the_user_with_the_providers_message() {
    let fake = FakeModel::start().await;
    for _ in 0..4 {
        fake.push(Reply::server_error(502));
    }
    let (agent, store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run("hello", RunOptions::new("chat")).collect().await;
    let (kind, message) = outcome.error.expect("an error, not an empty reply");
    assert_eq!(kind, "server");
    assert!(message.contains("502"), "{message}");
    let errors = store.tape("chat").read(&TapeQuery::all().kinds([EntryKind::Error])).await.unwrap();
    assert_eq!(errors.len(), 1);
}

#[tokio::test]
async fn a_comma_command_never_reaches_the_model() {
    let fake = FakeModel::start().await;
    let (agent, store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run(",weather.lookup Vienna", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, r#"{"city":"Vienna","sky":"clear"}"#);
    assert_eq!(fake.request_count(), 0);
    assert_eq!(store.tape("chat").read(&TapeQuery::all().named("command")).await.unwrap().len(), 1);
}

#[tokio::test]
async fn max_steps_bounds_the_model_calls() {
    let fake = FakeModel::start().await;
    for _ in 0..5 {
        fake.push(Reply::tool_calls(vec![("weather_lookup", json!({"city": "Nowhere"}))]));
    }
    let (agent, _store) = agent_on(&fake, "openai:gpt-test", 3).await;
    let outcome = agent.run("loop", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, Some((bub::agent::FailureKind::MaxSteps, "max_steps reached (3)".to_string())));
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn the_same_loop_runs_over_anthropic_messages() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("weather_lookup", json!({"city": "Kyoto"}))]))
        .push(Reply::text("Clear in Kyoto."));
    let (agent, _store) = agent_on(&fake, "anthropic:claude-test", 10).await;
    let outcome = agent.run("Kyoto?", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "Clear in Kyoto.");
    let recorded = fake.recorded();
    assert!(recorded.iter().all(|r| r.path == "/v1/messages"));
    let second = &recorded[1].body;
    assert_eq!(second["system"][0]["text"], "You are bub.");
    let blocks = second["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    assert_eq!(blocks[0]["type"], "tool_result");
}

#[tokio::test]
async fn reasoning_and_usage_reach_the_stream() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("42").with_reasoning("six times seven").with_usage(30, 2));
    let (agent, _store) = agent_on(&fake, "openai:gpt-test", 10).await;
    let outcome = agent.run("the answer?", RunOptions::new("chat")).collect().await;
    let reasoning: String = outcome
        .events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Reasoning(delta) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "six times seven");
    assert_eq!(outcome.text, "42");
    assert_eq!(outcome.usage.map(|u| (u.prompt_tokens, u.completion_tokens, u.total_tokens)), Some((30, 2, 32)));
}
