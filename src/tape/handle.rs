//! [`Tape`]: one tape of a store, with the operations the runtime builds on —
//! handoff, bootstrap anchor, info, reset with archive, context, sidecars, forks.

use super::archive;
use super::context::{ChatMessage, ContextSelector, default_context_owned, default_request_context};
use super::entry::{Entry, EntryKind, NewEntry};
use super::error::{TapeError, TapeResult};
use super::fork::Fork;
use super::name::TapeName;
use super::query::TapeQuery;
use super::spill::SpillSettings;
use super::store::TapeStore;
use crate::message::RequestMessage;
use serde_json::{Value, json};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// The anchor every tape gets before its first turn.
pub const BOOTSTRAP_ANCHOR: &str = "session/start";

/// The anchor a compaction writes (see `bub::agent::compaction`): its state
/// `{summary, covers, keep_from}` is read by [`Tape::context_entries`] and
/// rendered as the summary by [`super::context`].
pub const COMPACTION_ANCHOR: &str = "auto_handoff/compaction";

/// The event a compaction leaves, once per window, when it cannot make room
/// for several turns (see `bub::agent::compaction`): `tape.info` shows its
/// `message`.
pub const COMPACTION_WARNING: &str = "compaction.warning";

/// Settings shared by the tapes of one runtime.
///
/// The default names no archive directory: the library writes no file it
/// was not told where to put, so a `reset(archive = true)` then fails
/// ([`TapeError::NoArchiveDir`]) and leaves the tape as it was. The `bub`
/// binary sets `<home>/tapes`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TapeSettings {
    /// Where `reset(archive = true)` writes its JSONL files; empty: nowhere
    /// (archiving is refused).
    pub archive_dir: PathBuf,
    pub spill: SpillSettings,
}

/// The first entry a compaction anchor kept verbatim (`state.keep_from`),
/// when `anchor` is one.
pub fn kept_from(anchor: &Entry) -> Option<u64> {
    anchor.payload.get("state")?.get("keep_from")?.as_u64()
}

/// A handle on one tape. Cheap to clone; all state lives in the store.
#[derive(Clone)]
pub struct Tape {
    store: Arc<dyn TapeStore>,
    name: TapeName,
    settings: Arc<TapeSettings>,
    /// `meta` every anchor written through this handle carries (see
    /// [`Tape::with_anchor_meta`]).
    anchor_meta: Option<Arc<serde_json::Map<String, Value>>>,
}

impl fmt::Debug for Tape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tape").field("name", &self.name.as_str()).field("store", &self.store.location()).finish()
    }
}

/// What `tape.info` reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TapeInfo {
    pub name: String,
    pub entries: u64,
    pub anchors: u64,
    pub last_anchor: Option<String>,
    pub entries_since_last_anchor: u64,
    /// Total tokens of the latest model call (`run` event with usage).
    pub last_token_usage: Option<u64>,
    /// The latest compaction: `#<anchor id> <date>, entries <first>-<last> summarised`.
    pub last_compaction: Option<String>,
    /// The latest [`COMPACTION_WARNING`]'s message (a line only when there is one).
    pub compaction_warning: Option<String>,
}

impl fmt::Display for TapeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "name: {}", self.name)?;
        writeln!(f, "entries: {}", self.entries)?;
        writeln!(f, "anchors: {}", self.anchors)?;
        writeln!(f, "last_anchor: {}", self.last_anchor.as_deref().unwrap_or("-"))?;
        writeln!(f, "entries_since_last_anchor: {}", self.entries_since_last_anchor)?;
        match self.last_token_usage {
            Some(tokens) => writeln!(f, "last_token_usage: {tokens}")?,
            None => writeln!(f, "last_token_usage: -")?,
        }
        write!(f, "last_compaction: {}", self.last_compaction.as_deref().unwrap_or("-"))?;
        match &self.compaction_warning {
            Some(warning) => write!(f, "\ncompaction_warning: {warning}"),
            None => Ok(()),
        }
    }
}

/// What a reset did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResetReport {
    /// The archive of the tape, when one was asked for.
    pub archived: Option<PathBuf>,
    /// Each sidecar reset with it, and its archive.
    pub sidecars: Vec<(TapeName, Option<PathBuf>)>,
}

impl Tape {
    /// A handle on `name` in `store`, with settings from the environment.
    pub fn new(store: Arc<dyn TapeStore>, name: TapeName) -> Tape {
        Tape { store, name, settings: Arc::new(TapeSettings::default()), anchor_meta: None }
    }

    pub fn with_settings(mut self, settings: TapeSettings) -> Tape {
        self.settings = Arc::new(settings);
        self
    }

