//! What a run reads back from its session's tape when it starts: whether the
//! tape has an anchor yet, the session's `,model`, `,reasoning_effort` and
//! `,code_mode` switches and the newest system prompt, in one read (one
//! statement on SQLite) instead of one read each.

use crate::tape::{Entry, EntryKind, Tape, TapeQuery, TapeResult};
use serde_json::Value;
use std::sync::Mutex;

/// The session's settings as its tape records them when a run starts.
pub(crate) struct SessionSettings {
    /// The latest `code_mode_switch` (none: off).
    pub code_mode: bool,
    /// The latest `model_switch` (none or empty: the agent's default).
    pub model: Option<String>,
    /// The latest `reasoning_effort_switch` (none or empty: the provider's default).
    pub reasoning_effort: Option<String>,
}

/// The newest system prompt on the run's tape, kept on the turn state and
/// updated by the recorder when it writes one, so the recorder compares a
/// step's prompt without reading the tape each step.
pub(crate) struct LastSystemPrompt(pub Mutex<Option<String>>);

fn switch(name: &str) -> TapeQuery {
    TapeQuery::all().kinds([EntryKind::Event]).named(name)
}

/// The `model_switch` event's choice.
pub(crate) fn chosen_model(event: Option<&Entry>) -> Option<String> {
    let data = event?.data()?;
    data.get("model")?.as_str().filter(|spec| !spec.is_empty()).map(str::to_string)
}

/// The `reasoning_effort_switch` event's choice.
fn chosen_effort(event: Option<&Entry>) -> Option<String> {
    let data = event?.data()?;
    data.get("reasoning_effort")?.as_str().filter(|effort| !effort.is_empty()).map(str::to_string)
}

fn code_mode_on(event: Option<&Entry>) -> bool {
    event.and_then(Entry::data).and_then(|data| data.get("code_mode")?.as_bool()).unwrap_or(false)
}

/// What a run learns from its tape when it starts.
pub(crate) struct RunStart {
    /// The tape has an anchor (else the run writes the bootstrap anchor).
    pub has_anchor: bool,
    pub settings: SessionSettings,
    pub last_system: LastSystemPrompt,
}

/// Reads everything a run starts from in one call. On a fork, the unfiltered
/// query also gives the fork the parent's last id for its overlay.
pub(crate) async fn read(tape: &Tape) -> TapeResult<RunStart> {
    let queries = [
        switch("code_mode_switch"),
        switch("model_switch"),
        TapeQuery::all().kinds([EntryKind::System]),
        TapeQuery::all().kinds([EntryKind::Anchor]),
        TapeQuery::all(),
        switch("reasoning_effort_switch"),
    ];
    let found = tape.latest(&queries).await?;
    let settings = SessionSettings {
        code_mode: code_mode_on(found[0].as_ref()),
        model: chosen_model(found[1].as_ref()),
        reasoning_effort: chosen_effort(found[5].as_ref()),
    };
    let system = found[2].as_ref().and_then(|e| e.payload.get("content")).and_then(Value::as_str).map(str::to_string);
    Ok(RunStart { has_anchor: found[3].is_some(), settings, last_system: LastSystemPrompt(Mutex::new(system)) })
}

/// The session's `,reasoning_effort` choice alone (for the command without an argument).
pub(crate) async fn session_reasoning_effort(tape: &Tape) -> TapeResult<Option<String>> {
    Ok(chosen_effort(tape.latest(&[switch("reasoning_effort_switch")]).await?[0].as_ref()))
}

/// The session's `,model` choice alone (for `,model` without an argument).
pub(crate) async fn session_model(tape: &Tape) -> TapeResult<Option<String>> {
    Ok(chosen_model(tape.latest(&[switch("model_switch")]).await?[0].as_ref()))
}
