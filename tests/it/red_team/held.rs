//! Routes that held when the gateway was tried as an attacker, pinned so
//! they keep holding: comma-command parsing tricks that would smuggle a
//! shell past the operators rule, and a symlink out of the workspace.
//! (The group exact-name rule is pinned in `tests/it/gateway_policy.rs` and
//! `tests/it/policy_config.rs`; ids at arrival in `tests/it/gateway_webhook.rs`;
//! reloads in `tests/it/policy_reload.rs` and `tests/it/gateway_webhook.rs`.)

use crate::support::fake_model::FakeModel;
use crate::support::gateway::{GatewayProcess, client, signed_request};
use serde_json::{Value, json};

const SECRET: &str = "held-secret";

async fn say(gateway: &GatewayProcess, id: &str, sender: &str, text: &str) -> Value {
    let body = json!({"message_id": id, "chat_id": "c1", "sender_id": sender, "text": text});
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.expect("request");
    response.json().await.unwrap_or(Value::Null)
}

/// Neither a user with no rights nor an operator limited to `help` and
/// `tape.*` reaches the shell, however the line is dressed.
#[tokio::test(flavor = "multi_thread")]
async fn no_command_line_trick_reaches_the_shell() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("just text").await;
    let config = format!(
        "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n[channels.webhook.policy]\n\
         operators = [{{ user = \"webhook:ops\", commands = [\"help\", \"tape.*\"] }}]\n"
    );
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config).await;
    let tricks = [
        ",id",
        "   ,id",
        ",,id",
        ",tape.info; id",
        ",tape.info;id",
        ",help $(id)",
        ",help `id`",
        ",help\nid",
        ",\"tape.info; id\"",
        ",tape.search x && id",
        ",help | id",
        "，id",
    ];
    for (n, trick) in tricks.iter().enumerate() {
        for sender in ["mallory", "ops"] {
            let reply = say(&gateway, &format!("t{n}-{sender}"), sender, trick).await;
            let text = reply["text"].as_str().unwrap_or_default();
            assert!(!text.contains("uid="), "{sender} reached the shell with {trick:?}: {reply}");
        }
    }
    gateway.stop().await;
}

/// A symlink in the workspace that points at the gateway's config is not a
/// way out for the file tools, even for an operator.
#[tokio::test(flavor = "multi_thread")]
async fn a_symlink_out_of_the_workspace_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("just text").await;
    let config = format!(
        "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n[channels.webhook.policy]\n\
         operators = [\"webhook:ops\"]\n"
    );
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config).await;
    let workspace = home.path().join("workspaces").join("webhook%3Ac1");
    std::fs::create_dir_all(&workspace).unwrap();
    std::os::unix::fs::symlink(home.path().join("bub.toml"), workspace.join("config.toml")).unwrap();
    let reply = say(&gateway, "s1", "ops", ",fs.read config.toml").await;
    let text = reply["text"].as_str().unwrap_or_default();
    assert!(!text.contains(SECRET), "the config leaked through a symlink: {reply}");
    assert!(text.starts_with("error:"), "{reply}");
    gateway.stop().await;
}