    /// This handle, with `meta` stamped on every anchor written through it
    /// (a handoff's, a reset's bootstrap anchor). An anchor starts the context
    /// the model reads next, so what it carries over must keep the origin of
    /// the text it closes: the agent stamps the anchors a run's tools write
    /// with the provenance of the untrusted text that run held.
    pub fn with_anchor_meta(mut self, meta: serde_json::Map<String, Value>) -> Tape {
        self.anchor_meta = Some(Arc::new(meta));
        self
    }

    /// The `meta` anchors written through this handle carry.
    pub(crate) fn anchor_meta(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.anchor_meta.iter().flat_map(|meta| meta.iter())
    }

    pub fn name(&self) -> &TapeName {
        &self.name
    }

    pub fn store(&self) -> &Arc<dyn TapeStore> {
        &self.store
    }

    pub fn settings(&self) -> &TapeSettings {
        &self.settings
    }

    /// The same tape name on another store (a fork shares settings this way).
    pub(crate) fn on_store(&self, store: Arc<dyn TapeStore>) -> Tape {
        Tape { store, name: self.name.clone(), settings: self.settings.clone(), anchor_meta: self.anchor_meta.clone() }
    }

    /// The sidecar tape `<name>__sidecar__<sidecar>`, in the same store.
    pub fn sidecar(&self, sidecar: &str) -> Tape {
        Tape {
            store: self.store.clone(),
            name: self.name.sidecar(sidecar),
            settings: self.settings.clone(),
            anchor_meta: None,
        }
    }

    pub async fn append(&self, entry: NewEntry) -> TapeResult<Entry> {
        let stored = self.append_all(vec![entry]).await?;
        stored.into_iter().next().ok_or_else(|| self.broken_contract("an append of one entry returned none"))
    }

    /// Appends several entries atomically, with consecutive ids.
    pub async fn append_all(&self, entries: Vec<NewEntry>) -> TapeResult<Vec<Entry>> {
        let given = entries.len();
        let stored = self.store.append(&self.name, entries).await?;
        if stored.len() != given {
            let message = format!("an append of {given} entries returned {}", stored.len());
            return Err(self.broken_contract(&message));
        }
        Ok(stored)
    }

    fn broken_contract(&self, message: &str) -> TapeError {
        TapeError::StoreContract { tape: self.name.clone(), message: message.to_string() }
    }

    /// Appends an event `{name, data}`.
    pub async fn append_event(&self, name: &str, data: Value) -> TapeResult<Entry> {
        self.append(NewEntry::event(name, data)).await
    }

    pub async fn read(&self, query: &TapeQuery) -> TapeResult<Vec<Entry>> {
        self.store.read(&self.name, query).await
    }

    /// Writes an anchor and a `handoff` event, so the next context starts here.
    pub async fn handoff(&self, name: &str, state: Value) -> TapeResult<Entry> {
        let mut anchor = NewEntry::anchor(name, state.clone());
        for (key, value) in self.anchor_meta() {
            anchor = anchor.with_meta(key.clone(), value.clone());
        }
        let stored =
            self.append_all(vec![anchor, NewEntry::event("handoff", json!({"name": name, "state": state}))]).await?;
        stored.into_iter().next().ok_or_else(|| self.broken_contract("an append of two entries returned none"))
    }

    /// Writes the bootstrap anchor `session/start` if the tape has no anchor yet.
    /// Returns whether it wrote one.
    pub async fn ensure_bootstrap_anchor(&self) -> TapeResult<bool> {
        if self.store.stats(&self.name).await?.last_anchor.is_some() {
            return Ok(false);
        }
        self.write_bootstrap_anchor().await?;
        Ok(true)
    }

    /// Writes the bootstrap anchor `session/start` (for a caller that already
    /// knows the tape has no anchor).
    pub(crate) async fn write_bootstrap_anchor(&self) -> TapeResult<Entry> {
        self.handoff(BOOTSTRAP_ANCHOR, json!({"owner": "human"})).await
    }

    /// The last `limit` anchors, oldest first.
    pub async fn anchors(&self, limit: usize) -> TapeResult<Vec<Entry>> {
        let mut anchors = self.read(&TapeQuery::all().kinds([EntryKind::Anchor]).newest_first().limit(limit)).await?;
        anchors.reverse();
        Ok(anchors)
    }

    /// The data of the newest event called `name` (an indexed lookup): how
    /// session settings such as `model_switch` are read back.
    pub async fn last_event_data(&self, name: &str) -> TapeResult<Option<Value>> {
        let found = self.read(&TapeQuery::all().kinds([EntryKind::Event]).named(name).newest_first().limit(1)).await?;
        Ok(found.into_iter().next().and_then(|event| event.data().cloned()))
    }

