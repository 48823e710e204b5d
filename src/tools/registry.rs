//! [`ToolRegistry`]: the tools of an agent, by name.
//!
//! Lookups accept the registry name (`fs.read`) or the model name (`fs_read`),
//! case-insensitively; an exact registry name wins on collision.

use super::tool::{Tool, model_name};
use indexmap::IndexMap;

#[derive(Clone, Default, Debug)]
pub struct ToolRegistry {
    tools: IndexMap<String, Tool>,
}

/// A set of tools refused by [`ToolRegistry::replace_source`]: one of its
/// names is held by a tool that is not the source's (a builtin's, another
/// server's). Nothing of the set was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool {name} of {wanted_by} is refused: the name is taken by {held_by}")]
pub struct NameTaken {
    pub name: String,
    /// The source whose set was refused.
    pub wanted_by: String,
    /// The holder's source; `another tool` when it was added on its own.
    pub held_by: String,
}

/// Names in an allow-list that match no tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool(s) in allowed_tools: {}", .0.join(", "))]
pub struct UnknownTools(pub Vec<String>);

impl ToolRegistry {
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// Adds or replaces a tool.
    pub fn insert(&mut self, tool: Tool) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    pub fn with(mut self, tool: Tool) -> ToolRegistry {
        self.insert(tool);
        self
    }

    /// Replaces the tools `source` provided before (those whose
    /// [`Tool::source`] it is) with `tools`, each marked as the source's.
    /// All or nothing: a name (registry or model name) held by a tool that
    /// is not the source's refuses the whole set, so a provider can neither
    /// shadow a builtin (`bash`) nor another provider's tool.
    pub fn replace_source(&mut self, source: &str, tools: impl IntoIterator<Item = Tool>) -> Result<(), NameTaken> {
        let tools: Vec<Tool> = tools.into_iter().map(|tool| tool.with_source(source)).collect();
        for tool in &tools {
            let taken = [tool.name(), &tool.model_name()]
                .into_iter()
                .filter_map(|name| self.get(name))
                .find(|held| held.source() != Some(source));
            if let Some(held) = taken {
                return Err(NameTaken {
                    name: tool.name().to_string(),
                    wanted_by: source.to_string(),
                    held_by: held.source().map_or_else(|| "another tool".to_string(), str::to_string),
                });
            }
        }
        self.tools.retain(|_, tool| tool.source() != Some(source));
        for tool in tools {
            self.insert(tool);
        }
        Ok(())
    }

    pub fn remove(&mut self, name: &str) -> Option<Tool> {
        let key = self.get(name)?.name().to_string();
        self.tools.shift_remove(&key)
    }

    /// Finds a tool by registry or model name, ignoring case.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        if let Some(tool) = self.tools.get(name) {
            return Some(tool);
        }
        let wanted = model_name(name).to_lowercase();
        self.tools.values().find(|tool| tool.model_name().to_lowercase() == wanted)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tools the model may call (command-only ones left out).
    pub fn model_tools(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values().filter(|tool| tool.agent_use())
    }

    /// Up to three registered names close to `name`, closest first.
    pub fn suggest(&self, name: &str) -> Vec<String> {
        let wanted = model_name(name).to_lowercase();
        let mut scored: Vec<(f64, &str)> = self
            .tools
            .values()
            .map(|tool| (strsim::normalized_levenshtein(&wanted, &tool.model_name().to_lowercase()), tool.name()))
            .filter(|(score, _)| *score >= 0.6)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(3).map(|(_, name)| name.to_string()).collect()
    }

    /// A registry holding only the named tools (registry or model names).
    pub fn only(&self, allowed: &[String]) -> Result<ToolRegistry, UnknownTools> {
        let mut kept = ToolRegistry::new();
        let mut unknown = Vec::new();
        for name in allowed {
            match self.get(name) {
                Some(tool) => kept.insert(tool.clone()),
                None => unknown.push(name.clone()),
            }
        }
        if unknown.is_empty() { Ok(kept) } else { Err(UnknownTools(unknown)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Tool {
        Tool::new(name, "", json!({"type": "object"}), |_, _| async { Ok(json!(null)) })
    }

    #[test]
    fn lookups_accept_model_names_in_any_case() {
        let registry = ToolRegistry::new().with(tool("fs.read")).with(tool("bash"));
        assert_eq!(registry.get("fs_read").map(Tool::name), Some("fs.read"));
        assert_eq!(registry.get("FS.Read").map(Tool::name), Some("fs.read"));
        assert!(registry.get("fs").is_none());
    }

    #[test]
    fn a_source_swaps_its_own_tools_and_cannot_take_another_name() {
        let mut registry = ToolRegistry::new().with(tool("bash"));
        registry.replace_source("mcp.docs", [tool("mcp.docs.search"), tool("mcp.docs.get")]).unwrap();
        registry.replace_source("mcp.docs", [tool("mcp.docs.find")]).unwrap();
        let names: Vec<&str> = registry.iter().map(Tool::name).collect();
        assert_eq!(names, ["bash", "mcp.docs.find"]);
        assert_eq!(registry.get("mcp.docs.find").and_then(Tool::source), Some("mcp.docs"));

        let refused = registry.replace_source("mcp.evil", [tool("mcp.evil.x"), tool("BASH")]).unwrap_err();
        assert_eq!((refused.name.as_str(), refused.held_by.as_str()), ("BASH", "another tool"));
        let refused = registry.replace_source("mcp.evil", [tool("mcp_docs_find")]).unwrap_err();
        assert_eq!(refused.held_by, "mcp.docs");
        // All or nothing: the refused set left no tool behind.
        assert!(registry.get("mcp.evil.x").is_none());
        assert_eq!(registry.len(), 2);
    }

    #[test]
    fn suggestions_are_close_names_only() {
        let registry = ToolRegistry::new().with(tool("fs.read")).with(tool("fs.write")).with(tool("web.fetch"));
        assert_eq!(registry.suggest("fs_reed")[0], "fs.read");
        assert!(registry.suggest("completely_else").is_empty());
    }
}
