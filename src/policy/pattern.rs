//! [`ToolPattern`]: a glob over registry tool names (`fs.*`, `tape.{info,search}`, `bash`).
//!
//! Patterns match registry names (with dots); `*` matches any run of
//! characters, dots included, so `*` is every tool and `fs.*` every file tool.

use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// One glob from `allowed_tools`, `denied_tools` or an operator's `commands`.
#[derive(Clone)]
pub struct ToolPattern {
    text: String,
    matcher: GlobMatcher,
}

impl ToolPattern {
    pub fn new(text: &str) -> Result<ToolPattern, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty tool pattern".to_string());
        }
        let glob = Glob::new(text).map_err(|e| format!("invalid tool pattern `{text}`: {}", e.kind()))?;
        Ok(ToolPattern { text: text.to_string(), matcher: glob.compile_matcher() })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, tool: &str) -> bool {
        self.matcher.is_match(tool)
    }

    /// True when the pattern is a plain name (no `*`, `?`, `[` or `{`): it
    /// names exactly one tool. Shell and write tools in shared chats need this.
    pub fn is_exact(&self) -> bool {
        !self.text.contains(['*', '?', '[', '{'])
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

    #[test]
    fn globs_match_registry_names_across_dots() {
        let fs = ToolPattern::new("fs.*").unwrap();
        assert!(fs.matches("fs.read") && fs.matches("fs.write"));
        assert!(!fs.matches("fsck") && !fs.matches("bash"));
        let all = ToolPattern::new("*").unwrap();
        assert!(all.matches("bash") && all.matches("tape.info"));
        let two = ToolPattern::new("tape.{info,search}").unwrap();
        assert!(two.matches("tape.search") && !two.matches("tape.reset"));
        assert!(ToolPattern::new("bash").unwrap().matches("bash"));
        assert!(!ToolPattern::new("bash").unwrap().matches("bash.output"));
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
