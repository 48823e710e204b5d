//! Tape tools over the run's tape: `tape.info`, `tape.search`, `tape.anchors`,
//! `tape.handoff`, `tape.reset`.
//!
//! `tape.search` results start with [`SEARCH_MARKER`], and a later search drops
//! tool results that start with it, so searches never find their own earlier
//! output (which would repeat every old hit). The marker is in the content the
//! model reads, so this works for entries written before any metadata about
//! the producing tool existed; a result is recognised only by how it starts, so
//! a quote of the marker further inside a text is still found.

use crate::tape::entry::{format_date, parse_date};
use crate::tape::query::TextMatcher;
use crate::tape::{Entry, EntryKind, TapeQuery};
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use chrono::{DateTime, NaiveDate, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// How every `tape.search` result starts.
pub const SEARCH_MARKER: &str = "[tape.search]";
/// Anchors `tape.anchors` lists.
pub const ANCHORS_SHOWN: usize = 20;

/// Show facts about this session's tape: entry and anchor counts, the last
/// anchor, how many entries came after it, the last model call's token usage,
/// the last compaction and the estimated tokens of the context.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TapeInfoArgs {}

/// `tape.info`: the `TapeInfo` lines.
pub fn tape_info_tool() -> Tool {
    Tool::typed("tape.info", |_: TapeInfoArgs, ctx: ToolContext| async move {
        let mut text = ctx.tape.info().await?.to_string();
        let model = ctx.state.get_str("model").or_else(|| ctx.host.as_ref()?.default_model()).unwrap_or_default();
        let counter = crate::message::tokens::TokenCounter::for_model(&model);
        let entries = ctx.tape.context_entries().await?;
        let tokens: u64 = entries.iter().map(|entry| crate::tape::entry_tokens(&counter, entry)).sum();
        let how = if counter.is_exact() { "counted" } else { "estimated" };
        text.push_str(&format!("\ncontext_tokens: {tokens} ({how}, entries only)"));
        let system = ctx.tape.system_prompt().await?;
        if let Some(limits) =
            ctx.host.as_ref().and_then(|host| host.context_limits(&ctx.state, &model, system.as_deref()))
        {
            let (window, threshold, fixed) = (limits.window, limits.threshold, limits.fixed);
            text.push_str(&format!(
                "\ncontext_window: {window} (compacts at {threshold}; system prompt and tool schemas: {fixed})"
            ));
        }
        Ok::<_, ToolError>(text)
    })
    .with_capabilities([Capability::Read])
}

fn default_limit() -> usize {
    20
}

fn default_kinds() -> Vec<String> {
    vec!["message".into(), "tool_result".into()]
}

/// Search this session's whole history (also before the last handoff) for a
/// text, case-insensitively, newest first. Returns a header with the match
/// count, then one JSON line per hit: `{"id", "date", "kind", "content"}`.
/// Results of earlier searches are left out.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TapeSearchArgs {
    /// Text to look for (case-insensitive substring).
    pub query: String,
    /// Most hits to return.
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Only entries from this time on: RFC 3339 (`2026-01-31T09:00:00Z`) or a day (`2026-01-31`).
    #[serde(default)]
    pub start: Option<String>,
    /// Only entries before this time: RFC 3339, or a day (that day included).
    #[serde(default)]
    pub end: Option<String>,
    /// Entry kinds to search: message, tool_call, tool_result, anchor, event, error, system.
    #[serde(default = "default_kinds")]
    pub kinds: Vec<String>,
}

