//! Provenance: where the text on a tape came from, as an entry's
//! `meta.provenance` says it (`{"provenance": "stranger"}`).
//!
//! A fact about entries: the gateway writes it on each user message, a tool
//! that reads the outside world leaves an event carrying it, an anchor
//! written while the context held untrusted text carries the least trusted
//! origin seen. What a run may do given it is the policy's rule
//! (`policy::provenance`).

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
    pub(crate) fn describe(self) -> &'static str {
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
