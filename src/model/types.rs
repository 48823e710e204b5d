//! What goes to a model and what comes back, independent of the provider.
//!
//! Messages and tool schemas travel in OpenAI chat-completion shape (the shape
//! tape entries are stored in, see [`crate::tape::context`]); clients for other
//! APIs convert at their edge.

use super::error::ModelError;
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

/// A JSON object kept elsewhere and shared by every request that sends it:
/// a message entry of a tape, held by the store's context cache, goes into
/// each model call of a long chat without being copied.
pub trait SharedObject: Send + Sync + std::fmt::Debug {
    fn object(&self) -> &Map<String, Value>;
}

/// One message of a [`ChatRequest`], in OpenAI shape.
#[derive(Debug, Clone)]
pub enum RequestMessage {
    /// Built for this request (the system prompt, a tool result, a note).
    Built(Value),
    /// Kept elsewhere (a message entry of the tape), sent as it is.
    Shared(Arc<dyn SharedObject>),
}

impl RequestMessage {
    /// The message's fields; `None` for a built message that is not an object.
    pub fn as_object(&self) -> Option<&Map<String, Value>> {
        match self {
            RequestMessage::Built(Value::Object(map)) => Some(map),
            RequestMessage::Built(_) => None,
            RequestMessage::Shared(shared) => Some(shared.object()),
        }
    }

    /// A field of the message.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?.get(key)
    }

    /// The message as a value of its own (a shared one is copied).
    pub fn to_value(&self) -> Value {
        match self {
            RequestMessage::Built(value) => value.clone(),
            RequestMessage::Shared(shared) => Value::Object(shared.object().clone()),
        }
    }

    /// The message, to change: a shared one is copied into this request first.
    pub fn to_mut(&mut self) -> &mut Value {
        if let RequestMessage::Shared(shared) = self {
            *self = RequestMessage::Built(Value::Object(shared.object().clone()));
        }
        match self {
            RequestMessage::Built(value) => value,
            RequestMessage::Shared(_) => unreachable!("a shared message was replaced by its copy above"),
        }
    }
}

/// `message["role"]` as on a [`Value`]: `Null` for a missing field.
impl std::ops::Index<&str> for RequestMessage {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.get(key).unwrap_or(&NULL)
    }
}

impl From<Value> for RequestMessage {
    fn from(value: Value) -> RequestMessage {
        RequestMessage::Built(value)
    }
}

/// Messages are equal when they say the same, shared or not.
impl PartialEq for RequestMessage {
    fn eq(&self, other: &RequestMessage) -> bool {
        match other {
            RequestMessage::Built(value) => *self == *value,
            RequestMessage::Shared(shared) => self.as_object() == Some(shared.object()),
        }
    }
}

impl PartialEq<Value> for RequestMessage {
    fn eq(&self, other: &Value) -> bool {
        match (self, other.as_object()) {
            (RequestMessage::Built(value), _) => value == other,
            (RequestMessage::Shared(shared), Some(theirs)) => shared.object() == theirs,
            (RequestMessage::Shared(_), None) => false,
        }
    }
}

impl Serialize for RequestMessage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestMessage::Built(value) => value.serialize(serializer),
            RequestMessage::Shared(shared) => shared.object().serialize(serializer),
        }
    }
}

/// How the note an anchor becomes in a context starts (`[Anchor created:
/// NAME]: …`): rendered by `tape::context`, and found by the Anthropic
/// client, which puts its second cache breakpoint there.
pub const ANCHOR_NOTE_PREFIX: &str = "[Anchor created: ";

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