/// `tape.search`: text search over the whole tape.
pub fn tape_search_tool() -> Tool {
    Tool::typed("tape.search", |args: TapeSearchArgs, ctx: ToolContext| async move {
        if args.limit == 0 {
            return Err(ToolError::invalid_input("limit must be at least 1"));
        }
        let mut query = TapeQuery::search(args.query.clone()).kinds(parse_kinds(&args.kinds)?);
        query.since = args.start.as_deref().map(|s| parse_bound("start", s, false)).transpose()?;
        query.until = args.end.as_deref().map(|s| parse_bound("end", s, true)).transpose()?;
        let (hits, filtered) = search(&ctx.tape, &query, args.limit).await?;
        tracing::debug!(tool = "tape.search", session = %ctx.tape.name(), hits = hits.len(), filtered, "search");
        ctx.repeats(&hits);
        let mut text = format!("{SEARCH_MARKER} {} matches", hits.len());
        if filtered > 0 {
            text.push_str(&format!(" ({filtered} earlier search results left out)"));
        }
        for hit in &hits {
            let line = json!({"id": hit.id, "date": format_date(&hit.date), "kind": hit.kind, "content": hit.payload});
            text.push('\n');
            text.push_str(&line.to_string());
        }
        Ok(text)
    })
    .with_capabilities([Capability::Read])
}

/// The newest `limit` entries `query` (a [`TapeQuery::search`]) finds on
/// `tape`, earlier search results left out, and how many entries were left
/// out for holding nothing else that matches. `bub mcp serve` searches the
/// same way.
pub(crate) async fn search(
    tape: &crate::tape::Tape,
    query: &TapeQuery,
    limit: usize,
) -> crate::tape::TapeResult<(Vec<Entry>, usize)> {
    let matcher = TextMatcher::new(query.text.as_deref().unwrap_or_default());
    // Filtering happens after the store's limit, so read more until enough
    // hits survive it or the tape has no more.
    let mut fetch = limit.saturating_mul(2).max(limit.saturating_add(8));
    loop {
        let entries = tape.read(&query.clone().limit(fetch)).await?;
        let (hits, filtered) = drop_search_results(entries.iter(), &matcher, limit);
        if hits.len() >= limit || entries.len() < fetch {
            return Ok((hits, filtered));
        }
        fetch = fetch.saturating_mul(4);
    }
}

/// Up to `limit` entries with earlier search results removed, and how many
/// entries were dropped for holding nothing else that matches.
fn drop_search_results<'a>(
    entries: impl Iterator<Item = &'a Entry>,
    matcher: &TextMatcher,
    limit: usize,
) -> (Vec<Entry>, usize) {
    let mut hits = Vec::new();
    let mut filtered = 0;
    for entry in entries {
        if hits.len() == limit {
            break;
        }
        let mut entry = entry.clone();
        if entry.kind == EntryKind::ToolResult
            && let Some(Value::Array(results)) = entry.payload.get_mut("results")
        {
            let before = results.len();
            results.retain(|r| !r.as_str().is_some_and(|s| s.starts_with(SEARCH_MARKER)));
            if results.len() < before && (results.is_empty() || !matcher.matches(&entry)) {
                filtered += 1;
                continue;
            }
        }
        hits.push(entry);
    }
    (hits, filtered)
}

fn parse_kinds(kinds: &[String]) -> Result<Vec<EntryKind>, ToolError> {
    kinds
        .iter()
        .map(|kind| {
            EntryKind::parse(kind.trim()).ok_or_else(|| {
                let known: Vec<&str> = EntryKind::ALL.iter().map(|k| k.as_str()).collect();
                ToolError::invalid_input(format!("unknown kind {kind:?}; use one of: {}", known.join(", ")))
            })
        })
        .collect()
}

/// An RFC 3339 instant, or a `YYYY-MM-DD` day: its start, or for an end bound
/// the start of the next day, so the day is included.
pub(crate) fn parse_bound(field: &str, text: &str, end: bool) -> Result<DateTime<Utc>, ToolError> {
    let text = text.trim();
    if let Some(date) = parse_date(text) {
        return Ok(date);
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|day| if end { day.succ_opt() } else { Some(day) })
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .map(|day| day.and_utc())
        .ok_or_else(|| {
            ToolError::invalid_input(format!(
                "{field}: {text:?} is not a date; use RFC 3339 (2026-01-31T09:00:00Z) or YYYY-MM-DD"
            ))
        })
}

/// List the last 20 anchors (handoff points) of this session's tape, oldest
/// first, each with the state it carries.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TapeAnchorsArgs {}

