//! OpenTelemetry traces (issue 31): a webhook turn with a tool call is one
//! trace in an OTLP receiver, continuing the caller's `traceparent`, with
//! the span tree, the GenAI attributes, and no message, reply or tool text
//! unless `capture_content` asks for it.

use crate::support;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;
use support::fake_model::{FakeModel, Reply};
use support::fake_otlp::{FakeOtlp, ReceivedSpan};
use support::gateway::{CallbackReceiver, GatewayProcess, client};

const SECRET: &str = "traces-secret";
/// The caller's trace and span (a W3C `traceparent`, sampled).
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";
/// Words only the message, the tool's arguments and the reply hold.
const MESSAGE_WORD: &str = "quokkamessage";
const ARGUMENT_WORD: &str = "wombatargument";
const REPLY_WORD: &str = "numbatreply";

/// The model asks for one tool call, then answers; both report usage.
fn script(fake: &FakeModel) {
    let call = ("call_search_1", "tape_search", json!({"query": ARGUMENT_WORD}));
    fake.push(Reply::tool_calls(vec![call]).with_usage(21, 4).with_cached_tokens(8))
        .push(Reply::text(&format!("found it: {REPLY_WORD}")).with_usage(30, 5));
}

/// A signed webhook request carrying the caller's `traceparent`.
async fn post_traced(gateway: &GatewayProcess, mode: &str, body: &Value) -> reqwest::Response {
    let bytes = serde_json::to_vec(body).unwrap();
    let timestamp = chrono::Utc::now().timestamp();
    client()
        .post(format!("{}/webhook/webhook?mode={mode}", gateway.base_url()))
        .header("content-type", "application/json")
        .header(bub_webhook::TIMESTAMP_HEADER, timestamp.to_string())
        .header(bub_webhook::SIGNATURE_HEADER, bub_webhook::sign(SECRET, timestamp, &bytes))
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .header("tracestate", "vendor=opaque")
        .body(bytes)
        .send()
        .await
        .expect("webhook request")
}

fn message(id: &str) -> Value {
    json!({"message_id": id, "chat_id": "c1", "sender_id": "u1", "text": format!("please look for {MESSAGE_WORD}")})
}

