//! How the gateway turns messages into turns: debounce, one turn at a time
//! per session with the busy rule (steer, queue, drop), inbound rate limits.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::fake_model::{FakeModel, Reply};
use support::gateway::{GatewayProcess, client, signed_request};

const SECRET: &str = "turns-secret";

async fn start(home: &Path, fake: &FakeModel, policy: &str) -> GatewayProcess {
    let text = format!(
        "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\n[channels.webhook.policy]\n{policy}\n"
    );
    let path = home.join("bub.toml");
    std::fs::write(&path, text).unwrap();
    GatewayProcess::start(home, &fake.vars("openai:gpt-test"), &["--config", path.to_str().unwrap()]).await
}

async fn send(addr: std::net::SocketAddr, id: &str, chat: &str, text: &str) -> (u16, Value) {
    let body = json!({"message_id": id, "chat_id": chat, "sender_id": "u1", "text": text});
    let response = signed_request(&client(), addr, "webhook", "sync", &body, SECRET).await.expect("request");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The user messages of the model request `index`.
fn user_messages(fake: &FakeModel, index: usize) -> Vec<String> {
    fake.requests()[index]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Sends `first`, then — once the model is working on it — `second`, both in
/// the same chat; returns both outcomes.
async fn second_message_mid_turn(gateway: &GatewayProcess, fake: &FakeModel) -> (Value, Value) {
    let addr = gateway.addr;
    let first = tokio::spawn(async move { send(addr, "a", "c1", "first question").await });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fake.request_count() == 0 {
        assert!(std::time::Instant::now() < deadline, "the first turn never reached the model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, second) = send(addr, "b", "c1", "second question").await;
    let (_, first) = first.await.unwrap();
    (first, second)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_mid_turn_queues_behind_it_by_default() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_millis(1500), Reply::text("answer one")))
        .push(Reply::text("answer two"));
    let gateway = start(home.path(), &fake, "").await;
    let (first, second) = second_message_mid_turn(&gateway, &fake).await;
    assert_eq!(first["text"], "answer one");
    assert_eq!(second["text"], "answer two");
    assert_eq!(fake.request_count(), 2);
    assert_eq!(user_messages(&fake, 1).last().unwrap(), "second question", "the queued turn ran after the first");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_mid_turn_steers_it_when_the_policy_says_steer() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_millis(1500), Reply::text("answer one")))
        .push(Reply::text("answer to both"));
    let gateway = start(home.path(), &fake, "busy = \"steer\"").await;
    let (first, second) = second_message_mid_turn(&gateway, &fake).await;
    assert_eq!(fake.request_count(), 2);
    assert!(user_messages(&fake, 1).contains(&"second question".to_string()), "steered into the running turn");
    assert_eq!(first["text"], second["text"], "both messages share the turn's outcome");
    assert_eq!(second["text"], "answer oneanswer to both");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_mid_turn_is_dropped_with_a_notice_when_the_policy_says_drop() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_millis(1500), Reply::text("answer one")));
    let gateway = start(home.path(), &fake, "busy = \"drop\"").await;
    let (first, second) = second_message_mid_turn(&gateway, &fake).await;
    assert_eq!(first["text"], "answer one");
    assert_eq!(second["status"], "dropped", "{second}");
    assert!(second["text"].as_str().unwrap().contains("dropped"), "{second}");
    assert_eq!(fake.request_count(), 1);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_is_debounced_into_one_turn_and_commands_bypass_it() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("one answer").await;
    let gateway =
        start(home.path(), &fake, "debounce = { enabled = true, quiet_seconds = 0.5, max_wait_seconds = 5.0 }").await;
    let addr = gateway.addr;
    let mut burst = Vec::new();
    for (i, line) in ["deploy", "the api", "to staging"].into_iter().enumerate() {
        burst.push(tokio::spawn(async move { send(addr, &format!("d{i}"), "c1", line).await }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, command) = send(addr, "cmd", "c1", ",tape.info").await;
    assert_eq!(command["status"], "replied", "a command does not wait for the burst: {command}");
    for reply in burst {
        let (_, reply) = reply.await.unwrap();
        assert_eq!(reply["text"], "one answer");
    }
    assert_eq!(fake.request_count(), 1, "one turn for the burst");
    assert_eq!(user_messages(&fake, 0).last().unwrap(), "deploy\nthe api\nto staging");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sender_over_the_inbound_rate_gets_429_and_nothing_is_stored() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("ok").await;
    let gateway = start(home.path(), &fake, "rate = { inbound_per_user = \"2/min\" }").await;
    assert_eq!(send(gateway.addr, "r1", "c1", ",help").await.0, 200);
    assert_eq!(send(gateway.addr, "r2", "c1", ",help").await.0, 200);
    let body = json!({"message_id": "r3", "chat_id": "c1", "sender_id": "u1", "text": ",help"});
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.unwrap();
    assert_eq!(response.status(), 429);
    let seconds = response.headers()["retry-after"].to_str().unwrap().to_string();
    let refused: Value = response.json().await.unwrap();
    assert_eq!(
        refused["message"].as_str(),
        Some(format!("too many messages; retry after {seconds} s").as_str()),
        "the wait in whole seconds, as the header says: {refused}"
    );
    // Another sender is not limited.
    let other = json!({"message_id": "r4", "chat_id": "c1", "sender_id": "u2", "text": ",help"});
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &other, SECRET).await.unwrap();
    assert_eq!(response.status(), 200);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sync_caller_gets_504_after_the_reply_timeout_and_the_outcome_when_asking_again() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::slow_first_token(Duration::from_secs(3), Reply::text("late but here")));
    let text =
        format!("[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\nreply_timeout_seconds = 0.5\n");
    let path = home.path().join("bub.toml");
    std::fs::write(&path, text).unwrap();
    let gateway =
        GatewayProcess::start(home.path(), &fake.vars("openai:gpt-test"), &["--config", path.to_str().unwrap()]).await;
    let (status, body) = send(gateway.addr, "slow", "c1", "take your time").await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"], "timeout");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = send(gateway.addr, "slow", "c1", "take your time").await;
        if status == 200 {
            assert_eq!(body["text"], "late but here");
            break;
        }
        assert_eq!(status, 409, "still running: {body}");
        assert!(std::time::Instant::now() < deadline, "the turn never finished");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(fake.request_count(), 1, "asking again did not start another turn");
    gateway.stop().await;
}

