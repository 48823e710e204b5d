//! What a model is sent, below both the tape and the model clients: the
//! messages of a request ([`RequestMessage`], which may share a tape entry's
//! payload through [`SharedObject`] instead of copying it), the note an
//! anchor becomes ([`ANCHOR_NOTE_PREFIX`]), and what they cost ([`tokens`]).
//!
//! The tape builds these from its entries (`tape::context`), the clients in
//! [`crate::model`] send them, the agent counts them to know when to compact.
//! Messages are in OpenAI chat-completion shape; clients for other APIs
//! convert at their edge.

pub mod tokens;

use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// A JSON object kept elsewhere and shared by every request that sends it:
/// a message entry of a tape, held by the store's context cache, goes into
/// each model call of a long chat without being copied.
pub trait SharedObject: Send + Sync + std::fmt::Debug {
    fn object(&self) -> &Map<String, Value>;
}

/// One message of a [`ChatRequest`](crate::model::ChatRequest), in OpenAI shape.
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
