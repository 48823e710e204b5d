//! The OpenAI-compatible Chat Completions client: OpenAI itself, OpenRouter,
//! Ollama, llama.cpp, vLLM and every other server speaking that dialect.
//!
//! Requests are already in this API's shape ([`ChatRequest`] is OpenAI-shaped),
//! so the work here is the stream: text and reasoning deltas pass through as
//! they come, tool calls arrive in pieces keyed by `index` (id and name first,
//! arguments in fragments) and are emitted whole, after the text and before
//! `Finish`. A stream is complete only when it said so (`[DONE]` or a
//! `finish_reason`); anything shorter is a [`ModelError::Protocol`].

use super::error::ModelError;
use super::sse::{self, EventParser, Progress, SseEvent};
use super::transport;
use super::types::{ChatRequest, FinishReason, ModelClient, ModelEvent, ModelStream, ToolCallRequest, Usage};
use crate::message::RequestMessage;
use async_trait::async_trait;
use bub_channel::Secret;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};

/// Body fields the client owns: request options never replace them.
const PROTOCOL_FIELDS: [&str; 4] = ["model", "messages", "stream", "tools"];

/// A streaming Chat Completions client for one provider and base URL. The
/// key is a [`Secret`]: `Debug` never shows it.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    provider: String,
    base_url: String,
    api_key: Option<Secret>,
    http: reqwest::Client,
    default_max_tokens: Option<u32>,
}

impl OpenAiClient {
    /// `base_url` is the API root (`https://api.openai.com/v1`); requests go to
    /// `<base_url>/chat/completions`. Without a key no `Authorization` is sent
    /// (local servers).
    pub fn new(
        provider: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<String>,
        http: reqwest::Client,
    ) -> OpenAiClient {
        OpenAiClient {
            provider: provider.into(),
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: api_key.map(Secret::from),
            http,
            default_max_tokens: None,
        }
    }

    /// `max_tokens` for requests that do not set their own.
    pub fn with_default_max_tokens(mut self, max_tokens: Option<u32>) -> OpenAiClient {
        self.default_max_tokens = max_tokens;
        self
    }

    /// The JSON body sent for `request`.
    pub fn body(&self, request: &ChatRequest) -> Value {
        serde_json::to_value(self.wire_body(request)).unwrap_or(Value::Null)
    }

    /// The body as it is serialized, borrowing the request: a context is
    /// written out once per call, never copied into a `Value` first.
    fn wire_body<'a>(&self, request: &'a ChatRequest) -> WireBody<'a> {
        // An option of the same name replaces `stream_options` and `max_tokens`.
        let given = |key: &str| request.options.contains_key(key);
        WireBody {
            model: &request.model,
            messages: &request.messages,
            stream: true,
            stream_options: (!given("stream_options")).then_some(StreamOptions { include_usage: true }),
            tools: &request.tools,
            max_tokens: request.max_tokens.or(self.default_max_tokens).filter(|_| !given("max_tokens")),
            options: request.options.iter().filter(|(key, _)| !PROTOCOL_FIELDS.contains(&key.as_str())).collect(),
            // OpenAI's own API takes it; other servers of this dialect may refuse unknown fields.
            prompt_cache_key: request
                .cache_key
                .as_deref()
                .filter(|_| self.provider == "openai" && !given("prompt_cache_key")),
        }
    }
}

