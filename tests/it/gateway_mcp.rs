//! MCP tools through the real `bub gateway`, as a user of a webhook chat sees
//! them: `[mcp.NAME]` servers (npm's `server-everything` over stdio and the
//! fixture `tests/mcp/fixtures/server.py`) start with the gateway, their
//! tools answer model calls, comma commands and code, under the chat's
//! policy; a crashing server stays its own problem; a tool-list change or a
//! config reload lands between turns.
//!
//! `red_team::mcp` starts its gateway with [`fixture`] and [`servers_ready`].

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::fake_model::{FakeModel, Reply};
use support::gateway::{GatewayProcess, bub_cli, client, signed_request};
use support::mcp_servers;

const SECRET: &str = "mcp-secret";
/// How long a server may take to come up, or a reload to land.
const WAIT: Duration = Duration::from_secs(60);

/// A TOML string (a JSON string is one, for the paths and words used here).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// A `[mcp.NAME]` table running `argv` over stdio, with `extra` lines.
fn table(name: &str, argv: &[String], extra: &str) -> String {
    let args: Vec<String> = argv[1..].iter().map(|arg| quoted(arg)).collect();
    format!("\n[mcp.{name}]\ncommand = {}\nargs = [{}]\n{extra}\n", quoted(&argv[0]), args.join(", "))
}

/// The fixture server in normal mode; `state` is its crash marker.
pub fn fixture(name: &str, state: Option<&Path>, extra: &str) -> String {
    table(name, &mcp_servers::fixture("normal", state), extra)
}

/// `server-everything` over stdio, its tools undeclared (they can do anything).
fn everything() -> String {
    table("everything", &mcp_servers::everything_stdio(), "")
}

/// A webhook channel whose operator is `webhook:alice`, then `rest`.
fn config(rest: &str) -> String {
    format!(
        "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\
         [channels.webhook.policy]\noperators = [\"webhook:alice\"]\n{rest}"
    )
}

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

/// A message of `sender` in the direct chat `chat`, answered in sync mode.
async fn say(gateway: &GatewayProcess, chat: &str, sender: &str, text: &str) -> Value {
    send(gateway, json!({"chat_id": chat, "sender_id": sender, "text": text})).await
}

/// The same in a group chat, mentioning the bot.
async fn say_in_group(gateway: &GatewayProcess, chat: &str, sender: &str, text: &str) -> Value {
    send(gateway, json!({"chat_id": chat, "sender_id": sender, "text": text, "group": true, "mentions_bot": true}))
        .await
}

async fn send(gateway: &GatewayProcess, mut body: Value) -> Value {
    body["message_id"] = json!(uuid::Uuid::new_v4().to_string());
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.expect("request");
    assert_eq!(response.status(), 200, "{body}");
    response.json().await.unwrap()
}

fn text(reply: &Value) -> String {
    reply["text"].as_str().unwrap_or_default().to_string()
}

/// The tools the model was offered in request `index`.
fn offered(fake: &FakeModel, index: usize) -> Vec<String> {
    let request = &fake.requests()[index];
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .map(String::from)
        .collect()
}

/// What the last tool result the model read in request `index` says.
fn last_result(fake: &FakeModel, index: usize) -> String {
    let request = &fake.requests()[index];
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.iter().rev().find(|message| message["role"] == "tool");
    last.and_then(|message| message["content"].as_str()).unwrap_or_default().to_string()
}

