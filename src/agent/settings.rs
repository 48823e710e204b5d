//! What a run reads back from its session's tape when it starts: whether the
//! tape has an anchor yet, the session's switches (`,model`,
//! `,reasoning_effort`, `,code_mode`; their events are
//! [`crate::tools::switch`]'s) and the newest system prompt, in one read (one
//! statement on SQLite) instead of one read each.

use crate::tape::{EntryKind, Tape, TapeQuery, TapeResult};
use crate::tools::switch::SessionSwitches;
use parking_lot::Mutex;
use serde_json::Value;

/// The newest system prompt on the run's tape, kept on the turn state and
/// updated by the recorder when it writes one, so the recorder compares a
/// step's prompt without reading the tape each step.
pub(crate) struct LastSystemPrompt(pub Mutex<Option<String>>);

/// What a run learns from its tape when it starts.
pub(crate) struct RunStart {
    /// The tape has an anchor (else the run writes the bootstrap anchor).
    pub has_anchor: bool,
    pub switches: SessionSwitches,
    pub last_system: LastSystemPrompt,
}

/// Reads everything a run starts from in one call. On a fork, the unfiltered
/// query also gives the fork the parent's last id for its overlay.
pub(crate) async fn read(tape: &Tape) -> TapeResult<RunStart> {
    let system = TapeQuery::all().kinds([EntryKind::System]);
    let anchor = TapeQuery::all().kinds([EntryKind::Anchor]);
    // The unfiltered query is there for the fork (see above); the switches
    // come last and are told apart by their event names.
    let mut queries = vec![system, anchor, TapeQuery::all()];
    queries.extend(SessionSwitches::queries());
    let mut found = tape.latest(&queries).await?.into_iter();
    let (system, anchor, _newest) = (found.next().flatten(), found.next().flatten(), found.next());
    let switches = SessionSwitches::from_events(&found.flatten().collect::<Vec<_>>());
    let system = system.as_ref().and_then(|e| e.payload.get("content")).and_then(Value::as_str).map(str::to_string);
    Ok(RunStart { has_anchor: anchor.is_some(), switches, last_system: LastSystemPrompt(Mutex::new(system)) })
}
