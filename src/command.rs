//! Comma commands: `,tape.handoff summary='done now'` typed by an operator runs
//! a tool directly, without the model.
//!
//! This module only *reads* a command line; the agent decides what to run (a
//! registry tool, or the shell fallback for names that are not tools) and
//! records it. Two steps, so the fallback can use [`CommandLine::raw`] untouched
//! and binding can use the tool's schema:
//!
//! 1. [`parse_command`]: is this text a command, and what are its words? Words
//!    are split with shell-like quoting: the first is the name, then positional
//!    values, then `key=value` pairs.
//! 2. [`bind_arguments`]: positional values fill the schema's `properties` in
//!    order (serde_json keeps their order), pairs fill their key, and each text
//!    is turned into the JSON type its property asks for, so `limit=5` reaches
//!    the tool as the number 5.
//!
//! Platform commands (`/tape_info@bot`) are read as comma commands by
//! [`platform`].
//!
//! Every [`CommandError`] is one line that says what is wrong and how to fix it:
//! the operator reads it in a chat, not in a log.
//!
//! # Decisions
//! - A key that is not among the schema's `properties` is an error unless the
//!   schema sets `additionalProperties` to `true` or to a schema. serde would
//!   otherwise drop a typo like `limt=5` without a word.
//! - A token is a pair when the part before its first `=` looks like an
//!   identifier (letters, digits, `_`, `.`, and `-` after the first character,
//!   for the keys of MCP tools like `max-rows`), quoted or not. To pass a value
//!   that contains `=`, name it: `content='a=b'`.
//! - Unquoted `#` is kept as text (`,tape.search #release`), as in Bub; the
//!   `shlex` crate would read it as the start of a comment.
//! - For a property that may be several types, the text is tried as integer,
//!   number, boolean, array, object, null (the word `null`), then string; the
//!   first that fits wins, so a string is only chosen when nothing else fits.
//! - An `enum` or `const` allows only its values: `format=html` binds when
//!   `html` is listed (`2` binds the number when `2` is), and anything else is
//!   an error listing them, so a typo never reaches the tool. Types and values
//!   come from the whole property: `$ref`s into `$defs`, every `anyOf`,
//!   `oneOf` and `allOf` branch, `"type": [..]` and OpenAPI's `nullable`.
//! - A property without any type (a free-form `serde_json::Value`) takes a JSON
//!   array or object when the text is one, else the text as a string.

use std::borrow::Cow;
use std::fmt;

mod bind;
pub mod platform;

pub use bind::bind_arguments;

/// A command line, split into words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The trimmed text after the prefix, as typed (the shell fallback runs it).
    pub raw: String,
    /// The first word: a tool name, or the program of a shell fallback.
    pub name: String,
    /// Values before the first `key=value` pair.
    pub positional: Vec<String>,
    /// `key=value` pairs, in the order typed.
    pub named: Vec<(String, String)>,
}

/// A command that cannot be parsed or bound. Displayed as one line for the
/// person who typed it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("empty command: type a tool name after `{prefix}`")]
    Empty { prefix: String },
    #[error("unterminated quote in command: close every quote, or escape a lone quote or trailing backslash with `\\`")]
    UnterminatedQuote,
    #[error("positional value `{value}` after key=value pairs: put positional values first")]
    PositionalAfterPair { value: String },
    #[error("`{key}` is given twice: give each key=value once")]
    DuplicateKey { key: String },
    #[error("`{key}` is given both by position and as `{key}=…`: give it once")]
    BoundTwice { key: String },
    #[error("unknown argument `{key}` for `{command}`: {hint}")]
    UnknownKey { key: String, command: String, hint: String },
    #[error("too many positional values for `{command}`: it takes {max}, got {got}; quote values that contain spaces")]
    TooManyPositionals { command: String, max: usize, got: usize },
    #[error("`{key}` must be {expected}, got `{value}`{hint}")]
    InvalidValue { key: String, expected: String, value: String, hint: String },
}

/// A validated command prefix: non-empty, no whitespace. `,` by default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct CommandPrefix(String);

/// Why a configured command prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCommandPrefix {
    #[error("command prefix is empty: set one or more non-space characters, like `,`")]
    Empty,
    #[error("command prefix `{0}` contains whitespace: use non-space characters only, like `,`")]
    Whitespace(String),
}

