//! [`Capability`]: what a tool can do, in words an admin thinks in. Policies
//! allow or deny by capability (`denied_tools = ["cap:write"]`) as well as by
//! name, so a rule about writes covers `fs.write`, `fs.edit` and any tool
//! added later that declares `write`, without a new rule.
//!
//! A tool that declares nothing is taken to be able to do everything
//! ([`Capabilities::ALL`]): an undeclared tool is on the closed side of
//! every capability rule, never on the open one.

use std::fmt;

/// One thing a tool can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Reads files, the session's tape or the gateway's state, and changes nothing.
    Read,
    /// Writes or edits files.
    Write,
    /// Runs processes or code.
    Exec,
    /// Reaches the network (what it reads is the outside world's text).
    Network,
    /// Changes the session (its tape, model, mode) or who the gateway answers.
    Session,
}

impl Capability {
    /// Every capability, in the order they are shown.
    pub const EVERY: [Capability; 5] =
        [Capability::Read, Capability::Write, Capability::Exec, Capability::Network, Capability::Session];

    /// The name policies use (`read`, `write`, `exec`, `network`, `session`).
    pub fn name(self) -> &'static str {
        match self {
            Capability::Read => "read",
            Capability::Write => "write",
            Capability::Exec => "exec",
            Capability::Network => "network",
            Capability::Session => "session",
        }
    }

    /// The capability named `name`, if any.
    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::EVERY.into_iter().find(|capability| capability.name() == name)
    }

    fn bit(self) -> u8 {
        1 << Capability::EVERY.iter().position(|c| *c == self).unwrap_or(0)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of capabilities.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities(u8);

impl Capabilities {
    /// Nothing: the tool only computes.
    pub const NONE: Capabilities = Capabilities(0);
    /// Everything: what an undeclared tool is taken to do.
    pub const ALL: Capabilities = Capabilities(0b1_1111);

    pub fn of(capabilities: impl IntoIterator<Item = Capability>) -> Capabilities {
        Capabilities(capabilities.into_iter().fold(0, |bits, capability| bits | capability.bit()))
    }

    pub fn contains(self, capability: Capability) -> bool {
        self.0 & capability.bit() != 0
    }

    /// Whether any of `other` is in this set.
    pub fn intersects(self, other: Capabilities) -> bool {
        self.0 & other.0 != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Capability> {
        Capability::EVERY.into_iter().filter(move |capability| self.contains(*capability))
    }
}

impl fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Capability::name).collect();
        if names.is_empty() { f.write_str("none") } else { f.write_str(&names.join(", ")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_hold_what_they_were_made_of() {
        let set = Capabilities::of([Capability::Write, Capability::Exec]);
        assert!(set.contains(Capability::Write) && set.contains(Capability::Exec));
        assert!(!set.contains(Capability::Read));
        assert_eq!(set.to_string(), "write, exec");
        assert_eq!(Capabilities::ALL.iter().count(), 5);
        assert_eq!(Capability::from_name("network"), Some(Capability::Network));
        assert_eq!(Capability::from_name("root"), None);
    }
}
