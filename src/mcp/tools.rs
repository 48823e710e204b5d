//! A server's tools as bub [`Tool`]s: `mcp.SERVER.TOOL` in the registry
//! (`mcp_SERVER_TOOL` for the model), of source `mcp.SERVER` (so
//! `Agent::replace_tools` swaps the whole set), with the server's
//! description (trimmed, at most [`MAX_DESCRIPTION`] bytes) and input
//! schema (made an object schema when it is not one), and the capabilities
//! the config gives the tool.
//!
//! A model accepts function names of `[A-Za-z0-9_-]{1,64}`. A tool name
//! that does not fit in `mcp_SERVER_` + name has its other characters
//! replaced by `_` and is cut, with a short hash of the original name
//! appended; so does a name that would clash (registry lookups ignore
//! case) with another of the server's tools. The call always uses the
//! server's own name.

use super::content;
use super::error::McpError;
use super::server::McpServer;
use crate::config::mcp::McpServerConfig;
use crate::environment::Environment;
use crate::tools::{Tool, ToolError};
use futures::future::BoxFuture;
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;

/// The longest description kept; the rest is cut (a server's essay is sent with every model call).
pub const MAX_DESCRIPTION: usize = 4096;
/// The longest function name models accept.
pub const MAX_MODEL_NAME: usize = 64;

/// The source of server `server`'s tools in the registry.
pub fn source(server: &str) -> String {
    format!("mcp.{server}")
}

/// bub's name (the part after `mcp.SERVER.`) for each of `tools`, in order:
/// the name itself when a model accepts it, else a safe name with a hash.
pub fn tool_names<'a>(server: &str, tools: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let room = MAX_MODEL_NAME.saturating_sub(format!("mcp_{server}_").len()).max(8);
    let mut taken = HashSet::new();
    let tools: Vec<&str> = tools.into_iter().collect();
    // Names that fit as they are go first, so a safe name never takes theirs.
    let mut names: Vec<Option<String>> = tools
        .iter()
        .map(|tool| {
            let fits = !tool.is_empty()
                && tool.len() <= room
                && tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            (fits && taken.insert(tool.to_ascii_lowercase())).then(|| tool.to_string())
        })
        .collect();
    for (name, tool) in names.iter_mut().zip(&tools) {
        if name.is_none() {
            *name = Some(safe_name(tool, room, &mut taken));
        }
    }
    names.into_iter().flatten().collect()
}

/// `tool` with other characters as `_`, cut to leave room for `_` and a hash.
fn safe_name(tool: &str, room: usize, taken: &mut HashSet<String>) -> String {
    let cleaned: String =
        tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let hash = hex(&Sha256::digest(tool.as_bytes()));
    for length in [6, 10, 16, 32] {
        let keep = room.saturating_sub(length + 1);
        let stem: String = cleaned.chars().take(keep).collect();
        let name =
            if stem.is_empty() { format!("t_{}", &hash[..length]) } else { format!("{stem}_{}", &hash[..length]) };
        if taken.insert(name.to_ascii_lowercase()) {
            return name;
        }
    }
    // Sixty-four hex digits of SHA-256 of distinct names do not collide.
    hash[..room.min(hash.len())].to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A description a model is sent: trimmed, cut at [`MAX_DESCRIPTION`] bytes.
pub fn description(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_DESCRIPTION {
        return text.to_string();
    }
    let mut end = MAX_DESCRIPTION;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The schema as given, made an object schema with `properties`.
pub fn input_schema(schema: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        schema.insert("type".into(), json!("object"));
    }
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema.insert("properties".into(), json!({}));
    }
    Value::Object(schema)
}

/// How a tool's call reaches a server: the server's own tool name, the
/// arguments, and the environment of the session making the call (a
/// session-scoped server runs in it).
pub type Caller = Arc<
    dyn Fn(
            String,
            Option<JsonObject>,
            Option<Arc<dyn Environment>>,
        ) -> BoxFuture<'static, Result<CallToolResult, McpError>>
        + Send
        + Sync,
>;

/// `server`'s tools as bub tools, each calling through the supervised
/// server (so after a restart the same tool works again).
pub fn bub_tools(server: &McpServer, tools: &[rmcp::model::Tool]) -> Vec<Tool> {
    let handler = server.clone();
    let caller: Caller = Arc::new(move |tool, arguments, _environment| {
        let server = handler.clone();
        Box::pin(async move { server.call(&tool, arguments).await })
    });
    tools_calling(server.name(), server.config(), tools, caller)
}

/// The tools `tools` of server `name` (its table `config`), each call made
/// through `caller`.
pub fn tools_calling(name: &str, config: &McpServerConfig, tools: &[rmcp::model::Tool], caller: Caller) -> Vec<Tool> {
    let names = tool_names(name, tools.iter().map(|tool| tool.name.as_ref()));
    let source = source(name);
    tools
        .iter()
        .zip(names)
        .map(|(tool, bub_name)| {
            let original = tool.name.to_string();
            let text = tool.description.as_deref().or(tool.title.as_deref()).unwrap_or_default();
            let capabilities = config.capabilities_of(&original);
            let (caller, server) = (caller.clone(), name.to_string());
            Tool::new(
                format!("mcp.{name}.{bub_name}"),
                description(text),
                input_schema(&tool.input_schema),
                move |args, ctx| {
                    let (caller, server, original) = (caller.clone(), server.clone(), original.clone());
                    async move {
                        let arguments = match args {
                            Value::Object(map) => Some(map),
                            Value::Null => None,
                            other => {
                                return Err(ToolError::invalid_input(format!(
                                    "the arguments must be a JSON object, not {other}"
                                )));
                            }
                        };
                        let answer = caller(original, arguments, ctx.environment.clone()).await?;
                        content::tool_result(&server, &ctx, answer).await
                    }
                },
            )
            .with_capabilities(capabilities.iter())
            .with_source(&source)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_model_accepts_are_kept_others_made_safe_and_distinct() {
        let names = tool_names("docs", ["search", "get.page", "get page", "Search", "x".repeat(80).as_str()]);
        assert_eq!(names[0], "search");
        assert!(names[1].starts_with("get_page_") && names[2].starts_with("get_page_"), "{names:?}");
        assert_ne!(names[1], names[2], "two tools mapping to one name keep apart");
        assert!(names[3].starts_with("Search_"), "a case-insensitive clash gets a hash: {names:?}");
        for name in &names {
            let model = format!("mcp_docs_{name}");
            assert!(model.len() <= MAX_MODEL_NAME, "{model}");
            assert!(model.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{model}");
        }
        assert_eq!(tool_names("docs", ["get.page"]), tool_names("docs", ["get.page"]), "stable across listings");
    }

    #[test]
    fn schemas_become_object_schemas_and_descriptions_are_capped() {
        let schema = input_schema(json!({"type": "object"}).as_object().unwrap());
        assert_eq!(schema, json!({"type": "object", "properties": {}}));
        let given = json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]});
        assert_eq!(input_schema(given.as_object().unwrap()), given);
        assert_eq!(description("  Adds.  \n"), "Adds.");
        let long = description(&"é".repeat(5000));
        assert!(long.len() <= MAX_DESCRIPTION + "…".len() && long.ends_with('…'));
    }
}
