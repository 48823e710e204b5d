//! Tools whose names and schemas bub did not write (what an MCP server
//! brings: `mcp.my-docs.get-page`, a Python SDK's schema with `$defs`,
//! `anyOf` and enums) work in code mode and as comma commands exactly as
//! builtins do. The schemas are the `tools/list` answers of real servers,
//! kept in `tests/fixtures/mcp-schemas`.

use crate::support;

use bub::agent::{Agent, RunOptions, StreamEvent, TurnState};
use bub::model::SingleClient;
use bub::tape::TapeSettings;
use bub::tools::{Tool, ToolContext, ToolError};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use support::scripted_model::ScriptedModel;

/// `tool` of the fixture `server`: (description, input schema).
fn fixture(server: &str, tool: &str) -> (String, Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/mcp-schemas/{server}.json"));
    let list: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let found = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == tool).unwrap().clone();
    (found["description"].as_str().unwrap_or_default().to_string(), found["inputSchema"].clone())
}

type Calls = Arc<Mutex<Vec<Value>>>;

/// A tool registered as an MCP client registers one (`mcp.SERVER.TOOL`, the
/// server's description and schema) that records its arguments and answers
/// `answer`.
fn foreign_tool(name: &str, server: &str, tool: &str, answer: Value) -> (Tool, Calls) {
    let (description, schema) = fixture(server, tool);
    let calls: Calls = Arc::default();
    let seen = calls.clone();
    let tool = Tool::new(name, description, schema, move |arguments: Value, _: ToolContext| {
        seen.lock().push(arguments);
        let answer = answer.clone();
        async move { Ok::<_, ToolError>(answer) }
    });
    (tool, calls)
}

fn get_page() -> (Tool, Calls) {
    foreign_tool("mcp.my-docs.get-page", "my-docs", "get-page", json!({"result": "# Intro"}))
}

/// An agent on the scripted model with these tools, `run_code` and a stub directory.
async fn agent(tools: Vec<Tool>) -> (Agent, Arc<ScriptedModel>, support::TestStore) {
    let store = support::sqlite_store().await;
    let model = ScriptedModel::new();
    let agent = Agent::builder()
        .store(store.store.clone())
        .model(Arc::new(SingleClient(model.clone())), "scripted:test")
        .command_prefix(",")
        .tools(tools)
        .tool(bub::codemode::run_code_tool())
        .workspace(store.dir.path())
        .codemode_dir(store.dir.path().join("codemode"))
        .tape_settings(TapeSettings { archive_dir: store.dir.path().join("archives"), ..TapeSettings::default() })
        .system_prompt("You are a test agent.")
        .build();
    (agent, model, store)
}

fn code_mode() -> RunOptions {
    let state = TurnState::new();
    state.set("code_mode", json!(true));
    RunOptions::new("chat").state(state)
}

