//! Tape entries: the immutable facts a tape is made of.
//!
//! An [`Entry`] is what a store hands back (it carries the id the store assigned);
//! a [`NewEntry`] is what a caller hands in. Payload and meta are JSON objects by
//! construction, so "a payload that is not an object" is caught where the value is
//! built ([`NewEntry::new`]) rather than deep inside a store.

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::fmt;

/// A JSON object, the shape of every payload and meta.
pub type JsonObject = Map<String, Value>;

/// What an entry records. The set is closed: stores reject anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A chat message (`role`, `content`, …) as sent to or received from a model.
    Message,
    /// The system prompt of a model step. Never part of the model context.
    System,
    /// A checkpoint `{name, state}`: context is rebuilt from the last one.
    Anchor,
    /// The tool calls a model step asked for: `{calls: [...]}`.
    ToolCall,
    /// The results of those calls, aligned by position: `{results: [...]}`.
    ToolResult,
    /// An error `{kind, message, details?}`. Never part of the model context.
    Error,
    /// An operational event `{name, data?}`. Never part of the model context.
    Event,
}

impl EntryKind {
    /// Every kind, in a stable order.
    pub const ALL: [EntryKind; 7] = [
        EntryKind::Message,
        EntryKind::System,
        EntryKind::Anchor,
        EntryKind::ToolCall,
        EntryKind::ToolResult,
        EntryKind::Error,
        EntryKind::Event,
    ];

    /// The name used on disk and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Message => "message",
            EntryKind::System => "system",
            EntryKind::Anchor => "anchor",
            EntryKind::ToolCall => "tool_call",
            EntryKind::ToolResult => "tool_result",
            EntryKind::Error => "error",
            EntryKind::Event => "event",
        }
    }

    /// Parses the on-disk name; `None` for anything unknown.
    pub fn parse(text: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for EntryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An entry as stored: ids are assigned by the store, per tape, 1, 2, 3… without gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: u64,
    pub kind: EntryKind,
    pub payload: JsonObject,
    pub meta: JsonObject,
    #[serde(with = "entry_date")]
    pub date: DateTime<Utc>,
}

/// A message entry's payload is the message a model request sends: shared
/// with the store's cache instead of copied (see
/// [`crate::tape::default_request_context`]).
impl crate::message::SharedObject for Entry {
    fn object(&self) -> &JsonObject {
        &self.payload
    }
}

/// An entry on its way into a store; it gets its id when appended.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    pub kind: EntryKind,
    pub payload: JsonObject,
    pub meta: JsonObject,
    pub date: DateTime<Utc>,
}

/// Why a payload was refused. Stores wrap this with the tape's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} entry: {reason}")]
pub struct EntryShapeError {
    pub kind: EntryKind,
    pub reason: String,
}

impl NewEntry {
    /// Builds an entry from any JSON value, refusing payloads that are not
    /// objects or that lack the fields their kind needs.
    pub fn new(kind: EntryKind, payload: Value) -> Result<NewEntry, EntryShapeError> {
        let Value::Object(payload) = payload else {
            return Err(EntryShapeError {
                kind,
                reason: format!("payload must be a JSON object, got {}", json_type(&payload)),
            });
        };
        let entry = NewEntry { kind, payload, meta: JsonObject::new(), date: now() };
        entry.check_shape()?;
        Ok(entry)
    }

    /// A chat message; `message` must be an object with a string `role`.
    pub fn message(message: Value) -> Result<NewEntry, EntryShapeError> {
        NewEntry::new(EntryKind::Message, message)
    }

    /// A message with the given role and text content.
    pub fn chat(role: &str, content: impl Into<String>) -> NewEntry {
        NewEntry::trusted(EntryKind::Message, json!({"role": role, "content": content.into()}))
    }

    /// The system prompt of one model step.
    pub fn system(content: impl Into<String>) -> NewEntry {
        NewEntry::trusted(EntryKind::System, json!({"content": content.into()}))
    }

    /// An anchor. `state` is carried to the model when context is rebuilt from it.
    pub fn anchor(name: impl Into<String>, state: Value) -> NewEntry {
        NewEntry::trusted(EntryKind::Anchor, json!({"name": name.into(), "state": state}))
    }

    /// An event `{name, data}`.
    pub fn event(name: impl Into<String>, data: Value) -> NewEntry {
        NewEntry::trusted(EntryKind::Event, json!({"name": name.into(), "data": data}))
    }

    /// Tool calls in OpenAI shape (`{id, type: "function", function: {name, arguments}}`).
    pub fn tool_call(calls: Vec<Value>) -> NewEntry {
        NewEntry::trusted(EntryKind::ToolCall, json!({"calls": calls}))
    }

    /// Tool results, aligned by position with the preceding tool calls.
    pub fn tool_result(results: Vec<Value>) -> NewEntry {
        NewEntry::trusted(EntryKind::ToolResult, json!({"results": results}))
    }

    /// An error record `{kind, message, details?}`.
    pub fn error(kind: &str, message: impl Into<String>, details: Option<Value>) -> NewEntry {
        let mut payload = json!({"kind": kind, "message": message.into()});
        if let Some(details) = details {
            payload["details"] = details;
        }
        NewEntry::trusted(EntryKind::Error, payload)
    }

