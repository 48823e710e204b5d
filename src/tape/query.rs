//! Tape queries and their in-memory evaluation.
//!
//! A [`TapeQuery`] says which part of a tape to read: a scope bounded by anchors,
//! then filters (dates, kinds, name, text), an order and a limit. Stores translate
//! scope and filters into indexed lookups; [`TapeQuery::apply`] evaluates the same
//! query over a slice so the in-memory store and fork overlays agree with SQL
//! stores by construction (one conformance suite runs against all of them).
//!
//! Anchor bounds: a scope *starts at* its anchor (the anchor entry is included, so
//! the state it carries is in view) and *ends before* the closing anchor of
//! [`Scope::BetweenAnchors`]. A named anchor means the most recent one of that
//! name; the closing anchor is the first of its name after the opening one.

use super::entry::{Entry, EntryKind};
use super::error::{TapeError, TapeResult};
use super::name::TapeName;
use chrono::{DateTime, Days, NaiveDate, Utc};
use serde_json::Value;

/// Which stretch of the tape a query reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Scope {
    /// The whole tape.
    #[default]
    All,
    /// From the most recent anchor on.
    LastAnchor,
    /// From the most recent anchor of this name on.
    AfterAnchor(String),
    /// From the most recent `start` anchor up to (not including) the next `end` anchor.
    BetweenAnchors { start: String, end: String },
}

/// A description of which entries to read. Build with the chained methods.
/// The kinds [`super::default_context`] maps to chat messages.
pub const CONTEXT_KINDS: [EntryKind; 4] =
    [EntryKind::Anchor, EntryKind::Message, EntryKind::ToolCall, EntryKind::ToolResult];

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TapeQuery {
    pub scope: Scope,
    /// Only entries with a greater id (paging, tailing).
    pub after_id: Option<u64>,
    /// Only entries with a smaller id (paging back from the newest).
    pub before_id: Option<u64>,
    /// Entries dated at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Entries dated before this instant.
    pub until: Option<DateTime<Utc>>,
    /// Only these kinds (empty: all kinds).
    pub kinds: Vec<EntryKind>,
    /// Only anchors or events of this name.
    pub name: Option<String>,
    /// Only entries whose payload text contains this (case-insensitive).
    pub text: Option<String>,
    /// Newest entries first instead of oldest first.
    pub newest_first: bool,
    /// At most this many entries (after ordering).
    pub limit: Option<usize>,
}

impl TapeQuery {
    /// The whole tape, oldest first.
    pub fn all() -> TapeQuery {
        TapeQuery::default()
    }

    /// Everything from the last anchor on: what the model context is built from.
    pub fn last_anchor() -> TapeQuery {
        TapeQuery { scope: Scope::LastAnchor, ..TapeQuery::default() }
    }

    /// Everything from the last anchor called `name` on.
    pub fn after_anchor(name: impl Into<String>) -> TapeQuery {
        TapeQuery { scope: Scope::AfterAnchor(name.into()), ..TapeQuery::default() }
    }

    /// From the last `start` anchor up to the next `end` anchor (or the tape's end).
    pub fn between_anchors(start: impl Into<String>, end: impl Into<String>) -> TapeQuery {
        TapeQuery { scope: Scope::BetweenAnchors { start: start.into(), end: end.into() }, ..TapeQuery::default() }
    }

    /// A text search: case-insensitive, newest first, 20 hits unless changed.
    pub fn search(text: impl Into<String>) -> TapeQuery {
        TapeQuery { text: Some(text.into()), newest_first: true, limit: Some(20), ..TapeQuery::default() }
    }

    /// Entries dated in `[since, until)`.
    pub fn between_dates(mut self, since: DateTime<Utc>, until: DateTime<Utc>) -> TapeQuery {
        self.since = Some(since);
        self.until = Some(until);
        self
    }

