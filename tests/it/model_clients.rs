//! The model clients against the scripted fake model: what a caller sees for
//! good answers and for every kind of failure, through the same configured,
//! retrying clients the runtime uses.

use crate::support;

use bub::model::{
    ChatRequest, FinishReason, ModelClient, ModelError, ModelEvent, ModelSettings, ToolCallRequest, Usage,
};
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use support::fake_model::{FakeModel, Reply};

const OPENAI: &str = "openai:gpt-test";
const ANTHROPIC: &str = "anthropic:claude-test";

fn client(settings: &ModelSettings, spec: &str) -> Arc<dyn ModelClient> {
    match settings.client(spec) {
        Ok(client) => client,
        Err(error) => panic!("client for {spec}: {error}"),
    }
}

fn config_error(vars: &[(&str, &str)], spec: Option<&str>) -> String {
    let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let settings = ModelSettings::from_vars(vars).unwrap();
    let result = match spec {
        Some(spec) => settings.client(spec).map(|_| ()),
        None => settings.default_model().map(|_| ()),
    };
    result.expect_err("a configuration error").to_string()
}

fn request(model: &str) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        messages: vec![json!({"role": "user", "content": "hi"}).into()],
        ..ChatRequest::default()
    }
}

/// Every event until the end, and the error that ended it early, if any.
async fn run(
    client: &Arc<dyn ModelClient>,
    request: ChatRequest,
) -> Result<(Vec<ModelEvent>, Option<ModelError>), ModelError> {
    let mut stream = client.stream(&request).await?;
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => return Ok((events, Some(error))),
        }
    }
    Ok((events, None))
}

/// The events of a call that must succeed.
async fn answer(client: &Arc<dyn ModelClient>, request: ChatRequest) -> Vec<ModelEvent> {
    match run(client, request).await {
        Ok((events, None)) => events,
        Ok((_, Some(error))) | Err(error) => panic!("the call failed: {error}"),
    }
}

/// The error of a call that must fail before streaming.
async fn failure(client: &Arc<dyn ModelClient>, request: ChatRequest) -> ModelError {
    match run(client, request).await {
        Err(error) => error,
        Ok((events, _)) => panic!("expected an error, got {events:?}"),
    }
}

fn text(events: &[ModelEvent]) -> String {
    let deltas = events.iter().filter_map(|e| match e {
        ModelEvent::TextDelta(t) => Some(t.as_str()),
        _ => None,
    });
    deltas.collect()
}

fn tool_calls(events: &[ModelEvent]) -> Vec<(String, String, Value)> {
    let calls = events.iter().filter_map(|e| match e {
        ModelEvent::ToolCall(ToolCallRequest { id, name, arguments }) => {
            Some((id.clone(), name.clone(), serde_json::from_str(arguments).unwrap()))
        }
        _ => None,
    });
    calls.collect()
}

fn two_calls() -> Reply {
    Reply::tool_calls(vec![
        ("fs_read", json!({"path": "a.txt", "limit": 200})),
        ("fs_write", json!({"path": "notes/b.md", "content": "hello world"})),
    ])
    .with_text("Reading.")
}

// ---- OpenAI-compatible client ----

#[tokio::test]
async fn text_arrives_in_several_deltas_and_assembles() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("hello there, Ada"));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("gpt-test")).await;
    assert!(events.len() > 3, "several deltas: {events:?}");
    assert_eq!(text(&events), "hello there, Ada");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
    let sent = &fake.recorded()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some("Bearer fake-key"));
    assert_eq!(sent.body["model"], "gpt-test");
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert!(sent.body.get("tools").is_none(), "no tools, no field");
}

#[tokio::test]
async fn the_request_carries_tools_max_tokens_and_options() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("ok"));
    let mut req = request("gpt-test");
    let tool = json!({"type": "function", "function": {"name": "fs_read", "parameters": {"type": "object"}}});
    req.tools = vec![std::sync::Arc::new(tool.clone())];
    req.max_tokens = Some(321);
    req.options.insert("temperature".into(), json!(0.1));
    answer(&client(&fake.settings(OPENAI), OPENAI), req).await;
    let body = &fake.requests()[0];
    assert_eq!(body["tools"], json!([tool]));
    assert_eq!(body["max_tokens"], 321);
    assert_eq!(body["temperature"], 0.1);
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
}

