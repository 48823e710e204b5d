//! Many tools stay cheap: past the tool-schema budget, the tools a source
//! added (MCP servers) are offered with one line each plus `tools_describe`,
//! which loads full schemas for the rest of the turn; builtins stay whole,
//! a new turn starts compact again, and nothing changes under the budget.

use crate::support;

use bub::agent::events::BeforeToolCall;
use bub::agent::{Agent, RunOptions, RunOutcome, StreamEvent, TurnState};
use bub::model::ChatRequest;
use bub::tools::builtin::{self, ShellManager, WebFetchSettings};
use bub::tools::{Tool, ToolContext, ToolError};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::Arc;
use support::scripted_model::ScriptedModel;

/// The parameters of a compact tool.
fn open_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

/// An MCP-like tool `mcp.SERVER.op_N` with a realistic schema (five
/// properties, an enum, a nested object, a required `query`); it echoes
/// its arguments and refuses a call without `query`, as a server would.
fn server_tool(server: &str, n: usize) -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": format!("What to look for in {server} (op {n}).")},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "How many results to return."},
            "order": {"type": "string", "enum": ["newest", "oldest", "relevance"], "description": "Result order."},
            "filter": {
                "type": "object",
                "description": "Narrows the results.",
                "properties": {
                    "author": {"type": "string", "description": "Only items by this author."},
                    "labels": {"type": "array", "items": {"type": "string"}, "description": "Items with all labels."}
                }
            },
            "include_archived": {"type": "boolean", "description": "Also search archived items."}
        },
        "required": ["query"],
        "additionalProperties": false
    });
    let description = format!(
        "Searches {server} for items matching a query (operation {n}). Results are paged and sorted as asked; \
         archived items are left out unless asked for. Secret marker {server}-{n}-schema."
    );
    Tool::new(format!("mcp.{server}.op_{n}"), description, schema, |args: Value, _: ToolContext| async move {
        if args.get("query").and_then(Value::as_str).is_none() {
            return Err(ToolError::invalid_input("missing required argument `query`"));
        }
        Ok::<_, ToolError>(json!({"echo": args}))
    })
}

/// The tools of `server`, `count` of them.
fn server_tools(server: &str, count: usize) -> Vec<Tool> {
    (0..count).map(|n| server_tool(server, n)).collect()
}

/// An agent with bub's builtin tools, `per_server` tools from each of
/// `docs` and `tracker`, and every `BeforeToolCall` noted (tool names).
async fn agent_with(per_server: usize) -> (Agent, Arc<ScriptedModel>, support::TestStore, Arc<Mutex<Vec<String>>>) {
    let builtins = builtin::tools(Arc::new(ShellManager::new()), WebFetchSettings::default());
    let (agent, model, store) = support::scripted_agent(builtins).await;
    agent.replace_tools("mcp.docs", server_tools("docs", per_server)).unwrap();
    agent.replace_tools("mcp.tracker", server_tools("tracker", per_server)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let noted = seen.clone();
    agent.events().on_sync(move |event: &mut BeforeToolCall| {
        noted.lock().push(event.call.tool.clone());
        Ok(())
    });
    (agent, model, store, seen)
}

/// The definition a request sent for the tool of model name `name`.
fn sent<'a>(request: &'a ChatRequest, name: &str) -> Option<&'a Value> {
    request.tools.iter().map(|t| &**t).find(|t| t["function"]["name"] == name)
}

/// Whether a request sent the server tool of model name `name` compact:
/// every server tool here has parameters, so the open schema means compact
/// (builtins without arguments have it too, hence only `mcp_` names).
fn is_compact(request: &ChatRequest, name: &str) -> bool {
    let sent = sent(request, name).unwrap_or_else(|| panic!("{name} not offered"));
    name.starts_with("mcp_") && sent["function"]["parameters"] == open_schema()
}

/// The model names of the tools a request sent compact.
fn compact_names(request: &ChatRequest) -> Vec<String> {
    request
        .tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .filter(|name| is_compact(request, name))
        .collect()
}

/// The bytes of a request's tool definitions, as the client serializes them.
fn tool_bytes(request: &ChatRequest) -> usize {
    serde_json::to_vec(&request.tools).unwrap().len()
}