    /// Adds one meta field (`run_id`, `context`, …).
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> NewEntry {
        self.meta.insert(key.into(), value);
        self
    }

    /// Marks the entry as operational: it never reaches the model context.
    pub fn hidden_from_context(self) -> NewEntry {
        self.with_meta("context", Value::Bool(false))
    }

    /// Keeps the date of an entry being copied (fork merge, import).
    pub fn with_date(mut self, date: DateTime<Utc>) -> NewEntry {
        self.date = date.trunc_subsecs(6);
        self
    }

    /// The anchor or event name this entry carries, if any.
    pub fn name(&self) -> Option<&str> {
        entry_name(self.kind, &self.payload)
    }

    /// Checks the fields each kind needs. Stores call this on every append, so an
    /// entry whose public fields were edited after construction is still checked.
    pub fn check_shape(&self) -> Result<(), EntryShapeError> {
        let fail = |reason: &str| Err(EntryShapeError { kind: self.kind, reason: reason.into() });
        let field = |key: &str| self.payload.get(key);
        match self.kind {
            EntryKind::Message => match field("role") {
                Some(Value::String(_)) => Ok(()),
                _ => fail("payload needs a string `role`"),
            },
            EntryKind::Anchor | EntryKind::Event => match field("name") {
                Some(Value::String(name)) if !name.is_empty() => Ok(()),
                _ => fail("payload needs a non-empty string `name`"),
            },
            EntryKind::ToolCall => match field("calls") {
                Some(Value::Array(_)) => Ok(()),
                _ => fail("payload needs an array `calls`"),
            },
            EntryKind::ToolResult => match field("results") {
                Some(Value::Array(_)) => Ok(()),
                _ => fail("payload needs an array `results`"),
            },
            EntryKind::System | EntryKind::Error => Ok(()),
        }
    }

    /// Built from a literal whose shape is known to be right.
    fn trusted(kind: EntryKind, payload: Value) -> NewEntry {
        let payload = match payload {
            Value::Object(map) => map,
            _ => JsonObject::new(),
        };
        NewEntry { kind, payload, meta: JsonObject::new(), date: now() }
    }

    /// Gives the entry its store-assigned id.
    pub fn into_entry(self, id: u64) -> Entry {
        Entry { id, kind: self.kind, payload: self.payload, meta: self.meta, date: self.date }
    }
}

impl Entry {
    /// The anchor or event name this entry carries, if any.
    pub fn name(&self) -> Option<&str> {
        entry_name(self.kind, &self.payload)
    }

    /// False when `meta.context` is `false`: the entry never reaches the model.
    pub fn in_context(&self) -> bool {
        self.meta.get("context") != Some(&Value::Bool(false))
    }

    /// The anchor's or event's data: `state` for anchors, `data` for events.
    pub fn data(&self) -> Option<&Value> {
        match self.kind {
            EntryKind::Anchor => self.payload.get("state"),
            EntryKind::Event => self.payload.get("data"),
            _ => None,
        }
    }

    /// A copy to append elsewhere (fork merge); the id is dropped, the date kept.
    pub fn to_new(&self) -> NewEntry {
        NewEntry { kind: self.kind, payload: self.payload.clone(), meta: self.meta.clone(), date: self.date }
    }
}

fn entry_name(kind: EntryKind, payload: &JsonObject) -> Option<&str> {
    match kind {
        EntryKind::Anchor | EntryKind::Event => payload.get("name").and_then(Value::as_str),
        _ => None,
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The current time at the precision stores keep (microseconds), so an entry
/// reads back equal to what was appended.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// Dates are UTC with microseconds and a `Z`, fixed width, so that comparing the
/// stored text orders them like time (stores index and compare the text).
pub fn format_date(date: &DateTime<Utc>) -> String {
    date.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Parses a stored or user-given RFC 3339 date.
pub fn parse_date(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).ok().map(|date| date.with_timezone(&Utc))
}

mod entry_date {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(date: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_date(date))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_date(&text).ok_or_else(|| D::Error::custom(format!("not an RFC 3339 date: {text}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_that_is_not_an_object_is_refused_with_its_type() {
        let error = NewEntry::new(EntryKind::Message, json!(["hi"])).unwrap_err();
        assert_eq!(error.to_string(), "message entry: payload must be a JSON object, got an array");
    }

    #[test]
    fn kind_specific_fields_are_checked() {
        assert!(NewEntry::new(EntryKind::Anchor, json!({"state": {}})).is_err());
        assert!(NewEntry::new(EntryKind::ToolResult, json!({"results": "x"})).is_err());
        assert!(NewEntry::new(EntryKind::Message, json!({"content": "no role"})).is_err());
        assert!(NewEntry::new(EntryKind::System, json!({"content": "ok"})).is_ok());
    }

    #[test]
    fn stored_dates_sort_like_time() {
        let early = parse_date("2026-01-02T03:04:05Z").unwrap();
        let late = parse_date("2026-01-02T03:04:05.5Z").unwrap();
        assert!(format_date(&early) < format_date(&late));
        assert_eq!(format_date(&early), "2026-01-02T03:04:05.000000Z");
    }
}
