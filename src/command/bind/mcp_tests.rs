//! Binding against schemas bub did not write: the `tools/list` answers of
//! real MCP servers (`tests/fixtures/mcp-schemas`).

use super::*;
use crate::command::tests::parse;
use serde_json::json;
use std::path::Path;

/// The input schema of `tool` in the fixture of `server`.
fn schema(server: &str, tool: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/mcp-schemas/{server}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let list: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let tools = list["tools"].as_array().expect("a tools/list result");
    let found = tools.iter().find(|t| t["name"] == tool).unwrap_or_else(|| panic!("no {tool} in {server}"));
    found["inputSchema"].clone()
}

fn bind(text: &str, schema: &Value) -> Result<Value, CommandError> {
    bind_arguments(&parse(text), schema)
}

fn error(text: &str, schema: &Value) -> String {
    bind(text, schema).expect_err("the command should not bind").to_string()
}

#[test]
fn a_python_sdk_tool_binds_every_kind_of_property() {
    let get_page = schema("my-docs", "get-page");
    let arguments = bind(
        ",mcp.my-docs.get-page https://x limit=3 format=html include_toc=yes lang=de timeout=2.5 \
         range='{\"start\": 1}' headers='[{\"name\": \"a\", \"value\": \"b\"}]' extra='{\"k\": \"v\"}'",
        &get_page,
    )
    .unwrap();
    assert_eq!(
        arguments,
        json!({
            "url": "https://x",
            "limit": 3,
            "format": "html",
            "include_toc": true,
            "lang": "de",
            "timeout": 2.5,
            "range": {"start": 1},
            "headers": [{"name": "a", "value": "b"}],
            "extra": {"k": "v"},
        })
    );
    // Positional values fill the properties in the server's order.
    assert_eq!(
        bind(",mcp.my-docs.get-page https://x 3 text", &get_page).unwrap(),
        json!({"url": "https://x", "limit": 3, "format": "text"})
    );
    // The null branch of an `anyOf`; an integer where `anyOf` allows one.
    assert_eq!(
        bind(",mcp.my-docs.get-page https://x lang=null range=null timeout=4", &get_page).unwrap(),
        json!({"url": "https://x", "lang": null, "range": null, "timeout": 4})
    );
}

#[test]
fn a_bad_value_names_its_key_and_what_it_takes() {
    let get_page = schema("my-docs", "get-page");
    assert_eq!(error(",p https://x limit=many", &get_page), "`limit` must be an integer, got `many`");
    // An enum behind a `$ref`.
    assert_eq!(
        error(",p https://x format=pdf", &get_page),
        "`format` must be one of `markdown`, `html`, `text`, got `pdf`"
    );
    assert_eq!(
        error(",p https://x format=HTML", &get_page),
        "`format` must be one of `markdown`, `html`, `text`, got `HTML`: did you mean `html`?"
    );
    assert_eq!(error(",p https://x lang=fr", &get_page), "`lang` must be one of `en`, `de`, `ja` or null, got `fr`");
    assert_eq!(
        error(",p https://x range=5", &get_page),
        "`range` must be a JSON object or null, got `5`: write it as JSON, like range='{\"a\": 1}'"
    );
    assert_eq!(
        error(",p https://x headers=a", &get_page),
        "`headers` must be a JSON array, got `a`: write it as JSON, like headers='[\"a\", \"b\"]'"
    );
    assert_eq!(error(",p https://x include_toc=maybe", &get_page), "`include_toc` must be true or false, got `maybe`");
    assert_eq!(error(",p https://x limt=3", &get_page), "unknown argument `limt` for `p`: did you mean `limit`?");
}

#[test]
fn typescript_sdk_tools_bind_numbers_enums_and_arrays_of_objects() {
    let sum = schema("everything", "get-sum");
    assert_eq!(bind(",mcp.everything.get-sum 1 2.5", &sum).unwrap(), json!({"a": 1, "b": 2.5}));
    assert_eq!(error(",s a=one", &sum), "`a` must be a number, got `one`");
    let annotated = schema("everything", "get-annotated-message");
    assert_eq!(
        bind(",m messageType=error includeImage=true", &annotated).unwrap(),
        json!({"messageType": "error", "includeImage": true})
    );
    assert_eq!(
        error(",m messageType=warning", &annotated),
        "`messageType` must be one of `error`, `success`, `debug`, got `warning`"
    );
    let relations = schema("memory", "create_relations");
    assert_eq!(
        bind(",r relations='[{\"from\": \"a\", \"to\": \"b\", \"relationType\": \"knows\"}]'", &relations).unwrap(),
        json!({"relations": [{"from": "a", "to": "b", "relationType": "knows"}]})
    );
    let tree = schema("filesystem", "directory_tree");
    assert_eq!(
        bind(",t /tmp excludePatterns='[\"*.log\"]'", &tree).unwrap(),
        json!({"path": "/tmp", "excludePatterns": ["*.log"]})
    );
}

#[test]
fn odd_schemas_bind_by_what_they_allow() {
    let query = schema("edge-cases", "query-rows");
    assert_eq!(
        bind(
            ",q 'select 1' max-rows=5 dry-run=null mode=exact hints='[1]' anything=7 filter='{\"column\": \"a\"}' \
             params='[\"x\", 1]'",
            &query
        )
        .unwrap(),
        json!({
            "sql": "select 1",
            "max-rows": 5,
            "dry-run": null,
            "mode": "exact",
            "hints": [1],
            "anything": "7",
            "filter": {"column": "a"},
            "params": ["x", 1],
        })
    );
    assert_eq!(bind(",q s dry-run=no", &query).unwrap(), json!({"sql": "s", "dry-run": false}));
    assert_eq!(error(",q s mode=slow", &query), "`mode` must be one of `fast`, `exact`, got `slow`");
    assert_eq!(error(",q s dry-run=maybe", &query), "`dry-run` must be true or false or null, got `maybe`");
    assert_eq!(error(",q s max-rows=lots", &query), "`max-rows` must be an integer, got `lots`");
    assert!(error(",q s nope=1", &query).starts_with("unknown argument `nope`"));
    let untyped = schema("edge-cases", "untyped");
    assert_eq!(bind(",u anything 2", &untyped).unwrap(), json!({"a": "anything", "b": 2}));
    assert_eq!(error(",u b=4", &untyped), "`b` must be one of `1`, `2`, `3`, got `4`");
    // A `true` schema, and one that refers to itself: anything goes, nothing loops.
    assert_eq!(bind(",t x=1 y='[2]'", &schema("edge-cases", "true-schema")).unwrap(), json!({"x": "1", "y": [2]}));
    assert_eq!(bind(",l self='{}'", &schema("edge-cases", "loop")).unwrap(), json!({"self": {}}));
}
