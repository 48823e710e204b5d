//! The stub for tools whose names and schemas bub did not write: the
//! `tools/list` answers of real MCP servers (`tests/fixtures/mcp-schemas`),
//! named `mcp.<server>.<tool>` as the MCP client registers them.

use super::tests::python_check;
use super::*;
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-schemas")
}

/// The tools of one fixture (`<server>.json`, a `tools/list` result).
fn server_tools(server: &str) -> Vec<StubTool> {
    let path = fixture_dir().join(format!("{server}.json"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let list: Value = serde_json::from_str(&text).expect("fixture is JSON");
    let tools = list["tools"].as_array().expect("a tools/list result");
    tools
        .iter()
        .map(|tool| StubTool {
            model_name: crate::tools::model_name(&format!("mcp.{server}.{}", tool["name"].as_str().expect("name"))),
            description: tool["description"].as_str().unwrap_or_default().to_string(),
            parameters: tool["inputSchema"].clone(),
            output_schema: tool.get("outputSchema").cloned(),
        })
        .collect()
}

const SERVERS: &[&str] = &["everything", "filesystem", "memory", "time", "my-docs", "edge-cases"];

/// The stub of one fixture's tools.
fn stub_of(server: &str) -> String {
    render_stub(&server_tools(server))
}

/// The function `name` of a stub: its signature and docstring.
fn function<'s>(stub: &'s str, name: &str) -> &'s str {
    let start = stub.find(&format!("async def {name}(")).unwrap_or_else(|| panic!("no function {name}:\n{stub}"));
    let end = stub[start..].find("\n\n\n").map_or(stub.len(), |end| start + end);
    &stub[start..end]
}

#[test]
fn every_server_s_stub_is_valid_python() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files = Vec::new();
    let mut all = Vec::new();
    for server in SERVERS {
        let tools = server_tools(server);
        let path = dir.path().join(format!("{server}.pyi"));
        fs::write(&path, render_stub(&tools)).expect("write");
        files.push(path);
        all.extend(tools);
    }
    // Every server at once, as a chat with all of them configured sees them.
    let path = dir.path().join("all.pyi");
    fs::write(&path, render_stub(&all)).expect("write");
    files.push(path);
    // python3 is on every machine the suite runs on (.ci/run, the MCP fixtures need it): no skip.
    let checked = python_check(&files).expect("python3 is needed to check the stubs parse");
    checked.expect("every stub parses (and runs on Python 3.11+)");
}

#[test]
fn tool_names_with_dashes_are_called_by_identifiers() {
    let tools = server_tools("my-docs");
    let model_names: Vec<&str> = tools.iter().map(|t| t.model_name.as_str()).collect();
    assert_eq!(model_names, ["mcp_my-docs_get-page", "mcp_my-docs_search_v2"]);
    assert_eq!(code_names(&tools), ["mcp_my_docs_get_page", "mcp_my_docs_search_v2"]);
    let stub = stub_of("my-docs");
    assert!(
        function(&stub, "mcp_my_docs_get_page")
            .contains("Call it as `tools.mcp_my_docs_get_page`: the tool's own name is \"mcp_my-docs_get-page\"."),
        "{stub}"
    );
}

