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
    fn suggestions_are_close_names_only() {
        let registry = ToolRegistry::new().with(tool("fs.read")).with(tool("fs.write")).with(tool("web.fetch"));
        assert_eq!(registry.suggest("fs_reed")[0], "fs.read");
        assert!(registry.suggest("completely_else").is_empty());
    }
}