impl CommandPrefix {
    pub fn new(prefix: impl Into<String>) -> Result<CommandPrefix, InvalidCommandPrefix> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            Err(InvalidCommandPrefix::Empty)
        } else if prefix.chars().any(char::is_whitespace) {
            Err(InvalidCommandPrefix::Whitespace(prefix))
        } else {
            Ok(CommandPrefix(prefix))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for CommandPrefix {
    fn default() -> CommandPrefix {
        CommandPrefix(",".to_string())
    }
}

impl TryFrom<String> for CommandPrefix {
    type Error = InvalidCommandPrefix;

    fn try_from(prefix: String) -> Result<CommandPrefix, InvalidCommandPrefix> {
        CommandPrefix::new(prefix)
    }
}

impl std::str::FromStr for CommandPrefix {
    type Err = InvalidCommandPrefix;

    fn from_str(prefix: &str) -> Result<CommandPrefix, InvalidCommandPrefix> {
        CommandPrefix::new(prefix)
    }
}

impl AsRef<str> for CommandPrefix {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CommandPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether `text` is a command: its trimmed form starts with `prefix`. An empty
/// prefix matches nothing (commands off); validate configured prefixes with
/// [`CommandPrefix::new`].
pub fn is_command(text: &str, prefix: &str) -> bool {
    !prefix.is_empty() && text.trim().starts_with(prefix)
}

/// Reads a command line.
///
/// `None`: not a command. `Some(Err)`: a command that cannot be read (bare
/// prefix, unterminated quote, positional value after a pair, repeated key).
pub fn parse_command(text: &str, prefix: &str) -> Option<Result<CommandLine, CommandError>> {
    if !is_command(text, prefix) {
        return None;
    }
    let raw = text.trim()[prefix.len()..].trim();
    Some(split_command(raw, prefix))
}

fn split_command(raw: &str, prefix: &str) -> Result<CommandLine, CommandError> {
    let words = shlex::split(&keep_hash_marks(raw)).ok_or(CommandError::UnterminatedQuote)?;
    let mut words = words.into_iter();
    let name = words
        .next()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| CommandError::Empty { prefix: prefix.to_string() })?;
    let mut positional = Vec::new();
    let mut named: Vec<(String, String)> = Vec::new();
    for word in words {
        match split_pair(&word) {
            Some((key, value)) => {
                if named.iter().any(|(seen, _)| seen == key) {
                    return Err(CommandError::DuplicateKey { key: key.to_string() });
                }
                named.push((key.to_string(), value.to_string()));
            }
            None if !named.is_empty() => {
                return Err(CommandError::PositionalAfterPair { value: word });
            }
            None => positional.push(word),
        }
    }
    Ok(CommandLine { raw: raw.to_string(), name, positional, named })
}

/// Escapes every unquoted `#`, which the `shlex` crate would otherwise treat as
/// the start of a comment. Quote tracking mirrors shlex: backslash escapes
/// outside quotes and inside double quotes; single quotes are literal.
fn keep_hash_marks(raw: &str) -> Cow<'_, str> {
    if !raw.contains('#') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len() + 4);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for ch in raw.chars() {
        if escaped {
            escaped = false;
        } else {
            match (quote, ch) {
                (None, '#') => out.push('\\'),
                (None | Some('"'), '\\') => escaped = true,
                (None, '\'' | '"') => quote = Some(ch),
                (Some(open), _) if ch == open => quote = None,
                _ => {}
            }
        }
        out.push(ch);
    }
    Cow::Owned(out)
}

