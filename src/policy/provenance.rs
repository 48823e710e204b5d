//! Provenance: where the text in a conversation came from, and the rule it
//! feeds — while text of untrusted origin is in a turn's context, tools that
//! can run processes, write files or reach the network (`exec`, `write`,
//! `network`) are denied for that turn unless `allow_with_untrusted_context`
//! names them. A prompt injection in a stranger's message or a fetched page
//! then cannot reach a shell, a write or an exfiltrating request.
//!
//! - Every user message the gateway puts on a tape carries
//!   `meta.provenance` ([`Provenance`]): `operator`, `user` (named by the
//!   policy, paired, or a webhook's authenticated sender), `stranger` (a
//!   group member, or a sender of an open chat platform DM, nobody named),
//!   `forwarded`.
//! - A tool that reads the outside world (capability `network`) leaves an
//!   event `provenance {source}` with `meta.provenance = "outside"` the moment
//!   it is allowed: what it returns is in the context from then on.
//! - The context is untrusted when, since the last anchor, an entry carries an
//!   untrusted provenance. It is read once per turn, on the first call of such
//!   a tool (most turns call none), and kept on the turn state.
//! - Comma commands are exempt: an operator typed them, no model chose them.

use crate::agent::events::RunContext;
use crate::tape::{NewEntry, TapeError, TapeQuery};
use serde_json::{Value, json};
use std::fmt;

/// The `meta` key.
pub const META_KEY: &str = "provenance";

/// Where a piece of text came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provenance {
    /// One of the policy's operators.
    Operator,
    /// A user the policy names, an approved (paired) user, or a webhook's sender.
    User,
    /// Someone nobody named: a group member, an open DM on a chat platform.
    Stranger,
    /// A message forwarded from elsewhere: its author is not the sender.
    Forwarded,
    /// What a tool read from the outside world.
    Outside,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Operator => "operator",
            Provenance::User => "user",
            Provenance::Stranger => "stranger",
            Provenance::Forwarded => "forwarded",
            Provenance::Outside => "outside",
        }
    }

    pub fn from_meta(value: &Value) -> Option<Provenance> {
        match value.as_str()? {
            "operator" => Some(Provenance::Operator),
            "user" => Some(Provenance::User),
            "stranger" => Some(Provenance::Stranger),
            "forwarded" => Some(Provenance::Forwarded),
            "outside" => Some(Provenance::Outside),
            _ => None,
        }
    }

    /// Text an operator or a named user wrote.
    pub fn is_trusted(self) -> bool {
        matches!(self, Provenance::Operator | Provenance::User)
    }

    /// How the denial names it.
    fn describe(self) -> &'static str {
        match self {
            Provenance::Operator => "an operator's message",
            Provenance::User => "a user's message",
            Provenance::Stranger => "a message from someone the policy does not name",
            Provenance::Forwarded => "a forwarded message",
            Provenance::Outside => "what a tool read from the outside world",
        }
    }

    /// `{"provenance": "stranger"}`, for an entry's meta.
    pub fn meta(self) -> serde_json::Map<String, Value> {
        let mut meta = serde_json::Map::new();
        meta.insert(META_KEY.into(), json!(self.as_str()));
        meta
    }
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The least trusted of several (a batch of messages is as trusted as its worst one).
pub fn least_trusted(all: impl IntoIterator<Item = Provenance>) -> Provenance {
    all.into_iter().max().unwrap_or(Provenance::Stranger)
}

/// Why the turn's context is untrusted, once found (it never becomes trusted
/// again within a turn, so it is kept on the turn state; a trusted context is
/// read again on the next call, since steered messages may have joined).
#[derive(Debug, Clone)]
pub(crate) struct UntrustedContext(pub String);

/// Why this run's context is untrusted, if it is: the first untrusted entry
/// since the last anchor, read once per turn.
pub(crate) async fn untrusted_context(run: &RunContext) -> Result<Option<String>, TapeError> {
    if let Some(known) = run.state.extension::<UntrustedContext>() {
        return Ok(Some(known.0.clone()));
    }
    // The context's scope, with what a compaction kept (and its anchor, which
    // carries the provenance of what it summarised).
    let entries = run.tape.scope_entries(TapeQuery::last_anchor()).await?;
    let reason = entries.iter().find_map(|entry| {
        let provenance = Provenance::from_meta(entry.meta.get(META_KEY)?)?;
        (!provenance.is_trusted()).then(|| format!("{} (entry #{})", provenance.describe(), entry.id))
    });
    if let Some(reason) = &reason {
        run.state.insert_extension(UntrustedContext(reason.clone()));
    }
    Ok(reason)
}

/// A tool that reads the outside world was allowed: its result is untrusted
/// text in the context from now on (this turn, and later ones until an anchor).
pub(crate) async fn outside_text_enters(run: &RunContext, tool: &str) -> Result<(), TapeError> {
    let entry = NewEntry::event(META_KEY, json!({"source": format!("tool:{tool}")}))
        .with_meta(META_KEY, json!(Provenance::Outside.as_str()));
    run.tape.append(entry).await?;
    if run.state.extension::<UntrustedContext>().is_none() {
        run.state.insert_extension(UntrustedContext(format!("{} ({tool})", Provenance::Outside.describe())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_as_trusted_as_its_least_trusted_message() {
        assert_eq!(least_trusted([Provenance::Operator, Provenance::Stranger]), Provenance::Stranger);
        assert_eq!(least_trusted([Provenance::User, Provenance::Operator]), Provenance::User);
        for p in
            [Provenance::Operator, Provenance::User, Provenance::Stranger, Provenance::Forwarded, Provenance::Outside]
        {
            assert_eq!(Provenance::from_meta(&json!(p.as_str())), Some(p));
        }
        assert!(!Provenance::Forwarded.is_trusted() && Provenance::User.is_trusted());
    }
}
