//! Spill: tool results too long for the model's context are stored in the
//! sidecar tape `<tape>__sidecar__spill`; the model gets a preview and a handle
//! it can page through with `spill.read`.
//!
//! Layout on the sidecar, per spill: for each chunk an anchor
//! `spill/<handle>/chunk/<i>` followed by a one-element `tool_result`; then the
//! anchor `spill/<handle>/manifest` (state: handle, chunks, bytes, chars, lines,
//! tool) and a `spill.manifest` event. Chunks are written in batches and the
//! manifest last, so a spill without a manifest is incomplete and is reported
//! as such. Every lookup is by anchor name, an index probe in SQL stores.
//! Because the sidecar is a tape of the same store, it follows its tape through
//! fork, merge and reset.

use super::entry::{EntryKind, NewEntry};
use super::error::TapeError;
use super::handle::Tape;
use super::query::TapeQuery;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::fmt;

/// The sidecar's name.
pub const SPILL_SIDECAR: &str = "spill";
/// Characters per estimated token.
pub const CHARS_PER_TOKEN: usize = 4;
/// Bytes per chunk (chunks end on a character boundary, so some are shorter).
pub const CHUNK_BYTES: usize = 16 * 1024;
/// Most chunks one `spill.read` returns.
pub const MAX_READ_CHUNKS: usize = 4;
/// Characters of the head and of the tail shown in a preview.
pub const PREVIEW_EDGE_CHARS: usize = 300;
/// Chunks appended per batch before the manifest.
const CHUNKS_PER_BATCH: usize = 64;

/// When to spill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpillSettings {
    /// Results longer than this many estimated tokens are spilled. 0 stops new
    /// spills; existing handles stay readable.
    pub threshold_tokens: usize,
}

impl Default for SpillSettings {
    fn default() -> SpillSettings {
        SpillSettings { threshold_tokens: 4096 }
    }
}

impl SpillSettings {
    /// The threshold in characters, `None` when spilling is off.
    pub fn threshold_chars(&self) -> Option<usize> {
        (self.threshold_tokens > 0).then(|| self.threshold_tokens.saturating_mul(CHARS_PER_TOKEN))
    }
}

/// What the model gets for a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum SpillOutcome {
    /// Short enough: the result as it was.
    Kept(String),
    /// Stored in the sidecar: a header, a read hint and a preview.
    Spilled { handle: String, text: String },
    /// Too long, and storing it failed: a truncated preview that says so.
    Truncated { error: String, text: String },
}

impl SpillOutcome {
    /// The text to hand to the model.
    pub fn text(&self) -> &str {
        match self {
            SpillOutcome::Kept(text) | SpillOutcome::Spilled { text, .. } | SpillOutcome::Truncated { text, .. } => {
                text
            }
        }
    }

    pub fn into_text(self) -> String {
        match self {
            SpillOutcome::Kept(text) | SpillOutcome::Spilled { text, .. } | SpillOutcome::Truncated { text, .. } => {
                text
            }
        }
    }
}

/// The manifest that marks a spill complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpillManifest {
    pub handle: String,
    pub chunks: usize,
    pub bytes: usize,
    pub chars: usize,
    pub lines: usize,
    pub tool: String,
}

/// One page of a spilled result.
#[derive(Debug, Clone, PartialEq)]
pub struct SpillPage {
    pub manifest: SpillManifest,
    /// The `meta` the spilled result was stored with (its text's origin,
    /// when the run that spilled it held untrusted text: see
    /// [`Tape::with_anchor_meta`](super::Tape::with_anchor_meta)).
    pub meta: serde_json::Map<String, Value>,
    /// Index of the first chunk shown.
    pub first_chunk: usize,
    /// Number of chunks shown.
    pub shown: usize,
    /// Cursor for the next call in the same direction; `None` at the end.
    pub next_cursor: Option<usize>,
    pub content: String,
}

impl fmt::Display for SpillPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = self.first_chunk + self.shown.saturating_sub(1);
        writeln!(
            f,
            "[spill {}: chunks {}-{} of {} ({} chars, {} bytes in all); complete: true; next_cursor: {}]",
            self.manifest.handle,
            self.first_chunk,
            last,
            self.manifest.chunks,
            self.manifest.chars,
            self.manifest.bytes,
            self.next_cursor.map_or("none".to_string(), |c| c.to_string()),
        )?;
        f.write_str(&self.content)
    }
}