fn results(outcome: &RunOutcome) -> Vec<String> {
    outcome
        .events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn past_the_budget_server_tools_go_compact_and_tools_describe_loads_them_for_the_rest_of_the_turn() {
    let (agent, model, _store, seen) = agent_with(100).await;
    let full_bytes: usize = agent.tools().model_tools().map(|t| t.definition().to_string().len()).sum();

    model.tool_calls(&[("tools_describe", json!({"names": ["mcp_docs_op_3", "mcp.tracker.op_7"]}))]);
    model.text("Described.");
    let first = agent.run("find the flaky test", RunOptions::new("chat")).collect().await;
    assert_eq!(first.error, None);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);

    // The first request: every server tool compact, builtins whole, tools_describe offered.
    let opening = &requests[0];
    assert_eq!(compact_names(opening).len(), 200);
    assert!(sent(opening, "tools_describe").is_some());
    let bash = agent.tools().get("bash").unwrap().definition();
    assert_eq!(sent(opening, "bash"), Some(&*bash), "a builtin keeps its full definition");
    let summary = sent(opening, "mcp_docs_op_3").unwrap()["function"]["description"].as_str().unwrap();
    assert_eq!(summary, "Searches docs for items matching a query (operation 3).");
    assert!(
        tool_bytes(opening) * 3 < full_bytes,
        "compact: {} bytes of tools, in full: {full_bytes}",
        tool_bytes(opening)
    );

    // tools_describe answered with the full schemas, as a normal tool call.
    let described = &results(&first)[0];
    assert!(described.contains("docs-3-schema") && described.contains("tracker-7-schema"), "{described}");
    assert!(described.contains("include_archived"), "{described}");
    assert_eq!(*seen.lock(), ["tools.describe"]);
    let context = agent.tape("chat").unwrap().context().await.unwrap();
    let recorded = context.iter().any(|m| m["tool_calls"][0]["function"]["name"] == "tools_describe");
    assert!(recorded, "the call is on the tape: {context:?}");

    // The next step of the same turn: those two in full, the rest compact.
    let next = &requests[1];
    let docs_3 = agent.tools().get("mcp.docs.op_3").unwrap().definition();
    assert_eq!(sent(next, "mcp_docs_op_3"), Some(&*docs_3));
    assert!(!is_compact(next, "mcp_tracker_op_7"));
    assert_eq!(compact_names(next).len(), 198);

    // A new turn starts compact again.
    model.text("Again.");
    agent.run("and now?", RunOptions::new("chat")).collect().await;
    let again = model.requests().pop().unwrap();
    assert!(is_compact(&again, "mcp_docs_op_3") && is_compact(&again, "mcp_tracker_op_7"));
    assert_eq!(compact_names(&again).len(), 200);
}

#[tokio::test]
async fn a_compact_tool_called_directly_runs_and_its_own_check_refuses_bad_arguments() {
    let (agent, model, _store, _seen) = agent_with(100).await;
    model.tool_calls(&[("mcp_docs_op_5", json!({"query": "flaky", "limit": 3}))]);
    model.tool_calls(&[("mcp_docs_op_5", json!({"limit": 3}))]);
    model.text("Done.");
    let outcome = agent.run("search", RunOptions::new("chat")).collect().await;
    assert_eq!(outcome.error, None);
    let results = results(&outcome);
    assert_eq!(results[0], json!({"echo": {"query": "flaky", "limit": 3}}).to_string());
    assert!(results[1].contains("missing required argument `query`"), "{}", results[1]);
    assert!(model.requests().iter().all(|r| is_compact(r, "mcp_docs_op_5")), "calling it describes nothing");
}

#[tokio::test]
async fn under_the_budget_nothing_changes_and_no_tools_describe_is_offered() {
    let (agent, model, _store, _seen) = agent_with(3).await;
    model.text("Hello.");
    agent.run("hi", RunOptions::new("chat")).collect().await;
    let request = model.requests().remove(0);
    let full: Vec<Arc<Value>> = agent.tools().model_tools().map(Tool::definition).collect();
    assert_eq!(request.tools, full);
    assert!(sent(&request, "tools_describe").is_none());
}