#[tokio::test]
async fn reasoning_deltas_come_before_the_text() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("42").with_reasoning("think it through"));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    let reasoning: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ReasoningDelta(r) => Some(r.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "think it through");
    assert!(matches!(events[0], ModelEvent::ReasoningDelta(_)));
    assert_eq!(text(&events), "42");
}

#[tokio::test]
async fn parallel_tool_calls_are_assembled_by_index_before_finish() {
    let fake = FakeModel::start().await;
    fake.push(two_calls());
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(text(&events), "Reading.");
    assert_eq!(
        tool_calls(&events),
        vec![
            ("call_0".into(), "fs_read".into(), json!({"path": "a.txt", "limit": 200})),
            ("call_1".into(), "fs_write".into(), json!({"path": "notes/b.md", "content": "hello world"})),
        ]
    );
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn given_tool_call_ids_are_kept() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("call_abc", "bash", json!({"cmd": "ls"}))]));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(tool_calls(&events)[0].0, "call_abc");
}

#[tokio::test]
async fn usage_is_reported_with_cached_tokens() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("hi").with_usage(120, 7).with_cached_tokens(100));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    let expected = Usage { prompt_tokens: 120, completion_tokens: 7, total_tokens: 127, cached_tokens: Some(100) };
    assert!(events.contains(&ModelEvent::Usage(expected)), "{events:?}");
}

#[tokio::test]
async fn a_length_finish_is_reported() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("cut sho").with_finish_reason("length"));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Length)));
}

