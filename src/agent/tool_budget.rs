//! The tool-schema budget: many tools stay cheap.
//!
//! Every model call carries the definition of every tool it offers, and
//! twenty MCP servers bring hundreds. When the definitions a turn would
//! offer pass the budget (in estimated tokens, [`TokenCounter::estimate`]),
//! the tools a source added (MCP servers, plugins: [`Tool::source`]) are
//! offered **compact** — their name, a one-line summary and an open
//! parameters schema — and the loop's own [`TOOLS_DESCRIBE`] tool is offered
//! beside them. It returns the full description and schema of the tools it
//! is asked about, and from the next model step of the same turn on those
//! tools are sent in full. A new turn starts compact again.
//!
//! Guarantees:
//! - under the budget nothing changes: every definition is sent in full and
//!   `tools.describe` is not offered;
//! - builtins (tools without a source) are never compacted, so a budget the
//!   builtins alone pass changes nothing either;
//! - `tools.describe` describes only what the turn offers the model: the
//!   run's tools after its allow-list (the policy's), after code mode's
//!   choice. A tool taken out is an unknown name, and the close names it
//!   suggests are offered ones;
//! - a compact tool is called exactly as before: its open schema lets any
//!   arguments through to the tool, whose own check refuses bad ones.
//!
//! The compact definition is `{"type": "object", "properties": {}}` for the
//! parameters — the shape bub already gives argument-less tools, which
//! every provider it talks to accepts (no `additionalProperties`, which
//! some providers refuse) and which, as JSON Schema, lets any object
//! through — and the tool's [`Tool::summary`], cut to
//! [`SUMMARY_CHARS`]. What a compact tool needs is said once, in
//! `tools.describe`'s description and the system prompt's tool list, not
//! on each of the hundreds of lines.

use crate::message::tokens::TokenCounter;
use crate::tools::{Capability, Tool, ToolContext, ToolError, ToolErrorKind, ToolRegistry, TurnState};
use parking_lot::Mutex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The default budget, in estimated tokens of the offered definitions:
/// about a tenth of a 128k window.
///
/// bub's own tools (the `bub` binary's 23, as the model sees them) come to
/// about 3,100 estimated tokens, so they stay whole with room for a server
/// or two: 30 MCP tools of 3 to 8 parameters (about 290 tokens each, see
/// `benches/tool_schema_budget.rs`) still go whole, 40 do not, and 200
/// (about 61,000 tokens with the builtins) are compacted long before.
/// 0 turns the budget off.
pub const DEFAULT_TOOL_SCHEMA_BUDGET: u64 = 12_000;

/// The loop's tool that loads compact tools' full definitions (model name
/// `tools_describe`).
pub const TOOLS_DESCRIBE: &str = "tools.describe";

/// A compact tool's summary is cut to this many characters: one line, even
/// for a description written as one long sentence.
pub const SUMMARY_CHARS: usize = 160;

/// The budget a run uses (tokens; 0: off), kept on its turn state so a
/// nested run (a subagent) keeps its caller's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSchemaBudget(pub u64);

/// A turn over the budget, on its turn state: what the model is offered
/// (to describe from), each compact definition, and what was described.
pub(crate) struct CompactTools {
    /// The tools the model is offered this turn, `tools.describe` included.
    offered: Arc<ToolRegistry>,
    /// The compact definition of each tool offered compact, by registry name.
    compact: HashMap<String, Arc<Value>>,
    /// Registry names described in this turn: sent in full from the next step.
    described: Mutex<HashSet<String>>,
}

impl CompactTools {
    /// The definition sent for `tool` now: compact until it is described.
    fn definition(&self, tool: &Tool) -> (Arc<Value>, bool) {
        match self.compact.get(tool.name()) {
            Some(compact) if !self.described.lock().contains(tool.name()) => (compact.clone(), true),
            _ => (tool.definition(), false),
        }
    }

