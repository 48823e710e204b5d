//! `bub mcp serve`: bub's tapes for other agents, over MCP on stdio.
//!
//! Three tools, each read-only: `tapes_list` (the tapes, named as `bub tape
//! list` names them, with counts and last activity), `tape_search` (text in
//! one tape or all, found as `,tape.search` finds it) and `tape_read` (a tape
//! from an anchor — by default its last, where the context of its next run
//! starts — or from an entry id). Nothing else: no handoff, reset, anchor or
//! event, so an agent given this server reads what an operator's `,tape.*`
//! commands read and changes nothing. That holds by construction: the server
//! sees the store only through `ReadOnly`, whose writes fail, so a write
//! added here by mistake is refused instead of landing.
//!
//! Every answer is text an agent reads (one line per entry, as `bub tape show`
//! prints it, cut after `max_chars`) and the same as `structuredContent`,
//! which each tool's output schema describes. Bad arguments, an unknown tape
//! or anchor, a failed read: a tool error (`isError`) whose text says what to
//! change, and the server goes on serving. A result that stops short carries
//! `next_cursor`, which the next call passes back as `cursor`.

use crate::tape::entry::format_date;
use crate::tape::name::SIDECAR_MARKER;
use crate::tape::summary::{describe, one_line, recorded_workspace};
use crate::tape::{
    Entry, EntryKind, NewEntry, Tape, TapeError, TapeName, TapeQuery, TapeResult, TapeStats, TapeStore, TapeSummary,
};
use crate::tools::builtin::tape::{parse_bound, search as search_tape};
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::Arc;

/// What the server tells a client it offers (`instructions`).
pub const INSTRUCTIONS: &str = "bub's tapes: the recorded history of every bub session (gateway chats, `bub run` and \
     `bub chat` sessions), read-only. `tapes_list` finds a tape, most recent first; `tape_read` reads one from its \
     last anchor (where the context of its next run starts), from a named anchor or from an entry id; `tape_search` \
     finds text in one tape or in all. Entries are one line each, cut after `max_chars` characters; a result that \
     stops short gives `next_cursor`, to pass as `cursor` for the next page.";

const LIST: &str = "tapes_list";
const SEARCH: &str = "tape_search";
const READ: &str = "tape_read";

/// `(default, most)` of each tool's `limit`, and of `max_chars`.
const LIST_LIMIT: (usize, usize) = (50, 500);
const SEARCH_LIMIT: (usize, usize) = (20, 200);
const READ_LIMIT: (usize, usize) = (50, 500);
const MAX_CHARS: (usize, usize) = (500, 20_000);
/// How deep `tape_search` pages: each page reads the hits before it again.
const SEARCH_MAX_OFFSET: usize = 10_000;
/// The kinds `tape_search` looks in unless told (those of `,tape.search`).
const SEARCH_KINDS: [EntryKind; 2] = [EntryKind::Message, EntryKind::ToolResult];

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    #[error("the MCP server stopped: {0}")]
    Stopped(String),
}

/// Serves `store`'s tapes on stdin and stdout until the client leaves
/// (closes stdin). Nothing else may write to stdout meanwhile.
pub async fn serve_stdio(store: Arc<dyn TapeStore>) -> Result<(), ServeError> {
    let running = TapeServer::new(store)
        .serve(rmcp::transport::io::stdio())
        .await
        .map_err(|error| ServeError::Handshake(error.to_string()))?;
    let reason = running.waiting().await.map_err(|error| ServeError::Stopped(error.to_string()))?;
    tracing::debug!(?reason, "MCP client left");
    Ok(())
}

/// The MCP server over one tape store: clone it per connection.
#[derive(Clone)]
pub struct TapeServer {
    store: Arc<dyn TapeStore>,
}

impl TapeServer {
    /// A server that reads `store` through `ReadOnly` (writes refused).
    pub fn new(store: Arc<dyn TapeStore>) -> TapeServer {
        TapeServer { store: Arc::new(ReadOnly(store)) }
    }
}