#[tokio::test]
async fn refused_credentials_are_an_auth_error_and_not_retried() {
    let fake = FakeModel::start().await;
    fake.push(Reply::error(401, "Incorrect API key provided: sk-wrong"));
    let error = failure(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert!(matches!(error, ModelError::Auth { status: 401, .. }), "{error:?}");
    assert!(error.to_string().contains("Incorrect API key provided"));
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn a_rate_limit_is_retried_and_then_answered() {
    let fake = FakeModel::start().await;
    fake.push(Reply::rate_limited(0)).push(Reply::text("after the wait"));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(text(&events), "after the wait");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn a_retry_after_beyond_the_budget_is_returned_with_its_wait() {
    let fake = FakeModel::start().await;
    fake.push(Reply::rate_limited(30));
    let error = failure(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
    assert!(error.to_string().contains("Rate limit reached"), "{error}");
    assert_eq!(fake.request_count(), 1, "a 30 s wait does not fit a 5 s budget");
}

#[tokio::test]
async fn a_server_error_is_retried() {
    let fake = FakeModel::start().await;
    fake.push(Reply::server_error(500)).push(Reply::text("recovered"));
    let events = answer(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(text(&events), "recovered");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn exhausted_retries_return_the_typed_error_with_the_provider_message() {
    let fake = FakeModel::start().await;
    for _ in 0..4 {
        fake.push(Reply::server_error(503));
    }
    let error = failure(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert!(matches!(error, ModelError::Server { status: 503, .. }), "{error:?}");
    assert!(error.to_string().contains("The server had an error"), "{error}");
    assert_eq!(fake.request_count(), 4);
}

#[tokio::test]
async fn a_context_overflow_is_typed_and_not_retried() {
    let fake = FakeModel::start().await;
    fake.push(Reply::context_overflow());
    let error = failure(&client(&fake.settings(OPENAI), OPENAI), request("m")).await;
    assert_eq!(error.kind(), "context_overflow", "{error:?}");
    assert!(error.to_string().contains("maximum context length is 8192"));
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn a_stream_cut_mid_way_is_a_cut_error_after_the_partial_text() {
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("partial text"));
    let (events, error) = run(&client(&fake.settings(OPENAI), OPENAI), request("m")).await.unwrap();
    assert_eq!(text(&events), "partial text");
    let error = error.expect("the cut is reported");
    assert_eq!(error.kind(), "cut", "{error:?}");
    assert!(error.to_string().contains("stopped mid-answer: connection lost"), "{error}");
    assert_eq!(fake.request_count(), 1, "never retried after a token");
}

#[tokio::test]
async fn a_slow_first_token_times_out_and_is_retried() {
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_secs(3), Reply::text("late"))).push(Reply::text("on time"));
    let mut settings = fake.settings(OPENAI);
    settings.retry.timeout = Duration::from_millis(200);
    let events = answer(&client(&settings, OPENAI), request("m")).await;
    assert_eq!(text(&events), "on time");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn a_slow_first_token_without_attempts_left_is_a_timeout() {
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_secs(3), Reply::text("late")));
    let mut settings = fake.settings(OPENAI);
    settings.retry.timeout = Duration::from_millis(100);
    settings.retry.max_attempts = 1;
    let error = failure(&client(&settings, OPENAI), request("m")).await;
    assert!(matches!(error, ModelError::Timeout { .. }), "{error:?}");
}

#[tokio::test]
async fn an_empty_script_says_so() {
    let fake = FakeModel::start().await;
    let mut settings = fake.settings(OPENAI);
    settings.retry.max_attempts = 1;
    let error = failure(&client(&settings, OPENAI), request("m")).await;
    assert!(error.to_string().contains("no scripted reply left"), "{error}");
}

// ---- Anthropic Messages client ----

#[tokio::test]
async fn anthropic_streams_text_reasoning_and_usage() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("bonjour à tous").with_reasoning("French").with_usage(50, 9));
    let events = answer(&client(&fake.settings(ANTHROPIC), ANTHROPIC), request("claude-test")).await;
    assert!(matches!(events[0], ModelEvent::ReasoningDelta(_)));
    assert_eq!(text(&events), "bonjour à tous");
    let usage = Usage { prompt_tokens: 50, completion_tokens: 9, total_tokens: 59, cached_tokens: Some(0) };
    assert!(events.contains(&ModelEvent::Usage(usage)), "{events:?}");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
    let sent = &fake.recorded()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("fake-key"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["max_tokens"], 4096);
}

#[tokio::test]
async fn anthropic_tool_use_blocks_become_tool_calls() {
    let fake = FakeModel::start().await;
    fake.push(two_calls());
    let events = answer(&client(&fake.settings(ANTHROPIC), ANTHROPIC), request("c")).await;
    assert_eq!(text(&events), "Reading.");
    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1], ("call_1".into(), "fs_write".into(), json!({"path": "notes/b.md", "content": "hello world"})));
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn anthropic_requests_are_converted_from_the_openai_shape() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("done"));
    let call = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "fs_read", "arguments": args}});
    let req = ChatRequest {
        model: "claude-test".into(),
        messages: vec![
            json!({"role": "system", "content": "You are bub."}),
            json!({"role": "user", "content": "read both"}),
            json!({"role": "assistant", "content": "", "tool_calls": [call("t1", "{\"path\":\"a\"}"), call("t2", "{broken")]}),
            json!({"role": "tool", "tool_call_id": "t1", "content": "A"}),
            json!({"role": "tool", "tool_call_id": "t2", "content": "B"}),
        ]
        .into_iter()
        .map(Into::into)
        .collect(),
        tools: vec![std::sync::Arc::new(
            json!({"type": "function", "function": {"name": "fs_read", "description": "Read a file", "parameters": {"type": "object"}}}),
        )],
        max_tokens: Some(100),
        // A session's `,reasoning_effort`: the Messages API has no such field.
        options: serde_json::Map::from_iter([
            ("reasoning_effort".to_string(), json!("high")),
            ("temperature".to_string(), json!(0.2)),
        ]),
        cache_key: None,
    };
    answer(&client(&fake.settings(ANTHROPIC), ANTHROPIC), req).await;
    let body = &fake.requests()[0];
    assert_eq!(body["system"][0]["text"], "You are bub.");
    assert_eq!(body["system"][0]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(body["max_tokens"], 100);
    assert!(body.get("reasoning_effort").is_none(), "{body}");
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(
        body["tools"],
        json!([{"name": "fs_read", "input_schema": {"type": "object"}, "description": "Read a file"}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "read both"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "fs_read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "t2", "name": "fs_read", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "B"},
            ]},
        ])
    );
}