    /// Entries dated on the given UTC days, both included.
    pub fn between_days(self, first: NaiveDate, last: NaiveDate) -> TapeQuery {
        let since = first.and_hms_opt(0, 0, 0).map(|d| d.and_utc()).unwrap_or_default();
        let until = last
            .checked_add_days(Days::new(1))
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| d.and_utc())
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        self.between_dates(since, until)
    }

    /// Only entries after this id.
    pub fn after_id(mut self, id: u64) -> TapeQuery {
        self.after_id = Some(id);
        self
    }

    /// Only entries before this id.
    pub fn before_id(mut self, id: u64) -> TapeQuery {
        self.before_id = Some(id);
        self
    }

    pub fn kinds(mut self, kinds: impl IntoIterator<Item = EntryKind>) -> TapeQuery {
        self.kinds = kinds.into_iter().collect();
        self
    }

    /// Only anchors or events with this name (an indexed lookup in SQL stores).
    pub fn named(mut self, name: impl Into<String>) -> TapeQuery {
        self.name = Some(name.into());
        self
    }

    pub fn text(mut self, text: impl Into<String>) -> TapeQuery {
        self.text = Some(text.into());
        self
    }

    pub fn newest_first(mut self) -> TapeQuery {
        self.newest_first = true;
        self
    }

    pub fn limit(mut self, limit: usize) -> TapeQuery {
        self.limit = Some(limit);
        self
    }

    /// The entries the default model context is built from: the last anchor
    /// and the messages, tool calls and results after it (events, errors and
    /// system prompts never reach a model, so they are not read).
    pub fn context() -> TapeQuery {
        TapeQuery::last_anchor().kinds(CONTEXT_KINDS)
    }

    /// Whether only the scope and a kind filter that keeps anchors are set,
    /// so the scope's own anchor is always among the entries it selects.
    pub(crate) fn keeps_its_anchor(&self) -> bool {
        let bare = TapeQuery { scope: self.scope.clone(), kinds: self.kinds.clone(), ..TapeQuery::default() };
        *self == bare && (self.kinds.is_empty() || self.kinds.contains(&EntryKind::Anchor))
    }

    /// The same query without filters, order or limit: only its scope.
    pub fn scope_only(&self) -> TapeQuery {
        TapeQuery { scope: self.scope.clone(), ..TapeQuery::default() }
    }

    /// Evaluates the query over `entries` (in id order). A scope whose anchor is
    /// missing is an [`TapeError::AnchorNotFound`].
    pub fn apply(&self, tape: &TapeName, entries: &[Entry]) -> TapeResult<Vec<Entry>> {
        let scoped = self.scope_slice(tape, entries)?;
        Ok(self.pick(scoped.iter()).into_iter().cloned().collect())
    }

    /// [`TapeQuery::apply`] on entries the caller owns: the kept ones are
    /// moved, not copied (a forked turn reads its whole context this way).
    pub fn apply_owned(&self, tape: &TapeName, mut entries: Vec<Entry>) -> TapeResult<Vec<Entry>> {
        let range = self.scope_range(tape, &entries)?;
        entries.truncate(range.end);
        entries.drain(..range.start);
        Ok(self.pick(entries.into_iter()))
    }

    /// [`TapeQuery::apply`] over shared entries (a cache's): only the
    /// handles are copied.
    pub(crate) fn apply_shared<T: std::borrow::Borrow<Entry> + Clone>(
        &self,
        tape: &TapeName,
        entries: &[T],
    ) -> TapeResult<Vec<T>> {
        let range = self.scope_range(tape, entries)?;
        Ok(self.pick(entries[range].iter().cloned()))
    }

    /// The scoped entries the filters keep, in the query's order, up to its limit.
    fn pick<T: std::borrow::Borrow<Entry>>(&self, scoped: impl DoubleEndedIterator<Item = T>) -> Vec<T> {
        let matcher = self.text.as_deref().map(TextMatcher::new);
        let keep = |entry: &T| {
            let entry = entry.borrow();
            self.keeps(entry) && matcher.as_ref().is_none_or(|m| m.matches(entry))
        };
        let limit = self.limit.unwrap_or(usize::MAX);
        if self.newest_first {
            scoped.rev().filter(keep).take(limit).collect()
        } else {
            scoped.filter(keep).take(limit).collect()
        }
    }

    /// The slice of `entries` inside the scope.
    pub fn scope_slice<'a>(&self, tape: &TapeName, entries: &'a [Entry]) -> TapeResult<&'a [Entry]> {
        Ok(&entries[self.scope_range(tape, entries)?])
    }

    /// Where the scope lies in `entries`.
    fn scope_range<T: std::borrow::Borrow<Entry>>(
        &self,
        tape: &TapeName,
        entries: &[T],
    ) -> TapeResult<std::ops::Range<usize>> {
        let is_anchor = |e: &T, name: Option<&str>| {
            let e = e.borrow();
            e.kind == EntryKind::Anchor && name.is_none_or(|n| e.name() == Some(n))
        };
        let last_anchor = |name: Option<&str>| {
            entries
                .iter()
                .rposition(|e| is_anchor(e, name))
                .ok_or_else(|| TapeError::AnchorNotFound { tape: tape.clone(), anchor: name.map(str::to_string) })
        };
        let end = entries.len();
        Ok(match &self.scope {
            Scope::All => 0..end,
            Scope::LastAnchor => last_anchor(None)?..end,
            Scope::AfterAnchor(name) => last_anchor(Some(name))?..end,
            Scope::BetweenAnchors { start, end: closing } => {
                let from = last_anchor(Some(start))?;
                let to = entries[from + 1..]
                    .iter()
                    .position(|e| is_anchor(e, Some(closing.as_str())))
                    .map_or(end, |offset| from + 1 + offset);
                from..to
            }
        })
    }

    /// The filters other than text (which stores may evaluate in SQL).
    pub fn keeps(&self, entry: &Entry) -> bool {
        (self.kinds.is_empty() || self.kinds.contains(&entry.kind))
            && self.after_id.is_none_or(|id| entry.id > id)
            && self.before_id.is_none_or(|id| entry.id < id)
            && self.since.is_none_or(|since| entry.date >= since)
            && self.until.is_none_or(|until| entry.date < until)
            && self.name.as_deref().is_none_or(|name| entry.name() == Some(name))
    }
}

