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
//! Every [`CommandError`] is one line that says what is wrong and how to fix it:
//! the operator reads it in a chat, not in a log.
//!
//! # Decisions
//! - A key that is not among the schema's `properties` is an error unless the
//!   schema sets `additionalProperties` to `true` or to a schema. serde would
//!   otherwise drop a typo like `limt=5` without a word.
//! - A token is a pair when the part before its first `=` looks like an
//!   identifier (letters, digits, `_`, `.`), quoted or not. To pass a value that
//!   contains `=`, name it: `content='a=b'`.
//! - Unquoted `#` is kept as text (`,tape.search #release`), as in Bub; the
//!   `shlex` crate would read it as the start of a comment.
//! - For a property that may be several types, the text is tried as integer,
//!   number, boolean, array, object, null (the word `null`), then string; the
//!   first that fits wins, so a string is only chosen when nothing else fits.
//! - A property without any type (a free-form `serde_json::Value`) takes a JSON
//!   array or object when the text is one, else the text as a string.

use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::fmt;

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

/// `key=value` when the part before the first `=` looks like an identifier.
fn split_pair(word: &str) -> Option<(&str, &str)> {
    let (key, value) = word.split_once('=')?;
    let identifier = !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    identifier.then_some((key, value))
}

/// Binds a command's values to a tool's argument schema, as a JSON object.
///
/// Positional values fill `properties` in schema order; pairs fill their key.
/// Each value is coerced to its property's type (see the module docs). Missing
/// required arguments are left to the tool's own validation.
pub fn bind_arguments(command: &CommandLine, schema: &Value) -> Result<Value, CommandError> {
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    if command.positional.len() > properties.len() {
        return Err(CommandError::TooManyPositionals {
            command: command.name.clone(),
            max: properties.len(),
            got: command.positional.len(),
        });
    }
    let mut arguments = Map::new();
    for ((key, property), value) in properties.iter().zip(&command.positional) {
        arguments.insert(key.clone(), coerce(key, value, property, schema)?);
    }
    for (key, value) in &command.named {
        if arguments.contains_key(key) {
            return Err(CommandError::BoundTwice { key: key.clone() });
        }
        let property = property_schema(command, key, properties, schema)?;
        arguments.insert(key.clone(), coerce(key, value, property, schema)?);
    }
    Ok(Value::Object(arguments))
}

/// The schema a named key is coerced by, or the unknown-key error.
fn property_schema<'a>(
    command: &CommandLine,
    key: &str,
    properties: &'a Map<String, Value>,
    schema: &'a Value,
) -> Result<&'a Value, CommandError> {
    if let Some(property) = properties.get(key) {
        return Ok(property);
    }
    match schema.get("additionalProperties") {
        Some(extra @ (Value::Object(_) | Value::Bool(true))) => Ok(extra),
        _ => Err(CommandError::UnknownKey {
            key: key.to_string(),
            command: command.name.clone(),
            hint: unknown_key_hint(key, properties),
        }),
    }
}

fn unknown_key_hint(key: &str, properties: &Map<String, Value>) -> String {
    if properties.is_empty() {
        return "it takes no arguments".to_string();
    }
    let closest = properties
        .keys()
        .map(|known| (strsim::normalized_levenshtein(key, known), known))
        .filter(|(score, _)| *score >= 0.6)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match closest {
        Some((_, known)) => format!("did you mean `{known}`?"),
        None => {
            let known: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
            format!("use one of {}", known.join(", "))
        }
    }
}

/// The JSON types a value may take, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum JsonType {
    Integer,
    Number,
    Boolean,
    Array,
    Object,
    Null,
    String,
}

impl JsonType {
    fn from_name(name: &str) -> Option<JsonType> {
        Some(match name {
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "boolean" => JsonType::Boolean,
            "array" => JsonType::Array,
            "object" => JsonType::Object,
            "null" => JsonType::Null,
            "string" => JsonType::String,
            _ => return None,
        })
    }

    fn of(value: &Value) -> JsonType {
        match value {
            Value::Null => JsonType::Null,
            Value::Bool(_) => JsonType::Boolean,
            Value::Number(n) if n.is_f64() => JsonType::Number,
            Value::Number(_) => JsonType::Integer,
            Value::String(_) => JsonType::String,
            Value::Array(_) => JsonType::Array,
            Value::Object(_) => JsonType::Object,
        }
    }