#[tokio::test]
async fn anthropic_errors_are_typed_like_openai_ones() {
    let fake = FakeModel::start().await;
    let settings = fake.settings(ANTHROPIC);
    let client = client(&settings, ANTHROPIC);
    fake.push(Reply::error(401, "invalid x-api-key"));
    let error = failure(&client, request("c")).await;
    assert!(matches!(error, ModelError::Auth { status: 401, .. }), "{error:?}");
    assert!(error.to_string().contains("invalid x-api-key"));
    fake.push(Reply::context_overflow());
    let error = failure(&client, request("c")).await;
    assert_eq!(error.kind(), "context_overflow", "{error:?}");
    assert!(error.to_string().contains("prompt is too long"));
    assert_eq!(fake.request_count(), 2, "neither is retried");
}

#[tokio::test]
async fn anthropic_rate_limits_and_overloads_are_retried() {
    let fake = FakeModel::start().await;
    fake.push(Reply::rate_limited(0)).push(Reply::server_error(529)).push(Reply::text("third time"));
    let events = answer(&client(&fake.settings(ANTHROPIC), ANTHROPIC), request("c")).await;
    assert_eq!(text(&events), "third time");
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn anthropic_cut_stream_is_a_cut_error_after_the_partial_text() {
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("partial text"));
    let (events, error) = run(&client(&fake.settings(ANTHROPIC), ANTHROPIC), request("c")).await.unwrap();
    assert_eq!(text(&events), "partial text");
    assert_eq!(error.map(|e| e.kind()), Some("cut"));
    assert_eq!(fake.request_count(), 1);
}

// ---- configuration ----

#[tokio::test]
async fn the_spec_is_split_at_the_first_colon() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("free"));
    let spec = "openrouter:vendor/model:free";
    let settings = fake.settings(spec);
    let model = settings.default_model().unwrap();
    assert_eq!((model.provider.as_str(), model.model.as_str()), ("openrouter", "vendor/model:free"));
    answer(&client(&settings, spec), request(&model.model)).await;
    assert_eq!(fake.requests()[0]["model"], "vendor/model:free");
}

#[tokio::test]
async fn an_unknown_provider_works_as_openai_compatible_once_its_base_is_set() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("local"));
    let vars = [("BUB_MY_VLLM_API_BASE".to_string(), fake.base_url())];
    let settings = ModelSettings::from_vars(vars).unwrap();
    let client = client(&settings, "my-vllm:qwen");
    assert_eq!(client.provider(), "my-vllm");
    assert_eq!(text(&answer(&client, request("qwen")).await), "local");
    assert_eq!(fake.recorded()[0].header("authorization"), None, "no key, no header");
}

#[test]
fn no_model_says_how_to_set_one() {
    let error = config_error(&[], None);
    assert!(error.contains("BUB_MODEL") && error.contains("provider:model"), "{error}");
}

#[test]
fn an_unknown_provider_lists_the_known_ones_and_the_variable_to_set() {
    let error = config_error(&[], Some("acme:m1"));
    for known in ["openai", "openrouter", "anthropic", "ollama", "BUB_ACME_API_BASE"] {
        assert!(error.contains(known), "{known} missing from: {error}");
    }
}

#[test]
fn a_missing_key_names_the_variables() {
    let error = config_error(&[("BUB_ANTHROPIC_API_KEY", "k")], Some("openai:gpt-4o"));
    assert!(error.contains("BUB_OPENAI_API_KEY") && error.contains("BUB_API_KEY"), "{error}");
}

#[test]
fn a_spec_without_a_colon_shows_the_expected_form() {
    let error = config_error(&[("BUB_MODEL", "gpt-4o")], None);
    assert!(error.contains("provider:model"), "{error}");
}
