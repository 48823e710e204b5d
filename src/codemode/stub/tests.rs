use super::*;
use crate::tools::{ToolContext, ToolError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashMap;
use std::process::Command;

fn raw(name: &str, parameters: Value, output_schema: Option<Value>) -> StubTool {
    StubTool { model_name: name.into(), description: format!("The {name} tool."), parameters, output_schema }
}

/// A schema rendered as a result type: the type and the classes it needed.
fn type_of(schema: Value) -> (String, Vec<String>) {
    let mut stub = Stub::new(&[]);
    let ty = stub.root_type(&schema, "FResult");
    (ty, stub.classes)
}

fn ty_of(schema: Value) -> String {
    type_of(schema).0
}

/// The `async def` line(s) for a tool with these parameters.
fn signature_of(parameters: Value) -> String {
    let stub = render_stub(&[raw("f", parameters, None)]);
    let start = stub.find("async def f(").expect("function");
    let end = start + stub[start..].find(":\n").expect("end of signature");
    stub[start..end + 1].to_string()
}

#[test]
fn primitives_and_unknowns() {
    assert_eq!(ty_of(json!({"type": "string", "format": "date-time"})), "str");
    assert_eq!(ty_of(json!({"type": "integer", "format": "uint32", "minimum": 0})), "int");
    assert_eq!(ty_of(json!({"type": "number"})), "float");
    assert_eq!(ty_of(json!({"type": "boolean"})), "bool");
    assert_eq!(ty_of(json!({"type": "null"})), "None");
    assert_eq!(ty_of(json!({})), "Any");
    assert_eq!(ty_of(json!(true)), "Any");
    assert_eq!(ty_of(json!({"type": "bytes"})), "Any");
    assert_eq!(ty_of(json!({"not": {"type": "string"}})), "Any");
}

#[test]
fn unions_and_options() {
    assert_eq!(ty_of(json!({"anyOf": [{"type": "string"}, {"type": "null"}]})), "str | None");
    assert_eq!(ty_of(json!({"type": ["string", "null"]})), "str | None");
    assert_eq!(ty_of(json!({"type": ["integer", "string", "integer"]})), "int | str");
    assert_eq!(
        ty_of(json!({"oneOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]})),
        "int | list[str]"
    );
    assert_eq!(ty_of(json!({"type": "string", "nullable": true})), "str | None");
    assert_eq!(ty_of(json!({"anyOf": [{"type": "string"}, {}]})), "Any");
    assert_eq!(ty_of(json!({"allOf": [{"type": "string"}]})), "str");
    assert_eq!(ty_of(json!({"allOf": [{"type": "string"}, {"minLength": 1}]})), "Any");
}

#[test]
fn enums_and_consts_are_literals() {
    assert_eq!(ty_of(json!({"type": "string", "enum": ["low", "high"]})), r#"Literal["low", "high"]"#);
    assert_eq!(ty_of(json!({"const": 3})), "Literal[3]");
    assert_eq!(ty_of(json!({"enum": [true, "a\"b", -1]})), r#"Literal[True, "a\"b", -1]"#);
    assert_eq!(ty_of(json!({"enum": ["a", null, "b"]})), r#"Literal["a", "b"] | None"#);
    assert_eq!(ty_of(json!({"enum": [1.5]})), "Any");
    assert_eq!(ty_of(json!({"enum": []})), "Any");
    // schemars' form for unit variants with doc comments
    let variants = json!({"oneOf": [
        {"type": "string", "const": "low", "description": "Whenever."},
        {"type": "string", "const": "high", "description": "Now."},
        {"type": "null"},
    ]});
    assert_eq!(ty_of(variants), r#"Literal["low", "high"] | None"#);
}

#[test]
fn arrays_tuples_and_dicts() {
    assert_eq!(ty_of(json!({"type": "array", "items": {"type": "integer"}})), "list[int]");
    assert_eq!(ty_of(json!({"type": "array"})), "list[Any]");
    let pair = json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]});
    assert_eq!(ty_of(pair), "tuple[str, int]");
    let draft7 = json!({"type": "array", "items": [{"type": "boolean"}, {"type": "null"}]});
    assert_eq!(ty_of(draft7), "tuple[bool, None]");
    assert_eq!(ty_of(json!({"type": "array", "prefixItems": []})), "tuple[()]");
    let counts = json!({"type": "object", "additionalProperties": {"type": "integer", "format": "int64"}});
    assert_eq!(ty_of(counts), "dict[str, int]");
    assert_eq!(ty_of(json!({"type": "object"})), "dict[str, Any]");
    assert_eq!(ty_of(json!({"type": "object", "properties": {}})), "dict[str, Any]");
}

#[test]
fn refs_resolve_against_their_document() {
    let schema = json!({
        "type": "array",
        "items": {"$ref": "#/$defs/Level"},
        "$defs": {"Level": {"type": "string", "enum": ["debug", "info"]}},
    });
    assert_eq!(ty_of(schema), r#"list[Literal["debug", "info"]]"#);
    let old = json!({"$ref": "#/definitions/N", "definitions": {"N": {"type": "integer"}}});
    assert_eq!(ty_of(old), "int");
    assert_eq!(ty_of(json!({"$ref": "#/$defs/Missing"})), "Any");
    assert_eq!(ty_of(json!({"$ref": "https://example.com/schema.json"})), "Any");
    assert_eq!(ty_of(json!({"$ref": 7})), "Any");
}

#[test]
fn objects_become_typed_dicts_with_not_required_keys() {
    let schema = json!({
        "type": "object",
        "description": "An order.",
        "properties": {
            "id": {"type": "string", "description": "The order id."},
            "note": {"type": ["string", "null"]},
        },
        "required": ["id"],
    });
    let (ty, classes) = type_of(schema);
    assert_eq!(ty, "FResult");
    assert_eq!(
        classes,
        vec![
            "class FResult(TypedDict):\n    \"\"\"An order.\"\"\"\n\n    id: str  # The order id.\n    note: NotRequired[str | None]\n"
        ]
    );
}

#[test]
fn classes_are_named_from_title_or_context() {
    let schema = json!({
        "type": "object",
        "properties": {
            "shipping": {"type": "object", "title": "postal address", "properties": {"city": {"type": "string"}}},
            "billing_contact": {"type": "object", "properties": {"email": {"type": "string"}}},
        },
    });
    let (_, classes) = type_of(schema);
    assert!(classes[0].starts_with("class PostalAddress(TypedDict):"), "{classes:?}");
    assert!(classes[1].starts_with("class FResultBillingContact(TypedDict):"), "{classes:?}");
}

#[test]
fn identical_shapes_are_reused_and_different_ones_renamed() {
    let address =
        json!({"type": "object", "title": "Address", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let other = json!({"type": "object", "title": "Address", "properties": {"zip": {"type": "string"}}});
    let tools = [
        raw("a", json!({"type": "object", "properties": {"to": address.clone()}}), Some(address.clone())),
        raw("b", json!({"type": "object", "properties": {"from": address}}), Some(other)),
    ];
    let stub = render_stub(&tools);
    assert_eq!(stub.matches("class Address(TypedDict):").count(), 1, "{stub}");
    assert!(stub.contains("class Address2(TypedDict):\n    zip: NotRequired[str]\n"), "{stub}");
    assert!(stub.contains("async def a(*, to: Address = ...) -> Address:"), "{stub}");
    assert!(
        stub.contains("async def b(*, from_: Address")
            || stub.contains("async def b(**kwargs: Unpack[BArgs]) -> Address2:"),
        "{stub}"
    );
}

#[test]
fn keys_that_are_not_identifiers_use_the_functional_syntax() {
    let schema = json!({
        "type": "object",
        "properties": {
            "class": {"type": "string", "description": "CSS class."},
            "x-color": {"type": "integer"},
            "__private": {"type": "boolean"},
        },
        "required": ["class"],
    });
    let (ty, classes) = type_of(schema);
    assert_eq!(ty, "FResult");
    assert_eq!(
        classes[0],
        "FResult = TypedDict(\n    \"FResult\",\n    {\n        \"class\": str,  # CSS class.\n        \"x-color\": NotRequired[int],\n        \"__private\": NotRequired[bool],\n    },\n)\n"
    );
}

#[test]
fn recursive_refs_become_forward_references() {
    let schema = json!({
        "$ref": "#/$defs/Node",
        "$defs": {"Node": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
            },
            "required": ["name"],
        }},
    });
    let (ty, classes) = type_of(schema);
    assert_eq!(ty, "Node");
    assert_eq!(
        classes,
        vec![
            "class Node(TypedDict):\n    name: str\n    children: NotRequired[list[Node]]\n    parent: NotRequired[Node | None]\n"
        ]
    );
}

#[test]
fn recursion_in_the_functional_syntax_is_quoted() {
    let schema = json!({
        "type": "object",
        "properties": {"child-nodes": {"type": "array", "items": {"$ref": "#"}}},
    });
    let (ty, classes) = type_of(schema);
    assert_eq!(ty, "FResult");
    assert!(classes[0].contains("\"child-nodes\": NotRequired[\"list[FResult]\"],"), "{classes:?}");
}

#[test]
fn recursion_through_something_that_is_no_class_is_any() {
    let schema = json!({
        "$ref": "#/$defs/Tree",
        "$defs": {"Tree": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/Tree"}}]}},
    });
    assert_eq!(ty_of(schema), "str | list[Any]");
    assert_eq!(ty_of(json!({"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}})), "Any");
}

#[test]
fn parameters_required_first_with_python_defaults() {
    let parameters = json!({
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "default": 10},
            "query": {"type": "string"},
            "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
            "verbose": {"type": "boolean", "default": true},
            "since": {"type": ["string", "null"]},
            "page": {"type": "integer"},
            "filters": {"type": "object", "additionalProperties": {"type": "string"}, "default": {"a": "b\n"}},
        },
        "required": ["query"],
    });
    assert_eq!(
        signature_of(parameters),
        "async def f(\n    *,\n    query: str,\n    limit: int = 10,\n    mode: Literal[\"fast\", \"exact\"] = \"fast\",\n    verbose: bool = True,\n    since: str | None = None,\n    page: int = ...,\n    filters: dict[str, str] = {\"a\": \"b\\n\"},\n) -> Any:"
    );
}

#[test]
fn parameter_shapes_without_plain_keywords() {
    assert_eq!(signature_of(json!({"type": "object", "properties": {}})), "async def f() -> Any:");
    assert_eq!(
        signature_of(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        "async def f() -> Any:"
    );
    assert_eq!(signature_of(json!({"type": "object"})), "async def f(**kwargs: Any) -> Any:");
    assert_eq!(signature_of(json!({"anyOf": [{"type": "object"}]})), "async def f(**kwargs: Any) -> Any:");
    let extra = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}, "required": ["a"]});
    assert_eq!(signature_of(extra), "async def f(*, a: str, **kwargs: int) -> Any:");
    let class = json!({"type": "object", "properties": {"class": {"type": "string", "description": "Which."}, "n": {"type": "integer", "default": 2}}});
    let stub = render_stub(&[raw("f", class, None)]);
    assert!(stub.contains("async def f(**kwargs: Unpack[FArgs]) -> Any:"), "{stub}");
    assert!(
        stub.contains("FArgs = TypedDict(\n    \"FArgs\",\n    {\n        \"class\": NotRequired[str],  # Which.\n"),
        "{stub}"
    );
    assert!(stub.contains("    Takes the keys of `FArgs` as keyword arguments; pass the ones that are not Python identifiers as `**{\"class\": ...}`.\n"), "{stub}");
    assert!(stub.contains("    Args:\n        class: Which.\n        n: (default: 2)\n"), "{stub}");
}

#[test]
fn return_types_come_from_the_output_schema() {
    let stub = render_stub(&[
        raw("text", json!({"type": "object", "properties": {}}), Some(json!({"type": "string"}))),
        raw("unknown", json!({"type": "object", "properties": {}}), None),
        raw(
            "listing",
            json!({"type": "object", "properties": {}}),
            Some(json!({"type": "array", "items": {"type": "string"}, "description": "File names."})),
        ),
    ]);
    assert!(stub.contains("async def text() -> str:\n"), "{stub}");
    assert!(stub.contains("async def unknown() -> Any:\n"), "{stub}");
    assert!(stub.contains("async def listing() -> list[str]:\n    \"\"\"The listing tool.\n\n    Returns:\n        File names.\n    \"\"\"\n"), "{stub}");
}

#[test]
fn function_names_are_sanitised_and_unique() {
    assert_eq!(python_name("web-search"), "web_search");
    assert_eq!(python_name("2fa_check"), "_2fa_check");
    assert_eq!(python_name("import"), "_import");
    assert_eq!(python_name("größe"), "gr__e");
    assert_eq!(python_name(""), "_");
    assert_eq!(python_name("__init__"), "tool__init__");
    // `a_b` is an identifier already: it keeps its name whatever the order, and
    // `a-b`, which would be spelled the same, is numbered instead.
    let tools = [raw("a-b", json!({}), None), raw("a_b", json!({}), None), raw("Any", json!({}), None)];
    let sorted: Vec<&StubTool> = tools.iter().collect();
    assert_eq!(function_names(&sorted), vec!["a_b_2", "a_b", "Any_2"]);
    assert_eq!(code_names(&tools), vec!["a_b_2", "a_b", "Any_2"]);
    let reversed: Vec<StubTool> = tools.iter().rev().cloned().collect();
    assert_eq!(code_names(&reversed), vec!["Any_2", "a_b", "a_b_2"]);
    let stub = render_stub(&tools);
    assert!(
        stub.contains(
            "async def a_b_2(**kwargs: Any) -> Any:\n    \"\"\"The a-b tool.\n\n    \
             Call it as `tools.a_b_2`: the tool's own name is \"a-b\"; `tools.a_b` is not this tool.\n"
        ),
        "{stub}"
    );
    assert!(stub.contains("async def a_b(**kwargs: Any) -> Any:\n    \"\"\"The a_b tool.\"\"\"\n"), "{stub}");
}

#[test]
fn docstrings_cannot_be_closed_early() {
    assert_eq!(docstring(r#"say "hi""#, ""), r#""""say "hi\"""""#);
    assert_eq!(docstring(r#"a """ b \ c"#, ""), r#""""a \"\"" b \\ c""""#);
    assert_eq!(docstring("nul\0 here\r\nnext", "  "), "  \"\"\"nul\\x00 here\n  next\n  \"\"\"");
}

#[test]
fn rendering_is_deterministic_whatever_the_order() {
    let a = raw(
        "alpha",
        json!({"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "integer"}}}}}),
        None,
    );
    let b = raw(
        "beta",
        json!({"type": "object", "properties": {"x": {"type": "object", "properties": {"z": {"type": "integer"}}}}}),
        None,
    );
    let forward = render_stub(&[a.clone(), b.clone()]);
    assert_eq!(forward, render_stub(&[b, a]));
    assert!(forward.find("async def alpha").unwrap() < forward.find("async def beta").unwrap());
}

#[test]
fn stub_path_is_stable_per_session_and_tool_set() {
    let dir = Path::new("/home/u/.bub/codemode");
    let ws = Path::new("/work/project");
    let one = stub_path(dir, ws, "s1", "content");
    assert_eq!(one, stub_path(dir, ws, "s1", "content"));
    let name = one.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("tools-") && name.ends_with(".pyi") && name.len() == "tools-.pyi".len() + 12, "{name}");
    let session_dir = one.parent().unwrap();
    assert_eq!(session_dir.parent().unwrap(), dir);
    assert_eq!(session_dir.file_name().unwrap().len(), 16);
    let changed = stub_path(dir, ws, "s1", "other content");
    assert_eq!(changed.parent(), one.parent());
    assert_ne!(changed, one);
    assert_ne!(stub_path(dir, ws, "s2", "content").parent(), one.parent());
    assert_ne!(stub_path(dir, Path::new("/work/other"), "s1", "content").parent(), one.parent());
    // the NUL separator keeps (workspace, session) pairs apart
    assert_ne!(
        stub_path(dir, Path::new("/a"), "b/c", "x").parent(),
        stub_path(dir, Path::new("/a/b"), "c", "x").parent()
    );
}

#[test]
fn write_stub_writes_once_and_never_rewrites() {
    let home = tempfile::tempdir().expect("tempdir");
    let ws = Path::new("/work/project");
    let tools = vec![raw("a", json!({"type": "object", "properties": {}}), None)];
    let path = write_stub(home.path(), ws, "s", &tools).expect("write");
    assert_eq!(fs::read_to_string(&path).expect("read"), render_stub(&tools));
    fs::write(&path, "edited").expect("edit");
    assert_eq!(write_stub(home.path(), ws, "s", &tools).expect("again"), path);
    assert_eq!(fs::read_to_string(&path).expect("read"), "edited");
    let more = vec![tools[0].clone(), raw("b", json!({"type": "object", "properties": {}}), None)];
    let next = write_stub(home.path(), ws, "s", &more).expect("new tool set");
    assert_ne!(next, path);
    assert_eq!(next.parent(), path.parent());
    let files: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files.len(), 2, "no temp files left: {files:?}");
}

#[test]
fn odd_schemas_never_panic() {
    let odd = [
        json!(null),
        json!(false),
        json!(42),
        json!("string"),
        json!([]),
        json!({"type": 5}),
        json!({"type": [5, null]}),
        json!({"properties": 3}),
        json!({"type": "object", "properties": {"a": 1, "b": null}, "required": "a"}),
        json!({"items": 3}),
        json!({"anyOf": "x"}),
        json!({"anyOf": []}),
        json!({"enum": "x"}),
        json!({"$ref": "#"}),
        json!({"$ref": "#/"}),
        json!({"$ref": "#/$defs/a~1b", "$defs": {"a/b": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a~1b"}}}}}),
        json!({"type": "object", "properties": {"": {}, "0": {}, "é": {}}}),
    ];
    for schema in odd {
        let stub = render_stub(&[raw("f", schema.clone(), Some(schema))]);
        assert!(stub.contains("async def f("));
    }
    let mut deep = json!({"type": "string"});
    for _ in 0..500 {
        deep = json!({"type": "array", "items": deep});
    }
    assert!(ty_of(deep).contains("list[Any]"));
}

// --- Python checks -----------------------------------------------------

/// Runs python3 over the files: each must parse, and on 3.11+ (where
/// `typing` has `NotRequired` and `Unpack`) execute. `None` without python3.
pub(super) fn python_check(files: &[PathBuf]) -> Option<Result<(), String>> {
    const SCRIPT: &str = "import ast, sys\n\
        for path in sys.argv[1:]:\n    \
            src = open(path, encoding='utf-8').read()\n    \
            ast.parse(src)\n    \
            if sys.version_info >= (3, 11):\n        \
                exec(compile(src, path, 'exec'), {'__name__': 'stub'})\n";
    let output = match Command::new("python3").arg("-c").arg(SCRIPT).args(files).output() {
        Ok(output) => output,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Err(e.to_string())),
    };
    Some(if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) })
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Priority {
    Low,
    Normal,
    Urgent,
}

/// A postal address.
#[derive(Serialize, Deserialize, JsonSchema)]
struct Address {
    /// Street and number.
    street: String,
    city: String,
    zip: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct LineItem {
    sku: String,
    quantity: u32,
}

fn three() -> u8 {
    3
}

/// Place an order for a customer.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct PlaceOrder {
    /// The customer id, like "C42".
    customer_id: String,
    /// What to order.
    items: Vec<LineItem>,
    /// Where to ship; the customer's default address when absent.
    shipping: Option<Address>,
    priority: Option<Priority>,
    #[serde(default)]
    tags: Vec<String>,
    /// How often to retry payment.
    #[serde(default = "three")]
    retries: u8,
}

#[derive(Serialize, JsonSchema)]
struct Label {
    #[serde(rename = "class")]
    class_: String,
    #[serde(rename = "x-color")]
    color: Option<String>,
}

/// The order as stored.
#[derive(Serialize, JsonSchema)]
struct Order {
    id: String,
    priority: Priority,
    shipping: Option<Address>,
    /// Stock left per SKU.
    stock: HashMap<String, i64>,
    label: Label,
}

/// Tag a record with a CSS-like class.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct TagRecord {
    #[serde(rename = "class")]
    class_: String,
    note: Option<String>,
}

/// Search the catalogue.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct Search {
    query: String,
    #[serde(default)]
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct Hit {
    sku: String,
    score: f64,
    warehouse: Option<Address>,
}

fn realistic_tools() -> Vec<StubTool> {
    let hostile = Tool::new(
        "weird-tool.v2",
        "Says \"hi\"\\ and \"\"\" ends with a quote\"",
        json!({
            "type": "object",
            "properties": {
                "class": {"type": "string", "default": "a\"b\n", "description": "Line one\nline \0two \"\"\""},
                "lambda": {"enum": ["x", 1, true, null]},
                "__dunder": {"type": "object", "properties": {"if": {"type": "string"}}},
            },
        }),
        |_, _| async { Ok(json!(null)) },
    )
    .with_output_schema(json!({"$ref": "#/$defs/T", "$defs": {"T": {
        "type": "object",
        "properties": {"next-node": {"$ref": "#/$defs/T"}, "v": {"const": "x"}},
    }}}));
    let tools = [
        Tool::typed("orders.place", |_: PlaceOrder, _: ToolContext| async {
            Err::<Order, _>(ToolError::failed("not called"))
        }),
        Tool::typed("records.tag", |_: TagRecord, _: ToolContext| async {
            Err::<String, _>(ToolError::failed("not called"))
        }),
        Tool::typed("catalogue.search", |_: Search, _: ToolContext| async {
            Err::<Vec<Hit>, _>(ToolError::failed("not called"))
        }),
        Tool::new("tape.info", "Show tape info.", json!({"type": "object", "properties": {}}), |_, _| async {
            Ok(json!({}))
        }),
        hostile,
    ];
    tools.iter().map(StubTool::from_tool).collect()
}

#[test]
fn realistic_stub_is_valid_python() {
    let home = tempfile::tempdir().expect("tempdir");
    let tools = realistic_tools();
    let path = write_stub(home.path(), Path::new("/work/project"), "session", &tools).expect("write");
    let stub = fs::read_to_string(&path).expect("read");
    println!("{stub}");
    assert!(stub.contains("priority: Literal[\"low\", \"normal\", \"urgent\"] | None = None"), "{stub}");
    assert_eq!(stub.matches("class Address(TypedDict):").count(), 1, "{stub}");
    assert!(stub.contains("    stock: dict[str, int]  # Stock left per SKU.\n"), "{stub}");
    assert!(stub.contains("        \"class\": str,\n"), "{stub}");
    assert!(stub.contains("async def records_tag(**kwargs: Unpack[RecordsTagArgs]) -> str:"), "{stub}");
    assert!(stub.contains("-> list[Hit]:"), "{stub}");
    assert!(stub.contains("async def tape_info() -> Any:"), "{stub}");
    match python_check(&[path]) {
        None => println!("note: python3 not found; skipped checking the stub with python"),
        Some(result) => result.expect("stub parses and runs"),
    }
}

/// A random schema-like value, biased towards JSON Schema keywords and
/// local refs so recursion, unions and odd keys all come up.
fn random_schema(rng: &mut StdRng, depth: u32) -> Value {
    const KEYS: &[&str] = &[
        "type",
        "properties",
        "items",
        "prefixItems",
        "anyOf",
        "oneOf",
        "allOf",
        "enum",
        "const",
        "$ref",
        "$defs",
        "required",
        "additionalProperties",
        "default",
        "description",
        "title",
        "nullable",
        "a",
        "b",
        "class",
        "x-y",
        "__z",
    ];
    const TYPES: &[&str] = &["string", "integer", "number", "boolean", "null", "array", "object", "weird"];
    const REFS: &[&str] = &["#", "#/$defs/a", "#/$defs/b", "#/properties/a", "#/nope", "http://x"];
    if depth == 0 || rng.random_bool(0.25) {
        let leaves =
            [json!(null), json!(true), json!(1), json!(1.5), json!("x"), json!("\"\"\"\\"), json!([]), json!({})];
        return leaves[rng.random_range(0..leaves.len())].clone();
    }
    if rng.random_bool(0.15) {
        return Value::Array((0..rng.random_range(0..3)).map(|_| random_schema(rng, depth - 1)).collect());
    }
    let mut object = Map::new();
    for _ in 0..rng.random_range(1..5) {
        let key = KEYS[rng.random_range(0..KEYS.len())];
        let value = match key {
            "type" if rng.random_bool(0.8) => json!(TYPES[rng.random_range(0..TYPES.len())]),
            "$ref" => json!(REFS[rng.random_range(0..REFS.len())]),
            "required" => json!([KEYS[rng.random_range(0..KEYS.len())], "a", "class"]),
            "description" | "title" => json!(["Doc \"q\"", "", "x\ny", "__init__", "Any"][rng.random_range(0..5)]),
            _ => random_schema(rng, depth - 1),
        };
        object.insert(key.to_string(), value);
    }
    Value::Object(object)
}

#[test]
fn random_schemas_render_valid_python() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let mut files = Vec::new();
    for i in 0..200 {
        let tools: Vec<StubTool> = (0..3)
            .map(|t| raw(&format!("t{t}"), random_schema(&mut rng, 5), Some(random_schema(&mut rng, 5))))
            .collect();
        let path = dir.path().join(format!("stub{i}.pyi"));
        fs::write(&path, render_stub(&tools)).expect("write");
        files.push(path);
    }
    match python_check(&files) {
        None => println!("note: python3 not found; only checked that rendering does not panic"),
        Some(result) => result.expect("every random stub parses and runs"),
    }
}