/// `GET /readyz`: (status, body).
async fn readyz(gateway: &GatewayProcess) -> (u16, Value) {
    let response = client().get(format!("{}/readyz", gateway.base_url())).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// The state `/readyz` shows for server `name`.
fn dependency_state(body: &Value, name: &str) -> Option<String> {
    let dependencies = body["dependencies"].as_array()?;
    let found = dependencies.iter().find(|d| d["name"] == format!("mcp.{name}"))?;
    found["state"].as_str().map(String::from)
}

/// Waits until every server `/readyz` lists is ready.
pub async fn servers_ready(gateway: &GatewayProcess, names: &[&str]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, body) = readyz(gateway).await;
        if names.iter().all(|name| dependency_state(&body, name).as_deref() == Some("ready")) {
            return;
        }
        assert!(Instant::now() < deadline, "the MCP servers {names:?} did not come up: {body}\n{}", gateway.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `done` every 100 ms for [`WAIT`]; false when it never held.
async fn eventually<F: std::future::Future<Output = bool>>(mut done: impl FnMut() -> F) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The workspace of the webhook's direct chat `chat`.
fn workspace(home: &Path, chat: &str) -> PathBuf {
    home.join("workspaces").join(format!("webhook%3A{chat}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_call_to_an_mcp_tool_is_answered_and_recorded_and_counted() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("mcp_everything_echo", json!({"message": "from the model"}))]))
        .push(Reply::text("The server echoed."))
        .push(Reply::tool_calls(vec![("mcp_everything_get-tiny-image", json!({}))]))
        .push(Reply::text("An image."));
    let gateway = start(home.path(), &fake, &config(&everything())).await;
    servers_ready(&gateway, &["everything"]).await;

    let reply = say(&gateway, "c1", "u1", "echo it").await;
    assert_eq!(text(&reply), "The server echoed.", "{reply}");
    assert!(offered(&fake, 0).contains(&"mcp_everything_echo".to_string()), "{:?}", offered(&fake, 0));
    assert_eq!(fake.tool_results(1), "Echo: from the model");
    // The tape holds the call and its result, as `bub tape show` prints them.
    let (ok, shown, stderr) =
        bub_cli(home.path(), &["tape", "show", "--exact", "webhook:c1", "--kind", "tool_call,tool_result", "--json"]);
    assert!(ok, "{stderr}");
    assert!(shown.contains("mcp_everything_echo") || shown.contains("mcp.everything.echo"), "{shown}");
    assert!(shown.contains("from the model") && shown.contains("Echo: from the model"), "{shown}");

    // An image result: saved in the session's workspace, named in the result.
    // (Another chat: the echo's answer, from a server that declared nothing,
    // is outside text that keeps c1's model from its tools until an anchor.)
    assert_eq!(text(&say(&gateway, "c2", "u1", "an image").await), "An image.");
    let result = last_result(&fake, 3);
    let saved = result.split("saved as ").nth(1).and_then(|rest| rest.split([']', ' ', ',']).next());
    let saved = saved.unwrap_or_else(|| panic!("the result names no saved file: {result}"));
    let png = std::fs::read(workspace(home.path(), "c2").join(saved)).unwrap();
    assert_eq!(&png[..4], b"\x89PNG", "{saved}");

    let metrics = client().get(format!("{}/metrics", gateway.base_url())).send().await.unwrap().text().await.unwrap();
    let calls: Vec<&str> = metrics.lines().filter(|line| line.starts_with("bub_mcp_calls_total{")).collect();
    assert!(
        calls.iter().any(|line| line.contains("server=\"everything\"") && line.contains("status=\"ok\"")),
        "{calls:?}"
    );
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn operators_run_mcp_tools_as_comma_commands_and_from_code_others_are_refused() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let gateway = start(home.path(), &fake, &config(&everything())).await;
    servers_ready(&gateway, &["everything"]).await;

    let echoed = say(&gateway, "c1", "alice", ",mcp.everything.echo message=hi").await;
    assert_eq!((echoed["status"].as_str(), text(&echoed).as_str()), (Some("replied"), "Echo: hi"), "{echoed}");
    let listed = text(&say(&gateway, "c1", "alice", ",mcp").await);
    assert!(listed.starts_with("mcp.everything: ready"), "{listed}");
    assert!(listed.contains("echo") && listed.contains("get-tiny-image") && listed.contains("calls: 1"), "{listed}");

    let refused = say(&gateway, "c1", "mallory", ",mcp.everything.echo message=hi").await;
    assert_eq!(refused["status"], "refused", "{refused}");
    assert!(text(&refused).contains("webhook:mallory is not an operator here"), "{refused}");
    let refused = say(&gateway, "c1", "mallory", ",mcp").await;
    assert_eq!(refused["status"], "refused", "`,mcp` shows servers' errors to operators only: {refused}");

    // Code mode: the operator turns it on, the model's code calls the tool.
    let switched = say(&gateway, "c1", "alice", ",code_mode enable=true").await;
    assert_eq!(switched["status"], "replied", "{switched}");
    let code = "print(await tools.mcp_everything_echo(message='from code'))";
    fake.push(Reply::tool_calls(vec![("run_code", json!({"code": code, "timeout_seconds": 60}))]))
        .push(Reply::text("ran"));
    assert_eq!(text(&say(&gateway, "c1", "u1", "run it").await), "ran");
    let result = fake.tool_results(1);
    assert!(result.contains("Echo: from code"), "{result}");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chat_policy_covers_mcp_tools_by_pattern_capability_and_exact_name() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let chats = "\n[channels.webhook.chats.locked.policy]\ndenied_tools = [\"mcp.everything.*\"]\n\
                 [channels.webhook.chats.careful.policy]\ndenied_tools = [\"cap:write\"]\n\
                 [channels.webhook.chats.team.policy]\nallowed_tools = [\"*\"]\n\
                 [channels.webhook.chats.named.policy]\nallowed_tools = [\"mcp.everything.echo\"]\n";
    let servers = format!("{}{}", everything(), fixture("reader", None, "capabilities = [\"read\"]"));
    let gateway = start(home.path(), &fake, &config(&format!("{chats}{servers}"))).await;
    servers_ready(&gateway, &["everything", "reader"]).await;

    // Denied by pattern: not offered; the call the model makes anyway never runs.
    fake.push(Reply::tool_calls(vec![("mcp_everything_echo", json!({"message": "x"}))])).push(Reply::text("no"));
    assert_eq!(text(&say(&gateway, "locked", "u1", "echo").await), "no");
    assert!(!offered(&fake, 0).contains(&"mcp_everything_echo".to_string()), "{:?}", offered(&fake, 0));
    assert!(offered(&fake, 0).contains(&"mcp_reader_echo".to_string()), "{:?}", offered(&fake, 0));
    let result = fake.tool_results(1);
    assert!(result.contains("unknown tool `mcp_everything_echo`") && !result.contains("Echo:"), "{result}");
    let explained = text(&say(&gateway, "locked", "alice", ",policy explain mcp.everything.echo").await);
    assert!(
        explained.contains(
            "model call: denied — mcp.everything.echo is denied here by `mcp.everything.*` in \
                            channels.webhook.chats.\"locked\".policy.denied_tools"
        ),
        "{explained}"
    );
    let operator = say(&gateway, "locked", "alice", ",mcp.everything.echo message=x").await;
    assert!(text(&operator).contains("denied here by `mcp.everything.*`"), "an operator's command too: {operator}");
    let listed = text(&say(&gateway, "c1", "alice", ",mcp everything").await);
    assert!(!listed.contains("calls:"), "the server was never called: {listed}");

    // `cap:write`: the undeclared server's tools can do everything, the reader only reads.
    let explained = text(&say(&gateway, "careful", "alice", ",policy explain mcp.everything.echo").await);
    assert!(explained.contains("model call: denied") && explained.contains("`cap:write`"), "{explained}");
    let explained = text(&say(&gateway, "careful", "alice", ",policy explain mcp_reader_echo").await);
    assert!(explained.contains("mcp.reader.echo (read)") && explained.contains("model call: allowed"), "{explained}");
    fake.push(Reply::tool_calls(vec![("mcp_reader_echo", json!({"text": "read only"}))])).push(Reply::text("ok"));
    let before = fake.request_count();
    assert_eq!(text(&say(&gateway, "careful", "u1", "echo").await), "ok");
    assert_eq!(last_result(&fake, before + 1), "read only");

    // A group: an undeclared tool needs its exact name, `*` is not enough.
    fake.push(Reply::tool_calls(vec![("mcp_everything_echo", json!({"message": "group"}))])).push(Reply::text("no"));
    let before = fake.request_count();
    assert_eq!(text(&say_in_group(&gateway, "team", "u1", "echo").await), "no");
    assert!(!offered(&fake, before).contains(&"mcp_everything_echo".to_string()));
    assert!(fake.tool_results(before + 1).contains("unknown tool"), "{}", fake.tool_results(before + 1));
    let explained = text(&say_in_group(&gateway, "team", "alice", ",policy explain mcp.everything.echo").await);
    assert!(explained.contains("denied in group chats here") && explained.contains("no policy allows it by name"));
    fake.push(Reply::tool_calls(vec![("mcp_everything_echo", json!({"message": "named"}))])).push(Reply::text("ok"));
    let before = fake.request_count();
    assert_eq!(text(&say_in_group(&gateway, "named", "u1", "echo").await), "ok");
    assert_eq!(offered(&fake, before), ["mcp_everything_echo"]);
    assert_eq!(last_result(&fake, before + 1), "Echo: named");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_mid_call_is_a_tool_error_and_is_back_for_the_next_turn() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let marker = home.path().join("crashed-once");
    // Declared read-only, their answers are no outside text: one chat calls them turn after turn.
    let read = "capabilities = [\"read\"]";
    let servers = format!("{}{}", fixture("flaky", Some(&marker), read), fixture("steady", None, read));
    let gateway = start(home.path(), &fake, &config(&servers)).await;
    servers_ready(&gateway, &["flaky", "steady"]).await;

    // One step, two calls at once: the crash and the other server's echo.
    fake.push(Reply::tool_calls(vec![
        ("mcp_flaky_crash", json!({})),
        ("mcp_steady_echo", json!({"text": "still here"})),
    ]))
    .push(Reply::text("one failed"));
    assert_eq!(text(&say(&gateway, "c1", "u1", "crash it").await), "one failed");
    let results = fake.tool_results(1);
    assert!(results.contains("mcp server `flaky`: went down during the call of crash"), "{results}");
    assert!(results.contains("exited with code 3") && results.contains("crashing during the call"), "{results}");
    assert!(results.contains("still here"), "the other server answered: {results}");
    let (status, body) = readyz(&gateway).await;
    assert_eq!(status, 200, "a server that is not required never holds readiness: {body}");

    servers_ready(&gateway, &["flaky"]).await;
    fake.push(Reply::tool_calls(vec![("mcp_flaky_crash", json!({}))])).push(Reply::text("it survived"));
    assert_eq!(text(&say(&gateway, "c1", "u1", "again").await), "it survived");
    assert_eq!(last_result(&fake, 3), "survived");
    let listed = text(&say(&gateway, "c1", "alice", ",mcp flaky").await);
    assert!(listed.contains("calls: 2, failed: 1"), "{listed}");

    // A result of a megabyte reaches the model as a preview and a handle.
    fake.push(Reply::tool_calls(vec![("mcp_steady_huge", json!({}))])).push(Reply::text("spilled"));
    assert_eq!(text(&say(&gateway, "c1", "u1", "a lot").await), "spilled");
    let spilled = last_result(&fake, 5);
    assert!(spilled.contains("line of a huge result") && spilled.contains("spill_read(handle="), "{spilled:.600}");
    assert!(spilled.len() < 100_000, "{} bytes reached the model", spilled.len());
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_required_server_that_cannot_start_holds_readiness_not_the_chats() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("still answering").await;
    let missing = home.path().join("no-such-server");
    let servers = format!("{}{}", table("needed", &[missing.display().to_string()], "required = true"), everything());
    let gateway = start(home.path(), &fake, &config(&servers)).await;
    let failed = eventually(|| async {
        let (status, body) = readyz(&gateway).await;
        status == 503 && dependency_state(&body, "needed").as_deref() == Some("failed")
    })
    .await;
    let (status, body) = readyz(&gateway).await;
    assert!(failed, "{status} {body}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("mcp.needed is required and failed"), "{body}");
    assert!(reason.contains("no-such-server"), "the reason says what failed: {body}");
    assert_eq!(text(&say(&gateway, "c1", "u1", "hello").await), "still answering");
    let listed = text(&say(&gateway, "c1", "alice", ",mcp").await);
    assert!(listed.contains("mcp.needed: failed to start") && listed.contains("(required for readiness)"), "{listed}");
    assert!(gateway.stop().await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_servers_tool_list_change_lands_for_the_next_turn() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let gateway = start(home.path(), &fake, &config(&fixture("lists", None, "capabilities = [\"read\"]"))).await;
    servers_ready(&gateway, &["lists"]).await;
    fake.push(Reply::tool_calls(vec![("mcp_lists_change", json!({}))])).push(Reply::text("changed"));
    assert_eq!(text(&say(&gateway, "c1", "u1", "change it").await), "changed");
    assert!(!offered(&fake, 1).contains(&"mcp_lists_added".to_string()), "not within the turn");
    let landed =
        eventually(|| async { text(&say(&gateway, "c1", "alice", ",mcp lists").await).contains("mcp.lists.added") })
            .await;
    assert!(landed, "the new list never reached `,mcp`");
    fake.push(Reply::tool_calls(vec![("mcp_lists_added", json!({}))])).push(Reply::text("used it"));
    assert_eq!(text(&say(&gateway, "c1", "u1", "use the new one").await), "used it");
    assert!(offered(&fake, 2).contains(&"mcp_lists_added".to_string()), "{:?}", offered(&fake, 2));
    assert_eq!(last_result(&fake, 3), "added here");
    assert!(gateway.stop().await);
}

/// The pid a fixture wrote at its start, once it did.
fn pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_restarts_only_the_changed_server_and_a_removed_table_takes_its_tools() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("hi").await;
    let (a_pid, b_pid) = (home.path().join("a.pid"), home.path().join("b.pid"));
    let servers = |b_extra: &str, with_b: bool| {
        let a = fixture("a", None, &format!("env = {{ FIXTURE_PID_FILE = {} }}", quoted(&a_pid.display().to_string())));
        let b_env = format!("env = {{ FIXTURE_PID_FILE = {} }}\n{b_extra}", quoted(&b_pid.display().to_string()));
        let b = if with_b { fixture("b", None, &b_env) } else { String::new() };
        config(&format!("{a}{b}"))
    };
    let gateway = start(home.path(), &fake, &servers("", true)).await;
    servers_ready(&gateway, &["a", "b"]).await;
    let (first_a, first_b) = (pid(&a_pid).unwrap(), pid(&b_pid).unwrap());
    let help = text(&say(&gateway, "c1", "alice", ",help").await);
    assert!(help.contains("mcp.b.echo"), "{help}");

    std::fs::write(home.path().join("bub.toml"), servers("call_timeout_seconds = 7", true)).unwrap();
    let restarted = eventually(|| async { pid(&b_pid).is_some_and(|pid| pid != first_b) }).await;
    assert!(restarted, "the changed server was not restarted:\n{}", gateway.stderr());
    servers_ready(&gateway, &["a", "b"]).await;
    assert_eq!(pid(&a_pid), Some(first_a), "the unchanged server kept its process");
    assert!(Path::new(&format!("/proc/{first_a}")).exists());
    assert!(!Path::new(&format!("/proc/{first_b}")).exists(), "the old program of the changed server ended");

    std::fs::write(home.path().join("bub.toml"), servers("", false)).unwrap();
    let removed = eventually(|| async { !text(&say(&gateway, "c1", "alice", ",mcp").await).contains("mcp.b") }).await;
    assert!(removed, "the removed server is still listed");
    let help = text(&say(&gateway, "c1", "alice", ",help").await);
    assert!(!help.contains("mcp.b.") && help.contains("mcp.a.echo"), "{help}");
    let before = fake.request_count();
    say(&gateway, "c1", "u1", "hello").await;
    let tools = offered(&fake, before);
    assert!(tools.contains(&"mcp_a_echo".to_string()) && !tools.iter().any(|t| t.starts_with("mcp_b_")), "{tools:?}");
    assert_eq!(pid(&a_pid), Some(first_a));
    assert!(gateway.stop().await);
}

/// `[agent] tool_schema_budget` reaches the gateway's turns: past it, the
/// server's tools are offered with one line and `tools_describe` loads the
/// schema of the one the model names, in full for the rest of the turn.
#[tokio::test(flavor = "multi_thread")]
async fn past_the_configured_schema_budget_mcp_tools_are_offered_compact() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("tools_describe", json!({"names": ["mcp_everything_echo"]}))]))
        .push(Reply::text("Described."));
    let gateway =
        start(home.path(), &fake, &config(&format!("[agent]\ntool_schema_budget = 1000\n{}", everything()))).await;
    servers_ready(&gateway, &["everything"]).await;
    assert_eq!(text(&say(&gateway, "c1", "u1", "what does echo take?").await), "Described.");
    let definition = |index: usize, name: &str| {
        let request = &fake.requests()[index];
        let tools = request["tools"].as_array().cloned().unwrap_or_default();
        tools.into_iter().find(|tool| tool["function"]["name"] == name)
    };
    let compact = definition(0, "mcp_everything_echo").expect("echo offered");
    assert_eq!(compact["function"]["parameters"], json!({"type": "object", "properties": {}}), "{compact}");
    assert!(definition(0, "tools_describe").is_some(), "{:?}", offered(&fake, 0));
    assert!(last_result(&fake, 1).contains("message"), "the schema came back: {}", last_result(&fake, 1));
    let full = definition(1, "mcp_everything_echo").expect("echo offered");
    assert!(full["function"]["parameters"]["properties"]["message"].is_object(), "in full once described: {full}");
}
