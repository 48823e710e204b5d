//! `[agent]`: how the gateway's agent keeps long conversations within the
//! model's context window (see `agent::compaction`) and its requests small
//! when it has many tools (`tool_schema_budget`, see `agent::tool_budget`).
//! Every key is optional; unset, the agent's own settings apply
//! (`BUB_CONTEXT_WINDOW`, `BUB_COMPACT_AT`, `BUB_KEEP_RECENT_TOKENS`,
//! `BUB_TOOL_SCHEMA_BUDGET`, then the built-in defaults). A chat's policy
//! may set its own `context_window`, which wins here.
//!
//! The values are read on every turn, so a reload applies them at once.

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// The smallest window bub accepts: a system prompt, the tools and one turn
/// need about this much; less is a typo (a missing `000`).
pub const MIN_CONTEXT_WINDOW: u64 = 1_024;

/// `[agent]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The context window in tokens of every model the gateway uses, over the
    /// model family's known window.
    #[serde(default, deserialize_with = "window")]
    pub context_window: Option<u64>,
    /// Compact when the next context would pass this fraction of the window
    /// (above 0, at most 1; default 0.75), or past it where the system prompt
    /// and the tool schemas leave less than a quarter of the window below it.
    #[serde(default, deserialize_with = "fraction")]
    pub compact_at: Option<f64>,
    /// Tokens of the most recent turns kept verbatim after a summary
    /// (default a third of the conversation's room: what the window leaves
    /// below `compact_at` after the system prompt and the tool schemas; never
    /// more than half of it).
    #[serde(default, deserialize_with = "tokens")]
    pub keep_recent_tokens: Option<u64>,
    /// Past this many estimated tokens of tool definitions in a turn, the
    /// tools of MCP servers are offered with their name and one line each,
    /// and `tools_describe` loads their schemas on demand (0: no budget).
    #[serde(default)]
    pub tool_schema_budget: Option<u64>,
}

/// A `context_window` value, in `[agent]` or a policy layer: at least
/// [`MIN_CONTEXT_WINDOW`] tokens.
pub(super) fn window<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = u64::deserialize(deserializer)?;
    if value < MIN_CONTEXT_WINDOW {
        return Err(de::Error::custom(format!(
            "context_window {value} is too small: a window is at least {MIN_CONTEXT_WINDOW} tokens \
             (for example 128000)"
        )));
    }
    Ok(Some(value))
}

fn fraction<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    let value = f64::deserialize(deserializer)?;
    if !(value > 0.0 && value <= 1.0) {
        return Err(de::Error::custom(format!(
            "compact_at {value} must be a fraction of the window above 0 and at most 1 (for example 0.75)"
        )));
    }
    Ok(Some(value))
}

fn tokens<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = u64::deserialize(deserializer)?;
    if value == 0 {
        return Err(de::Error::custom("keep_recent_tokens must be above 0"));
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use crate::config::file::tests::{MINIMAL, parse};

    #[test]
    fn the_agent_table_is_read_and_checked_where_it_is_written() {
        let config = parse(&format!(
            "[agent]\ncontext_window = 200000\ncompact_at = 0.5\nkeep_recent_tokens = 8000\ntool_schema_budget = 0\n{MINIMAL}"
        ))
        .unwrap();
        assert_eq!(config.agent.context_window, Some(200_000));
        assert_eq!(config.agent.tool_schema_budget, Some(0));
        assert_eq!(config.agent.compact_at, Some(0.5));
        assert_eq!(config.agent.keep_recent_tokens, Some(8_000));
        assert_eq!(parse(MINIMAL).unwrap().agent, super::AgentConfig::default());

        let error = |table: &str| parse(&format!("[agent]\n{table}\n{MINIMAL}")).unwrap_err().to_string();
        assert!(error("context_window = 128").starts_with("bub.toml:2:18: context_window 128 is too small"));
        assert!(
            error("compact_at = 1.5").contains("compact_at 1.5 must be a fraction"),
            "{}",
            error("compact_at = 1.5")
        );
        assert!(error("compact_at = 0").contains("above 0 and at most 1"));
        assert!(error("keep_recent_tokens = 0").contains("keep_recent_tokens must be above 0"));
        assert!(
            error("context_windw = 9000").contains("did you mean `context_window`"),
            "{}",
            error("context_windw = 9000")
        );
    }
}
