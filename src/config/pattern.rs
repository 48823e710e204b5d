//! [`ToolPattern`]: a glob over registry tool names (`fs.*`, `tape.{info,search}`,
//! `bash`), or a capability (`cap:write`).
//!
//! Globs match registry names (with dots); `*` matches any run of
//! characters, dots included, so `*` is every tool and `fs.*` every file tool.
//! `cap:NAME` matches every tool that declares that capability (see
//! [`Capability`]; a tool that declares none is taken to have them all).

use crate::tools::capability::{Capabilities, Capability};
use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// One entry of `allowed_tools`, `denied_tools` or an operator's `commands`.
#[derive(Clone)]
pub struct ToolPattern {
    text: String,
    matcher: Matcher,
}

#[derive(Clone)]
enum Matcher {
    Glob(GlobMatcher),
    Capability(Capability),
}

/// The prefix of capability patterns.
const CAPABILITY_PREFIX: &str = "cap:";

impl ToolPattern {
    pub fn new(text: &str) -> Result<ToolPattern, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty tool pattern".to_string());
        }
        if let Some(name) = text.strip_prefix(CAPABILITY_PREFIX) {
            let capability = Capability::from_name(name.trim()).ok_or_else(|| {
                let names: Vec<&str> = Capability::EVERY.iter().map(|c| c.name()).collect();
                format!("unknown capability `{name}` in `{text}`; capabilities are {}", names.join(", "))
            })?;
            return Ok(ToolPattern { text: text.to_string(), matcher: Matcher::Capability(capability) });
        }
        let glob = Glob::new(text).map_err(|e| format!("invalid tool pattern `{text}`: {}", e.kind()))?;
        Ok(ToolPattern { text: text.to_string(), matcher: Matcher::Glob(glob.compile_matcher()) })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Does the tool named `tool`, which can do `capabilities`, match?
    pub fn matches(&self, tool: &str, capabilities: Capabilities) -> bool {
        match &self.matcher {
            Matcher::Glob(glob) => glob.is_match(tool),
            Matcher::Capability(capability) => capabilities.contains(*capability),
        }
    }

    /// Does the pattern name `tool` (a glob over names; a capability pattern
    /// names no tool by itself)?
    pub fn matches_name(&self, tool: &str) -> bool {
        match &self.matcher {
            Matcher::Glob(glob) => glob.is_match(tool),
            Matcher::Capability(_) => false,
        }
    }

    /// The capability a `cap:NAME` pattern stands for.
    pub fn capability(&self) -> Option<Capability> {
        match &self.matcher {
            Matcher::Capability(capability) => Some(*capability),
            Matcher::Glob(_) => None,
        }
    }

    /// True when the pattern is a plain name (no `*`, `?`, `[` or `{`, not a
    /// capability): it names exactly one tool. Shell and write tools in
    /// shared chats need this.
    pub fn is_exact(&self) -> bool {
        matches!(self.matcher, Matcher::Glob(_)) && !self.text.contains(['*', '?', '[', '{'])
    }
}

impl PartialEq for ToolPattern {
    fn eq(&self, other: &ToolPattern) -> bool {
        self.text == other.text
    }
}

impl fmt::Debug for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ToolPattern({:?})", self.text)
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for ToolPattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ToolPattern, D::Error> {
        let text = String::deserialize(deserializer)?;
        ToolPattern::new(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_matches(pattern: &ToolPattern, tool: &str) -> bool {
        pattern.matches(tool, Capabilities::NONE)
    }

    #[test]
    fn globs_match_registry_names_across_dots() {
        let fs = ToolPattern::new("fs.*").unwrap();
        assert!(name_matches(&fs, "fs.read") && name_matches(&fs, "fs.write"));
        assert!(!name_matches(&fs, "fsck") && !name_matches(&fs, "bash"));
        let all = ToolPattern::new("*").unwrap();
        assert!(name_matches(&all, "bash") && name_matches(&all, "tape.info"));
        let two = ToolPattern::new("tape.{info,search}").unwrap();
        assert!(name_matches(&two, "tape.search") && !name_matches(&two, "tape.reset"));
        assert!(name_matches(&ToolPattern::new("bash").unwrap(), "bash"));
        assert!(!name_matches(&ToolPattern::new("bash").unwrap(), "bash.output"));
    }

    #[test]
    fn capability_patterns_match_by_what_a_tool_declares() {
        let writes = ToolPattern::new("cap:write").unwrap();
        assert!(writes.matches("fs.edit", Capabilities::of([Capability::Write])));
        assert!(!writes.matches("fs.read", Capabilities::of([Capability::Read])));
        assert!(writes.matches("mcp.anything", Capabilities::ALL), "an undeclared tool is on the closed side");
        assert!(!writes.is_exact());
        assert_eq!(
            ToolPattern::new("cap:root").unwrap_err(),
            "unknown capability `root` in `cap:root`; capabilities are read, write, exec, network, session"
        );
    }

    #[test]
    fn only_plain_names_are_exact() {
        assert!(ToolPattern::new("bash").unwrap().is_exact());
        assert!(!ToolPattern::new("bash*").unwrap().is_exact());
        assert!(!ToolPattern::new("fs.*").unwrap().is_exact());
        assert!(ToolPattern::new("").is_err());
        assert!(ToolPattern::new("fs.[").unwrap_err().starts_with("invalid tool pattern `fs.[`"));
    }
}