/// `key=value` when the part before the first `=` looks like an identifier
/// (`-` allowed after its first character, for `max-rows=5`).
fn split_pair(word: &str) -> Option<(&str, &str)> {
    let (key, value) = word.split_once('=')?;
    let identifier = key.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
        && key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-'));
    identifier.then_some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn parse(text: &str) -> CommandLine {
        match parse_command(text, ",") {
            Some(Ok(command)) => command,
            other => panic!("`{text}` did not parse: {other:?}"),
        }
    }

    pub(super) fn parse_error(text: &str) -> CommandError {
        match parse_command(text, ",") {
            Some(Err(error)) => error,
            other => panic!("`{text}` should fail: {other:?}"),
        }
    }

    // --- prefix ---

    #[test]
    fn prefix_must_be_non_empty_and_without_whitespace() {
        assert_eq!(CommandPrefix::new(""), Err(InvalidCommandPrefix::Empty));
        assert!(matches!(CommandPrefix::new(", "), Err(InvalidCommandPrefix::Whitespace(_))));
        assert_eq!(CommandPrefix::new("!!").map(|p| p.to_string()).ok(), Some("!!".into()));
        assert_eq!(CommandPrefix::default().as_str(), ",");
    }

    #[test]
    fn prefix_errors_say_how_to_fix_them() {
        let message = CommandPrefix::new("a b").unwrap_err().to_string();
        assert!(message.contains("whitespace") && message.contains("non-space"), "{message}");
    }

    #[test]
    fn prefix_deserializes_only_when_valid() {
        let ok: CommandPrefix = serde_json::from_value(json!("/")).unwrap();
        assert_eq!(ok.as_str(), "/");
        assert!(serde_json::from_value::<CommandPrefix>(json!("")).is_err());
    }

    // --- is a command? ---

    #[test]
    fn text_starting_with_the_prefix_after_trimming_is_a_command() {
        assert!(is_command("  ,tape.info  ", ","));
        assert!(!is_command("hello, world", ","));
        assert!(parse_command("hello", ",").is_none());
    }

    #[test]
    fn empty_prefix_makes_nothing_a_command() {
        assert!(!is_command(",tape.info", ""));
        assert!(parse_command("tape.info", "").is_none());
    }

    #[test]
    fn multi_char_prefix_is_stripped_once() {
        let command = match parse_command("!!!echo hi", "!!") {
            Some(Ok(command)) => command,
            other => panic!("{other:?}"),
        };
        assert_eq!(command.name, "!echo");
        assert_eq!(command.raw, "!echo hi");
    }

    #[test]
    fn only_one_prefix_is_stripped() {
        let command = parse(",,skill");
        assert_eq!(command.name, ",skill");
    }

    // --- splitting ---

    #[test]
    fn first_word_is_the_name_and_raw_is_the_trimmed_rest() {
        let command = parse("  ,  tape.search  release notes  ");
        assert_eq!(command.name, "tape.search");
        assert_eq!(command.raw, "tape.search  release notes");
        assert_eq!(command.positional, vec!["release", "notes"]);
        assert!(command.named.is_empty());
    }

    #[test]
    fn quotes_keep_spaces_together() {
        let command = parse(",tape.handoff summary='done now' name=\"phase two\"");
        assert_eq!(
            command.named,
            vec![("summary".to_string(), "done now".to_string()), ("name".to_string(), "phase two".to_string()),]
        );
    }

    #[test]
    fn positional_values_come_before_pairs() {
        let command = parse(",tape.search release limit=5");
        assert_eq!(command.positional, vec!["release"]);
        assert_eq!(command.named, vec![("limit".to_string(), "5".to_string())]);
    }

    #[test]
    fn positional_value_after_a_pair_is_an_error() {
        assert_eq!(
            parse_error(",tape.search limit=5 release").to_string(),
            "positional value `release` after key=value pairs: put positional values first"
        );
    }

    #[test]
    fn unterminated_quote_is_an_error() {
        let error = parse_error(",tape.handoff summary='done now");
        assert_eq!(error, CommandError::UnterminatedQuote);
        assert!(error.to_string().starts_with("unterminated quote in command"));
        assert_eq!(parse_error(",echo \"open"), CommandError::UnterminatedQuote);
    }

    #[test]
    fn bare_prefix_is_an_empty_command() {
        for text in [",", ",   ", "  ,  ", ",''"] {
            assert_eq!(parse_error(text).to_string(), "empty command: type a tool name after `,`", "{text:?}");
        }
    }

    #[test]
    fn duplicate_key_is_an_error() {
        assert_eq!(
            parse_error(",tape.search q limit=1 limit=2").to_string(),
            "`limit` is given twice: give each key=value once"
        );
    }

    #[test]
    fn only_identifier_like_keys_make_pairs() {
        let command = parse(",echo --opt=x -o=y 'two words=x' =y a=b a.b_c1=z max-rows=5");
        assert_eq!(command.positional, vec!["--opt=x", "-o=y", "two words=x", "=y"]);
        let named: Vec<(&str, &str)> = command.named.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(named, [("a", "b"), ("a.b_c1", "z"), ("max-rows", "5")]);
    }

    #[test]
    fn value_may_contain_equals_signs() {
        let command = parse(",fs.write notes.txt content='x=1'");
        assert_eq!(command.named, vec![("content".to_string(), "x=1".to_string())]);
        assert_eq!(parse(",cfg url=a=b").named[0].1, "a=b");
    }

    #[test]
    fn hash_marks_are_text_not_comments() {
        let command = parse(",tape.search #release limit=2 note=\"a # b\" tag='#x'");
        assert_eq!(command.positional, vec!["#release"]);
        assert_eq!(command.named[1].1, "a # b");
        assert_eq!(command.named[2].1, "#x");
    }

    #[test]
    fn escapes_work_inside_and_outside_quotes() {
        let command = parse(r#",echo it\'s "say \"hi\"" \#tag"#);
        assert_eq!(command.positional, vec!["it's", "say \"hi\"", "#tag"]);
    }
}