/// Case-insensitive text match over an entry's payload: the needle must occur in
/// one of the payload's strings (keys and values) or in the text of a number. This
/// matches what a person typed, not JSON escaping: a search for `"quoted"` finds
/// `"quoted"` in a message.
pub struct TextMatcher {
    needle: String,
}

impl TextMatcher {
    pub fn new(text: &str) -> TextMatcher {
        TextMatcher { needle: text.to_lowercase() }
    }

    pub fn matches(&self, entry: &Entry) -> bool {
        if self.needle.is_empty() {
            return true;
        }
        entry.payload.iter().any(|(key, value)| self.contains(key) || self.value_matches(value))
    }

    fn value_matches(&self, value: &Value) -> bool {
        match value {
            Value::String(text) => self.contains(text),
            Value::Number(number) => self.contains(&number.to_string()),
            Value::Array(items) => items.iter().any(|item| self.value_matches(item)),
            Value::Object(map) => map.iter().any(|(key, item)| self.contains(key) || self.value_matches(item)),
            Value::Bool(_) | Value::Null => false,
        }
    }

    fn contains(&self, haystack: &str) -> bool {
        haystack.to_lowercase().contains(&self.needle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tape::entry::NewEntry;
    use serde_json::json;

    fn tape_of(entries: Vec<NewEntry>) -> Vec<Entry> {
        entries.into_iter().enumerate().map(|(i, e)| e.into_entry(i as u64 + 1)).collect()
    }

    #[test]
    fn between_anchors_starts_at_the_last_start_and_stops_before_the_next_end() {
        let entries = tape_of(vec![
            NewEntry::anchor("a", json!({})),
            NewEntry::chat("user", "old"),
            NewEntry::anchor("a", json!({})),
            NewEntry::chat("user", "inside"),
            NewEntry::anchor("b", json!({})),
            NewEntry::chat("user", "after"),
        ]);
        let name = TapeName::new("t").unwrap();
        let ids: Vec<u64> =
            TapeQuery::between_anchors("a", "b").apply(&name, &entries).unwrap().iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![3, 4]);
    }

    #[test]
    fn text_match_ignores_case_and_json_escaping() {
        let entry = NewEntry::chat("user", "He said \"Grüße\" 🦀").into_entry(1);
        assert!(TextMatcher::new("SAID \"GRÜẞE\"").matches(&entry));
        assert!(TextMatcher::new("said \"grüße\"").matches(&entry));
        assert!(TextMatcher::new("🦀").matches(&entry));
    }
}
