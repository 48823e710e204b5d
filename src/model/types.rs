//! What goes to a model and what comes back, independent of the provider.
//!
//! Messages and tool schemas travel in OpenAI chat-completion shape (the shape
//! tape entries are stored in, see [`crate::tape::context`]); clients for other
//! APIs convert at their edge.

use super::error::ModelError;
use crate::message::RequestMessage;
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

/// One model call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    /// The model id at the provider (the part after `provider:`).
    pub model: String,
    /// Chat messages, system prompt first, in OpenAI shape. The tape's
    /// messages are shared with the store's cache, not copied per call.
    pub messages: Vec<RequestMessage>,
    /// Tool definitions in OpenAI shape: `{type: "function", function: {name, description, parameters}}`.
    /// Shared, not owned: a tool's definition is built once and every request points at it.
    pub tools: Vec<Arc<Value>>,
    pub max_tokens: Option<u32>,
    /// Extra request fields (`temperature`, `top_p`, `reasoning_effort`, …), sent as given.
    pub options: Map<String, Value>,
    /// A stable key per conversation for the provider's prompt cache (the
    /// agent sets one per session): OpenAI's `prompt_cache_key`.
    pub cache_key: Option<String>,
}

/// A tool call the model asked for, assembled from its streamed pieces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    pub id: String,
    /// The model-facing name (`fs_read`).
    pub name: String,
    /// The arguments as the model wrote them: JSON text, possibly invalid.
    pub arguments: String,
}

impl ToolCallRequest {
    /// The OpenAI-shaped call recorded on the tape and sent back in context.
    pub fn to_openai(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// Token usage of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Prompt tokens served from the provider's cache, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A complete answer.
    Stop,
    /// It wants tools run.
    ToolCalls,
    /// It hit the token limit (the answer is cut).
    Length,
    /// Withheld by the provider's filter.
    ContentFilter,
    /// Anything else the provider said.
    Other(String),
}

impl FinishReason {
    /// The reason in OpenAI's words, which the OpenTelemetry GenAI
    /// conventions use too (`gen_ai.response.finish_reasons`).
    pub fn name(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }
}

/// One item of a model's streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// A complete tool call (clients assemble the streamed pieces first).
    ToolCall(ToolCallRequest),
    Usage(Usage),
    /// The last event of a successful stream.
    Finish(FinishReason),
}

/// A streamed answer. An `Err` item ends it.
pub type ModelStream = BoxStream<'static, Result<ModelEvent, ModelError>>;

/// A chat model that streams. Implementations translate one provider's API;
/// retries live in [`super::retry::Retrying`], around any client.
#[async_trait]
pub trait ModelClient: Send + Sync + 'static {
    /// The provider name (`openai`, `anthropic`, …), for records and errors.
    fn provider(&self) -> &str;

    /// Starts a call. Errors before the stream (HTTP status, connection) are
    /// returned here; errors while streaming arrive as stream items. The
    /// request is borrowed: a retry sends it again, and the caller keeps it
    /// for its events, without copying a whole context each time.
    async fn stream(&self, request: &ChatRequest) -> Result<ModelStream, ModelError>;
}
