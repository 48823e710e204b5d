//! Tape names.
//!
//! A tape is named after its session (`telegram:-100123:42`, `customer-42`,
//! `temp/abc`). Any printable text is accepted — slashes, quotes, emoji — because
//! the stores bind names as parameters and never splice them into SQL or paths;
//! [`TapeName::file_stem`] gives the form used where a name must become a file name.

use std::fmt;

/// Marker that joins a tape name to the name of one of its sidecars.
pub const SIDECAR_MARKER: &str = "__sidecar__";

/// Longest accepted name, in bytes.
pub const MAX_NAME_BYTES: usize = 512;

/// The name of one tape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TapeName(String);

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tape name {name:?}: {reason}")]
pub struct InvalidTapeName {
    pub name: String,
    pub reason: &'static str,
}

impl TapeName {
    /// Accepts any non-empty name of printable characters up to 512 bytes.
    pub fn new(name: impl Into<String>) -> Result<TapeName, InvalidTapeName> {
        let name = name.into();
        let refuse = |reason| Err(InvalidTapeName { name: name.clone(), reason });
        if name.trim().is_empty() {
            return refuse("it is empty");
        }
        if name.len() > MAX_NAME_BYTES {
            return refuse("it is longer than 512 bytes");
        }
        if name.chars().any(char::is_control) {
            return refuse("it contains a control character");
        }
        Ok(TapeName(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The sibling tape `<name>__sidecar__<sidecar>` that follows this tape
    /// through fork, merge and reset.
    pub fn sidecar(&self, sidecar: &str) -> TapeName {
        TapeName(format!("{}{SIDECAR_MARKER}{sidecar}", self.0))
    }

    /// True for sidecar tapes, which tape listings hide.
    pub fn is_sidecar(&self) -> bool {
        self.0.contains(SIDECAR_MARKER)
    }

    /// True when this tape is `other` itself or one of its sidecars.
    pub fn belongs_to(&self, other: &TapeName) -> bool {
        self == other || self.0.strip_prefix(other.as_str()).is_some_and(|rest| rest.starts_with(SIDECAR_MARKER))
    }

    /// Throwaway sessions (`temp/…`) whose forks are never merged back.
    pub fn is_temporary(&self) -> bool {
        self.0.starts_with("temp/")
    }

    /// A file-system-safe, collision-free form: ASCII letters, digits, `-`, `_`
    /// and `.` stay, every other byte becomes `%XX`.
    pub fn file_stem(&self) -> String {
        let mut stem = String::with_capacity(self.0.len());
        for byte in self.0.bytes() {
            match byte {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => stem.push(byte as char),
                b'.' if !stem.is_empty() => stem.push('.'),
                _ => stem.push_str(&format!("%{byte:02X}")),
            }
        }
        stem
    }
}

impl fmt::Display for TapeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TapeName {
    type Err = InvalidTapeName;
    fn from_str(name: &str) -> Result<TapeName, InvalidTapeName> {
        TapeName::new(name)
    }
}

impl AsRef<str> for TapeName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_characters_are_accepted_but_control_characters_are_not() {
        assert!(TapeName::new("a/b'c\"d 🦀").is_ok());
        assert!(TapeName::new("").is_err());
        assert!(TapeName::new("  ").is_err());
        assert!(TapeName::new("a\nb").is_err());
        assert!(TapeName::new("x".repeat(513)).is_err());
    }

    #[test]
    fn file_stems_are_safe_and_distinct() {
        let stem = TapeName::new("../a/b 🦀").unwrap().file_stem();
        assert!(!stem.contains('/') && !stem.starts_with('.'));
        assert_ne!(TapeName::new("a/b").unwrap().file_stem(), TapeName::new("a%2Fb").unwrap().file_stem());
    }

    #[test]
    fn sidecars_belong_to_their_tape_only() {
        let tape = TapeName::new("chat").unwrap();
        assert!(tape.sidecar("spill").belongs_to(&tape));
        assert!(tape.sidecar("spill").is_sidecar());
        assert!(!TapeName::new("chat2").unwrap().belongs_to(&tape));
    }
}