    fn article_name(self) -> &'static str {
        match self {
            JsonType::Integer => "an integer",
            JsonType::Number => "a number",
            JsonType::Boolean => "true or false",
            JsonType::Array => "a JSON array",
            JsonType::Object => "a JSON object",
            JsonType::Null => "null",
            JsonType::String => "a string",
        }
    }

    fn parse(self, text: &str) -> Option<Value> {
        match self {
            JsonType::Integer => parse_integer(text),
            JsonType::Number => parse_integer(text).or_else(|| parse_float(text)),
            JsonType::Boolean => parse_bool(text).map(Value::Bool),
            JsonType::Array => serde_json::from_str(text).ok().filter(Value::is_array),
            JsonType::Object => serde_json::from_str(text).ok().filter(Value::is_object),
            JsonType::Null => (text == "null").then_some(Value::Null),
            JsonType::String => Some(Value::String(text.to_string())),
        }
    }
}

fn parse_integer(text: &str) -> Option<Value> {
    if let Ok(n) = text.parse::<i64>() {
        return Some(Value::from(n));
    }
    text.parse::<u64>().ok().map(Value::from)
}

fn parse_float(text: &str) -> Option<Value> {
    let n = text.parse::<f64>().ok()?;
    Number::from_f64(n).map(Value::Number)
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// How deep `$ref`, `anyOf`, `oneOf` and `allOf` are followed.
const MAX_SCHEMA_DEPTH: usize = 16;

/// Collects the JSON types a property schema allows; empty means any.
fn allowed_types(property: &Value, root: &Value, depth: usize, types: &mut Vec<JsonType>) {
    if depth > MAX_SCHEMA_DEPTH {
        return;
    }
    match property.get("type") {
        Some(Value::String(name)) => types.extend(JsonType::from_name(name)),
        Some(Value::Array(names)) => {
            types.extend(names.iter().filter_map(Value::as_str).filter_map(JsonType::from_name))
        }
        _ => {}
    }
    if let Some(constant) = property.get("const") {
        types.push(JsonType::of(constant));
    }
    if let Some(Value::Array(values)) = property.get("enum") {
        types.extend(values.iter().map(JsonType::of));
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = property.get(combinator) {
            for branch in branches {
                allowed_types(branch, root, depth + 1, types);
            }
        }
    }
    if let Some(target) = property
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
    {
        allowed_types(target, root, depth + 1, types);
    }
}

fn coerce(key: &str, text: &str, property: &Value, root: &Value) -> Result<Value, CommandError> {
    let mut types = Vec::new();
    allowed_types(property, root, 0, &mut types);
    if types.is_empty() {
        return Ok(parse_free_form(text));
    }
    types.sort();
    types.dedup();
    if let Some(value) = types.iter().find_map(|kind| kind.parse(text)) {
        return Ok(value);
    }
    Err(invalid_value(key, text, &types))
}

/// A value for a property of any type: JSON arrays and objects as JSON, the
/// rest as text.
fn parse_free_form(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ (Value::Array(_) | Value::Object(_))) => value,
        _ => Value::String(text.to_string()),
    }
}