fn tool_results(outcome: &bub::agent::RunOutcome) -> Vec<(String, bool)> {
    outcome
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn code_calls_a_dashed_tool_by_its_identifier_with_json_arguments() {
    let (tool, calls) = get_page();
    let (agent, model, _store) = agent(vec![tool]).await;
    let code = "page = await tools.mcp_my_docs_get_page(url='https://x', limit=3, format='html', \
                range={'start': 1, 'end': None}, headers=[{'name': 'a', 'value': 'b'}], include_toc=True)\n\
                print(page['result'])";
    model.tool_calls(&[("run_code", json!({"code": code}))]);
    model.text("Read it.");
    let outcome = agent.run("read the intro", code_mode()).collect().await;
    assert_eq!(outcome.error, None);
    assert_eq!(tool_results(&outcome), [("# Intro\n".to_string(), false)]);
    assert_eq!(
        *calls.lock(),
        [json!({
            "url": "https://x",
            "limit": 3,
            "format": "html",
            "range": {"start": 1, "end": null},
            "headers": [{"name": "a", "value": "b"}],
            "include_toc": true,
        })]
    );

    // The model was told the identifier, and the stub has its typed function.
    let system = model.requests()[0].messages[0]["content"].as_str().unwrap().to_string();
    assert!(system.contains("Tools in code: mcp_my_docs_get_page"), "{system}");
    let stub_path = system.split_whitespace().find(|word| word.ends_with(".pyi")).expect("the stub's path");
    let stub = std::fs::read_to_string(stub_path).unwrap();
    assert!(stub.contains("async def mcp_my_docs_get_page(\n    *,\n    url: str,\n    limit: int = 10,\n"), "{stub}");
    assert!(stub.contains("the tool's own name is \"mcp_my-docs_get-page\""), "{stub}");
}

#[tokio::test]
async fn tools_whose_names_meet_as_identifiers_each_keep_their_own() {
    let (dashed, dashed_calls) = foreign_tool("mcp.a-b.echo", "everything", "echo", json!("dashed"));
    let (plain, plain_calls) = foreign_tool("mcp.a_b.echo", "everything", "echo", json!("plain"));
    let (agent, model, _store) = agent(vec![dashed, plain]).await;
    let code = "print(await tools.mcp_a_b_echo(message='to plain'), await tools.mcp_a_b_echo_2(message='to dashed'))";
    model.tool_calls(&[("run_code", json!({"code": code}))]);
    model.text("Done.");
    let outcome = agent.run("echo both", code_mode()).collect().await;
    assert_eq!(tool_results(&outcome), [("plain dashed\n".to_string(), false)]);
    assert_eq!(*plain_calls.lock(), [json!({"message": "to plain"})]);
    assert_eq!(*dashed_calls.lock(), [json!({"message": "to dashed"})]);
    let system = model.requests()[0].messages[0]["content"].as_str().unwrap().to_string();
    assert!(system.contains("Tools in code: mcp_a_b_echo_2, mcp_a_b_echo\n"), "{system}");
}

#[tokio::test]
async fn a_model_calls_a_dashed_tool_by_its_model_name() {
    let (tool, calls) = get_page();
    let (agent, model, _store) = agent(vec![tool]).await;
    model.tool_calls(&[("mcp_my-docs_get-page", json!({"url": "https://x"}))]);
    model.text("Read it.");
    let outcome = agent.run("read the intro", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, None);
    assert_eq!(*calls.lock(), [json!({"url": "https://x"})]);
}

#[tokio::test]
async fn a_comma_command_binds_values_to_the_server_s_schema() {
    let (tool, calls) = get_page();
    let (agent, model, _store) = agent(vec![tool]).await;
    let outcome = agent.run(",mcp.my-docs.get-page url=https://x limit=3", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, None, "{}", outcome.text);
    assert_eq!(outcome.text, r##"{"result":"# Intro"}"##);
    // The model-name form, positional values in the schema's order, an
    // enum behind a `$ref`, a nullable union and a JSON object.
    let outcome = agent
        .run(",mcp_my-docs_get-page https://y 5 text lang=null range='{\"start\": 2}'", RunOptions::new("chat"))
        .collect()
        .await;
    assert_eq!(outcome.error, None, "{}", outcome.text);
    assert_eq!(
        *calls.lock(),
        [
            json!({"url": "https://x", "limit": 3}),
            json!({"url": "https://y", "limit": 5, "format": "text", "lang": null, "range": {"start": 2}}),
        ]
    );
    assert!(model.requests().is_empty(), "commands never ask the model");
}

#[tokio::test]
async fn a_bad_command_value_names_the_key_and_never_reaches_the_tool() {
    let (tool, calls) = get_page();
    let (agent, _model, _store) = agent(vec![tool]).await;
    let outcome = agent.run(",mcp.my-docs.get-page url=https://x limit=lots", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "error: `limit` must be an integer, got `lots`");
    assert!(outcome.error.is_some());
    let outcome = agent.run(",mcp.my-docs.get-page https://x format=pdf", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.text, "error: `format` must be one of `markdown`, `html`, `text`, got `pdf`");
    assert!(calls.lock().is_empty());
}