    /// The newest system prompt recorded (the recorder writes one whenever a
    /// model call's differs from the last), for counting what it costs.
    pub async fn system_prompt(&self) -> TapeResult<Option<String>> {
        let found = self.latest(&[TapeQuery::all().kinds([EntryKind::System])]).await?;
        let newest = found.into_iter().next().flatten();
        Ok(newest.and_then(|entry| entry.payload.get("content")?.as_str().map(str::to_string)))
    }

    /// The newest entry each query selects, in order (see [`TapeStore::latest`]):
    /// several "latest X" lookups in one round trip.
    ///
    /// ```
    /// use bub::tape::{EntryKind, InMemoryTapeStore, NewEntry, Tape, TapeName, TapeQuery};
    /// use serde_json::json;
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let tape = Tape::new(Arc::new(InMemoryTapeStore::new()), TapeName::new("s")?);
    /// tape.append_event("model_switch", json!({"model": "openai:gpt-4o"})).await?;
    /// let found = tape
    ///     .latest(&[
    ///         TapeQuery::all().kinds([EntryKind::Event]).named("model_switch"),
    ///         TapeQuery::all().kinds([EntryKind::Anchor]),
    ///     ])
    ///     .await?;
    /// assert_eq!(found[0].as_ref().unwrap().data().unwrap()["model"], "openai:gpt-4o");
    /// assert!(found[1].is_none()); // no anchor yet
    /// # Ok::<(), bub::tape::TapeError>(())
    /// # }).unwrap();
    /// ```
    pub async fn latest(&self, queries: &[TapeQuery]) -> TapeResult<Vec<Option<Entry>>> {
        let found = self.store.latest(&self.name, queries).await?;
        super::store::checked_latest(&self.name, queries.len(), found)
    }

    pub async fn info(&self) -> TapeResult<TapeInfo> {
        let stats = self.store.stats(&self.name).await?;
        let run = TapeQuery::all().kinds([EntryKind::Event]).named("run");
        let compaction = TapeQuery::all().kinds([EntryKind::Anchor]).named(COMPACTION_ANCHOR);
        let warning = TapeQuery::all().kinds([EntryKind::Event]).named(COMPACTION_WARNING);
        let mut found = self.latest(&[run, compaction, warning]).await?.into_iter();
        let (last_run, compaction, warning) = (found.next().flatten(), found.next().flatten(), found.next().flatten());
        let compaction_warning = warning.and_then(|event| event.data()?.get("message")?.as_str().map(str::to_string));
        let last_token_usage = last_run.and_then(|run| run.data()?.pointer("/usage/total_tokens")?.as_u64());
        let last_compaction = compaction.map(|anchor| {
            let covers = |i: usize| anchor.payload.get("state")?.get("covers")?.get(i)?.as_u64();
            let date = super::entry::format_date(&anchor.date);
            match (covers(0), covers(1)) {
                (Some(first), Some(last)) => format!("#{} {date}, entries {first}-{last} summarised", anchor.id),
                _ => format!("#{} {date}", anchor.id),
            }
        });
        Ok(TapeInfo {
            name: self.name.to_string(),
            entries: stats.entries,
            anchors: stats.anchors,
            last_anchor: stats.last_anchor.as_ref().and_then(|a| a.name().map(str::to_string)),
            entries_since_last_anchor: stats.last_anchor.map_or(stats.entries, |a| stats.last_id - a.id),
            last_token_usage,
            last_compaction,
            compaction_warning,
        })
    }

    /// The model context with the default mapping (see [`super::context`]).
    pub async fn context(&self) -> TapeResult<Vec<ChatMessage>> {
        Ok(default_context_owned(self.context_entries().await?))
    }

    /// The model context with a custom selector.
    pub async fn context_with(&self, selector: &ContextSelector) -> TapeResult<Vec<ChatMessage>> {
        let entries = self.scope_entries(TapeQuery::last_anchor()).await?;
        Ok(selector(&entries.into_iter().filter(Entry::in_context).collect::<Vec<_>>()))
    }

    /// The entries the default context is built from: the last anchor, then
    /// the messages, tool calls and results after it. When that anchor is a
    /// compaction's (its state names `keep_from`, see [`kept_from`]), the
    /// entries it kept verbatim follow it, though they were written before
    /// it: a compaction appends, it never rewrites. Older anchors among the
    /// kept entries are left out (the compaction's summary covers them).
    /// Two indexed reads at most, whatever the tape's length.
    pub async fn context_entries(&self) -> TapeResult<Vec<Entry>> {
        self.scope_entries(TapeQuery::context()).await
    }

    /// The model context of a request: [`Tape::context`] with the message
    /// entries shared with the store's cache (see
    /// [`super::default_request_context`]), not copied.
    pub async fn request_context(&self) -> TapeResult<Vec<RequestMessage>> {
        Ok(default_request_context(&self.scope_shared(TapeQuery::context()).await?))
    }

