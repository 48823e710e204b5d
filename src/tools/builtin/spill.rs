//! `spill.read`: pages through a tool result that was too long for the context
//! and was stored in the tape's spill sidecar (see [`crate::tape::spill`]).
//!
//! Every failure (unknown handle, bad cursor, incomplete spill, even a store
//! error) comes back as a plain successful text: the messages are written for
//! the model, which reads them and retries with a better handle or cursor.

use crate::tools::{Capability, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

fn default_count() -> usize {
    1
}

/// Read a tool result that was too long to show and was stored instead (its
/// preview names the handle). Each call returns up to 4 chunks of about 16 KiB
/// and a header with `next_cursor`; call again with that cursor (and the same
/// `from_end`) to continue, until `next_cursor` is `none`.
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

/// `spill.read`: the `SpillPage` text, or the read error as text.
pub fn spill_read_tool() -> Tool {
    Tool::typed("spill.read", |args: SpillReadArgs, ctx: ToolContext| async move {
        let handle = args.handle.trim();
        let count = args.count;
        let read = ctx.tape.read_spill(handle, args.cursor, count, args.from_end).await;
        tracing::debug!(tool = "spill.read", session = %ctx.tape.name(), handle, cursor = args.cursor, count, ok = read.is_ok(), "spill read");
        Ok::<_, ToolError>(match read {
            Ok(page) => page.to_string(),
            Err(error) => error.to_string(),
        })
    })
    .preserved()
    .with_capabilities([Capability::Read])
}
