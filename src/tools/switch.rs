//! Session switches: `,model`, `,reasoning_effort` and `,code_mode` each write
//! an event on the session's tape, and a run reads the latest of each back
//! when it starts (so a switch holds from the next turn and survives
//! restarts). The event names and payload fields live here only, for the
//! commands that write them and the agent that reads them; events are read
//! back by name and field, never by their place in a query.
//!
//! | switch | event | data |
//! |---|---|---|
//! | `,model` | `model_switch` | `{"model": "provider:model"}` (empty: the default) |
//! | `,reasoning_effort` | `reasoning_effort_switch` | `{"reasoning_effort": "high"}` (empty: the provider's) |
//! | `,code_mode` | `code_mode_switch` | `{"code_mode": true}` |

use crate::tape::{Entry, EntryKind, NewEntry, Tape, TapeQuery, TapeResult};
use serde_json::{Value, json};

/// One kind of session switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Model,
    ReasoningEffort,
    CodeMode,
}

impl Switch {
    /// Every switch.
    pub const ALL: [Switch; 3] = [Switch::Model, Switch::ReasoningEffort, Switch::CodeMode];

    /// The name of the tape event recording it.
    pub fn event_name(self) -> &'static str {
        match self {
            Switch::Model => "model_switch",
            Switch::ReasoningEffort => "reasoning_effort_switch",
            Switch::CodeMode => "code_mode_switch",
        }
    }

    /// The field of the event's data holding the choice.
    fn field(self) -> &'static str {
        match self {
            Switch::Model => "model",
            Switch::ReasoningEffort => "reasoning_effort",
            Switch::CodeMode => "code_mode",
        }
    }

    /// The query for the latest event of this switch.
    pub fn query(self) -> TapeQuery {
        TapeQuery::all().kinds([EntryKind::Event]).named(self.event_name())
    }

    /// The switch an entry records, if it is a switch event.
    fn of(entry: &Entry) -> Option<Switch> {
        if entry.kind != EntryKind::Event {
            return None;
        }
        let name = entry.name()?;
        Switch::ALL.into_iter().find(|switch| switch.event_name() == name)
    }

    fn event(self, value: Value) -> NewEntry {
        NewEntry::event(self.event_name(), json!({ self.field(): value }))
    }
}

/// The event switching the session's model (empty: back to the default).
pub fn model_switch(model: &str) -> NewEntry {
    Switch::Model.event(json!(model))
}

/// The event switching the session's reasoning effort (empty: the provider's default).
pub fn reasoning_effort_switch(effort: &str) -> NewEntry {
    Switch::ReasoningEffort.event(json!(effort))
}

/// The event turning code mode on or off.
pub fn code_mode_switch(on: bool) -> NewEntry {
    Switch::CodeMode.event(json!(on))
}

/// A session's switches as its tape records them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionSwitches {
    /// The latest `,model` (none or empty: the agent's default).
    pub model: Option<String>,
    /// The latest `,reasoning_effort` (none or empty: the provider's default).
    pub reasoning_effort: Option<String>,
    /// The latest `,code_mode` (none: off).
    pub code_mode: bool,
}

impl SessionSwitches {
    /// The queries for the latest event of every switch, to read them in one
    /// `Tape::latest` call beside others; hand what they find to
    /// [`SessionSwitches::from_events`].
    pub fn queries() -> Vec<TapeQuery> {
        Switch::ALL.into_iter().map(Switch::query).collect()
    }

    /// The switches in `events`, each told by its event name; entries that are
    /// no switch are ignored, and of two events of one switch the later wins.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Entry>) -> SessionSwitches {
        let mut switches = SessionSwitches::default();
        for entry in events {
            let Some(switch) = Switch::of(entry) else { continue };
            let value = entry.data().and_then(|data| data.get(switch.field()));
            let text = || value.and_then(Value::as_str).filter(|text| !text.is_empty()).map(str::to_string);
            match switch {
                Switch::Model => switches.model = text(),
                Switch::ReasoningEffort => switches.reasoning_effort = text(),
                Switch::CodeMode => switches.code_mode = value.and_then(Value::as_bool).unwrap_or(false),
            }
        }
        switches
    }

    /// Reads the session's switches (one read).
    pub async fn read(tape: &Tape) -> TapeResult<SessionSwitches> {
        let found = tape.latest(&SessionSwitches::queries()).await?;
        Ok(SessionSwitches::from_events(found.iter().flatten()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(entries: Vec<NewEntry>) -> Vec<Entry> {
        entries.into_iter().zip(1..).map(|(entry, id)| entry.into_entry(id)).collect()
    }

    #[test]
    fn switches_are_read_back_by_name_whatever_their_order() {
        let events = recorded(vec![
            code_mode_switch(true),
            NewEntry::event("other", json!({"model": "x:y"})),
            reasoning_effort_switch("high"),
            model_switch("openai:gpt-4o-mini"),
        ]);
        let read = SessionSwitches::from_events(events.iter().rev());
        assert_eq!(
            read,
            SessionSwitches {
                model: Some("openai:gpt-4o-mini".into()),
                reasoning_effort: Some("high".into()),
                code_mode: true
            }
        );
    }

    #[test]
    fn an_empty_choice_is_the_default() {
        let events = recorded(vec![model_switch(""), reasoning_effort_switch(""), code_mode_switch(false)]);
        assert_eq!(SessionSwitches::from_events(&events), SessionSwitches::default());
    }
}