/// `tape.anchors`: a bullet list of recent anchors.
pub fn tape_anchors_tool() -> Tool {
    Tool::typed("tape.anchors", |_: TapeAnchorsArgs, ctx: ToolContext| async move {
        let anchors = ctx.tape.anchors(ANCHORS_SHOWN).await?;
        if anchors.is_empty() {
            return Ok::<_, ToolError>("(no anchors)".to_string());
        }
        let lines: Vec<String> = anchors
            .iter()
            .map(|anchor| {
                let state = anchor.data().cloned().unwrap_or(Value::Null);
                format!("- {}: {state}", anchor.name().unwrap_or("?"))
            })
            .collect();
        Ok(lines.join("\n"))
    })
    .with_capabilities([Capability::Read])
}

fn default_handoff_name() -> String {
    "handoff".into()
}

/// Mark a handoff point: an anchor carrying a summary. From the next turn on
/// the context starts at this anchor, so earlier turns no longer cost tokens;
/// put into `summary` everything from them that is still needed.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TapeHandoffArgs {
    /// Anchor name, like `phase/2` or `handoff`.
    #[serde(default = "default_handoff_name")]
    pub name: String,
    /// What the conversation so far established and what comes next.
    #[serde(default)]
    pub summary: String,
}

/// `tape.handoff`: writes an anchor with state `{summary}`.
pub fn tape_handoff_tool() -> Tool {
    Tool::typed("tape.handoff", |args: TapeHandoffArgs, ctx: ToolContext| async move {
        let name = args.name.trim();
        if name.is_empty() {
            return Err(ToolError::invalid_input("name must not be empty"));
        }
        ctx.tape.handoff(name, json!({"summary": args.summary})).await?;
        tracing::info!(tool = "tape.handoff", session = %ctx.tape.name(), anchor = name, "handoff");
        Ok(format!("handoff created: {name}"))
    })
    .with_capabilities([Capability::Session])
}

/// Clear this session's tape (its whole history) and start it again. With
/// `archive=true` the old entries are saved to a file first. Cannot be undone.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TapeResetArgs {
    /// Save the history to an archive file before clearing it.
    #[serde(default)]
    pub archive: bool,
}

/// `tape.reset`: clears the tape, optionally archiving it.
pub fn tape_reset_tool() -> Tool {
    Tool::typed("tape.reset", |args: TapeResetArgs, ctx: ToolContext| async move {
        let report = ctx.tape.reset(args.archive).await?;
        tracing::info!(tool = "tape.reset", session = %ctx.tape.name(), archive = args.archive, "tape reset");
        Ok::<_, ToolError>(match report.archived {
            Some(path) => format!("tape reset; archived to {}", path.display()),
            None => "tape reset".to_string(),
        })
    })
    .with_capabilities([Capability::Session])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::NewEntry;

    #[test]
    fn day_bounds_include_the_whole_day() {
        let start = parse_bound("start", "2026-01-31", false).unwrap();
        let end = parse_bound("end", "2026-01-31", true).unwrap();
        assert_eq!(format_date(&start), "2026-01-31T00:00:00.000000Z");
        assert_eq!(format_date(&end), "2026-02-01T00:00:00.000000Z");
        assert!(parse_bound("end", "2026-01-31T10:00:00+02:00", true).is_ok());
        assert!(parse_bound("end", "yesterday", true).is_err());
    }

    #[test]
    fn earlier_search_results_are_dropped_unless_something_else_matches() {
        let old_search = format!("{SEARCH_MARKER} 1 matches\n{{\"content\": \"invoice\"}}");
        let entries: Vec<Entry> = [
            NewEntry::tool_result(vec![json!(old_search)]),
            NewEntry::tool_result(vec![json!(old_search), json!("invoice 7 paid")]),
            NewEntry::tool_result(vec![json!(old_search), json!("unrelated")]),
            NewEntry::chat("user", "where is the invoice?"),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, e)| e.into_entry(i as u64 + 1))
        .collect();
        let (hits, filtered) = drop_search_results(entries.iter(), &TextMatcher::new("invoice"), 10);
        assert_eq!(hits.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2, 4]);
        assert_eq!(hits[0].payload["results"], json!(["invoice 7 paid"]));
        assert_eq!(filtered, 2);
    }
}