/// Why a spill could not be read. The messages are meant for the model.
#[derive(Debug, thiserror::Error)]
pub enum SpillReadError {
    #[error("no spilled result has handle {0:?}; use the handle from the spill header")]
    UnknownHandle(String),
    #[error("the spilled result {handle:?} is incomplete (no manifest, {found} chunk(s) written); it cannot be read")]
    Incomplete { handle: String, found: usize },
    #[error("count must be between 1 and {MAX_READ_CHUNKS}, got {0}")]
    BadCount(usize),
    #[error("cursor {cursor} is past the last chunk (the result has {chunks} chunk(s), cursors 0-{})", .chunks.saturating_sub(1))]
    BadCursor { cursor: usize, chunks: usize },
    #[error("chunk {chunk} of spilled result {handle:?} is missing")]
    MissingChunk { handle: String, chunk: usize },
    #[error(transparent)]
    Store(#[from] TapeError),
}

fn chunk_anchor(handle: &str, index: usize) -> String {
    format!("spill/{handle}/chunk/{index}")
}

fn manifest_anchor(handle: &str) -> String {
    format!("spill/{handle}/manifest")
}

/// Splits `text` into pieces of at most `max_bytes` bytes, each ending on a
/// character boundary (a piece may be shorter so a character is never cut).
pub fn utf8_chunks(text: &str, max_bytes: usize) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(max_bytes.max(4));
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (chunk, tail) = rest.split_at(end);
        chunks.push(chunk);
        rest = tail;
    }
    chunks
}

/// The first and last [`PREVIEW_EDGE_CHARS`] characters with how many were left out.
pub fn preview(text: &str) -> String {
    let chars = text.chars().count();
    if chars <= PREVIEW_EDGE_CHARS * 2 {
        return text.to_string();
    }
    let head: String = text.chars().take(PREVIEW_EDGE_CHARS).collect();
    let tail_start = text.char_indices().nth(chars - PREVIEW_EDGE_CHARS).map_or(text.len(), |(i, _)| i);
    format!("{head}\n[... {} chars omitted ...]\n{}", chars - PREVIEW_EDGE_CHARS * 2, &text[tail_start..])
}

impl Tape {
    /// The spill sidecar of this tape.
    pub fn spill_tape(&self) -> Tape {
        self.sidecar(SPILL_SIDECAR)
    }

    /// Spills `text` (the rendered result of `tool`) when it is over the
    /// threshold. Never fails: if storing fails the model gets a truncated
    /// preview that says so, and the failure is logged.
    pub async fn spill_if_large(&self, tool: &str, text: String) -> SpillOutcome {
        let chars = text.chars().count();
        match self.settings().spill.threshold_chars() {
            Some(threshold) if chars > threshold => {}
            _ => return SpillOutcome::Kept(text),
        }
        match self.spill(tool, &text, chars).await {
            Ok(manifest) => {
                let text = format!(
                    "[tool result spilled: {} chars, {} bytes in {} chunk(s); handle {}]\n\
                     Read it with spill_read(handle=\"{}\", cursor=0, count=1, from_end=false).\n\
                     --- preview ---\n{}",
                    manifest.chars,
                    manifest.bytes,
                    manifest.chunks,
                    manifest.handle,
                    manifest.handle,
                    preview(&text)
                );
                SpillOutcome::Spilled { handle: manifest.handle, text }
            }
            Err(error) => {
                tracing::warn!(tape = %self.name(), tool, %error, "spill failed; the result is truncated");
                let _ = self
                    .append(
                        NewEntry::event(
                            "spill.write",
                            json!({"status": "error", "tool": tool, "error": error.to_string()}),
                        )
                        .hidden_from_context(),
                    )
                    .await;
                let text = format!(
                    "[tool result truncated, spill failed: {chars} chars; only a preview is shown]\n{}",
                    preview(&text)
                );
                SpillOutcome::Truncated { error: error.to_string(), text }
            }
        }
    }

    async fn spill(&self, tool: &str, text: &str, chars: usize) -> Result<SpillManifest, TapeError> {
        let handle = uuid::Uuid::new_v4().simple().to_string();
        let sidecar = self.spill_tape();
        let chunks = utf8_chunks(text, CHUNK_BYTES);
        for (batch_index, batch) in chunks.chunks(CHUNKS_PER_BATCH).enumerate() {
            let mut entries = Vec::with_capacity(batch.len() * 2);
            for (offset, chunk) in batch.iter().enumerate() {
                let index = batch_index * CHUNKS_PER_BATCH + offset;
                entries.push(NewEntry::anchor(chunk_anchor(&handle, index), json!({})).hidden_from_context());
                entries.push(
                    NewEntry::tool_result(vec![Value::String((*chunk).to_string())])
                        .with_meta("spill_handle", json!(handle))
                        .with_meta("spill_chunk", json!(index))
                        .hidden_from_context(),
                );
            }
            sidecar.append_all(entries).await?;
        }
        let manifest = SpillManifest {
            handle: handle.clone(),
            chunks: chunks.len(),
            bytes: text.len(),
            chars,
            lines: text.lines().count(),
            tool: tool.to_string(),
        };
        let state = serde_json::to_value(&manifest).unwrap_or_default();
        let mut anchor = NewEntry::anchor(manifest_anchor(&handle), state.clone());
        for (key, value) in self.anchor_meta() {
            anchor = anchor.with_meta(key.clone(), value.clone());
        }
        sidecar
            .append_all(vec![
                anchor.hidden_from_context(),
                NewEntry::event("spill.manifest", state).hidden_from_context(),
            ])
            .await?;
        self.append(
            NewEntry::event(
                "spill.write",
                json!({"status": "ok", "handle": handle, "bytes": manifest.bytes, "chunks": manifest.chunks, "tool": tool}),
            )
            .hidden_from_context(),
        )
        .await?;
        Ok(manifest)
    }

