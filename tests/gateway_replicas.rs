//! Several `bub gateway` processes on one PostgreSQL database (real
//! processes, a throwaway cluster from `support::postgres`): a chat's
//! messages may reach any replica, its turns run one at a time and in
//! order on the replica that leases its session, and callers waiting on
//! the request are answered wherever the turn ran.

mod support;

use serde_json::{Value, json};
use std::time::Duration;
use support::fake_model::{FakeModel, Reply};
use support::gateway::{CallbackReceiver, GatewayProcess, client, signed_request};

const SECRET: &str = "replica-test-secret";

fn body(id: &str, chat: &str, text: &str) -> Value {
    json!({ "message_id": id, "chat_id": chat, "sender_id": format!("u-{chat}"), "text": text })
}

fn replica_env(fake: &FakeModel, url: &str, callback: Option<&CallbackReceiver>) -> Vec<(String, String)> {
    let mut env = fake.vars("openai:gpt-test");
    env.push(("BUB_WEBHOOK_SECRET".into(), SECRET.into()));
    env.push(("BUB_DATABASE_URL".into(), url.into()));
    if let Some(receiver) = callback {
        env.push(("BUB_WEBHOOK_CALLBACK_URL".into(), receiver.url()));
    }
    env
}

/// One chat, its messages sent in turn to two replicas with `?mode=sync`:
/// every caller gets its own reply, whichever replica ran the turn, and the
/// tape (one, in the shared database) holds the prompts in sending order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_spread_over_two_replicas_is_answered_in_order() {
    let url = support::postgres::fresh_database().await;
    let fake = FakeModel::start().await;
    fake.answer_all(Reply::text("answered"));
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let env = replica_env(&fake, &url, None);
    let a = GatewayProcess::start(homes[0].path(), &env, &[]).await;
    let b = GatewayProcess::start(homes[1].path(), &env, &[]).await;
    let client = client();
    for n in 0..6 {
        let target = if n % 2 == 0 { a.addr } else { b.addr };
        let text = format!("prompt number {n}");
        let response = signed_request(&client, target, "webhook", "sync", &body(&format!("m{n}"), "c1", &text), SECRET)
            .await
            .unwrap();
        let status = response.status();
        let outcome: Value = response.json().await.unwrap_or_default();
        assert_eq!(status, 200, "m{n}: {outcome}; a:\n{}\nb:\n{}", a.stderr(), b.stderr());
        assert_eq!(outcome["text"], "answered", "m{n} got {outcome}");
    }
    let stderr = format!("{}\n{}", a.stderr(), b.stderr());
    assert!(a.stop().await && b.stop().await, "both stop cleanly on SIGTERM:\n{stderr}");
    let store = bub::db::PgTapeStore::connect(&url).await.unwrap();
    let prompts = user_texts(&store).await;
    let expected: Vec<String> = (0..6).map(|n| format!("prompt number {n}")).collect();
    assert_eq!(prompts, expected, "one tape, prompts in order");
}

/// The user messages of every tape, in tape order, concatenated.
async fn user_texts(store: &bub::db::PgTapeStore) -> Vec<String> {
    use bub::tape::{TapeQuery, TapeStore};
    let mut texts = Vec::new();
    for summary in store.list().await.unwrap() {
        let name = bub::tape::TapeName::new(summary.name.clone()).unwrap();
        let entries = store.read(&name, &TapeQuery::all()).await.unwrap();
        for entry in entries {
            if entry.payload.get("role").and_then(Value::as_str) == Some("user") {
                let content = entry.payload.get("content").and_then(Value::as_str).unwrap_or_default();
                if let Some(start) = content.find("prompt number") {
                    texts.push(content[start..].lines().next().unwrap_or_default().to_string());
                }
            }
        }
    }
    texts
}

#[allow(dead_code)]
const SETTLE: Duration = Duration::from_secs(2);
