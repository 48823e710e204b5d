//! [`ConfigError`]: what is wrong with a config file, said as
//! `FILE:LINE:COL: message` so an editor can jump to it and an admin can act
//! on it without reading bub's source.

use std::ops::Range;
use std::path::{Path, PathBuf};

/// A config file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not a valid config; `location` is 1-based `(line, column)`.
    #[error("{}", render(path, *location, message))]
    Invalid { path: PathBuf, location: Option<(usize, usize)>, message: String },
    #[error("{}: cannot watch for changes: {message}", path.display())]
    Watch { path: PathBuf, message: String },
}

fn render(path: &Path, location: Option<(usize, usize)>, message: &str) -> String {
    match location {
        Some((line, column)) => format!("{}:{line}:{column}: {message}", path.display()),
        None => format!("{}: {message}", path.display()),
    }
}

impl ConfigError {
    /// The message without the file and position.
    pub fn message(&self) -> String {
        match self {
            ConfigError::Invalid { message, .. } | ConfigError::Watch { message, .. } => message.clone(),
            ConfigError::Read { source, .. } => format!("cannot read: {source}"),
        }
    }

    /// 1-based `(line, column)`, when the error points into the file.
    pub fn location(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Invalid { location, .. } => *location,
            _ => None,
        }
    }
}

/// The text of a config file and its name, to turn byte spans into positions.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub path: PathBuf,
    pub text: String,
}

/// The path only: the text holds the secrets written in the file.
impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Source {
    /// An error at `span` (a byte range into the text), or at no position.
    pub fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.clone(),
            location: span.map(|span| line_column(&self.text, span.start)),
            message: message.into(),
        }
    }
}

/// The 1-based line and column (in characters) of a byte offset. Offsets past
/// the end or inside a character are clamped, never a panic.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The closest of `candidates` to `word`, if it is close enough to be a typo.
pub(crate) fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(word, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// `; did you mean `x`?`, or nothing.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, candidates).map(|c| format!("; did you mean `{c}`?")).unwrap_or_default()
}

/// Rewrites serde's messages into the config's words: "unknown field" becomes
/// an unknown key with a suggestion, "unknown variant" lists the allowed
/// values, "missing field" a missing key.
pub(crate) fn friendly_message(message: &str) -> String {
    let message = message.trim();
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (word, expected) = split_expected(rest);
        let hint = did_you_mean(&word, expected.iter().map(String::as_str));
        return match (hint.is_empty(), expected.is_empty()) {
            (false, _) => format!("unknown key `{word}`{hint}"),
            (true, false) => format!("unknown key `{word}`; expected one of {}", expected.join(", ")),
            (true, true) => format!("unknown key `{word}`: this table takes no keys"),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (word, expected) = split_expected(rest);
        let hint = did_you_mean(&word, expected.iter().map(String::as_str));
        return format!("unknown value `{word}`; expected one of {}{hint}", expected.join(", "));
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!("missing key {rest}");
    }
    message.to_string()
}

/// Splits "`word`, expected one of `a`, `b`" into the word and `[a, b]`.
fn split_expected(text: &str) -> (String, Vec<String>) {
    let mut quoted = text.split('`').skip(1).step_by(2).map(str::to_string);
    let word = quoted.next().unwrap_or_default();
    (word, quoted.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_offsets_become_one_based_lines_and_character_columns() {
        let text = "a = 1\n\n  é = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 7), (3, 1));
        // `=` after a two-byte character is column 5, not 6
        assert_eq!(line_column(text, 7 + 2 + 2 + 1), (3, 5));
        assert_eq!(line_column(text, 10_000), (4, 1));
        assert_eq!(line_column(text, 10), (3, 3), "inside a character: clamped back");
    }

    #[test]
    fn unknown_fields_get_a_suggestion_and_variants_list_the_allowed_values() {
        assert_eq!(
            friendly_message("unknown field `allow_user`, expected one of `allow_users`, `allow_chats`"),
            "unknown key `allow_user`; did you mean `allow_users`?"
        );
        assert_eq!(
            friendly_message("unknown variant `steeer`, expected one of `steer`, `queue`, `drop`"),
            "unknown value `steeer`; expected one of steer, queue, drop; did you mean `steer`?"
        );
        assert_eq!(friendly_message("missing field `secrets`"), "missing key `secrets`");
        assert_eq!(friendly_message("unknown field `zzz`, expected `user`"), "unknown key `zzz`; expected one of user");
    }

    #[test]
    fn errors_render_as_file_line_column() {
        let source = Source { path: "config/bub.toml".into(), text: "[http]\nlisten = 1\n".into() };
        let error = source.error(Some(16..17), "expected a string");
        assert_eq!(error.to_string(), "config/bub.toml:2:10: expected a string");
        assert_eq!(error.location(), Some((2, 10)));
        assert_eq!(source.error(None, "empty").to_string(), "config/bub.toml: empty");
    }
}
