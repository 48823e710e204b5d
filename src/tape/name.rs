//! Tape names.
//!
//! A tape is named after its session (`telegram:-100123:42`, `customer-42`,
//! `temp/abc`). Any printable text is accepted — slashes, quotes, emoji — because
//! the stores bind names as parameters and never splice them into SQL or paths;
//! [`TapeName::file_stem`] gives the form used where a name must become a file
//! name (workspaces, archives): short enough for any file system, whatever the name.
//!
//! A session named on the command line (`bub run --session s`) is scoped to
//! its workspace: [`TapeName::scoped`] names its tape `s@<workspace hash>`, so
//! two projects never share one; the gateway's chats keep their plain names.

use sha2::{Digest, Sha256};
use std::fmt;
use std::path::Path;

/// Marker that joins a tape name to the name of one of its sidecars.
pub const SIDECAR_MARKER: &str = "__sidecar__";

/// Longest accepted name, in bytes.
pub const MAX_NAME_BYTES: usize = 512;

/// Longest [`TapeName::file_stem`], in bytes: what is added to a stem (an
/// archive's `.jsonl.<timestamp>.bak.partial`, 42 bytes) still fits the 255
/// bytes file systems allow in one file name.
pub const MAX_STEM_BYTES: usize = 200;

/// Hex digits of the hash that ends a shortened stem (128 bits).
const STEM_HASH_HEX: usize = 32;

/// Hex digits of the workspace hash that ends a [`TapeName::scoped`] name
/// (64 bits: a person has far fewer workspaces than it takes to collide).
pub const WORKSPACE_HASH_HEX: usize = 16;

