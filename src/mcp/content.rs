//! A `tools/call` answer as the tool's result: the text the model reads.
//!
//! - text parts, joined by newlines;
//! - images, audio and binary embedded resources written into the session's
//!   workspace (`mcp/SERVER/<call id>-<n>.<ext>`) and named in the text
//!   (media type, size, path), so the model can send the file on
//!   (`chat.send_file`); when nothing can be written, only described;
//! - text embedded resources: their text under their URI;
//! - resource links: URI, name and description;
//! - `structuredContent`: its JSON, when the answer has no text;
//! - `isError: true`: a [`ToolError`] whose message is that text.
//!
//! Long results need nothing here: the agent's executor spills them.

use crate::environment::Environment;
use crate::tools::{ToolContext, ToolError};
use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use std::sync::Arc;

/// Where a call's files go, inside the workspace.
pub fn file_path(server: &str, call_id: &str, index: usize, media_type: &str) -> String {
    let call: String = call_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(64)
        .collect();
    let call = if call.is_empty() { "call".to_string() } else { call };
    format!("mcp/{server}/{call}-{index}.{}", extension(media_type))
}

/// A file name extension for a media type (`bin` for one not known).
fn extension(media_type: &str) -> &'static str {
    let essence = media_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    match essence.as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/ogg" => "ogg",
        "application/pdf" => "pdf",
        "application/json" => "json",
        "application/gzip" | "application/x-gzip" => "gz",
        "application/zip" => "zip",
        "text/plain" => "txt",
        "text/csv" => "csv",
        "text/html" => "html",
        _ => "bin",
    }
}

/// The result the model reads for `answer`, files written through `context`.
pub async fn tool_result(server: &str, context: &ToolContext, answer: CallToolResult) -> Result<Value, ToolError> {
    let mut files = Files { server, call_id: &context.call_id, environment: context.environment().ok(), saved: 0 };
    let mut parts = Vec::with_capacity(answer.content.len());
    for block in answer.content {
        // Text as it came (most answers are one text block: no copy); other blocks through their JSON.
        let part = match block {
            ContentBlock::Text(text) => text.text,
            other => files.describe(&serde_json::to_value(&other).unwrap_or(Value::Null)).await,
        };
        parts.push(part);
    }
    let mut text = if parts.len() == 1 { parts.pop().unwrap_or_default() } else { parts.join("\n") };
    if text.trim().is_empty()
        && let Some(structured) = &answer.structured_content
    {
        text = serde_json::to_string_pretty(structured).unwrap_or_default();
    }
    if answer.is_error == Some(true) {
        let message =
            if text.trim().is_empty() { "the tool reported an error without a message".to_string() } else { text };
        return Err(ToolError::failed(message).with_details(json!({"mcp_server": server})));
    }
    Ok(Value::String(text))
}

/// Where one call's files go.
struct Files<'a> {
    server: &'a str,
    call_id: &'a str,
    environment: Option<Arc<dyn Environment>>,
    saved: usize,
}

impl Files<'_> {
    /// One content block as text, its bytes saved when it has any.
    async fn describe(&mut self, block: &Value) -> String {
        let kind = block["type"].as_str().unwrap_or_default();
        match kind {
            "text" => block["text"].as_str().unwrap_or_default().to_string(),
            "image" | "audio" => {
                let media_type = block["mimeType"].as_str().unwrap_or("application/octet-stream");
                let data = block["data"].as_str().unwrap_or_default();
                self.save(kind, media_type, data, None).await
            }
            "resource" => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                if let Some(text) = resource["text"].as_str() {
                    return format!("[resource {uri}]\n{text}");
                }
                let media_type = resource["mimeType"].as_str().unwrap_or("application/octet-stream");
                let data = resource["blob"].as_str().unwrap_or_default();
                self.save("resource", media_type, data, Some(uri)).await
            }
            "resource_link" => {
                let uri = block["uri"].as_str().unwrap_or_default();
                let mut line = format!("[resource link {uri}");
                if let Some(name) = block["name"].as_str() {
                    line.push_str(&format!(" ({name})"));
                }
                if let Some(description) = block["description"].as_str() {
                    line.push_str(&format!(": {description}"));
                }
                line.push(']');
                line
            }
            _ => block.to_string(),
        }
    }

    /// Writes a base64 payload into the workspace and says where, or says why not.
    async fn save(&mut self, kind: &str, media_type: &str, data: &str, uri: Option<&str>) -> String {
        let from = uri.map(|uri| format!(" {uri}")).unwrap_or_default();
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.trim()) else {
            return format!("[{kind}{from} {media_type}: its data is not base64, dropped]");
        };
        let size = bytes.len();
        let Some(environment) = &self.environment else {
            return format!("[{kind}{from} {media_type}, {size} bytes, not saved: this call has no workspace]");
        };
        self.saved += 1;
        let path = file_path(self.server, self.call_id, self.saved, media_type);
        match environment.write_bytes(&path, &bytes).await {
            Ok(_) => format!("[{kind}{from} {media_type}, {size} bytes, saved as {path}]"),
            Err(error) => format!("[{kind}{from} {media_type}, {size} bytes, not saved: {error}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::{InMemoryTapeStore, Tape, TapeName};

    fn answer(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    fn context(dir: &std::path::Path) -> ToolContext {
        let tape = Tape::new(Arc::new(InMemoryTapeStore::new()), TapeName::new("content-test").unwrap());
        let mut context = ToolContext::detached(tape, dir);
        context.call_id = "call/1".to_string();
        context
    }

    #[tokio::test]
    async fn texts_join_images_are_saved_and_links_named() {
        let dir = tempfile::tempdir().unwrap();
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
        let result = tool_result(
            "pics",
            &context(dir.path()),
            answer(json!({"content": [
                {"type": "text", "text": "one"},
                {"type": "image", "data": png, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"},
            ]})),
        )
        .await;
        let text = result.unwrap_or_default();
        let text = text.as_str().unwrap_or_default();
        assert!(text.starts_with("one\n[image image/png, 9 bytes, saved as mcp/pics/call_1-1.png]"), "{text}");
        assert!(text.contains("[resource file:///a.txt]\ninside"), "{text}");
        assert!(text.ends_with("[resource link file:///b (b)]"), "{text}");
        assert_eq!(std::fs::read(dir.path().join("mcp/pics/call_1-1.png")).ok(), Some(b"\x89PNG fake".to_vec()));
    }

    #[tokio::test]
    async fn structured_content_stands_in_for_missing_text_and_is_error_is_a_tool_error() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let value = tool_result("s", &ctx, answer(json!({"content": [], "structuredContent": {"t": 21}}))).await;
        assert_eq!(value.ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(), "{\n  \"t\": 21\n}");
        let error = tool_result(
            "s",
            &ctx,
            answer(json!({"content": [{"type": "text", "text": "no such city"}], "isError": true})),
        )
        .await
        .err();
        assert_eq!(error.map(|e| e.message), Some("no such city".to_string()));
    }
}