#[derive(serde::Serialize)]
struct WireBody<'a> {
    model: &'a str,
    messages: &'a [RequestMessage],
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "<[std::sync::Arc<Value>]>::is_empty")]
    tools: &'a [std::sync::Arc<Value>],
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    /// Routes requests of one session to the same cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    /// Extra fields, sent as given (protocol fields excluded).
    #[serde(flatten)]
    options: BTreeMap<&'a String, &'a Value>,
}

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[async_trait]
impl ModelClient for OpenAiClient {
    fn provider(&self) -> &str {
        &self.provider
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let url = format!("{}/chat/completions", self.base_url);
        tracing::debug!(provider = %self.provider, model = %request.model, %url, "model request");
        let mut builder =
            self.http.post(url).header(reqwest::header::ACCEPT, "text/event-stream").json(&self.wire_body(request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        let response = transport::send(&self.provider, builder).await?;
        let parser = ChunkParser::new(&self.provider);
        Ok(sse::drive(&self.provider, response.bytes_stream(), parser))
    }
}

/// A tool call being assembled from its pieces.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Parses `chat.completion.chunk` events.
struct ChunkParser {
    provider: String,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl ChunkParser {
    fn new(provider: &str) -> ChunkParser {
        ChunkParser { provider: provider.to_string(), calls: BTreeMap::new(), finish_reason: None, usage: None }
    }

    fn protocol(&self, message: String) -> ModelError {
        ModelError::Protocol { provider: self.provider.clone(), message }
    }

    fn on_delta(&mut self, delta: &Value, out: &mut VecDeque<ModelEvent>) {
        let text = |key: &str| delta.get(key).and_then(Value::as_str).filter(|t| !t.is_empty());
        if let Some(reasoning) = text("reasoning_content").or_else(|| text("reasoning")) {
            out.push_back(ModelEvent::ReasoningDelta(reasoning.to_string()));
        }
        if let Some(content) = text("content") {
            out.push_back(ModelEvent::TextDelta(content.to_string()));
        }
        let pieces = delta.get("tool_calls").and_then(Value::as_array);
        for (position, piece) in pieces.into_iter().flatten().enumerate() {
            let index = piece.get("index").and_then(Value::as_u64).unwrap_or(position as u64);
            let call = self.calls.entry(index).or_default();
            let field = |pointer: &str| piece.pointer(pointer).and_then(Value::as_str);
            if let Some(id) = field("/id").filter(|id| !id.is_empty())
                && call.id.is_empty()
            {
                call.id = id.to_string();
            }
            if let Some(name) = field("/function/name").filter(|n| !n.is_empty())
                && call.name.is_empty()
            {
                call.name = name.to_string();
            }
            if let Some(arguments) = field("/function/arguments") {
                call.arguments.push_str(arguments);
            }
        }
    }

    /// Emits the assembled tool calls, the usage and `Finish`, in that order.
    fn finish(&mut self, out: &mut VecDeque<ModelEvent>) {
        let calls = std::mem::take(&mut self.calls);
        let had_calls = !calls.is_empty();
        for (index, call) in calls {
            let id = match call.id.is_empty() {
                true => format!("call_{index}"),
                false => call.id,
            };
            out.push_back(ModelEvent::ToolCall(ToolCallRequest { id, name: call.name, arguments: call.arguments }));
        }
        if let Some(usage) = self.usage.take() {
            out.push_back(ModelEvent::Usage(usage));
        }
        let reason = self.finish_reason.as_deref().unwrap_or("stop");
        out.push_back(ModelEvent::Finish(finish_reason(reason, had_calls)));
    }
}

impl EventParser for ChunkParser {
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Progress, ModelError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Progress::Continue);
        }
        if data == "[DONE]" {
            self.finish(out);
            return Ok(Progress::Done);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|error| self.protocol(format!("invalid JSON event ({error}): {}", transport::truncate(data))))?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(transport::stream_error(&self.provider, &chunk));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(parse_usage(usage));
        }
        if let Some(choice) = chunk.pointer("/choices/0") {
            if let Some(delta) = choice.get("delta") {
                self.on_delta(delta, out);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(Progress::Continue)
    }

    fn on_end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        // Some servers close after the finish chunk without `[DONE]`: complete.
        if self.finish_reason.is_some() {
            self.finish(out);
            return Ok(());
        }
        Err(ModelError::Cut {
            provider: self.provider.clone(),
            message: "the stream ended early (no [DONE] and no finish_reason)".into(),
        })
    }
}

