//! Long conversations through the gateway: a chat's policy sets the model's
//! context window, the gateway compacts that chat after its reply (and no
//! other), and the cached tokens the provider reports reach `/metrics`.

use crate::support;

use serde_json::{Value, json};
use std::time::Duration;
use support::fake_model::{FakeModel, Reply};
use support::gateway::{GatewayProcess, client, signed_request};

const SECRET: &str = "compaction-secret";

const CONFIG: &str = r#"
[agent]
compact_at = 0.75
keep_recent_tokens = 400

[channels.webhook]
kind = "webhook"
secrets = ["compaction-secret"]

[channels.webhook.chats."small".policy]
context_window = 2000
"#;

async fn say(gateway: &GatewayProcess, id: &str, chat: &str, text: &str) -> Value {
    let body = json!({"message_id": id, "chat_id": chat, "sender_id": "u1", "text": text});
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.expect("request");
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn is_summary_call(request: &Value) -> bool {
    request["messages"][0]["content"].as_str().is_some_and(|s| s.starts_with("You are compacting"))
}

/// The user messages of the last turn request (not a summary call) whose
/// newest user message is `last`.
fn turn_request(fake: &FakeModel, last: &str) -> Vec<Value> {
    let request = fake
        .requests()
        .into_iter()
        .rev()
        .filter(|r| !is_summary_call(r))
        .find(|r| {
            let messages = r["messages"].as_array().unwrap();
            messages.iter().rev().find(|m| m["role"] == "user").is_some_and(|m| m["content"] == last)
        })
        .unwrap_or_else(|| panic!("no request ends with {last:?}"));
    request["messages"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_with_a_small_window_is_compacted_after_its_reply_and_cached_tokens_reach_metrics() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::text("Noted: the team's plans.").with_usage(300, 5).with_cached_tokens(120));
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), CONFIG).await;
    let filler = "the release checklist grows longer every week ".repeat(25);
    for turn in 0..6 {
        for chat in ["small", "big"] {
            let body =
                say(&gateway, &format!("{chat}-{turn}"), chat, &format!("turn {turn} in {chat}: {filler}")).await;
            assert_eq!(body["text"], "Noted: the team's plans.", "{body}");
        }
    }
    // The summary is asked for after a reply, in the background.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !fake.requests().iter().any(is_summary_call) {
        assert!(std::time::Instant::now() < deadline, "the small chat was never compacted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let summary = fake.requests().into_iter().find(is_summary_call).unwrap();
    let asked = summary["messages"].to_string();
    assert!(asked.contains("turn 0 in small:"), "the oldest turns are summarised");
    assert!(!asked.contains("in big:"), "only the small chat's turns");

    say(&gateway, "small-last", "small", "what did we decide, small?").await;
    say(&gateway, "big-last", "big", "what did we decide, big?").await;
    let small = turn_request(&fake, "what did we decide, small?");
    let users = |messages: &[Value]| messages.iter().filter(|m| m["role"] == "user").count();
    assert!(
        small
            .iter()
            .any(|m| m["content"].as_str().is_some_and(|c| c.starts_with("[Anchor created: auto_handoff/compaction]")
                && c.contains("Noted: the team's plans."))),
        "the summary anchor is in the small chat's context: {small:?}"
    );
    assert!(users(&small) < 7, "the small chat's old turns were replaced by the summary: {} users", users(&small));
    let big = turn_request(&fake, "what did we decide, big?");
    assert_eq!(users(&big), 7, "the big chat (the model's own 32k window) keeps every turn");

    let metrics = client().get(format!("{}/metrics", gateway.base_url())).send().await.unwrap().text().await.unwrap();
    let cached = metrics
        .lines()
        .find(|line| line.starts_with("bub_model_tokens_total{kind=\"cached\"}"))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no cached tokens in /metrics: {metrics}"));
    assert!(cached >= 120.0 * 14.0, "every turn's cached tokens are counted: {cached}");
    assert!(metrics.contains("bub_model_tokens_total{kind=\"input\"}"), "{metrics}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_shows_where_the_context_window_comes_from_and_a_bad_one_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("unused").await;
    let config = CONFIG.replace("compact_at = 0.75", "context_window = 64000");
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config).await;
    let small = say(&gateway, "p1", "small", ",policy").await;
    assert!(
        small["text"].as_str().unwrap().contains("context_window = 2000  (channels.webhook.chats.\"small\".policy)"),
        "{small}"
    );
    let other = say(&gateway, "p2", "other", ",policy").await;
    assert!(other["text"].as_str().unwrap().contains("context_window = 64000  (agent)"), "{other}");
    gateway.stop().await;

    let path = home.path().join("bad.toml");
    std::fs::write(&path, CONFIG.replace("context_window = 2000", "context_window = 200")).unwrap();
    let (ok, _, stderr) = support::gateway::bub_cli(home.path(), &["policy", "check", path.to_str().unwrap()]);
    assert!(!ok, "a window of 200 tokens is refused");
    assert!(stderr.contains("bad.toml:11:18: context_window 200 is too small"), "{stderr}");
}