    /// The full definitions of `names` (registry or model names), which are
    /// sent in full from the next step on; any name the turn does not offer
    /// fails the whole call, with close names from what it offers.
    fn describe(&self, names: &[String]) -> Result<Vec<DescribedTool>, ToolError> {
        if names.is_empty() {
            return Err(ToolError::invalid_input("name at least one tool to describe, e.g. {\"names\": [\"a_tool\"]}"));
        }
        let offered = |name: &str| self.offered.get(name).filter(|tool| tool.agent_use());
        let unknown: Vec<String> =
            names.iter().filter(|name| offered(name).is_none()).map(|name| self.unknown(name)).collect();
        if !unknown.is_empty() {
            return Err(ToolError::new(ToolErrorKind::NotFound, unknown.join("; ")));
        }
        let mut seen = HashSet::new();
        let tools: Vec<&Tool> =
            names.iter().filter_map(|name| offered(name)).filter(|t| seen.insert(t.name())).collect();
        self.described.lock().extend(tools.iter().map(|tool| tool.name().to_string()));
        Ok(tools.into_iter().map(DescribedTool::of).collect())
    }

    /// Why `name` cannot be described, with up to three close offered names.
    fn unknown(&self, name: &str) -> String {
        let close: Vec<String> = self
            .offered
            .suggest(name)
            .into_iter()
            .filter_map(|n| self.offered.get(&n).filter(|t| t.agent_use()).map(|t| format!("`{}`", t.model_name())))
            .collect();
        if close.is_empty() {
            format!("no tool `{name}` is offered here, and none has a similar name")
        } else {
            format!("no tool `{name}` is offered here; did you mean {}?", close.join(", "))
        }
    }
}

/// One tool as `tools.describe` returns it.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DescribedTool {
    /// The name to call it by.
    pub name: String,
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: Value,
}

impl DescribedTool {
    fn of(tool: &Tool) -> DescribedTool {
        DescribedTool {
            name: tool.model_name(),
            description: tool.description().to_string(),
            parameters: tool.parameters().clone(),
        }
    }
}

/// Get the full description and parameters of tools offered with one line only.
#[derive(Debug, Deserialize, JsonSchema)]
struct DescribeArgs {
    /// The tools, by the names they are offered under (like `mcp_docs_search`).
    names: Vec<String>,
}

/// `tools.describe`'s description: what a compact tool needs, said once.
const DESCRIBE: &str = "Get the full description and parameters (JSON Schema) of tools that are offered with \
                        one line and no parameters. Call it with their names before calling such a tool; they \
                        are then offered in full for the rest of this turn.";

/// `tools.describe`: it reads the turn's [`CompactTools`] and nothing else.
fn describe_tool() -> Tool {
    Tool::typed(TOOLS_DESCRIBE, |args: DescribeArgs, ctx: ToolContext| async move {
        let Some(turn) = ctx.state.extension::<CompactTools>() else {
            return Err(ToolError::failed("every tool is offered in full in this turn: there is nothing to describe"));
        };
        turn.describe(&args.names)
    })
    .with_description(DESCRIBE)
    .with_capabilities([Capability::Read])
}