fn by_name<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.name() == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = by_name(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span: {:#?}", names(spans));
    found[0]
}

fn names(spans: &[ReceivedSpan]) -> Vec<String> {
    spans.iter().map(|span| format!("{} ({} <- {})", span.name(), span.span_id(), span.parent_id())).collect()
}

/// The spans of a turn that was answered with a tool call, once the gateway stopped (the flush).
fn complete(spans: &[ReceivedSpan], sends: usize) -> bool {
    by_name(spans, "chat gpt-test").len() >= 2
        && by_name(spans, "outbound").len() >= sends
        && !by_name(spans, "turn").is_empty()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_turn_is_one_trace_under_the_callers_span_with_genai_attributes_and_no_content() {
    let home = tempfile::tempdir().unwrap();
    let otlp = FakeOtlp::start().await;
    let fake = FakeModel::start().await;
    script(&fake);
    let receiver = CallbackReceiver::start().await;
    let mut env = fake.vars("openai:gpt-test");
    env.extend([
        ("BUB_WEBHOOK_SECRET".to_string(), SECRET.to_string()),
        ("BUB_WEBHOOK_CALLBACK_URL".to_string(), receiver.url()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), otlp.base_url()),
        ("OTEL_BSP_SCHEDULE_DELAY".to_string(), "100".to_string()),
        ("BUB_LOG_FORMAT".to_string(), "json".to_string()),
        ("BUB_LOG".to_string(), "info,bub::gateway=debug".to_string()),
    ]);
    let gateway = GatewayProcess::start(home.path(), &env, &[]).await;
    let response = post_traced(&gateway, "async", &message("m1")).await;
    assert_eq!(response.status(), 202);
    assert!(receiver.wait_for_keys(1, Duration::from_secs(60)).await, "no reply:\n{}", gateway.stderr());
    let stderr = gateway.stderr();
    assert!(gateway.stop().await, "a clean stop:\n{stderr}");
    let spans = otlp.wait_for(Duration::from_secs(30), |spans| complete(spans, 1)).await;

    // The turn's log lines carry the trace's id, so a log line leads to its trace.
    let answered: Vec<serde_json::Value> = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["message"] == "turn answered")
        .collect();
    assert_eq!(answered.len(), 1, "one turn answered:\n{stderr}");
    assert_eq!(answered[0]["trace_id"], CALLER_TRACE, "{}", answered[0]);

    // One trace, the caller's, and bub's root-most span is the caller's span's child.
    assert!(!spans.is_empty(), "nothing exported:\n{stderr}");
    for span in &spans {
        assert_eq!(span.trace_id(), CALLER_TRACE, "{} is in the caller's trace: {:#?}", span.name(), names(&spans));
        assert_eq!(span.service, "bub", "the default service name");
    }
    let admission = one(&spans, "admission");
    assert_eq!(admission.parent_id(), CALLER_SPAN, "{:#?}", names(&spans));
    let turn = one(&spans, "turn");
    assert_eq!(turn.parent_id(), admission.span_id(), "the turn hangs under its message's admission");
    let run = one(&spans, "invoke_agent bub");
    assert_eq!(run.parent_id(), turn.span_id());
    assert_eq!(run.attribute("gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    let chats = by_name(&spans, "chat gpt-test");
    assert_eq!(chats.len(), 2, "two model calls: {:#?}", names(&spans));
    let tool = one(&spans, "execute_tool tape.search");
    assert_eq!(tool.parent_id(), run.span_id());
    let outbound = one(&spans, "outbound");
    assert_eq!(outbound.parent_id(), turn.span_id(), "the send is in the turn's trace");
    assert_eq!(spans.len(), 7, "no other span is exported: {:#?}", names(&spans));

    // GenAI attributes, with the fake model's values.
    let mut chats: Vec<&ReceivedSpan> = chats;
    chats.sort_by_key(|span| span.span.start_time_unix_nano);
    let expected = [("21", "4", Some("8"), "tool_calls"), ("30", "5", None, "stop")];
    for (chat, (input, output, cached, finish)) in chats.iter().zip(expected) {
        assert_eq!(chat.parent_id(), run.span_id());
        let attribute = |key: &str| chat.attribute(key);
        assert_eq!(attribute("gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(attribute("gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(attribute("gen_ai.request.model").as_deref(), Some("gpt-test"));
        assert_eq!(attribute("gen_ai.usage.input_tokens").as_deref(), Some(input));
        assert_eq!(attribute("gen_ai.usage.output_tokens").as_deref(), Some(output));
        assert_eq!(attribute("gen_ai.usage.cache_read.input_tokens").as_deref(), cached);
        assert_eq!(attribute("gen_ai.response.finish_reasons").as_deref(), Some(finish));
    }
    assert_eq!(tool.attribute("gen_ai.operation.name").as_deref(), Some("execute_tool"));
    assert_eq!(tool.attribute("gen_ai.tool.name").as_deref(), Some("tape.search"));
    assert_eq!(tool.attribute("gen_ai.tool.call.id").as_deref(), Some("call_search_1"));
    assert!(spans.iter().all(|span| !span.failed()), "nothing failed");

    // No content by default: not in an attribute, not in an event.
    for span in &spans {
        let text = span.all_text();
        for word in [MESSAGE_WORD, ARGUMENT_WORD, REPLY_WORD] {
            assert!(!text.contains(word), "`{}` carries `{word}`:\n{text}", span.name());
        }
        assert!(span.span.events.is_empty(), "no log line becomes a span event: {:?}", span.span.events);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn capture_content_in_the_config_records_the_prompt_the_reply_and_the_tool_text() {
    let home = tempfile::tempdir().unwrap();
    let otlp = FakeOtlp::start().await;
    let fake = FakeModel::start().await;
    script(&fake);
    let config = format!(
        "[telemetry]\nendpoint = \"{}\"\nservice_name = \"bub-traces-test\"\ncapture_content = true\n\n\
         [channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n",
        otlp.base_url()
    );
    let mut env = fake.vars("openai:gpt-test");
    env.push(("OTEL_BSP_SCHEDULE_DELAY".to_string(), "100".to_string()));
    let gateway = GatewayProcess::start_with_config(home.path(), &env, &config).await;
    let response = post_traced(&gateway, "sync", &message("m1")).await;
    assert_eq!(response.status(), 200);
    let stderr = gateway.stderr();
    assert!(gateway.stop().await, "a clean stop:\n{stderr}");
    let spans = otlp.wait_for(Duration::from_secs(30), |spans| complete(spans, 0)).await;
    assert!(spans.iter().all(|span| span.service == "bub-traces-test"), "service_name from the file");
    let text: HashMap<String, String> =
        spans.iter().map(|span| (span.name().to_string(), span.all_text())).fold(HashMap::new(), |mut all, (k, v)| {
            all.entry(k).or_default().push_str(&v);
            all
        });
    let chats = &text["chat gpt-test"];
    assert!(chats.contains(MESSAGE_WORD), "the prompt: {chats}");
    assert!(chats.contains(REPLY_WORD), "the reply: {chats}");
    let tool = &text["execute_tool tape.search"];
    assert!(tool.contains(ARGUMENT_WORD), "the tool's arguments: {tool}");
    let chat = by_name(&spans, "chat gpt-test")[0];
    assert!(chat.attribute("gen_ai.input.messages").is_some());
    assert!(by_name(&spans, "execute_tool tape.search")[0].attribute("gen_ai.tool.call.result").is_some());
}
