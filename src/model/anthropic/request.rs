//! OpenAI-shaped requests as Messages API bodies.
//!
//! The tape stores OpenAI-shaped messages; Anthropic wants system text apart,
//! tool calls and results as content blocks, and no empty text. Conversion is
//! total: odd input (invalid tool arguments, unknown parts) is carried over as
//! well as it can be rather than refused, so one bad tape entry never blocks a
//! session.

use crate::message::{ANCHOR_NOTE_PREFIX, RequestMessage};
use crate::model::types::ChatRequest;
use serde_json::{Map, Value, json};

/// Body fields the client owns: request options never replace them.
const PROTOCOL_FIELDS: [&str; 5] = ["model", "messages", "stream", "tools", "system"];

/// OpenAI request fields the Messages API has no counterpart for: left out,
/// so a session's `,reasoning_effort` does not make an Anthropic model fail.
const OPENAI_ONLY_FIELDS: [&str; 1] = ["reasoning_effort"];

/// The Messages API body for an OpenAI-shaped request (without `max_tokens`).
pub fn to_messages_body(request: &ChatRequest) -> Value {
    let mut system = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut anchor_marked = false;
    for message in &request.messages {
        let (role, mut blocks) = match message.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => {
                system.push(text_of(message.get("content")));
                continue;
            }
            Some("assistant") => ("assistant", assistant_blocks(message)),
            Some("tool") => ("user", vec![tool_result(message)]),
            _ => ("user", content_blocks(message.get("content"))),
        };
        // The context's anchor (a summary) changes only at a compaction: the
        // second cache breakpoint, after the system prompt's.
        if !anchor_marked && is_anchor_note(message) {
            anchor_marked = true;
            if let Some(Value::Object(last)) = blocks.last_mut() {
                last.insert("cache_control".into(), json!({"type": "ephemeral"}));
            }
        }
        match turns.last_mut() {
            _ if blocks.is_empty() => {}
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("stream".into(), json!(true));
    let system: Vec<String> = system.into_iter().filter(|s| !s.is_empty()).collect();
    if !system.is_empty() {
        // Tools and system prompt are the stable prefix: cached up to here.
        let block = json!({"type": "text", "text": system.join("\n\n"), "cache_control": {"type": "ephemeral"}});
        body.insert("system".into(), json!([block]));
    }
    let messages: Vec<Value> =
        turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
    body.insert("messages".into(), json!(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request.tools.iter().map(|tool| tool_definition(tool)).collect();
        body.insert("tools".into(), json!(tools));
    }
    for (key, value) in &request.options {
        if !PROTOCOL_FIELDS.contains(&key.as_str()) && !OPENAI_ONLY_FIELDS.contains(&key.as_str()) {
            body.insert(key.clone(), value.clone());
        }
    }
    Value::Object(body)
}

/// Whether `message` is the note an anchor becomes in the context.
fn is_anchor_note(message: &RequestMessage) -> bool {
    message.get("role").and_then(Value::as_str) == Some("assistant")
        && message.get("content").and_then(Value::as_str).is_some_and(|c| c.starts_with(ANCHOR_NOTE_PREFIX))
}

/// The text of an OpenAI `content`: a string, or the text parts of an array.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Content blocks for OpenAI `content`; empty text is dropped (the API refuses it).
fn content_blocks(content: Option<&Value>) -> Vec<Value> {
    let parts = match content {
        Some(Value::Array(parts)) => parts.clone(),
        other => vec![json!({"type": "text", "text": text_of(other)})],
    };
    parts
        .into_iter()
        .filter_map(|part| match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
            }
            Some("image_url") => image_block(&part),
            _ => Some(part),
        })
        .collect()
}

/// An OpenAI `image_url` part as an Anthropic image block (data URL or URL).
fn image_block(part: &Value) -> Option<Value> {
    let url = part.pointer("/image_url/url").and_then(Value::as_str)?;
    let source = match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
        Some((media_type, data)) => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
        None => json!({"type": "url", "url": url}),
    };
    Some(json!({"type": "image", "source": source}))
}

fn assistant_blocks(message: &RequestMessage) -> Vec<Value> {
    let mut blocks = content_blocks(message.get("content"));
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for call in calls.into_iter().flatten() {
        let field = |pointer: &str| call.pointer(pointer).and_then(Value::as_str).unwrap_or("");
        let input = serde_json::from_str::<Value>(field("/function/arguments"))
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        blocks.push(json!({
            "type": "tool_use",
            "id": field("/id"),
            "name": field("/function/name"),
            "input": input,
        }));
    }
    blocks
}

fn tool_result(message: &RequestMessage) -> Value {
    let id = message.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
    json!({"type": "tool_result", "tool_use_id": id, "content": text_of(message.get("content"))})
}

/// `{type: function, function: {name, description, parameters}}` → `{name, description, input_schema}`.
fn tool_definition(tool: &Value) -> Value {
    let Some(function) = tool.get("function") else {
        return tool.clone(); // already in Anthropic shape
    };
    let schema = function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let mut definition = json!({"name": function.get("name"), "input_schema": schema});
    if let Some(description) = function.get("description") {
        definition["description"] = description.clone();
    }
    definition
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(messages: Vec<Value>) -> Value {
        let messages = messages.into_iter().map(Into::into).collect();
        to_messages_body(&ChatRequest { model: "c".into(), messages, ..ChatRequest::default() })
    }

    #[test]
    fn system_messages_join_the_top_level_system() {
        let b = body(vec![
            json!({"role": "system", "content": "one"}),
            json!({"role": "system", "content": [{"type": "text", "text": "two"}]}),
            json!({"role": "user", "content": "hi"}),
        ]);
        assert_eq!(b["system"][0]["text"], "one\n\ntwo");
        assert_eq!(b["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(b["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]));
    }

    #[test]
    fn a_user_message_after_tool_results_joins_them_and_empty_turns_vanish() {
        let b = body(vec![
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "[1]"}}]}),
            json!({"role": "tool", "tool_call_id": "t", "content": "done"}),
            json!({"role": "user", "content": "next"}),
            json!({"role": "assistant", "content": ""}),
        ]);
        let messages = b["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0]["content"][0]["input"], json!({}), "non-object arguments become {{}}");
        assert_eq!(messages[1]["content"][1], json!({"type": "text", "text": "next"}));
    }

    #[test]
    fn image_urls_become_image_blocks() {
        let b = body(vec![json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        ]})]);
        let content = &b["messages"][0]["content"];
        assert_eq!(content[0]["source"], json!({"type": "base64", "media_type": "image/png", "data": "AAAA"}));
        assert_eq!(content[1]["source"], json!({"type": "url", "url": "https://x/y.png"}));
    }
}