fn parse_usage(usage: &Value) -> Usage {
    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
    let prompt_tokens = count("/prompt_tokens").unwrap_or(0);
    let completion_tokens = count("/completion_tokens").unwrap_or(0);
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: count("/total_tokens").unwrap_or(prompt_tokens + completion_tokens),
        cached_tokens: count("/prompt_tokens_details/cached_tokens"),
    }
}

/// Maps `finish_reason`. Some servers say `stop` after tool calls; the calls
/// decide, so the agent loop can trust `ToolCalls`.
fn finish_reason(reason: &str, had_calls: bool) -> FinishReason {
    match reason {
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "stop" if had_calls => FinishReason::ToolCalls,
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(events: &[&str]) -> (Vec<ModelEvent>, Result<(), ModelError>) {
        let mut parser = ChunkParser::new("openai");
        let mut out = VecDeque::new();
        for data in events {
            let event = SseEvent { event: None, data: data.to_string() };
            match parser.on_event(event, &mut out) {
                Ok(Progress::Continue) => {}
                Ok(Progress::Done) => return (out.into(), Ok(())),
                Err(error) => return (out.into(), Err(error)),
            }
        }
        let end = parser.on_end(&mut out);
        (out.into(), end)
    }

    /// An option named like a field the client sets replaces it: the body on
    /// the wire holds each key once.
    #[test]
    fn options_replace_max_tokens_and_stream_options_without_duplicate_keys() {
        let client = OpenAiClient::new("openai", "http://x/v1/", None, reqwest::Client::new())
            .with_default_max_tokens(Some(100));
        let mut request = ChatRequest { model: "gpt".into(), ..ChatRequest::default() };
        request.options.insert("max_tokens".into(), json!(7));
        request.options.insert("stream_options".into(), json!({"include_usage": false}));
        let wire = serde_json::to_string(&client.wire_body(&request)).unwrap();
        assert_eq!(wire.matches("\"max_tokens\"").count(), 1, "{wire}");
        assert_eq!(wire.matches("\"stream_options\"").count(), 1, "{wire}");
        let body: Value = serde_json::from_str(&wire).unwrap();
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["stream_options"]["include_usage"], false);
    }

    #[test]
    fn the_body_streams_with_usage_and_omits_empty_tools() {
        let client = OpenAiClient::new("openai", "http://x/v1/", None, reqwest::Client::new())
            .with_default_max_tokens(Some(100));
        let mut request = ChatRequest { model: "gpt".into(), ..ChatRequest::default() };
        request.options.insert("temperature".into(), json!(0.2));
        request.options.insert("stream".into(), json!(false));
        let body = client.body(&request);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(body["temperature"], 0.2);
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn a_finish_chunk_without_done_completes_the_stream() {
        let (events, end) = parse(&[
            r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
        ]);
        assert!(end.is_ok());
        assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Length)));
    }

    #[test]
    fn an_error_event_is_typed() {
        let (_, end) = parse(&[r#"{"error":{"message":"overloaded","type":"server_error"}}"#]);
        assert_eq!(end.unwrap_err().kind(), "server");
    }

    #[test]
    fn tool_calls_without_ids_get_positional_ids() {
        let (events, end) = parse(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"a","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert!(end.is_ok());
        assert_eq!(
            events,
            vec![
                ModelEvent::ToolCall(ToolCallRequest { id: "call_0".into(), name: "a".into(), arguments: "{}".into() }),
                ModelEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn openrouter_style_reasoning_is_a_reasoning_delta() {
        let (events, _) = parse(&[r#"{"choices":[{"delta":{"reasoning":"hmm"}}]}"#, "[DONE]"]);
        assert_eq!(events[0], ModelEvent::ReasoningDelta("hmm".into()));
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let (_, end) = parse(&["not json"]);
        assert_eq!(end.unwrap_err().kind(), "protocol");
    }
}
