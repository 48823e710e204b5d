//! How entries and tapes read in a listing, for a person or another agent:
//! `bub tape show` and `bub mcp serve` print them the same way.
//!
//! - [`describe`]: what an entry holds, on one line, whole; [`summarize`]
//!   the same cut to [`SUMMARY_CHARS`], as `bub tape show` prints it.
//! - [`WORKSPACE_EVENT`]: the event by which a `bub run`/`bub chat` tape
//!   records its workspace ([`recorded_workspace`] reads it back).

use super::{Entry, EntryKind, Tape, TapeQuery, TapeResult};
use serde_json::Value;

/// How long a line [`summarize`] keeps, in characters.
pub const SUMMARY_CHARS: usize = 160;

/// The event that says which workspace a `bub run`/`bub chat` tape belongs
/// to: `{"session", "workspace"}`, never shown to the model.
pub const WORKSPACE_EVENT: &str = "cli.workspace";

/// One line that says what an entry holds, cut to [`SUMMARY_CHARS`].
pub fn summarize(entry: &Entry) -> String {
    one_line(&describe(entry), SUMMARY_CHARS)
}

/// What an entry holds as text a reader follows: a message's role and text,
/// a tool call's name and arguments, a result's text, an anchor's or event's
/// name and data, an error's kind and message. Whitespace is kept as written;
/// [`one_line`] flattens it.
pub fn describe(entry: &Entry) -> String {
    let text = |value: Option<&Value>| match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let line = match entry.kind {
        EntryKind::Message => {
            let role = entry.payload.get("role").and_then(Value::as_str).unwrap_or("?");
            format!("{role}: {}", text(entry.payload.get("content")))
        }
        EntryKind::System => text(entry.payload.get("content")),
        EntryKind::Anchor | EntryKind::Event => {
            let data = entry.data().filter(|d| !d.is_null()).map(Value::to_string).unwrap_or_default();
            format!("{} {data}", entry.name().unwrap_or("?"))
        }
        EntryKind::ToolCall => entry
            .payload
            .get("calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|call| {
                let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("?");
                format!("{name}({})", text(call.pointer("/function/arguments")))
            })
            .collect::<Vec<_>>()
            .join(", "),
        EntryKind::ToolResult => entry
            .payload
            .get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| text(Some(r)))
            .collect::<Vec<_>>()
            .join(" | "),
        EntryKind::Error => {
            let (kind, message) = (text(entry.payload.get("kind")), text(entry.payload.get("message")));
            // An answer cut off mid-stream: what it had said, marked as such, first.
            match entry.payload.get("details").and_then(|d| d.get("partial_text")).and_then(Value::as_str) {
                Some(partial) if !partial.is_empty() => format!("{kind}: cut off after {partial:?}: {message}"),
                _ => format!("{kind}: {message}"),
            }
        }
    };
    // Calls made by code under `run_code` (recorded out of the model's context).
    match entry.meta.get("code_mode") {
        Some(Value::Bool(true)) => format!("[from code] {line}"),
        _ => line,
    }
}

/// `text` with its whitespace runs made single spaces, cut after
/// `max_chars` characters with `…`.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

/// The query for the [`WORKSPACE_EVENT`]s of a tape.
pub fn workspace_query() -> TapeQuery {
    TapeQuery::all().kinds([EntryKind::Event]).named(WORKSPACE_EVENT)
}

/// The workspace a [`WORKSPACE_EVENT`]'s data names.
pub fn workspace_of(data: &Value) -> Option<String> {
    data.get("workspace")?.as_str().map(str::to_string)
}

/// The workspace `tape` records (none for gateway chats and tapes from
/// before the scoping).
pub async fn recorded_workspace(tape: &Tape) -> TapeResult<Option<String>> {
    let data = tape.last_event_data(WORKSPACE_EVENT).await?;
    Ok(data.as_ref().and_then(workspace_of))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::NewEntry;
    use serde_json::json;

    #[test]
    fn a_long_entry_is_cut_to_one_line_and_described_whole() {
        let long = format!("first line\n\n{}", "word ".repeat(100));
        let entry = NewEntry::chat("user", long.as_str()).into_entry(1);
        assert_eq!(summarize(&entry).chars().count(), SUMMARY_CHARS + 1);
        assert!(summarize(&entry).starts_with("user: first line word"));
        assert!(summarize(&entry).ends_with('…'));
        assert_eq!(describe(&entry), format!("user: {long}"));
    }

    #[test]
    fn tool_calls_read_as_calls() {
        let call =
            json!({"id": "c1", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}});
        let entry = NewEntry::tool_call(vec![call]).into_entry(2);
        assert_eq!(summarize(&entry), "fs_read({\"path\":\"a\"})");
    }
}
