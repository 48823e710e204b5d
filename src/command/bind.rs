//! Binding a [`CommandLine`] to a tool's argument schema: which property each
//! value fills and which JSON type its text becomes. The rules and the reasons
//! for them are in the [`crate::command`] module docs.

use super::{CommandError, CommandLine};
use serde_json::{Map, Number, Value};

/// Binds a command's values to a tool's argument schema, as a JSON object.
///
/// Positional values fill `properties` in schema order; pairs fill their key.
/// Each value is coerced to its property's type (see [`crate::command`]). Missing
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
    if *schema == Value::Bool(true) {
        // The schema that allows everything.
        return Ok(schema);
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

/// What a property accepts: values of these JSON types, and these values
/// (an `enum` or `const`, which allows nothing else of its branch).
#[derive(Debug, Default)]
struct Accepted {
    types: Vec<JsonType>,
    values: Vec<Value>,
}

impl Accepted {
    fn of(property: &Value, root: &Value) -> Accepted {
        let mut accepted = Accepted::default();
        accepted.collect(property, root, 0);
        accepted.types.sort();
        accepted.types.dedup();
        accepted
    }

    /// Adds what `property` allows; the union of every branch, so `allOf`
    /// is read loosely (the tool still checks its arguments).
    fn collect(&mut self, property: &Value, root: &Value, depth: usize) {
        if depth > MAX_SCHEMA_DEPTH {
            return;
        }
        let listed = match (property.get("const"), property.get("enum")) {
            (Some(constant), _) => Some(std::slice::from_ref(constant)),
            (None, Some(Value::Array(values))) if !values.is_empty() => Some(values.as_slice()),
            _ => None,
        };
        match (listed, property.get("type")) {
            (Some(values), _) => self.values.extend(values.iter().cloned()),
            (None, Some(Value::String(name))) => self.types.extend(JsonType::from_name(name)),
            (None, Some(Value::Array(names))) => {
                self.types.extend(names.iter().filter_map(Value::as_str).filter_map(JsonType::from_name))
            }
            _ => {}
        }
        // OpenAPI's spelling of `"type": [T, "null"]`, which some servers use.
        if property.get("nullable") == Some(&Value::Bool(true)) {
            self.types.push(JsonType::Null);
        }
        for combinator in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = property.get(combinator) {
                for branch in branches {
                    self.collect(branch, root, depth + 1);
                }
            }
        }
        if let Some(target) = property
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|reference| reference.strip_prefix('#'))
            .and_then(|pointer| root.pointer(pointer))
        {
            self.collect(target, root, depth + 1);
        }
    }

    fn is_any(&self) -> bool {
        self.types.is_empty() && self.values.is_empty()
    }

    /// The listed value `text` spells: a string as typed, a number, boolean
    /// or null as the command syntax writes one, arrays and objects as JSON.
    fn listed(&self, text: &str) -> Option<Value> {
        let spells = |value: &Value| match value {
            Value::String(listed) => listed == text,
            Value::Number(listed) => {
                JsonType::Number.parse(text).and_then(|n| n.as_f64()).is_some_and(|n| Some(n) == listed.as_f64())
            }
            Value::Bool(listed) => parse_bool(text) == Some(*listed),
            Value::Null => text == "null",
            Value::Array(_) | Value::Object(_) => serde_json::from_str::<Value>(text).is_ok_and(|v| v == *value),
        };
        self.values.iter().find(|value| spells(value)).cloned()
    }
}

fn coerce(key: &str, text: &str, property: &Value, root: &Value) -> Result<Value, CommandError> {
    let accepted = Accepted::of(property, root);
    if accepted.is_any() {
        return Ok(parse_free_form(text));
    }
    if let Some(value) = accepted.listed(text) {
        return Ok(value);
    }
    if let Some(value) = accepted.types.iter().find_map(|kind| kind.parse(text)) {
        return Ok(value);
    }
    Err(invalid_value(key, text, &accepted))
}

/// A value for a property of any type: JSON arrays and objects as JSON, the
/// rest as text.
fn parse_free_form(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ (Value::Array(_) | Value::Object(_))) => value,
        _ => Value::String(text.to_string()),
    }
}

/// A listed value as the command syntax writes it.
fn spelled(value: &Value) -> String {
    match value {
        Value::String(text) => format!("`{text}`"),
        other => format!("`{other}`"),
    }
}

fn invalid_value(key: &str, text: &str, accepted: &Accepted) -> CommandError {
    let mut names: Vec<String> = Vec::new();
    match accepted.values.as_slice() {
        [] => {}
        [only] => names.push(spelled(only)),
        values => names.push(format!("one of {}", values.iter().map(spelled).collect::<Vec<_>>().join(", "))),
    }
    names.extend(accepted.types.iter().map(|kind| kind.article_name().to_string()));
    let expected = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "a value".to_string(),
    };
    let types = &accepted.types;
    let close = accepted.values.iter().find(|value| value.as_str().is_some_and(|v| v.eq_ignore_ascii_case(text)));
    let hint = if let Some(close) = close {
        format!(": did you mean {}?", spelled(close))
    } else if types.contains(&JsonType::Array) {
        format!(": write it as JSON, like {key}='[\"a\", \"b\"]'")
    } else if types.contains(&JsonType::Object) {
        format!(": write it as JSON, like {key}='{{\"a\": 1}}'")
    } else {
        String::new()
    };
    CommandError::InvalidValue { key: key.to_string(), expected, value: text.to_string(), hint }
}

#[cfg(test)]
mod mcp_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::tests::{parse, parse_error};
    use serde_json::json;

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