fn invalid_value(key: &str, text: &str, types: &[JsonType]) -> CommandError {
    let names: Vec<&str> = types.iter().map(|kind| kind.article_name()).collect();
    let expected = match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "a value".to_string(),
    };
    let hint = if types.contains(&JsonType::Array) {
        format!(": write it as JSON, like {key}='[\"a\", \"b\"]'")
    } else if types.contains(&JsonType::Object) {
        format!(": write it as JSON, like {key}='{{\"a\": 1}}'")
    } else {
        String::new()
    };
    CommandError::InvalidValue { key: key.to_string(), expected, value: text.to_string(), hint }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> CommandLine {
        match parse_command(text, ",") {
            Some(Ok(command)) => command,
            other => panic!("`{text}` did not parse: {other:?}"),
        }
    }

    fn parse_error(text: &str) -> CommandError {
        match parse_command(text, ",") {
            Some(Err(error)) => error,
            other => panic!("`{text}` should fail: {other:?}"),
        }
    }

    fn bind(text: &str, schema: Value) -> Result<Value, CommandError> {
        bind_arguments(&parse(text), &schema)
    }

    fn search_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "format": "uint"},
                "kinds": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        })
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
        let command = parse(",echo --opt=x 'two words=x' =y a=b a.b_c1=z");
        assert_eq!(command.positional, vec!["--opt=x", "two words=x", "=y"]);
        assert_eq!(command.named, vec![("a".to_string(), "b".to_string()), ("a.b_c1".to_string(), "z".to_string()),]);
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

    // --- binding ---

    #[test]
    fn positional_values_bind_in_schema_property_order() {
        let arguments = bind(",tape.search release 5", search_schema()).unwrap();
        assert_eq!(arguments, json!({"query": "release", "limit": 5}));
        let keys: Vec<&String> = arguments.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["query", "limit"]);
    }

    #[test]
    fn pairs_bind_by_key() {
        let arguments = bind(",tape.search limit=3 query='a b'", search_schema()).unwrap();
        assert_eq!(arguments, json!({"limit": 3, "query": "a b"}));
    }

    #[test]
    fn too_many_positional_values_is_an_error() {
        let error = bind(",tape.search a 1 [] extra", search_schema()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "too many positional values for `tape.search`: it takes 3, got 4; quote values that contain spaces"
        );
        let no_args = json!({"type": "object", "properties": {}});
        assert!(matches!(
            bind(",tape.info now", no_args),
            Err(CommandError::TooManyPositionals { max: 0, got: 1, .. })
        ));
    }

    #[test]
    fn value_given_by_position_and_key_is_an_error() {
        assert_eq!(
            bind(",tape.search release query=other", search_schema()).unwrap_err().to_string(),
            "`query` is given both by position and as `query=…`: give it once"
        );
    }

    #[test]
    fn unknown_key_is_an_error_with_a_suggestion() {
        assert_eq!(
            bind(",tape.search q limt=5", search_schema()).unwrap_err().to_string(),
            "unknown argument `limt` for `tape.search`: did you mean `limit`?"
        );
        assert_eq!(
            bind(",tape.search q zzz=5", search_schema()).unwrap_err().to_string(),
            "unknown argument `zzz` for `tape.search`: use one of `query`, `limit`, `kinds`"
        );
        let no_args = json!({"type": "object", "properties": {}, "additionalProperties": false});
        assert_eq!(
            bind(",tape.info x=1", no_args).unwrap_err().to_string(),
            "unknown argument `x` for `tape.info`: it takes no arguments"
        );
    }

    #[test]
    fn unknown_keys_pass_when_the_schema_allows_extra_properties() {
        let open = json!({"type": "object", "additionalProperties": true});
        assert_eq!(bind(",t x=1", open).unwrap(), json!({"x": "1"}));
        let typed = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        assert_eq!(bind(",t x=1", typed).unwrap(), json!({"x": 1}));
    }

    #[test]
    fn integers_reject_fractions_and_words() {
        let schema = search_schema();
        assert_eq!(bind(",s q limit=-2", schema.clone()).unwrap()["limit"], -2);
        assert_eq!(
            bind(",s q limit=abc", schema.clone()).unwrap_err().to_string(),
            "`limit` must be an integer, got `abc`"
        );
        assert!(matches!(bind(",s q limit=1.5", schema), Err(CommandError::InvalidValue { .. })));
    }

    #[test]
    fn numbers_accept_integers_and_fractions_but_not_infinity() {
        let schema = json!({"properties": {"t": {"type": "number"}}});
        assert_eq!(bind(",x t=1.5", schema.clone()).unwrap(), json!({"t": 1.5}));
        assert_eq!(bind(",x t=2", schema.clone()).unwrap(), json!({"t": 2}));
        assert!(bind(",x t=inf", schema.clone()).is_err());
        assert!(bind(",x t=NaN", schema).is_err());
    }

    #[test]
    fn booleans_accept_common_words_in_any_case() {
        let schema = json!({"properties": {"b": {"type": "boolean"}}});
        for (text, expected) in [
            ("true", true),
            ("TRUE", true),
            ("Yes", true),
            ("1", true),
            ("false", false),
            ("no", false),
            ("NO", false),
            ("0", false),
        ] {
            assert_eq!(bind(&format!(",x b={text}"), schema.clone()).unwrap()["b"], expected);
        }
        assert_eq!(bind(",x b=maybe", schema).unwrap_err().to_string(), "`b` must be true or false, got `maybe`");
    }

    #[test]
    fn strings_are_taken_as_typed() {
        let schema = json!({"properties": {"s": {"type": "string"}}});
        assert_eq!(bind(",x s=5", schema.clone()).unwrap(), json!({"s": "5"}));
        assert_eq!(bind(",x s=", schema).unwrap(), json!({"s": ""}));
    }

    #[test]
    fn arrays_and_objects_are_json_text() {
        let arguments = bind(",tape.search q kinds='[\"message\"]'", search_schema()).unwrap();
        assert_eq!(arguments["kinds"], json!(["message"]));
        assert_eq!(
            bind(",tape.search q kinds=message", search_schema()).unwrap_err().to_string(),
            "`kinds` must be a JSON array, got `message`: write it as JSON, like kinds='[\"a\", \"b\"]'"
        );
        let schema = json!({"properties": {"headers": {"type": "object"}}});
        assert_eq!(
            bind(",web.fetch headers='{\"a\": \"b\"}'", schema.clone()).unwrap(),
            json!({"headers": {"a": "b"}})
        );
        assert!(bind(",web.fetch headers='[1]'", schema).is_err());
    }

    #[test]
    fn type_arrays_with_null_accept_null_and_the_type() {
        let schema = json!({"properties": {"limit": {"type": ["integer", "null"]}}});
        assert_eq!(bind(",x limit=4", schema.clone()).unwrap(), json!({"limit": 4}));
        assert_eq!(bind(",x limit=null", schema.clone()).unwrap(), json!({"limit": null}));
        assert_eq!(
            bind(",x limit=lots", schema).unwrap_err().to_string(),
            "`limit` must be an integer or null, got `lots`"
        );
    }

    #[test]
    fn any_of_with_a_null_branch_coerces_by_the_other_branch() {
        let schema = json!({
            "properties": {"kinds": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]}},
        });
        assert_eq!(bind(",x kinds='[\"a\"]'", schema).unwrap(), json!({"kinds": ["a"]}));
        let schema = json!({"properties": {"on": {"oneOf": [{"type": "boolean"}, {"type": "null"}]}}});
        assert_eq!(bind(",x on=yes", schema).unwrap(), json!({"on": true}));
    }

    #[test]
    fn referenced_definitions_are_followed() {
        let schema = json!({
            "properties": {"mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}]}},
            "$defs": {"Mode": {"type": "string", "enum": ["fast", "slow"]}},
        });
        assert_eq!(bind(",x mode=fast", schema).unwrap(), json!({"mode": "fast"}));
    }

    #[test]
    fn free_form_properties_take_json_containers_or_text() {
        let schema = json!({"properties": {"data": {}}});
        assert_eq!(bind(",x '{\"a\": 1}'", schema.clone()).unwrap(), json!({"data": {"a": 1}}));
        assert_eq!(bind(",x 5", schema).unwrap(), json!({"data": "5"}));
    }

    #[test]
    fn schemars_option_fields_bind() {
        /// Search.
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Args {
            query: String,
            limit: Option<u32>,
            kinds: Option<Vec<String>>,
            archive: Option<bool>,
        }
        let schema = serde_json::to_value(schemars::schema_for!(Args)).unwrap();
        let arguments = bind(",tape.search release 7 kinds='[\"message\"]' archive=yes", schema).unwrap();
        assert_eq!(arguments, json!({"query": "release", "limit": 7, "kinds": ["message"], "archive": true}));
    }

    #[test]
    fn every_error_is_one_line() {
        let errors = [
            parse_error(","),
            parse_error(",x 'a"),
            parse_error(",x a=1 b"),
            parse_error(",x a=1 a=2"),
            bind(",x q limt=1", search_schema()).unwrap_err(),
            bind(",x q 1 [] 4", search_schema()).unwrap_err(),
            bind(",x q limit=z", search_schema()).unwrap_err(),
            bind(",x q kinds=z", search_schema()).unwrap_err(),
        ];
        for error in errors {
            assert!(!error.to_string().contains('\n'), "{error}");
        }
    }
}
