//! Channel policy through the real `bub gateway`: operators, tools denied in
//! groups on every path, and live reloads of the config file.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use support::fake_model::{FakeModel, Reply};
use support::gateway::{CallbackReceiver, GatewayProcess, client, refused_start, signed_request};

const SECRET: &str = "policy-secret";

fn config(callback: &str, extra: &str) -> String {
    format!(
        r#"
[policy.defaults]
operators = ["webhook:alice"]

[channels.webhook]
kind = "webhook"
secrets = ["{SECRET}"]
callback_url = "{callback}"

# code may run here, the shell still may not
[channels.webhook.chats."code-room".policy]
allowed_tools = ["*", "run_code"]
{extra}
"#
    )
}

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    let path = home.join("bub.toml");
    std::fs::write(&path, config_text).unwrap();
    let vars = fake.vars("openai:gpt-test");
    GatewayProcess::start(home, &vars, &["--config", path.to_str().unwrap()]).await
}

/// A group message from `sender` that mentions the bot, answered in sync mode.
async fn say(gateway: &GatewayProcess, id: &str, chat: &str, sender: &str, text: &str) -> Value {
    let body = json!({
        "message_id": id, "chat_id": chat, "sender_id": sender, "text": text, "group": true, "mentions_bot": true,
    });
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.expect("request");
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_operator_keeps_the_read_only_commands_and_is_told_why_others_are_refused() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("hi").await;
    let receiver = CallbackReceiver::start().await;
    let gateway = start(home.path(), &fake, &config(&receiver.url(), "")).await;
    // Naming an operator (alice) leaves everyone the read-only commands.
    let info = say(&gateway, "n0", "room", "mallory", ",tape.info").await;
    assert_eq!(info["status"], "replied", "{info}");
    assert!(info["text"].as_str().unwrap().contains("name: webhook:room"), "{info}");
    // `,help` lists what each may run, not the whole catalogue.
    let help = say(&gateway, "n00", "room", "mallory", ",help").await;
    assert_eq!(help["status"], "replied", "{help}");
    let listed = help["text"].as_str().unwrap();
    assert!(listed.contains(",tape.info") && listed.contains(",policy"), "{listed}");
    for hidden in [",bash", ",tape.handoff", ",fs.write", "runs in the shell"] {
        assert!(!listed.contains(hidden), "{hidden} listed for a non-operator: {listed}");
    }
    // The operator's list: their commands, without the shell in this group.
    let operators = say(&gateway, "n01", "room", "alice", ",help").await["text"].as_str().unwrap().to_string();
    assert!(operators.contains(",tape.handoff") && !operators.contains(",bash"), "{operators}");
    let refused = say(&gateway, "n1", "room", "mallory", ",tape.handoff").await;
    assert_eq!(refused["status"], "refused", "{refused}");
    let reason = refused["text"].as_str().unwrap();
    assert!(reason.contains("webhook:mallory") && reason.contains("operator"), "{reason}");
    let allowed = say(&gateway, "n2", "room", "alice", ",tape.info").await;
    assert_eq!(allowed["status"], "replied", "{allowed}");
    assert!(allowed["text"].as_str().unwrap().contains("name: webhook:room"), "{allowed}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_is_denied_in_a_group_from_the_model_commands_the_fallback_and_code() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    let receiver = CallbackReceiver::start().await;
    let gateway = start(home.path(), &fake, &config(&receiver.url(), "")).await;
    let marker = home.path().join("shell-ran");
    let touch = format!("touch {}", marker.display());

    // 1. The model asks for bash: it is not offered, and the call is denied.
    fake.push(Reply::tool_calls(vec![("bash", json!({"cmd": touch}))])).push(Reply::text("could not"));
    let reply = say(&gateway, "b1", "room", "alice", "please run it").await;
    assert_eq!(reply["text"], "could not");
    assert!(!tool_names(&fake.requests()[0]).contains(&"bash".to_string()), "bash is not offered in a group");
    // A call naming a tool the model was not offered is an unknown tool.
    assert!(fake.tool_results(1).contains("unknown tool `bash`"), "{}", fake.tool_results(1));

    // 2. A comma command naming bash.
    let reply = say(&gateway, "b2", "room", "alice", &format!(",bash cmd='{touch}'")).await;
    assert!(reply["text"].as_str().unwrap().contains("denied"), "{reply}");

    // 3. The shell fallback of an unknown command.
    let reply = say(&gateway, "b3", "room", "alice", &format!(",{touch}")).await;
    assert!(reply["text"].as_str().unwrap().contains("denied"), "{reply}");

    // 4. From code run by run_code, where run_code itself is allowed.
    let reply = say(&gateway, "b4", "code-room", "alice", ",code_mode enable=true").await;
    assert_eq!(reply["status"], "replied", "{reply}");
    let code =
        format!("try:\n    await tools.bash(cmd='{touch}')\nexcept Exception as error:\n    print('refused:', error)");
    let before = fake.request_count();
    fake.push(Reply::tool_calls(vec![("run_code", json!({"code": code, "timeout_seconds": 60}))]))
        .push(Reply::text("done"));
    let reply = say(&gateway, "b5", "code-room", "alice", "run it from code").await;
    assert_eq!(reply["text"], "done", "{reply}");
    let results = fake.tool_results(before + 1);
    // Code sees only the tools the policy offers, and the policy handler would deny it anyway.
    assert!(results.contains("refused:") && results.contains("no tool named 'bash'"), "{results}");

    assert!(!marker.exists(), "no path ran the shell");
    // In a direct chat the same command runs.
    let body =
        json!({"message_id": "d1", "chat_id": "dm", "sender_id": "alice", "text": format!(",bash cmd='{touch}'")});
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.unwrap();
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["status"], "replied", "{reply}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn policy_show_and_explain_answer_in_the_chat() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("hi").await;
    let receiver = CallbackReceiver::start().await;
    let gateway = start(home.path(), &fake, &config(&receiver.url(), "")).await;
    let shown = say(&gateway, "p1", "room", "alice", ",policy show").await;
    assert!(shown["text"].as_str().unwrap().contains("operators"), "{shown}");
    let explained = say(&gateway, "p2", "room", "alice", ",policy explain bash").await;
    let text = explained["text"].as_str().unwrap();
    assert!(text.contains("bash") && text.contains("denied"), "{text}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_edit_applies_without_restart_and_an_invalid_edit_keeps_the_old_policy() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("hi").await;
    let receiver = CallbackReceiver::start().await;
    let denying = config(&receiver.url(), "\n[channels.webhook.policy]\ndenied_tools = [\"tape.info\"]\n");
    let gateway = start(home.path(), &fake, &denying).await;
    let reply = say(&gateway, "r0", "room", "alice", ",tape.info").await;
    assert!(reply["text"].as_str().unwrap().contains("denied"), "{reply}");

    std::fs::write(home.path().join("bub.toml"), config(&receiver.url(), "")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reply = say(&gateway, &format!("r1-{attempt}"), "room", "alice", ",tape.info").await;
        if reply["text"].as_str().unwrap().contains("name: webhook:room") {
            break;
        }
        assert!(Instant::now() < deadline, "the edit was not applied: {reply}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let broken = config(&receiver.url(), "\n[channels.webhook.policy]\ndenied_tool = [\"tape.info\"]\n");
    std::fs::write(home.path().join("bub.toml"), broken).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gateway.stderr().contains("the running policy stays") {
        assert!(Instant::now() < deadline, "the invalid edit was not reported:\n{}", gateway.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stderr = gateway.stderr();
    assert!(
        stderr.contains("bub.toml:") && stderr.contains("denied_tools"),
        "file:line:col and a suggestion:\n{stderr}"
    );
    let reply = say(&gateway, "r2", "room", "alice", ",tape.info").await;
    assert!(reply["text"].as_str().unwrap().contains("name: webhook:room"), "the old policy stays: {reply}");
    // The operator who wrote in `room` is told, through the channel's callback.
    assert!(
        receiver
            .wait_until(Duration::from_secs(30), |r| r
                .posts()
                .iter()
                .any(|p| p.body["text"].as_str().is_some_and(|t| t.contains("refused"))))
            .await,
        "operators were not told"
    );
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_config_stops_the_gateway_with_file_line_and_column() {
    let home = tempfile::tempdir().unwrap();
    let stderr = refused_start(
        home.path(),
        "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"x\"]\ncalback_url = \"http://x\"\n",
    );
    assert!(stderr.contains("bub.toml:4:1"), "{stderr}");
    assert!(stderr.contains("callback_url"), "did you mean: {stderr}");

    let stderr = refused_start(home.path(), "[channels.webhook]\nkind = \"webhook\"\nsecrets = []\n");
    assert!(stderr.contains("secret"), "{stderr}");

    // An existing but empty file is not the embedded default: it is an error.
    let stderr = refused_start(home.path(), "");
    assert!(stderr.contains("bub.toml: no channels: "), "{stderr}");
}
