//! The Anthropic Messages client.
//!
//! bub speaks OpenAI-shaped messages everywhere (the tape stores them so), and
//! this client converts at the edge ([`to_messages_body`]): system messages
//! become the top-level `system`, assistant `tool_calls` become `tool_use`
//! blocks, `tool` messages become `tool_result` blocks in a user message, and
//! consecutive messages of one role merge (the API wants results of one step
//! together). The event stream is parsed back into the same [`ModelEvent`]s
//! the OpenAI client yields; a stream without `message_stop` is an error.

mod request;

pub use request::to_messages_body;

use super::error::ModelError;
use super::sse::{self, EventParser, Progress, SseEvent};
use super::transport;
use super::types::{ChatRequest, FinishReason, ModelClient, ModelEvent, ModelStream, ToolCallRequest, Usage};
use async_trait::async_trait;
use bub_channel::Secret;
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};

/// The `anthropic-version` header: the API version whose event stream this parses.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is required by the API; used when neither request nor settings set it.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A streaming Messages API client. The key is a [`Secret`]: `Debug` never shows it.
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    provider: String,
    base_url: String,
    api_key: Secret,
    http: reqwest::Client,
    default_max_tokens: u32,
}

impl AnthropicClient {
    /// `base_url` is the API root (`https://api.anthropic.com/v1`); requests go
    /// to `<base_url>/messages`.
    pub fn new(
        provider: impl Into<String>,
        base_url: impl Into<String>,
        api_key: impl Into<String>,
        http: reqwest::Client,
    ) -> AnthropicClient {
        AnthropicClient {
            provider: provider.into(),
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: Secret::new(api_key),
            http,
            default_max_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    /// `max_tokens` for requests that do not set their own (else 4096).
    pub fn with_default_max_tokens(mut self, max_tokens: Option<u32>) -> AnthropicClient {
        self.default_max_tokens = max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        self
    }

    /// The JSON body sent for `request`.
    pub fn body(&self, request: &ChatRequest) -> Value {
        let mut body = to_messages_body(request);
        if let Some(fields) = body.as_object_mut() {
            let max_tokens = request.max_tokens.unwrap_or(self.default_max_tokens);
            fields.insert("max_tokens".into(), json!(max_tokens));
        }
        body
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    fn provider(&self) -> &str {
        &self.provider
    }

    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError> {
        let url = format!("{}/messages", self.base_url);
        tracing::debug!(provider = %self.provider, model = %request.model, %url, "model request");
        let builder = self
            .http
            .post(url)
            .header("x-api-key", self.api_key.expose())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&self.body(request));
        let response = transport::send(&self.provider, builder).await?;
        let parser = MessageParser::new(&self.provider);
        Ok(sse::drive(&self.provider, response.bytes_stream(), parser))
    }
}

/// A content block being streamed.
enum Block {
    ToolUse { id: String, name: String, input: Value, json: String },
    Other,
}

/// Parses the Messages event stream.
struct MessageParser {
    provider: String,
    blocks: BTreeMap<u64, Block>,
    usage: Option<Usage>,
    stop_reason: Option<String>,
}

impl MessageParser {
    fn new(provider: &str) -> MessageParser {
        MessageParser { provider: provider.to_string(), blocks: BTreeMap::new(), usage: None, stop_reason: None }
    }

    fn emit_tool_call(block: Block, out: &mut VecDeque<ModelEvent>) {
        if let Block::ToolUse { id, name, input, json } = block {
            let arguments = if json.trim().is_empty() { input.to_string() } else { json };
            out.push_back(ModelEvent::ToolCall(ToolCallRequest { id, name, arguments }));
        }
    }

    fn on_start(&mut self, index: u64, block: &Value, out: &mut VecDeque<ModelEvent>) {
        let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let started = match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => Block::ToolUse {
                id: text("id"),
                name: text("name"),
                input: block.get("input").cloned().unwrap_or_else(|| json!({})),
                json: String::new(),
            },
            Some("text") if !text("text").is_empty() => {
                out.push_back(ModelEvent::TextDelta(text("text")));
                Block::Other
            }
            Some("thinking") if !text("thinking").is_empty() => {
                out.push_back(ModelEvent::ReasoningDelta(text("thinking")));
                Block::Other
            }
            _ => Block::Other,
        };
        self.blocks.insert(index, started);
    }

    fn on_delta(&mut self, index: u64, delta: &Value, out: &mut VecDeque<ModelEvent>) {
        let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("");
        match text("type") {
            "text_delta" if !text("text").is_empty() => {
                out.push_back(ModelEvent::TextDelta(text("text").to_string()));
            }
            "thinking_delta" if !text("thinking").is_empty() => {
                out.push_back(ModelEvent::ReasoningDelta(text("thinking").to_string()));
            }
            "input_json_delta" => {
                if let Some(Block::ToolUse { json, .. }) = self.blocks.get_mut(&index) {
                    json.push_str(text("partial_json"));
                }
            }
            _ => {} // signature_delta and future kinds carry nothing bub shows
        }
    }

    fn on_usage(&mut self, usage: &Value) {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        let current = self.usage.get_or_insert_with(Usage::default);
        if let Some(input) = count("input_tokens") {
            let cache_read = count("cache_read_input_tokens");
            let cache_write = count("cache_creation_input_tokens").unwrap_or(0);
            current.prompt_tokens = input + cache_read.unwrap_or(0) + cache_write;
            current.cached_tokens = cache_read.or(current.cached_tokens);
        }
        if let Some(output) = count("output_tokens") {
            current.completion_tokens = output;
        }
        current.total_tokens = current.prompt_tokens + current.completion_tokens;
    }

    fn finish(&mut self, out: &mut VecDeque<ModelEvent>) {
        for (_, block) in std::mem::take(&mut self.blocks) {
            MessageParser::emit_tool_call(block, out);
        }
        if let Some(usage) = self.usage.take() {
            out.push_back(ModelEvent::Usage(usage));
        }
        let reason = match self.stop_reason.as_deref() {
            None | Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("max_tokens") => FinishReason::Length,
            Some("refusal") => FinishReason::ContentFilter,
            Some(other) => FinishReason::Other(other.to_string()),
        };
        out.push_back(ModelEvent::Finish(reason));
    }
}

impl EventParser for MessageParser {
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Progress, ModelError> {
        if event.data.trim().is_empty() {
            return Ok(Progress::Continue);
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|error| ModelError::Protocol {
            provider: self.provider.clone(),
            message: format!("invalid JSON event ({error}): {}", transport::truncate(&event.data)),
        })?;
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        let kind = data.get("type").and_then(Value::as_str).or(event.event.as_deref());
        match kind.unwrap_or("") {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.on_usage(usage);
                }
            }
            "content_block_start" => {
                let block = data.get("content_block").cloned().unwrap_or_default();
                self.on_start(index, &block, out);
            }
            "content_block_delta" => {
                let delta = data.get("delta").cloned().unwrap_or_default();
                self.on_delta(index, &delta, out);
            }
            "content_block_stop" => {
                if let Some(block) = self.blocks.remove(&index) {
                    MessageParser::emit_tool_call(block, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    self.on_usage(usage);
                }
            }
            "message_stop" => {
                self.finish(out);
                return Ok(Progress::Done);
            }
            "error" => return Err(transport::stream_error(&self.provider, &data)),
            _ => {} // ping and event kinds added after this client
        }
        Ok(Progress::Continue)
    }

    fn on_end(&mut self, _out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        Err(ModelError::Cut {
            provider: self.provider.clone(),
            message: "the stream ended early (no message_stop)".into(),
        })
    }
}
