//! `bub tape …`: inspect tapes. Output is meant for both a person and a
//! script: tables and one-line summaries by default, JSON lines with `--json`.

use crate::home::BubHome;
use crate::tape::{Entry, EntryKind, SqliteTapeStore, Tape, TapeName, TapeQuery, TapeStore};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum TapeCommand {
    /// List tapes with their entry counts.
    List {
        /// Include sidecar tapes (`<tape>__sidecar__<name>`).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        format: Format,
    },
    /// Show the entries of one tape, oldest first.
    Show {
        /// Session (tape) name, as `bub tape list` prints it.
        session: String,
        /// Only the entries from the last anchor on (what the model sees).
        #[arg(long)]
        since_anchor: bool,
        /// Only entries of these kinds (message, system, anchor, tool_call, tool_result, error, event).
        #[arg(long = "kind", value_name = "KIND")]
        kinds: Vec<String>,
        /// At most this many entries (the newest ones).
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        format: Format,
    },
    /// Search one tape's entries, newest first (case-insensitive).
    Search {
        session: String,
        query: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        format: Format,
    },
    /// Write every entry of a tape as JSON lines.
    Export {
        session: String,
        /// Write to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct Format {
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run_tape(home: &BubHome, command: TapeCommand) -> Result<()> {
    let store = Arc::new(SqliteTapeStore::open(home.database()).await?);
    let result = run_tape_command(store.clone(), command).await;
    store.close().await;
    result
}

async fn run_tape_command(store: Arc<SqliteTapeStore>, command: TapeCommand) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        TapeCommand::List { all, format } => {
            let tapes: Vec<_> = store
                .list()
                .await?
                .into_iter()
                .filter(|t| all || !t.name.contains(crate::tape::name::SIDECAR_MARKER))
                .collect();
            if format.json {
                for tape in &tapes {
                    writeln!(out, "{}", serde_json::to_string(tape)?)?;
                }
            } else if tapes.is_empty() {
                writeln!(out, "no tapes in {}", store.location())?;
            } else {
                let width = tapes.iter().map(|t| t.name.chars().count()).max().unwrap_or(4).max(4);
                writeln!(out, "{:<width$}  {:>8}  UPDATED", "TAPE", "ENTRIES")?;
                for tape in &tapes {
                    let updated = tape.updated.map_or("-".to_string(), |d| d.format("%Y-%m-%d %H:%M:%S").to_string());
                    writeln!(out, "{:<width$}  {:>8}  {updated}", tape.name, tape.entries)?;
                }
            }
        }
        TapeCommand::Show { session, since_anchor, kinds, limit, format } => {
            let tape = open_existing(&store, &session).await?;
            let mut query = if since_anchor { TapeQuery::last_anchor() } else { TapeQuery::all() };
            query = query.kinds(parse_kinds(&kinds)?);
            if let Some(limit) = limit {
                query = query.newest_first().limit(limit);
            }
            let mut entries = tape.read(&query).await?;
            if limit.is_some() {
                entries.reverse();
            }
            print_entries(&mut out, &entries, format.json)?;
        }
        TapeCommand::Search { session, query, limit, format } => {
            let tape = open_existing(&store, &session).await?;
            let entries = tape.read(&TapeQuery::search(query.clone()).limit(limit)).await?;
            if entries.is_empty() && !format.json {
                writeln!(out, "no entries of {session} match {query:?}")?;
            }
            print_entries(&mut out, &entries, format.json)?;
        }
        TapeCommand::Export { session, output } => {
            let tape = open_existing(&store, &session).await?;
            match output {
                Some(path) => {
                    let file =
                        std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
                    let mut file = std::io::BufWriter::new(file);
                    let count = crate::tape::archive::write_jsonl(&tape, &mut file, &path).await?;
                    eprintln!("wrote {count} entries to {}", path.display());
                }
                None => {
                    drop(out);
                    let mut stdout = std::io::BufWriter::new(std::io::stdout());
                    crate::tape::archive::write_jsonl(&tape, &mut stdout, std::path::Path::new("<stdout>")).await?;
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// A tape that exists in the store; an unknown name is an error with a hint.
async fn open_existing(store: &Arc<SqliteTapeStore>, session: &str) -> Result<Tape> {
    let name = TapeName::new(session)?;
    if !store.list().await?.iter().any(|t| t.name == session) {
        bail!("no tape named {session:?} in {}; `bub tape list` shows the tapes", store.location());
    }
    Ok(Tape::new(store.clone(), name))
}

fn parse_kinds(kinds: &[String]) -> Result<Vec<EntryKind>> {
    kinds
        .iter()
        .flat_map(|k| k.split(','))
        .map(|kind| {
            EntryKind::parse(kind.trim()).with_context(|| {
                let known: Vec<_> = EntryKind::ALL.iter().map(|k| k.as_str()).collect();
                format!("unknown entry kind {kind:?}; use one of {}", known.join(", "))
            })
        })
        .collect()
}

fn print_entries(out: &mut impl Write, entries: &[Entry], json: bool) -> Result<()> {
    for entry in entries {
        if json {
            writeln!(out, "{}", serde_json::to_string(entry)?)?;
        } else {
            writeln!(
                out,
                "#{:<5} {}  {:<11} {}",
                entry.id,
                entry.date.format("%Y-%m-%d %H:%M:%S"),
                entry.kind.as_str(),
                summarize(entry)
            )?;
        }
    }
    Ok(())
}

/// One line that says what an entry holds.
pub fn summarize(entry: &Entry) -> String {
    let text = |value: Option<&Value>| match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let line = match entry.kind {
        EntryKind::Message => {
            let role = entry.payload.get("role").and_then(Value::as_str).unwrap_or("?");
            format!("{role}: {}", text(entry.payload.get("content")))
        }
        EntryKind::System => text(entry.payload.get("content")),
        EntryKind::Anchor | EntryKind::Event => {
            let data = entry.data().filter(|d| !d.is_null()).map(Value::to_string).unwrap_or_default();
            format!("{} {data}", entry.name().unwrap_or("?"))
        }
        EntryKind::ToolCall => entry
            .payload
            .get("calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|call| {
                let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("?");
                format!("{name}({})", text(call.pointer("/function/arguments")))
            })
            .collect::<Vec<_>>()
            .join(", "),
        EntryKind::ToolResult => entry
            .payload
            .get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| text(Some(r)))
            .collect::<Vec<_>>()
            .join(" | "),
        EntryKind::Error => format!("{}: {}", text(entry.payload.get("kind")), text(entry.payload.get("message"))),
    };
    // Calls made by code under `run_code` (recorded out of the model's context).
    let line = match entry.meta.get("code_mode") {
        Some(Value::Bool(true)) => format!("[from code] {line}"),
        _ => line,
    };
    one_line(&line, 160)
}

pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
