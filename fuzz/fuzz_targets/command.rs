//! Comma commands: `parse_command`, then `bind_arguments` against every
//! builtin tool's schema.
//!
//! Invariants:
//! - `parse_command` is `None` exactly when `is_command` says no;
//! - a parsed line keeps the trimmed text after the prefix as `raw`, has a
//!   non-empty name, identifier-like keys (`-` allowed after the first
//!   character) given once each, and reads back the
//!   same when its words are quoted again and joined (shell-like quoting);
//! - every error is one line (unless it quotes a line break the text had);
//! - bound arguments hold one value per positional value and pair, under the
//!   schema's properties in order, each of its property's declared type (a
//!   string property gets the text as typed).
#![no_main]

use bub::command::{CommandError, CommandLine, bind_arguments, is_command, parse_command};
use bub::tools::builtin::{self, ShellManager, WebFetchSettings};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::{Arc, LazyLock};

/// The parameter schemas of the builtin and session tools, by tool name.
static SCHEMAS: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    let shells = Arc::new(ShellManager::new());
    let mut tools = builtin::tools(shells.clone(), WebFetchSettings::default());
    tools.extend(builtin::session_tools(shells));
    tools.iter().map(|tool| (tool.name().to_string(), tool.parameters().clone())).collect()
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for prefix in [",", "!!"] {
        check(text, prefix);
    }
});

fn check(text: &str, prefix: &str) {
    let parsed = parse_command(text, prefix);
    assert_eq!(parsed.is_some(), is_command(text, prefix), "{text:?}");
    match parsed {
        None => {}
        Some(Err(error)) => assert_one_line(text, &error),
        Some(Ok(command)) => {
            assert_eq!(command.raw, text.trim()[prefix.len()..].trim());
            assert!(!command.name.is_empty());
            for (i, (key, _)) in command.named.iter().enumerate() {
                // Letters, digits, `_`, `.`, and `-` after the first character (`max-rows=5`).
                let first_ok = key.starts_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.');
                let all_ok = key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-'));
                assert!(first_ok && all_ok, "{key:?}");
                assert!(command.named[..i].iter().all(|(seen, _)| seen != key), "{key:?} twice");
            }
            requote_reads_the_same(&command, prefix);
            for (_, schema) in SCHEMAS.iter() {
                check_binding(text, &command, schema);
            }
        }
    }
}

/// The words quoted again and joined parse to the same command.
fn requote_reads_the_same(command: &CommandLine, prefix: &str) {
    let words = std::iter::once(command.name.clone())
        .chain(command.positional.iter().cloned())
        .chain(command.named.iter().map(|(key, value)| format!("{key}={value}")));
    let words: Vec<String> = words.collect();
    // shlex cannot quote a NUL.
    let Ok(line) = shlex::try_join(words.iter().map(String::as_str)) else { return };
    let again = match parse_command(&format!("{prefix}{line}"), prefix) {
        Some(Ok(again)) => again,
        other => panic!("{words:?} quoted as {line:?} reads as {other:?}"),
    };
    assert_eq!(
        (&again.name, &again.positional, &again.named),
        (&command.name, &command.positional, &command.named),
        "quoted as {line:?}"
    );
}

fn check_binding(text: &str, command: &CommandLine, schema: &Value) {
    let arguments = match bind_arguments(command, schema) {
        Ok(arguments) => arguments,
        Err(error) => return assert_one_line(text, &error),
    };
    let Value::Object(arguments) = arguments else { panic!("arguments are not an object: {arguments}") };
    assert_eq!(arguments.len(), command.positional.len() + command.named.len());
    let properties = schema.get("properties").and_then(Value::as_object);
    let by_position = properties.into_iter().flat_map(|p| p.iter()).zip(&command.positional);
    for ((key, property), value) in by_position {
        check_value(key, value, property, &arguments);
    }
    for (key, value) in &command.named {
        match properties.and_then(|p| p.get(key)) {
            Some(property) => check_value(key, value, property, &arguments),
            None => assert!(arguments.contains_key(key), "{key} not bound"),
        }
    }
}

/// A value bound to a property with one declared `type` is of that type.
fn check_value(key: &str, text: &str, property: &Value, arguments: &serde_json::Map<String, Value>) {
    let value = arguments.get(key).unwrap_or_else(|| panic!("{key} not bound"));
    let fits = match property.get("type").and_then(Value::as_str) {
        Some("string") => value.as_str() == Some(text),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    };
    assert!(fits, "{key}={text:?} bound as {value} for {property}");
}

/// An error is one line, unless it quotes words of a text that had line breaks.
fn assert_one_line(text: &str, error: &CommandError) {
    let message = error.to_string();
    if !text.contains(['\n', '\r']) {
        assert!(!message.contains(['\n', '\r']), "error is not one line: {message:?}");
    }
}