    /// Reads `count` chunks (at most [`MAX_READ_CHUNKS`]) of a spilled result,
    /// starting at `cursor` from the start, or from the end when `from_end`.
    pub async fn read_spill(
        &self,
        handle: &str,
        cursor: usize,
        count: usize,
        from_end: bool,
    ) -> Result<SpillPage, SpillReadError> {
        if count == 0 || count > MAX_READ_CHUNKS {
            return Err(SpillReadError::BadCount(count));
        }
        let sidecar = self.spill_tape();
        let by_name = |name: String| TapeQuery::all().kinds([EntryKind::Anchor]).named(name).newest_first().limit(1);
        let manifest = sidecar.read(&by_name(manifest_anchor(handle))).await?;
        let Some(manifest) = manifest.first() else {
            let first = sidecar.read(&by_name(chunk_anchor(handle, 0))).await?;
            if first.is_empty() {
                return Err(SpillReadError::UnknownHandle(handle.to_string()));
            }
            let found = sidecar
                .read(&TapeQuery::all().kinds([EntryKind::ToolResult]).after_id(first[0].id))
                .await?
                .iter()
                .filter(|e| e.meta.get("spill_handle").and_then(Value::as_str) == Some(handle))
                .count();
            return Err(SpillReadError::Incomplete { handle: handle.to_string(), found });
        };
        let mut meta = manifest.meta.clone();
        meta.remove("context");
        let manifest: SpillManifest = manifest
            .data()
            .and_then(|state| serde_json::from_value(state.clone()).ok())
            .ok_or_else(|| SpillReadError::Incomplete { handle: handle.to_string(), found: 0 })?;
        if cursor >= manifest.chunks {
            return Err(SpillReadError::BadCursor { cursor, chunks: manifest.chunks });
        }
        let (first, shown, next_cursor) = if from_end {
            let end = manifest.chunks - cursor;
            let first = end.saturating_sub(count);
            (first, end - first, (first > 0).then_some(cursor + (end - first)))
        } else {
            let shown = count.min(manifest.chunks - cursor);
            (cursor, shown, (cursor + shown < manifest.chunks).then_some(cursor + shown))
        };
        let mut content = String::new();
        for index in first..first + shown {
            let query = TapeQuery::after_anchor(chunk_anchor(handle, index)).kinds([EntryKind::ToolResult]).limit(1);
            let chunk = match sidecar.read(&query).await {
                Ok(entries) => entries.into_iter().next(),
                Err(TapeError::AnchorNotFound { .. }) => None,
                Err(error) => return Err(error.into()),
            };
            let text = chunk
                .as_ref()
                .and_then(|e| e.payload.get("results")?.get(0)?.as_str().map(str::to_string))
                .ok_or_else(|| SpillReadError::MissingChunk { handle: handle.to_string(), chunk: index })?;
            content.push_str(&text);
        }
        Ok(SpillPage { manifest, meta, first_chunk: first, shown, next_cursor, content })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_never_cut_a_character() {
        let text = "a".repeat(5) + &"é".repeat(10) + "🦀🦀";
        for size in 1..12 {
            let chunks = utf8_chunks(&text, size);
            assert_eq!(chunks.concat(), text);
            assert!(chunks.iter().all(|c| !c.is_empty()));
        }
    }

    #[test]
    fn preview_keeps_head_and_tail_and_counts_the_rest() {
        let text = format!("{}{}{}", "h".repeat(300), "m".repeat(1000), "t".repeat(300));
        let shown = preview(&text);
        assert!(shown.starts_with(&"h".repeat(300)));
        assert!(shown.ends_with(&"t".repeat(300)));
        assert!(shown.contains("[... 1000 chars omitted ...]"));
    }
}