#[tokio::test]
async fn a_budget_of_zero_is_off() {
    let (agent, model, _store, _seen) = agent_with(100).await;
    model.text("Hello.");
    agent.run("hi", RunOptions::new("chat").tool_schema_budget(0)).collect().await;
    let request = model.requests().remove(0);
    assert!(compact_names(&request).is_empty());
    assert!(sent(&request, "tools_describe").is_none());
    assert_eq!(request.tools.len(), agent.tools().model_tools().count());
}

#[tokio::test]
async fn tools_describe_never_describes_a_tool_the_run_is_not_allowed() {
    let (agent, model, _store, _seen) = agent_with(100).await;
    let allowed: Vec<String> =
        agent.tools().iter().map(|t| t.name().to_string()).filter(|n| !n.starts_with("mcp.tracker.")).collect();
    model.tool_calls(&[("tools_describe", json!({"names": ["mcp_tracker_op_7"]}))]);
    model.tool_calls(&[("tools_describe", json!({"names": ["mcp_docs_op_1", "mcp_tracker_op_1"]}))]);
    model.text("Done.");
    let options = RunOptions::new("chat").allowed_tools(allowed);
    let outcome = agent.run("describe", options).collect().await;
    assert_eq!(outcome.error, None);
    let results = results(&outcome);
    assert!(results[0].contains("no tool `mcp_tracker_op_7` is offered here"), "{}", results[0]);
    assert!(results[0].contains("not_found"), "{}", results[0]);
    // One name it may not see fails the whole call: nothing is described.
    assert!(results[1].contains("no tool `mcp_tracker_op_1` is offered here"), "{}", results[1]);
    for result in &results {
        assert!(!result.contains("tracker-7-schema") && !result.contains("include_archived"), "leaked: {result}");
    }
    let requests = model.requests();
    assert!(requests.iter().all(|r| r.tools.iter().all(|t| !t.to_string().contains("tracker"))));
    assert!(is_compact(&requests[2], "mcp_docs_op_1"), "a failed call describes nothing");
}

#[tokio::test]
async fn an_unknown_name_is_an_error_naming_close_tools() {
    let (agent, model, _store, _seen) = agent_with(100).await;
    model.tool_calls(&[("tools_describe", json!({"names": ["mcp_docs_op_77x"]}))]);
    model.text("Done.");
    let outcome = agent.run("describe", RunOptions::new("chat")).collect().await;
    let result = &results(&outcome)[0];
    assert!(result.contains("did you mean `mcp_docs_op_77`"), "{result}");
}

/// A chat whose policy allows only a server's tools: `tools.describe` is
/// not among them, yet the model may describe what it is offered.
#[tokio::test]
async fn a_policy_that_allows_only_server_tools_still_lets_the_model_describe_them() {
    let (agent, model, _store, _seen) = agent_with(100).await;
    bub::policy::enforce(&agent);
    let text = "[mcp.docs]\ncommand = \"docs-server\"\n\n[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n\n\
                [channels.hooks.policy]\nallowed_tools = [\"mcp.docs.*\"]\n";
    let config = bub::config::GatewayConfig::parse(text, "bub.toml").unwrap();
    let session =
        bub::policy::SessionPolicy::for_chat(&config, "hooks", "room-1", "hooks:alice", bub_channel::ChatKind::Direct);
    let tools: Vec<(String, bub::tools::Capabilities)> =
        agent.tools().iter().map(|t| (t.name().to_string(), t.capabilities())).collect();
    let allowed = session.policy.offered_tools(&tools, false);
    assert_eq!(allowed.len(), 100, "{allowed:?}");
    let state = TurnState::new();
    session.install(&state);

    model.tool_calls(&[("tools_describe", json!({"names": ["mcp_docs_op_2"]}))]);
    model.text("Done.");
    let options = RunOptions::new("hooks:room-1").state(state).allowed_tools(allowed);
    let outcome = agent.run("describe", options).collect().await;
    let result = &results(&outcome)[0];
    assert!(result.contains("docs-2-schema"), "{result}");
    assert!(!is_compact(&model.requests()[1], "mcp_docs_op_2"));
}
