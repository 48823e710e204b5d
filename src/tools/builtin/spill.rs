//! `spill.read`: pages through a tool result that was too long for the context
//! and was stored in the tape's spill sidecar (see [`crate::tape::spill`]).
//!
//! Every failure (unknown handle, bad cursor, incomplete spill, even a store
//! error) comes back as a plain successful text: the messages are written for
//! the model, which reads them and retries with a better handle or cursor.

use crate::tape::spill::{CHUNK_BYTES, MAX_READ_CHUNKS};
use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

fn default_count() -> usize {
    1
}

/// Read a tool result that was too long to show and was stored instead (its
/// preview names the handle). Each call returns up to 4 chunks of about 16 KiB
/// (fewer when that many would not fit in one result) and a header with
/// `next_cursor`; call again with that cursor (and the same `from_end`) to
/// continue, until `next_cursor` is `none`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SpillReadArgs {
    /// The handle from the `[tool result spilled: …; handle <handle>]` header.
    pub handle: String,
    /// Chunks to skip: from the start, or from the end when `from_end` is true.
    #[serde(default)]
    pub cursor: usize,
    /// How many chunks to return (1 to 4).
    #[serde(default = "default_count")]
    pub count: usize,
    /// Read backwards from the last chunk (for the tail of logs and outputs).
    #[serde(default)]
    pub from_end: bool,
}

/// The tool's name.
pub const SPILL_READ: &str = "spill.read";

/// How many chunks fit in one result the model reads: as many as stay within
/// the spill threshold (what counts as too long for one result), at least one.
/// Off (threshold 0): as many as asked.
fn chunks_that_fit(asked: usize, threshold_chars: Option<usize>) -> usize {
    match threshold_chars {
        Some(threshold) => asked.min((threshold / CHUNK_BYTES).max(1)),
        None => asked,
    }
}

/// `spill.read`: the `SpillPage` text, or the read error as text.
pub fn spill_read_tool() -> Tool {
    Tool::typed(SPILL_READ, |args: SpillReadArgs, ctx: ToolContext| async move {
        let handle = args.handle.trim();
        let asked = args.count;
        let count = if (1..=MAX_READ_CHUNKS).contains(&asked) {
            chunks_that_fit(asked, ctx.tape.settings().spill.threshold_chars())
        } else {
            asked // out of range: `read_spill` explains
        };
        let read = ctx.tape.read_spill(handle, args.cursor, count, args.from_end).await;
        tracing::debug!(tool = SPILL_READ, session = %ctx.tape.name(), handle, cursor = args.cursor, count, ok = read.is_ok(), "spill read");
        if let Ok(page) = &read {
            // The page carries the spilled result's text, and its origin.
            ctx.carries(page.meta.clone());
        }
        Ok::<_, ToolError>(match read {
            Ok(page) if count < asked && page.next_cursor.is_some() => {
                format!("{page}\n[{count} of the {asked} chunks asked fit in one result; continue from next_cursor]")
            }
            Ok(page) => page.to_string(),
            Err(error) => error.to_string(),
        })
    })
    .preserved()
    // A page answered with another spill notice could never be read.
    .never_spilled()
    .with_capabilities([Capability::Read])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_stays_within_the_threshold_but_always_shows_a_chunk() {
        assert_eq!(chunks_that_fit(4, Some(16_384)), 1);
        assert_eq!(chunks_that_fit(4, Some(100)), 1);
        assert_eq!(chunks_that_fit(4, Some(3 * CHUNK_BYTES)), 3);
        assert_eq!(chunks_that_fit(2, Some(10 * CHUNK_BYTES)), 2);
        assert_eq!(chunks_that_fit(4, None), 4);
    }
}
