//! Turning tape entries into the chat messages a model reads.
//!
//! The model context is the last anchor and every entry after it, mapped by
//! [`default_context`]:
//! - an anchor becomes an assistant note `[Anchor created: <name>]: <state JSON>`,
//!   or, for a compaction's anchor (state `{summary, covers}`), a note with the
//!   summary as text and the ids it covers;
//! - a message passes as it is;
//! - a tool call becomes an assistant message with empty content and `tool_calls`;
//! - each tool result becomes a `tool` message carrying the `tool_call_id` and
//!   `name` of the call at the same position; non-string results are JSON text;
//! - `system`, `event` and `error` entries, and any entry with
//!   `meta.context = false`, never appear.
//!
//! Messages are OpenAI chat-completion objects (`serde_json::Value`), the shape
//! message entries are stored in; model clients for other APIs convert from it.

use super::entry::{Entry, EntryKind};
use crate::message::tokens::{MESSAGE_OVERHEAD, TokenCounter};
use crate::message::{ANCHOR_NOTE_PREFIX, RequestMessage, SharedObject};
use serde_json::{Value, json};
use std::borrow::Borrow;
use std::collections::VecDeque;
use std::sync::Arc;

/// A chat message in OpenAI chat-completion shape.
pub type ChatMessage = Value;

/// Chooses and maps the entries of a context. Entries with `meta.context = false`
/// are removed before a selector sees them.
pub type ContextSelector = Arc<dyn Fn(&[Entry]) -> Vec<ChatMessage> + Send + Sync>;

/// The default selector, as described in the module docs.
pub fn default_context(entries: &[Entry]) -> Vec<ChatMessage> {
    default_context_owned(entries.to_vec())
}

/// [`default_context`] taking the entries, so message payloads move into the
/// context instead of being copied.
pub fn default_context_owned(entries: Vec<Entry>) -> Vec<ChatMessage> {
    map_context(entries, |mut entry| Value::Object(std::mem::take(&mut entry.payload)), |built| built)
}

/// [`default_context`] for a model request over entries shared with the
/// store's cache: message entries go into the request as they are kept
/// (shared, not copied: every model call of a long chat sends thousands);
/// the rest is mapped as in [`default_context`].
pub fn default_request_context(entries: &[Arc<Entry>]) -> Vec<RequestMessage> {
    map_context(
        entries.iter().cloned(),
        |entry| RequestMessage::Shared(entry as Arc<dyn SharedObject>),
        RequestMessage::Built,
    )
}

/// The mapping of the module docs over entries given as `T` (owned or
/// shared): `message` makes a message entry the caller's message, `built`
/// wraps what is rendered here.
fn map_context<T: Borrow<Entry>, M>(
    entries: impl IntoIterator<Item = T>,
    message: impl Fn(T) -> M,
    built: impl Fn(Value) -> M,
) -> Vec<M> {
    let entries = entries.into_iter();
    let mut messages = Vec::with_capacity(entries.size_hint().0);
    // Calls waiting for their results, oldest first: results match by position.
    let mut pending: VecDeque<(Value, Value)> = VecDeque::new();
    for entry in entries.filter(|entry| entry.borrow().in_context()) {
        let payload = &entry.borrow().payload;
        match entry.borrow().kind {
            EntryKind::Anchor => messages.push(built(anchor_note(entry.borrow()))),
            EntryKind::Message => messages.push(message(entry)),
            EntryKind::ToolCall => {
                let calls = payload.get("calls").cloned().unwrap_or_else(|| json!([]));
                pending = calls
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|call| {
                        let id = call.get("id").cloned().unwrap_or(Value::Null);
                        let name = call.pointer("/function/name").cloned().unwrap_or(Value::Null);
                        (id, name)
                    })
                    .collect();
                messages.push(built(json!({"role": "assistant", "content": "", "tool_calls": calls})));
            }
            EntryKind::ToolResult => {
                let results = payload.get("results").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
                for result in results {
                    let (id, name) = pending.pop_front().unwrap_or((Value::Null, Value::Null));
                    let content = match result {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    messages.push(built(json!({"role": "tool", "content": content, "tool_call_id": id, "name": name})));
                }
            }
            EntryKind::System | EntryKind::Event | EntryKind::Error => {}
        }
    }
    messages
}

/// The tokens an entry adds to a context.
pub fn entry_tokens(counter: &TokenCounter, entry: &Entry) -> u64 {
    if !entry.in_context() {
        return 0;
    }
    match entry.kind {
        EntryKind::Message => counter.count_message(&entry.payload),
        EntryKind::ToolCall => {
            let mut call = serde_json::Map::new();
            if let Some(calls) = entry.payload.get("calls") {
                call.insert("tool_calls".into(), calls.clone());
            }
            counter.count_message(&call)
        }
        EntryKind::ToolResult => {
            let results = entry.payload.get("results").and_then(Value::as_array);
            results
                .into_iter()
                .flatten()
                .map(|result| {
                    MESSAGE_OVERHEAD
                        + match result {
                            Value::String(text) => counter.count(text),
                            other => counter.count(&other.to_string()),
                        }
                })
                .sum()
        }
        EntryKind::Anchor => {
            let state = entry.payload.get("state").cloned().unwrap_or(Value::Null);
            let text = state.get("summary").and_then(Value::as_str).map_or_else(|| state.to_string(), str::to_string);
            MESSAGE_OVERHEAD + 40 + counter.count(&text)
        }
        EntryKind::System | EntryKind::Event | EntryKind::Error => 0,
    }
}