async fn send_in_group(addr: std::net::SocketAddr, id: &str, text: &str, mention: bool) -> Value {
    let body = json!({
        "message_id": id, "chat_id": "room", "sender_id": "u1", "text": text,
        "group": true, "mentions_bot": mention,
    });
    let response = signed_request(&client(), addr, "webhook", "sync", &body, SECRET).await.expect("request");
    response.json().await.unwrap_or(Value::Null)
}

/// An unaddressed group message never starts a turn, not even right after
/// the bot was addressed (inside `active_window_seconds`, debounce off as on
/// webhooks): it is recorded, and the next addressed turn sees it as context.
#[tokio::test(flavor = "multi_thread")]
async fn unaddressed_group_messages_are_recorded_never_answered() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("on it").await;
    let gateway = start(home.path(), &fake, "debounce = { active_window_seconds = 60.0 }").await;
    let addr = gateway.addr;

    assert_eq!(send_in_group(addr, "w0", "before anyone asked", false).await["status"], "recorded");
    assert_eq!(send_in_group(addr, "w1", "@bub what's up?", true).await["status"], "replied");
    let follow_up = send_in_group(addr, "w2", "and also this", false).await;
    assert_eq!(follow_up["status"], "recorded", "{follow_up}");
    assert_eq!(follow_up["text"], "", "no answer: {follow_up}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.request_count(), 1, "the follow-up started no turn");
    assert_eq!(send_in_group(addr, "w3", "@bub and now?", true).await["status"], "replied");
    let seen = user_messages(&fake, 1).join("\n");
    assert!(seen.contains("and also this"), "the recorded follow-up is context: {seen}");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_answer_is_asked_again_and_the_chat_gets_the_whole_one() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("first words ")).push(Reply::text("Complete reply.")).push(Reply::text("ok"));
    let gateway = start(home.path(), &fake, "").await;
    let (status, reply) = send(gateway.addr, "a", "c1", "tell me").await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["status"], "replied", "{reply}");
    assert_eq!(reply["text"], "Complete reply.");
    send(gateway.addr, "b", "c1", "and now?").await;
    let context: Vec<String> = fake.requests()[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(context.iter().any(|c| c == "Complete reply."), "{context:?}");
    assert!(!context.iter().any(|c| c.contains("first words")), "the fragment is not replayed: {context:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_cut_twice_fails_the_turn_and_the_chat_reads_that_it_was_cut() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("first words ")).push(Reply::cut_mid_stream("again words "));
    let gateway = start(home.path(), &fake, "").await;
    let (_, reply) = send(gateway.addr, "a", "c1", "tell me").await;
    assert_eq!(reply["status"], "failed", "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(text.starts_with("again words"), "what was said before the cut is shown as such: {text}");
    assert!(text.contains("The turn failed (cut)") && text.contains("answer was cut off"), "{text}");
    assert!(!text.contains("first words"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sse_caller_is_told_to_restart_when_a_cut_answer_is_asked_again() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::cut_mid_stream("first words ")).push(Reply::text("Complete reply."));
    let gateway = start(home.path(), &fake, "").await;
    let body = json!({"message_id": "s1", "chat_id": "c1", "sender_id": "u1", "text": "tell me"});
    let response = signed_request(&client(), gateway.addr, "webhook", "sse", &body, SECRET).await.unwrap();
    let stream = response.text().await.unwrap();
    let events: Vec<(&str, Value)> = stream
        .split("\n\n")
        .filter_map(|event| {
            let name = event.lines().find_map(|line| line.strip_prefix("event:"))?.trim();
            let data = event.lines().find_map(|line| line.strip_prefix("data:"))?;
            Some((name, serde_json::from_str(data.trim()).unwrap()))
        })
        .collect();
    let restart = events.iter().position(|(name, _)| *name == "restart").expect(&stream);
    assert_eq!(events[restart].1["text"], "", "nothing before the cut answer is kept: {stream}");
    let after: String = events[restart..]
        .iter()
        .filter(|(name, _)| *name == "delta")
        .map(|(_, data)| data["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(after, "Complete reply.", "{stream}");
    let (_, done) = events.last().unwrap();
    assert_eq!(done["text"], "Complete reply.", "{stream}");
}

/// `bub_model_call_seconds` records the call's real duration, not whole
/// milliseconds: a loopback call to the fake model takes a fraction of one
/// (once read as 0), and the sum of two is not a whole number of them.
#[tokio::test(flavor = "multi_thread")]
async fn model_call_seconds_are_recorded_below_the_millisecond() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::text("one"));
    fake.push(Reply::text("two"));
    let gateway = start(home.path(), &fake, "").await;
    assert_eq!(send(gateway.addr, "m1", "c1", "first").await.1["text"], "one");
    assert_eq!(send(gateway.addr, "m2", "c2", "second").await.1["text"], "two");
    let metrics = client().get(format!("{}/metrics", gateway.base_url())).send().await.unwrap().text().await.unwrap();
    let sum: f64 = metrics
        .lines()
        .find(|line| line.starts_with("bub_model_call_seconds_sum{status=\"ok\"}"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no bub_model_call_seconds_sum: {metrics}"));
    let millis = sum * 1000.0;
    assert!(sum > 0.0 && (millis - millis.round()).abs() > 1e-6, "{sum} s is whole milliseconds");
    gateway.stop().await;
}