/// Longest session a [`TapeName::scoped`] name can hold, in bytes: what
/// `@` and the hash leave of [`MAX_NAME_BYTES`].
pub const MAX_SCOPED_SESSION_BYTES: usize = MAX_NAME_BYTES - 1 - WORKSPACE_HASH_HEX;

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

    /// The tape of `session` run in `workspace` from the command line:
    /// `<session>@<first 16 hex digits of the SHA-256 of the workspace path>`
    /// (`cli:local@1f3a…`). The session stays readable in `bub tape list`;
    /// the fixed-length hash keeps the name short whatever the path, and
    /// makes the mapping one-to-one (the suffix alone gives the workspace
    /// hash, so the rest is the session). The same session in another
    /// workspace is another tape.
    ///
    /// `workspace` must be canonical (`std::fs::canonicalize`): a relative
    /// path or a symlink names another tape. The hash is of the path's bytes,
    /// so the name stays the same across runs and versions of bub.
    pub fn scoped(session: &str, workspace: &Path) -> Result<TapeName, InvalidTapeName> {
        let session = TapeName::new(session)?;
        if session.0.len() > MAX_SCOPED_SESSION_BYTES {
            return Err(InvalidTapeName {
                name: session.0,
                reason: "a session scoped to its workspace may be at most 495 bytes long",
            });
        }
        let digest = Sha256::digest(workspace.as_os_str().as_encoded_bytes());
        let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Ok(TapeName(format!("{}@{}", session.0, &hash[..WORKSPACE_HASH_HEX])))
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

    /// A file-system-safe, collision-free form, at most [`MAX_STEM_BYTES`]:
    /// ASCII letters, digits, `-`, `_` and `.` stay, every other byte becomes
    /// `%XX` (`telegram:-100/7` → `telegram%3A-100%2F7`). When that form is
    /// longer than [`MAX_STEM_BYTES`] (a 250-character or a 30-emoji chat id),
    /// its head is kept, readable, and the rest becomes `~` and 32 hex digits
    /// of the SHA-256 of the whole name. Encoded forms never contain `~` (it is
    /// `%7E` there), so a shortened stem never equals a name's full one, and
    /// the hash tells shortened ones apart. Names that fit keep exactly the
    /// form they always had, so existing workspaces and archives keep their paths.
    pub fn file_stem(&self) -> String {
        let mut stem = String::with_capacity(self.0.len());
        for byte in self.0.bytes() {
            match byte {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => stem.push(byte as char),
                b'.' if !stem.is_empty() => stem.push('.'),
                _ => stem.push_str(&format!("%{byte:02X}")),
            }
        }
        if stem.len() <= MAX_STEM_BYTES {
            return stem;
        }
        // The stem is ASCII, so any byte offset is a char boundary; only a
        // `%XX` escape must not be cut in two.
        let mut head = MAX_STEM_BYTES - 1 - STEM_HASH_HEX;
        if let Some(escape) = stem[..head].rfind('%')
            && escape + 3 > head
        {
            head = escape;
        }
        let digest: String = Sha256::digest(self.0.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        format!("{}~{}", &stem[..head], &digest[..STEM_HASH_HEX])
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
    fn stems_that_fit_are_the_plain_encoding_and_longer_ones_end_in_a_hash() {
        let stem = |name: &str| TapeName::new(name).unwrap().file_stem();
        // Existing workspaces keep their paths.
        assert_eq!(stem("telegram:-100/7"), "telegram%3A-100%2F7");
        assert_eq!(stem(".hidden 🦀"), "%2Ehidden%20%F0%9F%A6%80");
        let fits = format!("webhook%{}", "a".repeat(MAX_STEM_BYTES - 10));
        assert_eq!(stem(&fits), format!("webhook%25{}", "a".repeat(MAX_STEM_BYTES - 10)), "exactly the limit");

        for name in [format!("webhook:{}", "a".repeat(250)), format!("webhook:{}", "🦀".repeat(30))] {
            let long = stem(&name);
            assert!(long.len() <= MAX_STEM_BYTES, "{} bytes: {long}", long.len());
            assert!(long.starts_with("webhook%3A"), "a readable head: {long}");
            let (head, hash) = long.split_once('~').unwrap();
            assert_eq!(hash.len(), 32);
            assert!(!head.ends_with('%') && !head[head.len() - 2..].contains('%'), "no escape cut in two: {head}");
            assert!(long.chars().all(|c| c.is_ascii_alphanumeric() || "%-_.~".contains(c)), "{long}");
            // What the archive adds still fits one file name.
            assert!(format!("{long}.jsonl.20261201T203050.123456Z.bak.partial").len() <= 255);
        }
        let one_more = format!("webhook%{}", "a".repeat(MAX_STEM_BYTES - 9));
        assert!(stem(&one_more).contains('~'), "one byte over the limit is shortened");
    }

    #[test]
    fn shortened_stems_stay_distinct() {
        let base = "x".repeat(300);
        let a = TapeName::new(format!("{base}a")).unwrap().file_stem();
        let b = TapeName::new(format!("{base}b")).unwrap().file_stem();
        assert_ne!(a, b, "names that differ only past the kept head");
        // A name that spells out a shortened stem is encoded (`~` → `%7E`), never equal to it.
        assert_ne!(TapeName::new(a.clone()).unwrap().file_stem(), a);
    }

    #[test]
    fn scoped_names_keep_the_session_readable_and_differ_by_workspace() {
        let a = TapeName::scoped("cli:local", Path::new("/home/me/project-a")).unwrap();
        let b = TapeName::scoped("cli:local", Path::new("/home/me/project-b")).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, TapeName::scoped("cli:local", Path::new("/home/me/project-a")).unwrap(), "stable");
        let (session, hash) = a.as_str().rsplit_once('@').unwrap();
        assert_eq!(session, "cli:local");
        assert_eq!(hash.len(), WORKSPACE_HASH_HEX);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        // Pinned: a changed hash would orphan every CLI session's tape.
        assert_eq!(
            TapeName::scoped("s", Path::new("/")).unwrap().as_str(),
            format!("s@{}", &"8a5edab282632443219e051e4ade2d1d5bbc671c781051bf1437897cbdfea0f1"[..16])
        );
    }

    #[test]
    fn scoped_names_refuse_what_a_tape_name_refuses_and_over_long_sessions() {
        let workspace = Path::new("/w");
        assert!(TapeName::scoped("", workspace).is_err());
        assert!(TapeName::scoped("a\nb", workspace).is_err());
        assert_eq!(MAX_SCOPED_SESSION_BYTES, 495, "as the error says");
        let longest = "x".repeat(MAX_SCOPED_SESSION_BYTES);
        assert_eq!(TapeName::scoped(&longest, workspace).unwrap().as_str().len(), MAX_NAME_BYTES);
        let error = TapeName::scoped(&format!("{longest}x"), workspace).unwrap_err();
        assert!(error.reason.contains("495"), "{error}");
    }

    #[test]
    fn sidecars_belong_to_their_tape_only() {
        let tape = TapeName::new("chat").unwrap();
        assert!(tape.sidecar("spill").belongs_to(&tape));
        assert!(tape.sidecar("spill").is_sidecar());
        assert!(!TapeName::new("chat2").unwrap().belongs_to(&tape));
    }
}