impl ServerHandler for TapeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("bub", env!("CARGO_PKG_VERSION")).with_title("bub tapes (read-only)"))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let tool = request.name.as_ref();
        let answer = match tool {
            LIST => match arguments_of(arguments) {
                Ok(args) => self.list(args).await,
                Err(message) => Err(message),
            },
            SEARCH => match arguments_of(arguments) {
                Ok(args) => self.search(args).await,
                Err(message) => Err(message),
            },
            READ => match arguments_of(arguments) {
                Ok(args) => self.read(args).await,
                Err(message) => Err(message),
            },
            other => {
                let message = format!("no tool named {other:?}: this server has {LIST}, {SEARCH} and {READ}");
                return Err(ErrorData::invalid_params(message, None));
            }
        };
        Ok(answer
            .unwrap_or_else(|message| {
                tracing::debug!(tool, %message, "MCP tool call refused");
                CallToolResult::error(vec![ContentBlock::text(message)])
            })
            .into())
    }
}

/// The three tools, with their schemas; all read-only.
fn tools() -> Vec<Tool> {
    let read_only = ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false);
    let tool = |name: &'static str, title: &str, description: &'static str| {
        Tool::new(name, description, Arc::default()).with_title(title).annotate(read_only.clone())
    };
    vec![
        tool(
            LIST,
            "List bub's tapes",
            "The tapes (one per bub session: a gateway chat, a `bub run`/`bub chat` session), most recently \
             active first: name, entries, last activity, anchors, the last anchor and, for command-line \
             sessions, their workspace. `filter` keeps names containing a text; sidecar tapes only with \
             `include_sidecars`. The names are those `tape_read` and `tape_search` take.",
        )
        .with_input_schema::<ListArgs>()
        .with_output_schema::<TapeListing>(),
        tool(
            SEARCH,
            "Search bub's tapes",
            "Entries containing a text (case-insensitive), newest first, in one tape (`tape`) or in every \
             tape but sidecars; by default messages and tool results, as `,tape.search` looks. Results of \
             earlier searches on the tape are left out. Each hit: tape, entry id, date, kind and text.",
        )
        .with_input_schema::<SearchArgs>()
        .with_output_schema::<SearchResult>(),
        tool(
            READ,
            "Read a bub tape",
            "A tape's entries, oldest first: by default from its last anchor on (the turns a compaction kept \
             before it included), which is the context its next run starts from; from the last anchor of a \
             name (`anchor`); or from an entry id (`from_id`, 1 is the start of the tape). `kinds` keeps \
             some kinds only.",
        )
        .with_input_schema::<ReadArgs>()
        .with_output_schema::<ReadResult>(),
    ]
}

