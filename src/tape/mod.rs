//! Tapes: the append-only history of each session.
//!
//! A tape is an ordered list of [`Entry`] values (messages, tool calls and
//! results, anchors, events…) kept by a [`TapeStore`]. Nothing on a tape is
//! changed; an anchor marks where the model context is rebuilt from, so a long
//! conversation costs only what came after its last anchor.
//!
//! # Layout
//! - [`entry`]: `Entry`, `NewEntry`, `EntryKind`.
//! - [`name`]: `TapeName` and sidecar naming.
//! - [`query`]: `TapeQuery` (anchor scopes, dates, kinds, names, text, limit).
//! - [`store`]: the `TapeStore` trait; [`memory`] implements it here, and
//!   the database layer implements it for each backend
//!   (`db::SqliteTapeStore`). Nothing in `tape` knows SQL: `db` imports
//!   `tape`, never the other way.
//! - [`handle`]: `Tape`, the per-tape operations (handoff, info, reset, context).
//! - [`context`]: entries → chat messages.
//! - [`fork`]: in-memory overlays merged back when a run ends.
//! - [`spill`]: oversized tool results in the `spill` sidecar.
//! - [`archive`]: JSON-lines export.
//! - [`provenance`]: where an entry's text came from (`meta.provenance`).
//! - [`summary`]: entries and tapes as a listing shows them (`bub tape show`, `bub mcp serve`).
//!
//! # Example
//! ```
//! use bub::tape::{InMemoryTapeStore, NewEntry, Tape, TapeName};
//! use serde_json::json;
//! use std::sync::Arc;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let tape = Tape::new(Arc::new(InMemoryTapeStore::new()), TapeName::new("customer-42")?);
//! tape.ensure_bootstrap_anchor().await?;
//! tape.append(NewEntry::chat("user", "Where is order A123?")).await?;
//! tape.handoff("triage", json!({"summary": "asked about A123"})).await?;
//! tape.append(NewEntry::chat("user", "And B456?")).await?;
//!
//! let context = tape.context().await?;
//! assert_eq!(context.len(), 2); // the triage note, then the new question
//! assert_eq!(context[1]["content"], "And B456?");
//! # Ok::<(), bub::tape::TapeError>(())
//! # }).unwrap();
//! ```

pub mod archive;
pub mod context;
pub mod entry;
pub mod error;
pub mod fork;
pub mod handle;
pub mod memory;
pub mod name;
pub mod provenance;
pub mod query;
pub mod spill;
pub mod store;
pub mod summary;

pub use context::{
    ChatMessage, ContextSelector, default_context, default_context_owned, default_request_context, entry_tokens,
};
pub use entry::{Entry, EntryKind, JsonObject, NewEntry};
pub use error::{TapeError, TapeResult};
pub use fork::{Fork, ForkStore, MergeReport};
pub use handle::{
    BOOTSTRAP_ANCHOR, COMPACTION_ANCHOR, COMPACTION_WARNING, ResetReport, Tape, TapeInfo, TapeSettings, kept_from,
};
pub use memory::InMemoryTapeStore;
pub use name::TapeName;
pub use provenance::Provenance;
pub use query::{Scope, TapeQuery};
pub use spill::{SpillOutcome, SpillPage, SpillReadError, SpillSettings};
pub use store::{TapeStats, TapeStore, TapeSummary};