    /// `from_anchor` (a last-anchor query) with the entries a compaction
    /// anchor kept spliced in after it.
    pub(crate) async fn scope_entries(&self, from_anchor: TapeQuery) -> TapeResult<Vec<Entry>> {
        // Entries the store does not keep are unwrapped without a copy.
        Ok(self.scope_shared(from_anchor).await?.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    /// [`Tape::scope_entries`], or on a tape without an anchor (one no run
    /// has opened: a library's own tape, a fresh name) the whole tape, with
    /// the query's kinds: what a compaction or a context estimate reads.
    pub(crate) async fn scope_or_whole(&self, from_anchor: TapeQuery) -> TapeResult<Vec<Entry>> {
        let kinds = from_anchor.kinds.clone();
        match self.scope_entries(from_anchor).await {
            Err(TapeError::AnchorNotFound { .. }) => self.read(&TapeQuery::all().kinds(kinds)).await,
            scope => scope,
        }
    }

    /// [`Tape::scope_entries`] as the store's shared entries.
    async fn scope_shared(&self, from_anchor: TapeQuery) -> TapeResult<Vec<Arc<Entry>>> {
        let kinds = from_anchor.kinds.clone();
        let mut entries = self.store.read_shared(&self.name, &from_anchor).await?;
        let Some((anchor_id, keep_from)) =
            entries.first().filter(|e| e.kind == EntryKind::Anchor).and_then(|a| Some((a.id, kept_from(a)?)))
        else {
            return Ok(entries);
        };
        if keep_from == 0 || keep_from >= anchor_id {
            return Ok(entries);
        }
        // Ids in a tape are consecutive: at most this many entries lie
        // between, fewer once kinds are filtered (the rest is dropped below).
        let between = TapeQuery::all().kinds(kinds).after_id(keep_from - 1).limit((anchor_id - keep_from) as usize);
        let kept = self.store.read_shared(&self.name, &between).await?;
        let kept = kept.into_iter().filter(|e| e.id < anchor_id && e.kind != EntryKind::Anchor);
        let after = entries.split_off(1);
        entries.extend(kept);
        entries.extend(after);
        Ok(entries)
    }

    /// Clears the tape and its sidecars, optionally archiving each to a JSONL
    /// file first, then writes a fresh `session/start` anchor whose state records
    /// where the archive went. When an archive cannot be written nothing of that
    /// tape is cleared.
    pub async fn reset(&self, archive: bool) -> TapeResult<ResetReport> {
        let mut report = ResetReport::default();
        let sidecars = self.sidecar_names().await?;
        if archive {
            if self.settings.archive_dir.as_os_str().is_empty() {
                return Err(TapeError::NoArchiveDir { tape: self.name.clone() });
            }
            report.archived = Some(archive::archive(self, &self.settings.archive_dir).await?);
        }
        self.store.reset(&self.name).await?;
        let mut state = json!({"owner": "human"});
        if let Some(path) = &report.archived {
            state["archived"] = json!(path.display().to_string());
        }
        self.handoff(BOOTSTRAP_ANCHOR, state).await?;

        for name in sidecars {
            let sidecar = Tape { name, anchor_meta: None, ..self.clone() };
            let archived = match archive {
                true => match archive::archive(&sidecar, &self.settings.archive_dir).await {
                    Ok(path) => Some(path),
                    Err(error) => {
                        self.append(
                            NewEntry::event(
                                "sidecar.reset",
                                json!({"sidecar": sidecar.name.as_str(), "status": "skipped", "error": error.to_string()}),
                            )
                            .hidden_from_context(),
                        )
                        .await?;
                        continue;
                    }
                },
                false => None,
            };
            self.store.reset(&sidecar.name).await?;
            let mut data = json!({"sidecar": sidecar.name.as_str(), "status": "ok"});
            if let Some(path) = &archived {
                data["archived"] = json!(path.display().to_string());
            }
            self.append(NewEntry::event("sidecar.reset", data).hidden_from_context()).await?;
            report.sidecars.push((sidecar.name, archived));
        }
        Ok(report)
    }

    /// Opens a fork: writes through the returned fork's tape stay in memory until
    /// [`Fork::merge`]; reads see this tape followed by them.
    pub fn fork(&self) -> Fork {
        Fork::open(self)
    }

    /// The names of this tape's sidecars that hold entries.
    pub async fn sidecar_names(&self) -> TapeResult<Vec<TapeName>> {
        Ok(self
            .store
            .list()
            .await?
            .into_iter()
            .filter_map(|summary| TapeName::new(summary.name).ok())
            .filter(|name| name != &self.name && name.belongs_to(&self.name))
            .collect())
    }
}