/// A turn's tools under the budget: `offered` as is, or — past `budget`
/// with at least one tool a source added — with `tools.describe` added and
/// the turn's [`CompactTools`] on `state`. Returns the tools to offer and
/// to run calls against (each with `tools.describe` when added). A turn
/// under the budget leaves no `CompactTools` on the state, even one its
/// state came with (a subagent's copy of its caller's).
pub(crate) fn apply(
    offered: Arc<ToolRegistry>,
    callable: Arc<ToolRegistry>,
    state: &TurnState,
    budget: u64,
) -> (Arc<ToolRegistry>, Arc<ToolRegistry>) {
    state.remove_extension::<CompactTools>();
    let over = budget > 0 && definitions_tokens(offered.model_tools()) > budget;
    let compact: HashMap<String, Arc<Value>> = if over {
        offered
            .model_tools()
            .filter(|t| t.source().is_some())
            .map(|t| (t.name().to_string(), compact_definition(t)))
            .collect()
    } else {
        HashMap::new()
    };
    if compact.is_empty() {
        return (offered, callable);
    }
    let describe = describe_tool();
    let offered = Arc::new(ToolRegistry::clone(&offered).with(describe.clone()));
    let callable = Arc::new(ToolRegistry::clone(&callable).with(describe));
    tracing::debug!(budget, compact = compact.len(), "the offered tools pass the schema budget: sent compact");
    state.insert_extension(CompactTools { offered: offered.clone(), compact, described: Mutex::default() });
    (offered, callable)
}

/// Whether a call of `tool` is the loop's own `tools.describe` of a turn
/// past the budget: it shows only the schemas of tools the turn already
/// offers, so the policy lets it through whatever the allow-list names
/// (a chat allowed `mcp.github.*` must be able to read their schemas).
/// False in a turn under the budget, where a tool of that name is not the
/// loop's.
pub fn is_turn_describe(tool: &str, state: &TurnState) -> bool {
    tool == TOOLS_DESCRIBE && state.extension::<CompactTools>().is_some()
}

/// What one model request carries for `tools`: each definition (compact or
/// full), and whether it is compact (for the system prompt's tool list).
pub(crate) fn definitions<'a>(tools: impl IntoIterator<Item = &'a Tool>, state: &TurnState) -> Vec<(Arc<Value>, bool)> {
    let turn = state.extension::<CompactTools>();
    tools
        .into_iter()
        .map(|tool| match &turn {
            Some(turn) => turn.definition(tool),
            None => (tool.definition(), false),
        })
        .collect()
}

/// The estimated tokens of `tools`' full definitions.
pub fn definitions_tokens<'a>(tools: impl IntoIterator<Item = &'a Tool>) -> u64 {
    let counter = TokenCounter::estimate();
    tools.into_iter().map(|tool| counter.count(&tool.definition().to_string())).sum()
}

/// The tokens `tools`' definitions take in a turn's first request under
/// `budget` (counted with `counter`): all in full under it; past it, the
/// tools a source added compact, plus `tools.describe`. What compaction
/// counts as the fixed part of a request.
pub(crate) fn sent_tokens(tools: &[&Tool], budget: u64, counter: &TokenCounter) -> u64 {
    let full: u64 = tools.iter().map(|tool| counter.count(&tool.definition().to_string())).sum();
    let over = budget > 0 && definitions_tokens(tools.iter().copied()) > budget;
    if !over || !tools.iter().any(|tool| tool.source().is_some()) {
        return full;
    }
    let sent = tools.iter().map(|tool| match tool.source() {
        Some(_) => counter.count(&compact_definition(tool).to_string()),
        None => counter.count(&tool.definition().to_string()),
    });
    sent.sum::<u64>() + counter.count(&describe_tool().definition().to_string())
}

