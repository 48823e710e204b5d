//! `bub tape …`: inspect tapes. Output is meant for both a person and a
//! script: tables and one-line summaries by default, JSON lines with `--json`.
//!
//! Also [`CliSession`], the tape of a `bub run`/`bub chat` session: its name
//! scoped to the workspace, which the tape records for `bub tape list`.
//!
//! The commands that take a tape find NAME by one rule: the session NAME as
//! `bub run --session NAME` names it in the current directory, if that tape
//! exists, else the tape named exactly NAME (what `bub tape list` prints, and
//! every gateway chat and tape from before the scoping). `--workspace DIR`
//! looks only for the session in DIR, `--exact` only for the tape name.

use super::env::canonical_workspace;
use crate::db::{Durability, HomeStore};
use crate::home::BubHome;
use crate::tape::summary::{self, WORKSPACE_EVENT, workspace_of, workspace_query};
pub use crate::tape::summary::{one_line, summarize};
use crate::tape::{Entry, EntryKind, NewEntry, Tape, TapeName, TapeQuery, TapeResult, TapeStore};
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum TapeSubcommand {
    /// List tapes with their entry counts and, for `bub run`/`bub chat` sessions, their workspace.
    List {
        /// Include sidecar tapes (`<tape>__sidecar__<name>`).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        format: Format,
    },
    /// Show the entries of one tape, oldest first.
    Show {
        /// The session as `bub run --session` names it here, else a tape as `bub tape list` prints it.
        #[arg(value_name = "NAME")]
        session: String,
        #[command(flatten)]
        lookup: Lookup,
        /// Only what the model reads: the last anchor, the recent turns a
        /// compaction kept before it, and what follows.
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
        /// The session as `bub run --session` names it here, else a tape as `bub tape list` prints it.
        #[arg(value_name = "NAME")]
        session: String,
        query: String,
        #[command(flatten)]
        lookup: Lookup,
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        format: Format,
    },
    /// Write every entry of a tape as JSON lines.
    Export {
        /// The session as `bub run --session` names it here, else a tape as `bub tape list` prints it.
        #[arg(value_name = "NAME")]
        session: String,
        #[command(flatten)]
        lookup: Lookup,
        /// Write to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// Where the commands that take a tape look for NAME (see the module docs).
#[derive(Debug, Args)]
pub struct Lookup {
    /// Only the session NAME of `bub run`/`bub chat` in this workspace.
    #[arg(long, short = 'w', value_name = "DIR", conflicts_with = "exact")]
    workspace: Option<PathBuf>,
    /// Only the tape named exactly NAME, as `bub tape list` prints it.
    #[arg(long)]
    exact: bool,
}

#[derive(Debug, Args)]
pub struct Format {
    /// One JSON object per line instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run_tape(home: &BubHome, command: TapeSubcommand) -> Result<()> {
    let location = crate::setup::store_location(home, None, &super::env::vars())?;
    let store = Arc::new(crate::db::open(&location, Durability::default()).await?);
    let result = run_tape_command(store.clone(), command).await;
    store.close().await;
    result
}

async fn run_tape_command(store: Arc<HomeStore>, command: TapeSubcommand) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match command {
        TapeSubcommand::List { all, format } => {
            let tapes: Vec<_> = store
                .list()
                .await?
                .into_iter()
                .filter(|t| all || !t.name.contains(crate::tape::name::SIDECAR_MARKER))
                .collect();
            let mut workspaces = Vec::with_capacity(tapes.len());
            for tape in &tapes {
                workspaces.push(recorded_workspace(&store, &tape.name).await?);
            }
            if format.json {
                for (tape, workspace) in tapes.iter().zip(&workspaces) {
                    let mut line = serde_json::to_value(tape)?;
                    line["workspace"] = json!(workspace);
                    writeln!(out, "{line}")?;
                }
            } else if tapes.is_empty() {
                writeln!(out, "no tapes in {}", store.location())?;
            } else {
                let width = tapes.iter().map(|t| t.name.chars().count()).max().unwrap_or(4).max(4);
                writeln!(out, "{:<width$}  {:>8}  {:<19}  WORKSPACE", "TAPE", "ENTRIES", "UPDATED")?;
                for (tape, workspace) in tapes.iter().zip(&workspaces) {
                    let updated = tape.updated.map_or("-".to_string(), |d| d.format("%Y-%m-%d %H:%M:%S").to_string());
                    let workspace = workspace.as_deref().unwrap_or(UNKNOWN_WORKSPACE);
                    writeln!(out, "{:<width$}  {:>8}  {updated:<19}  {workspace}", tape.name, tape.entries)?;
                }
            }
        }
        TapeSubcommand::Show { session, lookup, since_anchor, kinds, limit, format } => {
            let tape = open_existing(&store, &session, &lookup).await?;
            let kinds = parse_kinds(&kinds)?;
            let entries = if since_anchor {
                // What the model reads: a compaction's kept turns included.
                let mut entries = tape.scope_entries(TapeQuery::last_anchor().kinds(kinds)).await?;
                let skip = entries.len().saturating_sub(limit.unwrap_or(usize::MAX));
                entries.drain(..skip);
                entries
            } else {
                let mut query = TapeQuery::all().kinds(kinds);
                if let Some(limit) = limit {
                    query = query.newest_first().limit(limit);
                }
                let mut entries = tape.read(&query).await?;
                if limit.is_some() {
                    entries.reverse();
                }
                entries
            };
            print_entries(&mut out, &entries, format.json)?;
        }
        TapeSubcommand::Search { session, query, lookup, limit, format } => {
            let tape = open_existing(&store, &session, &lookup).await?;
            let entries = tape.read(&TapeQuery::search(query.clone()).limit(limit)).await?;
            if entries.is_empty() && !format.json {
                writeln!(out, "no entries of {} match {query:?}", tape.name())?;
            }
            print_entries(&mut out, &entries, format.json)?;
        }
        TapeSubcommand::Export { session, lookup, output } => {
            let tape = open_existing(&store, &session, &lookup).await?;
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

/// The tape NAME refers to under the [`Lookup`] rule (see the module docs);
/// one that does not exist is an error with a hint.
async fn open_existing(store: &Arc<HomeStore>, name: &str, lookup: &Lookup) -> Result<Tape> {
    let exact = TapeName::new(name)?;
    let tapes: HashSet<String> = store.list().await?.into_iter().map(|t| t.name).collect();
    let open = |name: TapeName| Tape::new(store.clone(), name);
    if lookup.exact {
        if tapes.contains(exact.as_str()) {
            return Ok(open(exact));
        }
        bail!("no tape named {name:?} in {}; `bub tape list` shows the tapes", store.location());
    }
    let Some(dir) = &lookup.workspace else {
        // Here: a current directory bub cannot use, or a session too long to
        // scope, has no session of its own; NAME can still be a tape.
        let here = CliSession::resolve(name, None).ok();
        if let Some(here) = &here
            && tapes.contains(here.tape.as_str())
        {
            if tapes.contains(exact.as_str()) {
                eprintln!(
                    "note: this is session {name:?} of {} (tape {}); `--exact` shows the tape named {name:?}",
                    here.workspace.display(),
                    here.tape
                );
            }
            return Ok(open(here.tape.clone()));
        }
        if tapes.contains(exact.as_str()) {
            return Ok(open(exact));
        }
        let session = here.map(|here| format!(", nor a session {name:?} of {}", here.workspace.display()));
        bail!(
            "no tape named {name:?}{} in {}; `bub tape list` shows the tapes",
            session.unwrap_or_default(),
            store.location()
        );
    };
    let session = CliSession::resolve(name, Some(dir))?;
    if tapes.contains(session.tape.as_str()) {
        return Ok(open(session.tape));
    }
    bail!(
        "no session {name:?} of {} (its tape would be {}) in {}; `bub tape list` shows the tapes",
        session.workspace.display(),
        session.tape,
        store.location()
    );
}

/// What `bub tape list` prints for a tape that records no workspace: a
/// gateway chat, or a command-line session from before the scoping.
const UNKNOWN_WORKSPACE: &str = "-";

/// A session of `bub run` or `bub chat`: the name the user gave, the
/// canonical workspace, and the tape the two name ([`TapeName::scoped`]), so
/// the same `--session` in two projects is two conversations.
#[derive(Debug, Clone)]
pub(crate) struct CliSession {
    pub session: String,
    pub workspace: PathBuf,
    pub tape: TapeName,
}

impl CliSession {
    /// `session` in `workspace` (`None`: the current directory), which must
    /// be a directory; relative paths and symlinks resolve to the same tape
    /// as the real path.
    pub fn resolve(session: &str, workspace: Option<&Path>) -> Result<CliSession> {
        let canonical = canonical_workspace(workspace).with_context(|| match workspace {
            Some(dir) => format!("cannot use {} as the workspace", dir.display()),
            None => "cannot use the current directory as the workspace".to_string(),
        })?;
        let tape = TapeName::scoped(session, &canonical)?;
        Ok(CliSession { session: session.to_string(), workspace: canonical, tape })
    }

    /// Records the workspace on the tape after a run, unless the tape already
    /// does or is empty (an empty prompt, a `temp/` session: nothing to own).
    /// Checked after every run, so a tape a `,tape.reset` cleared says it
    /// again. A failure is a warning: the conversation itself was kept.
    pub async fn note_workspace(&self, store: Arc<dyn TapeStore>) {
        if let Err(error) = self.try_note_workspace(store).await {
            eprintln!("warning: cannot record the workspace on tape {}: {error}", self.tape);
        }
    }

    async fn try_note_workspace(&self, store: Arc<dyn TapeStore>) -> TapeResult<()> {
        let tape = Tape::new(store, self.tape.clone());
        let found = tape.latest(&[TapeQuery::all(), workspace_query()]).await?;
        let workspace = self.workspace.display().to_string();
        let recorded = found[1].as_ref().and_then(Entry::data).and_then(workspace_of);
        if found[0].is_none() || recorded.as_deref() == Some(workspace.as_str()) {
            return Ok(());
        }
        let data = json!({"session": self.session, "workspace": workspace});
        tape.append(NewEntry::event(WORKSPACE_EVENT, data).hidden_from_context()).await?;
        Ok(())
    }
}

/// The workspace the tape `name` records (none for gateway chats and tapes
/// from before the scoping).
async fn recorded_workspace(store: &Arc<HomeStore>, name: &str) -> Result<Option<String>> {
    let Ok(name) = TapeName::new(name) else { return Ok(None) };
    Ok(summary::recorded_workspace(&Tape::new(store.clone(), name)).await?)
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