/// `arguments` as a tool's argument type, or what is wrong with them.
fn arguments_of<A: DeserializeOwned>(arguments: Value) -> Result<A, String> {
    serde_json::from_value(arguments).map_err(|error| format!("invalid arguments: {error}"))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Only tapes whose name contains this text (case-insensitive).
    #[serde(default)]
    filter: Option<String>,
    /// Also list sidecar tapes (`<tape>__sidecar__<name>`: spilled tool results and the like).
    #[serde(default)]
    include_sidecars: bool,
    /// At most this many tapes (1 to 500; 50 if not given).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u64>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// The text to find (case-insensitive substring of the entry's text).
    query: String,
    /// Only this tape, as `tapes_list` names it; every tape but sidecars if not given.
    #[serde(default)]
    tape: Option<String>,
    /// Kinds to look in: message, tool_call, tool_result, anchor, event, error, system (message and tool_result if not given).
    #[serde(default)]
    kinds: Option<Vec<String>>,
    /// Only entries from this time on: RFC 3339 (`2026-01-31T09:00:00Z`) or a day (`2026-01-31`).
    #[serde(default)]
    start: Option<String>,
    /// Only entries before this time: RFC 3339, or a day (that day included).
    #[serde(default)]
    end: Option<String>,
    /// At most this many hits (1 to 200; 20 if not given).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u64>,
    /// Cut each entry's text after this many characters (1 to 20000; 500 if not given).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20000))]
    max_chars: Option<u64>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The tape, as `tapes_list` names it.
    tape: String,
    /// Start at the last anchor of this name (`tapes_list` shows the last anchor of each tape).
    #[serde(default)]
    anchor: Option<String>,
    /// Start at this entry id instead of an anchor (1: the whole tape).
    #[serde(default)]
    #[schemars(range(min = 1))]
    from_id: Option<u64>,
    /// Only these kinds: message, tool_call, tool_result, anchor, event, error, system (all if not given).
    #[serde(default)]
    kinds: Option<Vec<String>>,
    /// At most this many entries (1 to 500; 50 if not given).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u64>,
    /// Cut each entry's text after this many characters (1 to 20000; 500 if not given).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20000))]
    max_chars: Option<u64>,
    /// The `next_cursor` of the previous page (with the same `tape` and `anchor`).
    #[serde(default)]
    cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct TapeListing {
    /// How many tapes match, on every page.
    total: usize,
    tapes: Vec<TapeRow>,
    /// Pass as `cursor` for the next page; null on the last.
    next_cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct TapeRow {
    name: String,
    entries: u64,
    /// When the last entry was written (RFC 3339); null for a tape reset to empty.
    updated: Option<String>,
    anchors: u64,
    /// The name of the last anchor, where `tape_read` starts by default.
    last_anchor: Option<String>,
    /// The directory of a `bub run`/`bub chat` session; null for gateway chats.
    workspace: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SearchResult {
    query: String,
    /// How many tapes were searched.
    tapes: usize,
    hits: Vec<SearchHit>,
    /// Entries that held only results of earlier searches, left out.
    earlier_searches_left_out: usize,
    next_cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SearchHit {
    tape: String,
    #[serde(flatten)]
    entry: EntryView,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ReadResult {
    tape: String,
    /// Where the reading starts: `last anchor`, `anchor NAME` or `entry N` (or `the start`: a tape without anchors).
    from: String,
    /// The anchor it starts at, when it does.
    anchor: Option<AnchorRef>,
    /// Entries before the start, not shown (`from_id` = 1 reads them).
    before: u64,
    entries: Vec<EntryView>,
    next_cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct AnchorRef {
    id: u64,
    name: String,
}

/// An entry as the tools show it.
#[derive(Debug, Serialize, JsonSchema)]
struct EntryView {
    /// Its id on its tape (from 1, without gaps).
    id: u64,
    /// When it was written (RFC 3339, UTC).
    date: String,
    /// message, system, anchor, tool_call, tool_result, error or event.
    kind: String,
    /// What it holds on one line, as `bub tape show` prints it, cut after `max_chars` characters.
    text: String,
    /// Whether `text` was cut.
    truncated: bool,
    /// The length of the whole text, in characters.
    chars: usize,
}

impl EntryView {
    fn of(entry: &Entry, max_chars: usize) -> EntryView {
        let whole = one_line(&describe(entry), usize::MAX);
        let chars = whole.chars().count();
        let truncated = chars > max_chars;
        let text = if truncated { one_line(&whole, max_chars) } else { whole };
        EntryView {
            id: entry.id,
            date: format_date(&entry.date),
            kind: entry.kind.as_str().to_string(),
            text,
            truncated,
            chars,
        }
    }

    /// The line `bub tape show` prints, with a note when cut.
    fn line(&self, date: &chrono::DateTime<chrono::Utc>) -> String {
        let mut line = format!("#{:<5} {}  {:<11} {}", self.id, date.format("%Y-%m-%d %H:%M:%S"), self.kind, self.text);
        if self.truncated {
            let _ = write!(line, " [cut: {} characters in all; a larger max_chars shows more]", self.chars);
        }
        line
    }
}

impl TapeServer {
    async fn list(&self, args: ListArgs) -> Result<CallToolResult, String> {
        let limit = bounded("limit", args.limit, LIST_LIMIT)?;
        let offset = Cursor::offset(args.cursor.as_deref())?;
        let filter = args.filter.map(|filter| filter.to_lowercase());
        let mut tapes: Vec<TapeSummary> = self
            .store
            .list()
            .await
            .map_err(failed)?
            .into_iter()
            .filter(|tape| args.include_sidecars || !tape.name.contains(SIDECAR_MARKER))
            .filter(|tape| filter.as_ref().is_none_or(|filter| tape.name.to_lowercase().contains(filter)))
            .collect();
        tapes.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| a.name.cmp(&b.name)));
        let mut rows = Vec::new();
        for tape in tapes.iter().skip(offset).take(limit) {
            rows.push(self.row(tape).await.map_err(failed)?);
        }
        let next = offset + rows.len();
        let listing = TapeListing {
            total: tapes.len(),
            next_cursor: (next < tapes.len()).then(|| Cursor::Offset(next).to_string()),
            tapes: rows,
        };
        let mut text = match listing.tapes.len() {
            0 if listing.total == 0 => "no tapes".to_string(),
            0 => format!("no tapes past {offset} (of {})", listing.total),
            shown => {
                format!("tapes {}–{} of {}, most recently active first", offset + 1, offset + shown, listing.total)
            }
        };
        for row in &listing.tapes {
            let _ = write!(
                text,
                "\n{}  entries: {}  updated: {}  anchors: {}  last anchor: {}  workspace: {}",
                row.name,
                row.entries,
                row.updated.as_deref().unwrap_or("-"),
                row.anchors,
                row.last_anchor.as_deref().unwrap_or("-"),
                row.workspace.as_deref().unwrap_or("-"),
            );
        }
        more(&mut text, &listing.next_cursor);
        answer(text, &listing)
    }

    /// A tape's row: its summary, its anchors and its workspace.
    async fn row(&self, tape: &TapeSummary) -> TapeResult<TapeRow> {
        let (stats, workspace) = match TapeName::new(&tape.name) {
            Ok(name) => {
                let handle = Tape::new(self.store.clone(), name.clone());
                (self.store.stats(&name).await?, recorded_workspace(&handle).await?)
            }
            // A name this build would refuse (an older bub's): listed, not read.
            Err(_) => (TapeStats::default(), None),
        };
        Ok(TapeRow {
            name: tape.name.clone(),
            entries: tape.entries,
            updated: tape.updated.as_ref().map(format_date),
            anchors: stats.anchors,
            last_anchor: stats.last_anchor.as_ref().and_then(Entry::name).map(str::to_string),
            workspace,
        })
    }

    async fn search(&self, args: SearchArgs) -> Result<CallToolResult, String> {
        if args.query.trim().is_empty() {
            return Err("query must not be empty".into());
        }
        let limit = bounded("limit", args.limit, SEARCH_LIMIT)?;
        let max_chars = bounded("max_chars", args.max_chars, MAX_CHARS)?;
        let offset = Cursor::offset(args.cursor.as_deref())?;
        if offset > SEARCH_MAX_OFFSET {
            return Err(format!("search pages end after {SEARCH_MAX_OFFSET} hits: narrow the search instead"));
        }
        let kinds = match &args.kinds {
            Some(kinds) => parse_kinds(kinds)?,
            None => SEARCH_KINDS.to_vec(),
        };
        let mut query = TapeQuery::search(args.query.clone()).kinds(kinds);
        let bound = |field, text: &Option<String>, end| {
            text.as_deref().map(|text| parse_bound(field, text, end).map_err(|error| error.message)).transpose()
        };
        query.since = bound("start", &args.start, false)?;
        query.until = bound("end", &args.end, true)?;
        let tapes = match &args.tape {
            Some(name) => vec![self.open(name).await?],
            None => self.every_tape().await?,
        };
        // Each tape's newest hits up to the end of this page, merged newest first.
        let wanted = offset + limit + 1;
        let mut hits = Vec::new();
        let mut left_out = 0;
        for tape in &tapes {
            let (found, filtered) = search_tape(tape, &query, wanted).await.map_err(failed)?;
            left_out += filtered;
            hits.extend(found.into_iter().map(|entry| (tape.name().to_string(), entry)));
        }
        hits.sort_by(|(a_tape, a), (b_tape, b)| {
            b.date.cmp(&a.date).then_with(|| a_tape.cmp(b_tape)).then_with(|| b.id.cmp(&a.id))
        });
        let has_more = hits.len() > offset + limit;
        let page: Vec<_> = hits.into_iter().skip(offset).take(limit).collect();
        let mut text = format!("{} hits for {:?} in {} tapes", page.len(), args.query, tapes.len());
        if offset > 0 {
            let _ = write!(text, " (after the first {offset})");
        }
        if left_out > 0 {
            let _ = write!(text, "; {left_out} entries holding only earlier search results left out");
        }
        let mut shown = Vec::with_capacity(page.len());
        for (tape, entry) in page {
            let view = EntryView::of(&entry, max_chars);
            let _ = write!(text, "\n{tape} {}", view.line(&entry.date));
            shown.push(SearchHit { tape, entry: view });
        }
        let result = SearchResult {
            query: args.query,
            tapes: tapes.len(),
            hits: shown,
            earlier_searches_left_out: left_out,
            next_cursor: has_more.then(|| Cursor::Offset(offset + limit).to_string()),
        };
        more(&mut text, &result.next_cursor);
        answer(text, &result)
    }

    async fn read(&self, args: ReadArgs) -> Result<CallToolResult, String> {
        let tape = self.open(&args.tape).await?;
        let limit = bounded("limit", args.limit, READ_LIMIT)?;
        let max_chars = bounded("max_chars", args.max_chars, MAX_CHARS)?;
        let kinds = parse_kinds(args.kinds.as_deref().unwrap_or_default())?;
        let cursor = args.cursor.as_deref().map(Cursor::parse).transpose()?;
        if args.anchor.is_some() && args.from_id.is_some() {
            return Err("give `anchor` or `from_id`, not both".into());
        }
        let (from, anchor, before, entries, next_cursor) = match (cursor, args.from_id) {
            (Some(Cursor::Id(id)), None) | (None, Some(id)) if args.anchor.is_none() => {
                if id == 0 {
                    return Err("from_id starts at 1, the tape's first entry".into());
                }
                let query = TapeQuery::all().kinds(kinds).after_id(id - 1).limit(limit + 1);
                let mut entries = tape.read(&query).await.map_err(failed)?;
                let next = (entries.len() > limit).then(|| entries[limit].id);
                entries.truncate(limit);
                (format!("entry {id}"), None, id - 1, entries, next.map(|id| Cursor::Id(id).to_string()))
            }
            (None | Some(Cursor::Scope { .. }), None) => {
                let scope = match &args.anchor {
                    Some(name) => tape.scope_entries(TapeQuery::after_anchor(name.clone())).await,
                    None => tape.scope_or_whole(TapeQuery::last_anchor()).await,
                };
                let scope = match scope {
                    Err(TapeError::AnchorNotFound { .. }) => return Err(self.no_such_anchor(&tape, &args).await),
                    scope => scope.map_err(failed)?,
                };
                let start = scope.first().map_or(0, |entry| entry.id);
                let offset = match cursor {
                    Some(Cursor::Scope { start: given, offset }) if given == start => offset,
                    Some(_) => {
                        return Err("the tape has a newer anchor than when this cursor was given: read it again \
                                    without `cursor`"
                            .into());
                    }
                    None => 0,
                };
                let anchor = scope
                    .first()
                    .filter(|entry| entry.kind == EntryKind::Anchor)
                    .map(|entry| AnchorRef { id: entry.id, name: entry.name().unwrap_or("?").to_string() });
                let from = match (&args.anchor, &anchor) {
                    (Some(name), _) => format!("anchor {name}"),
                    (None, Some(_)) => "last anchor".to_string(),
                    (None, None) => "the start".to_string(),
                };
                let kept: Vec<Entry> =
                    scope.into_iter().filter(|entry| kinds.is_empty() || kinds.contains(&entry.kind)).collect();
                let next = offset.saturating_add(limit);
                let next_cursor = (next < kept.len()).then(|| Cursor::Scope { start, offset: next }.to_string());
                let entries: Vec<Entry> = kept.into_iter().skip(offset).take(limit).collect();
                (from, anchor, start.saturating_sub(1), entries, next_cursor)
            }
            _ => return Err("this cursor belongs to another reading: pass it with the same `tape` and `anchor`".into()),
        };
        let mut text = format!("tape {} from {from}: {} entries", tape.name(), entries.len());
        if before > 0 {
            let _ = write!(text, " ({before} earlier entries not shown; from_id=1 reads them)");
        }
        let mut views = Vec::with_capacity(entries.len());
        for entry in &entries {
            let view = EntryView::of(entry, max_chars);
            let _ = write!(text, "\n{}", view.line(&entry.date));
            views.push(view);
        }
        let result = ReadResult { tape: tape.name().to_string(), from, anchor, before, entries: views, next_cursor };
        more(&mut text, &result.next_cursor);
        answer(text, &result)
    }

    /// The message for an `anchor` the tape does not have, naming those it has.
    async fn no_such_anchor(&self, tape: &Tape, args: &ReadArgs) -> String {
        let name = args.anchor.as_deref().unwrap_or_default();
        let anchors = tape.anchors(crate::tools::builtin::tape::ANCHORS_SHOWN).await.unwrap_or_default();
        let mut names: Vec<&str> = anchors.iter().filter_map(Entry::name).collect();
        names.dedup();
        if names.is_empty() {
            return format!("tape {} has no anchor named {name:?}, nor any other: leave `anchor` out", tape.name());
        }
        format!(
            "tape {} has no anchor named {name:?}; its last anchors: {} (leave `anchor` out to start at the last)",
            tape.name(),
            names.join(", ")
        )
    }

    /// The tape `name` names exactly, if it exists.
    async fn open(&self, name: &str) -> Result<Tape, String> {
        let tape = TapeName::new(name).map_err(|error| format!("{error}; tapes_list shows the tapes"))?;
        let tapes = self.store.list().await.map_err(failed)?;
        if !tapes.iter().any(|known| known.name == tape.as_str()) {
            return Err(format!("no tape named {name:?}; tapes_list shows the tapes (as `bub tape list` names them)"));
        }
        Ok(Tape::new(self.store.clone(), tape))
    }

    /// Every tape but sidecars.
    async fn every_tape(&self) -> Result<Vec<Tape>, String> {
        let tapes = self.store.list().await.map_err(failed)?;
        Ok(tapes
            .into_iter()
            .filter(|tape| !tape.name.contains(SIDECAR_MARKER))
            .filter_map(|tape| TapeName::new(&tape.name).ok())
            .map(|name| Tape::new(self.store.clone(), name))
            .collect())
    }
}

/// A success: `text` for the agent, `structured` as `structuredContent`.
fn answer<R: Serialize>(text: String, structured: &R) -> Result<CallToolResult, String> {
    let value = serde_json::to_value(structured).map_err(|error| format!("cannot encode the result: {error}"))?;
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    Ok(result)
}

/// The line that says how to get the next page.
fn more(text: &mut String, next_cursor: &Option<String>) {
    if let Some(cursor) = next_cursor {
        let _ = write!(text, "\nmore: call again with cursor {cursor:?}");
    }
}

/// A failed read, as the agent reads it (and the operator in the log).
fn failed(error: TapeError) -> String {
    tracing::warn!(%error, "MCP tape read failed");
    format!("reading the tapes failed: {error}")
}

/// `given`, or the default, checked against the most allowed.
fn bounded(field: &str, given: Option<u64>, (default, most): (usize, usize)) -> Result<usize, String> {
    match given {
        None => Ok(default),
        Some(value) if value >= 1 && value <= most as u64 => Ok(value as usize),
        Some(value) => Err(format!("{field} must be between 1 and {most} (it was {value})")),
    }
}

fn parse_kinds(kinds: &[String]) -> Result<Vec<EntryKind>, String> {
    kinds
        .iter()
        .map(|kind| {
            EntryKind::parse(kind.trim()).ok_or_else(|| {
                let known: Vec<&str> = EntryKind::ALL.iter().map(|kind| kind.as_str()).collect();
                format!("unknown kind {kind:?}; use one of: {}", known.join(", "))
            })
        })
        .collect()
}

/// Where the next page starts: `o:N` (the Nth item of a listing or a
/// search), `s:START:N` (the Nth entry of the scope starting at entry START)
/// or `i:ID` (entry ID on). Opaque to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    Offset(usize),
    Scope { start: u64, offset: usize },
    Id(u64),
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cursor::Offset(offset) => write!(f, "o:{offset}"),
            Cursor::Scope { start, offset } => write!(f, "s:{start}:{offset}"),
            Cursor::Id(id) => write!(f, "i:{id}"),
        }
    }
}

impl Cursor {
    fn parse(text: &str) -> Result<Cursor, String> {
        let parsed = match text.split(':').collect::<Vec<_>>()[..] {
            ["o", offset] => offset.parse().ok().map(Cursor::Offset),
            ["s", start, offset] => {
                start.parse().ok().zip(offset.parse().ok()).map(|(start, offset)| Cursor::Scope { start, offset })
            }
            ["i", id] => id.parse().ok().map(Cursor::Id),
            _ => None,
        };
        parsed.ok_or_else(|| format!("cursor {text:?} is not one this server gave: pass `next_cursor` as it came"))
    }

    /// The offset of a listing's or search's cursor (0 without one).
    fn offset(text: Option<&str>) -> Result<usize, String> {
        match text.map(Cursor::parse).transpose()? {
            None => Ok(0),
            Some(Cursor::Offset(offset)) => Ok(offset),
            Some(_) => Err("this cursor belongs to tape_read".into()),
        }
    }
}

/// A store whose reads pass through and whose writes fail: all the server
/// holds, so nothing it does can change a tape.
struct ReadOnly(Arc<dyn TapeStore>);

impl ReadOnly {
    fn refuse(&self, tape: &TapeName, operation: &'static str) -> TapeError {
        TapeError::Backend {
            tape: tape.to_string(),
            operation,
            location: self.0.location(),
            source: "`bub mcp serve` only reads tapes".into(),
        }
    }
}

#[async_trait]
impl TapeStore for ReadOnly {
    async fn append(&self, tape: &TapeName, _entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        Err(self.refuse(tape, "append"))
    }

    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        self.0.read(tape, query).await
    }

    async fn read_shared(&self, tape: &TapeName, query: &TapeQuery) -> TapeResult<Vec<Arc<Entry>>> {
        self.0.read_shared(tape, query).await
    }

    async fn latest(&self, tape: &TapeName, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        self.0.latest(tape, queries).await
    }

    async fn stats(&self, tape: &TapeName) -> TapeResult<TapeStats> {
        self.0.stats(tape).await
    }

    async fn list(&self) -> TapeResult<Vec<TapeSummary>> {
        self.0.list().await
    }

    async fn reset(&self, tape: &TapeName) -> TapeResult<()> {
        Err(self.refuse(tape, "reset"))
    }

    fn location(&self) -> String {
        self.0.location()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::InMemoryTapeStore;
    use serde_json::json;

    #[test]
    fn cursors_read_back_as_given_and_others_are_refused() {
        for cursor in [Cursor::Offset(40), Cursor::Scope { start: 12, offset: 50 }, Cursor::Id(7)] {
            assert_eq!(Cursor::parse(&cursor.to_string()), Ok(cursor));
        }
        for bad in ["", "o:", "o:-1", "x:1", "s:1", "i:1:2", "o:1:2"] {
            assert!(Cursor::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Cursor::offset(Some("i:3")).is_err());
    }

    #[test]
    fn limits_outside_their_range_are_refused_with_the_range() {
        assert_eq!(bounded("limit", None, LIST_LIMIT), Ok(50));
        assert_eq!(bounded("limit", Some(500), LIST_LIMIT), Ok(500));
        assert_eq!(bounded("limit", Some(0), LIST_LIMIT), Err("limit must be between 1 and 500 (it was 0)".into()));
        assert!(bounded("limit", Some(u64::MAX), LIST_LIMIT).is_err());
    }

    #[tokio::test]
    async fn the_server_cannot_write_to_the_store_it_reads() {
        let store: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
        let name = TapeName::new("chat").unwrap();
        let tape = Tape::new(store.clone(), name.clone());
        tape.append(NewEntry::chat("user", "hello")).await.unwrap();
        let server = TapeServer::new(store.clone());
        let through_server = Tape::new(server.store.clone(), name.clone());
        assert!(through_server.append(NewEntry::chat("user", "sneaky")).await.is_err());
        assert!(through_server.handoff("x", json!({})).await.is_err());
        assert!(server.store.reset(&name).await.is_err());
        assert_eq!(store.stats(&name).await.unwrap().entries, 1);
        assert_eq!(through_server.read(&TapeQuery::all()).await.unwrap().len(), 1);
    }

    #[test]
    fn every_tool_is_read_only_and_has_object_schemas() {
        let tools = tools();
        let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(names, [LIST, SEARCH, READ]);
        for tool in &tools {
            assert_eq!(tool.annotations.as_ref().and_then(|a| a.read_only_hint), Some(true), "{}", tool.name);
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(tool.output_schema.is_some(), "{}", tool.name);
        }
    }
}