#[test]
fn a_python_sdk_schema_keeps_defaults_enums_refs_and_nullables() {
    let stub = stub_of("my-docs");
    let get_page = function(&stub, "mcp_my_docs_get_page");
    assert!(
        get_page.starts_with(
            "async def mcp_my_docs_get_page(
    *,
    url: str,
    limit: int = 10,
    format: Literal[\"markdown\", \"html\", \"text\"] = \"markdown\",
    range: Range | None = None,
    headers: list[Header] = [],
    include_toc: bool = False,
    lang: Literal[\"en\", \"de\", \"ja\"] | None = None,
    timeout: int | float | None = None,
    extra: dict[str, str] = {},
) -> GetPageOutput:
    \"\"\"Fetch one page of the docs.
    Returns its text in the \"format\" asked for.
"
        ),
        "{get_page}"
    );
    assert!(get_page.contains("        url: The page URL, like https://docs.example.com/intro\n"), "{get_page}");
    assert!(stub.contains(
        "class Range(TypedDict):
    \"\"\"A slice of the page, in lines.\"\"\"

    start: NotRequired[int]  # First line, 0-based
    end: NotRequired[int | None]  # Line after the last; the end of the page when absent
"
    ));
    // Recursion through `$defs` is a forward reference to the class itself.
    assert!(stub.contains("class Node(TypedDict):"), "{stub}");
    assert!(stub.contains("    children: NotRequired[list[Node]]\n"), "{stub}");
    assert!(function(&stub, "mcp_my_docs_search_v2").contains("    outline: Node | None = None,\n"), "{stub}");
}

#[test]
fn typescript_sdk_schemas_keep_required_keys_enums_and_arrays_of_objects() {
    let everything = stub_of("everything");
    assert!(everything.contains(
        "async def mcp_everything_get_annotated_message(
    *,
    messageType: Literal[\"error\", \"success\", \"debug\"],
    includeImage: bool = False,
) -> Any:"
    ));
    assert!(everything.contains("async def mcp_everything_echo(*, message: str) -> Any:"), "{everything}");
    assert!(everything.contains("async def mcp_everything_get_env() -> Any:"), "{everything}");
    let memory = stub_of("memory");
    // `from` is a keyword: the class takes the functional syntax.
    assert!(
        memory.contains("        \"from\": str,  # The name of the entity where the relation starts\n"),
        "{memory}"
    );
    assert!(memory.contains("    relations: list[McpMemoryCreateRelationsRelationsItem],\n"), "{memory}");
    let filesystem = stub_of("filesystem");
    assert!(filesystem.contains("    tail: float = ...,\n    head: float = ...,\n"), "{filesystem}");
    assert!(filesystem.contains("    excludePatterns: list[str] = [],\n"), "{filesystem}");
    // An `anyOf` of objects in a result is a union of their classes.
    assert!(filesystem.contains(
        "content: list[McpFilesystemReadMediaFileResultContentItem | McpFilesystemReadMediaFileResultContentItem2]"
    ));
}

#[test]
fn odd_schemas_degrade_to_any_instead_of_failing() {
    let stub = stub_of("edge-cases");
    // Keys that are no identifiers (`max-rows`): keyword arguments through a TypedDict.
    let query = function(&stub, "mcp_edge_cases_query_rows");
    assert!(
        query.starts_with("async def mcp_edge_cases_query_rows(**kwargs: Unpack[McpEdgeCasesQueryRowsArgs]) -> Any:")
    );
    assert!(query.contains("        max-rows: Rows at most (default: 100)\n"), "{query}");
    assert!(stub.contains("        \"dry-run\": NotRequired[bool | None],\n"), "{stub}");
    assert!(stub.contains("        \"hints\": NotRequired[Any],\n"), "{stub}");
    assert!(stub.contains("        \"and\": NotRequired[\"list[Filter]\"],\n"), "{stub}");
    assert!(stub.contains("        \"mode\": NotRequired[Literal[\"fast\", \"exact\"]],\n"), "{stub}");
    // A description cannot end its docstring early.
    assert!(query.contains("    Ends with a quote: \\\"\\\"\" and a backslash \\\\\n"), "{query}");
    assert!(
        function(&stub, "mcp_edge_cases_untyped")
            .starts_with("async def mcp_edge_cases_untyped(*, a: Any = None, b: Literal[1, 2, 3] = ...) -> Any:")
    );
    assert!(
        function(&stub, "mcp_edge_cases_true_schema")
            .starts_with("async def mcp_edge_cases_true_schema(**kwargs: Any) -> Any:")
    );
    assert!(function(&stub, "mcp_edge_cases_loop").starts_with("async def mcp_edge_cases_loop(*, self: "), "{stub}");
}