fn anchor_note(entry: &Entry) -> ChatMessage {
    let name = entry.name().unwrap_or("anchor");
    let state = entry.payload.get("state").cloned().unwrap_or(Value::Null);
    if let Some(note) = summary_note(name, &state) {
        return json!({"role": "assistant", "content": note});
    }
    json!({"role": "assistant", "content": format!("{ANCHOR_NOTE_PREFIX}{name}]: {state}")})
}

/// A compaction's anchor (state `{summary, covers: [first, last]}`) as prose:
/// the model reads the summary as text, and learns where the entries it
/// replaces are.
fn summary_note(name: &str, state: &Value) -> Option<String> {
    let summary = state.get("summary")?.as_str()?;
    let covers = state.get("covers")?.as_array()?;
    let (first, last) = (covers.first()?.as_u64()?, covers.last()?.as_u64()?);
    Some(format!(
        "{ANCHOR_NOTE_PREFIX}{name}]: a summary of the conversation so far (tape entries {first} to {last}; \
         the entries themselves are still on the tape: find them with tape_search).\n\n{summary}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::entry::NewEntry;

    fn context_of(entries: Vec<NewEntry>) -> Vec<ChatMessage> {
        let entries: Vec<Entry> = entries.into_iter().enumerate().map(|(i, e)| e.into_entry(i as u64 + 1)).collect();
        default_context(&entries)
    }

    fn call(id: &str, name: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}})
    }

    #[test]
    fn anchor_becomes_an_assistant_note_with_its_state() {
        let messages = context_of(vec![NewEntry::anchor("phase/2", json!({"summary": "done"}))]);
        assert_eq!(
            messages,
            vec![json!({"role": "assistant", "content": "[Anchor created: phase/2]: {\"summary\":\"done\"}"})]
        );
    }

    #[test]
    fn a_compaction_anchor_reads_as_its_summary() {
        let state = json!({"summary": "Ada wants weekly reports.", "covers": [3, 80], "keep_from": 81});
        let messages = context_of(vec![NewEntry::anchor("auto_handoff/compaction", state)]);
        let note = messages[0]["content"].as_str().unwrap();
        assert!(note.starts_with("[Anchor created: auto_handoff/compaction]: a summary"), "{note}");
        assert!(note.contains("entries 3 to 80") && note.contains("tape_search"), "{note}");
        assert!(note.ends_with("\n\nAda wants weekly reports."), "{note}");
    }

    #[test]
    fn message_passes_as_it_is() {
        let message = json!({"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ada"});
        assert_eq!(context_of(vec![NewEntry::message(message.clone()).unwrap()]), vec![message]);
    }

    #[test]
    fn tool_call_becomes_assistant_tool_calls() {
        let calls = vec![call("c1", "fs_read")];
        assert_eq!(
            context_of(vec![NewEntry::tool_call(calls.clone())]),
            vec![json!({"role": "assistant", "content": "", "tool_calls": calls})]
        );
    }

    #[test]
    fn tool_results_match_their_calls_by_position() {
        let messages = context_of(vec![
            NewEntry::tool_call(vec![call("c1", "fs_read"), call("c2", "bash")]),
            NewEntry::tool_result(vec![json!("file text"), json!({"exit": 0})]),
        ]);
        assert_eq!(
            messages[1],
            json!({"role": "tool", "content": "file text", "tool_call_id": "c1", "name": "fs_read"})
        );
        assert_eq!(
            messages[2],
            json!({"role": "tool", "content": "{\"exit\":0}", "tool_call_id": "c2", "name": "bash"})
        );
    }

    #[test]
    fn system_event_and_error_entries_never_appear() {
        let messages = context_of(vec![
            NewEntry::system("you are bub"),
            NewEntry::event("run", json!({"status": "ok"})),
            NewEntry::error("provider", "rate limited", None),
            NewEntry::chat("user", "hello"),
        ]);
        assert_eq!(messages, vec![json!({"role": "user", "content": "hello"})]);
    }

    #[test]
    fn entries_marked_out_of_context_never_appear() {
        let messages = context_of(vec![
            NewEntry::chat("user", "secret").hidden_from_context(),
            NewEntry::anchor("spill/x/chunk/0", json!({})).hidden_from_context(),
            NewEntry::chat("user", "visible"),
        ]);
        assert_eq!(messages, vec![json!({"role": "user", "content": "visible"})]);
    }
}