/// A tool's name, its one-line summary and an open parameters schema (see the module doc).
fn compact_definition(tool: &Tool) -> Arc<Value> {
    let summary = tool.summary();
    let summary = match summary.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", summary[..cut].trim_end()),
        None => summary,
    };
    Arc::new(json!({
        "type": "function",
        "function": {
            "name": tool.model_name(),
            "description": summary,
            "parameters": {"type": "object", "properties": {}},
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> Tool {
        let schema =
            json!({"type": "object", "properties": {"query": {"type": "string", "description": "x".repeat(400)}}});
        Tool::new(name, description, schema, |_, _| async { Ok(Value::Null) })
    }

    fn registry(tools: impl IntoIterator<Item = Tool>) -> Arc<ToolRegistry> {
        let mut registry = ToolRegistry::new();
        for tool in tools {
            registry.insert(tool);
        }
        Arc::new(registry)
    }

    /// Compaction counts what is sent: past the budget, compact definitions.
    #[test]
    fn the_tokens_sent_follow_the_budget() {
        let counter = TokenCounter::estimate();
        let tools: Vec<Tool> = (0..50)
            .map(|i| tool(&format!("mcp.docs.t{i}"), "Search the docs.").with_source("mcp.docs"))
            .chain([tool("bash", "Run a command.")])
            .collect();
        let tools: Vec<&Tool> = tools.iter().collect();
        let full = sent_tokens(&tools, 0, &counter);
        assert_eq!(full, sent_tokens(&tools, full * 2, &counter), "under the budget: all in full");
        let compact = sent_tokens(&tools, 1_000, &counter);
        assert!(compact * 3 < full, "{compact} of {full}");
    }

    #[test]
    fn a_compact_definition_is_the_name_one_line_and_an_open_schema() {
        let long = format!("Search the docs. {}", "More words here. ".repeat(20));
        let compact = compact_definition(&tool("mcp.docs.search", &long));
        assert_eq!(
            *compact,
            json!({"type": "function", "function": {"name": "mcp_docs_search", "description": "Search the docs.",
                "parameters": {"type": "object", "properties": {}}}})
        );
        let one_sentence = "word ".repeat(100);
        let compact = compact_definition(&tool("mcp.docs.x", &one_sentence));
        let summary = compact["function"]["description"].as_str().unwrap();
        assert!(summary.ends_with('…') && summary.chars().count() <= SUMMARY_CHARS + 1, "{summary}");
    }

    #[test]
    fn only_sourced_tools_past_the_budget_are_compact_until_described() {
        let sourced = |name: &str| tool(name, "A tool. With more.").with_source("mcp.docs");
        let tools = registry([tool("bash", "Run a command."), sourced("mcp.docs.a"), sourced("mcp.docs.b")]);
        let state = TurnState::new();

        let (offered, _) = apply(tools.clone(), tools.clone(), &state, 0);
        assert!(offered.get(TOOLS_DESCRIBE).is_none() && state.extension::<CompactTools>().is_none(), "0: off");
        let (offered, _) = apply(tools.clone(), tools.clone(), &state, 1_000_000);
        assert!(offered.get(TOOLS_DESCRIBE).is_none(), "under the budget nothing changes");

        let (offered, callable) = apply(tools.clone(), tools.clone(), &state, 10);
        assert!(offered.get(TOOLS_DESCRIBE).is_some() && callable.get(TOOLS_DESCRIBE).is_some());
        let compact = |state: &TurnState| -> Vec<bool> {
            definitions(offered.model_tools(), state).into_iter().map(|(_, compact)| compact).collect()
        };
        assert_eq!(compact(&state), [false, true, true, false]);

        let turn = state.extension::<CompactTools>().unwrap();
        let described = turn.describe(&["mcp_docs_b".into(), "MCP.DOCS.B".into()]).unwrap();
        assert_eq!(described.len(), 1);
        assert_eq!(described[0].name, "mcp_docs_b");
        assert_eq!(compact(&state), [false, true, false, false]);

        let error = turn.describe(&["mcp_docs_c".into(), "mcp_docs_a".into()]).unwrap_err();
        assert_eq!(error.kind, ToolErrorKind::NotFound);
        assert!(error.message.contains("did you mean `mcp_docs_a`, `mcp_docs_b`"), "{}", error.message);
        assert_eq!(compact(&state), [false, true, false, false], "a failed call describes nothing");

        // A builtin-only set past the budget has nothing to compact.
        let builtins = registry([tool("bash", "Run a command.")]);
        let (offered, _) = apply(builtins.clone(), builtins, &state, 10);
        assert!(offered.get(TOOLS_DESCRIBE).is_none() && state.extension::<CompactTools>().is_none());
    }
}
