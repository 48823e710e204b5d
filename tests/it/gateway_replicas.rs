//! Several `bub gateway` processes on one PostgreSQL database (real
//! processes, a throwaway cluster from `support::postgres`): a chat's
//! messages may reach any replica, its turns run one at a time and in
//! order on the replica that leases its session, and callers waiting on
//! the request are answered wherever the turn ran.

use crate::support;

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

/// A streaming caller (`?mode=sse`) at a replica that does not hold the
/// chat gets the reply as a delta and the `done` event, like a local one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_caller_hears_a_turn_run_on_another_replica() {
    let url = support::postgres::fresh_database().await;
    let fake = FakeModel::start_answering("answered").await;
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let env = replica_env(&fake, &url, None);
    let a = GatewayProcess::start(homes[0].path(), &env, &[]).await;
    let b = GatewayProcess::start(homes[1].path(), &env, &[]).await;
    let first = signed_request(&client(), a.addr, "webhook", "sync", &body("m1", "c1", "hello"), SECRET).await;
    assert_eq!(first.unwrap().status(), 200, "a holds c1 now");
    let response =
        signed_request(&client(), b.addr, "webhook", "sse", &body("m2", "c1", "again"), SECRET).await.unwrap();
    assert_eq!(response.status(), 200);
    let stream = response.text().await.unwrap();
    let deltas = support::gateway::sse_deltas(&stream);
    assert_eq!(deltas, "answered", "{stream}");
    assert!(stream.contains("event: done"), "{stream}");
    assert!(a.stop().await && b.stop().await);
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

/// A session that moves to a replica whose workspaces are on another volume
/// tells its chat that the workspace starts empty; between replicas that
/// mount one volume (here: the same folder) it moves silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moved_off_its_volume_tells_the_chat() {
    const NOTICE: &str = "the workspace starts empty";
    for shared_volume in [false, true] {
        let url = support::postgres::fresh_database().await;
        let fake = FakeModel::start_answering("answered").await;
        let receiver = CallbackReceiver::start().await;
        let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        if shared_volume {
            std::fs::create_dir_all(homes[0].path().join("workspaces")).unwrap();
            std::os::unix::fs::symlink(homes[0].path().join("workspaces"), homes[1].path().join("workspaces")).unwrap();
        }
        let env = replica_env(&fake, &url, Some(&receiver));
        let a = GatewayProcess::start(homes[0].path(), &env, &[]).await;
        let b = GatewayProcess::start(homes[1].path(), &env, &[]).await;
        let first = signed_request(&client(), a.addr, "webhook", "async", &body("m1", "c1", "hello"), SECRET).await;
        assert_eq!(first.unwrap().status(), 202);
        assert!(receiver.wait_for_keys(1, Duration::from_secs(30)).await, "a answers: {}", a.stderr());
        // A clean stop gives its leases up at once.
        assert!(a.stop().await);
        let second = signed_request(&client(), b.addr, "webhook", "async", &body("m2", "c1", "again"), SECRET).await;
        assert_eq!(second.unwrap().status(), 202);
        // The reply, and before it (on another volume) the notice, each under its own key.
        let posts = if shared_volume { 2 } else { 3 };
        assert!(receiver.wait_for_keys(posts, Duration::from_secs(30)).await, "b answers: {}", b.stderr());
        tokio::time::sleep(Duration::from_millis(300)).await;
        let texts: Vec<String> =
            receiver.accepted().iter().map(|post| post.body["text"].as_str().unwrap_or_default().to_string()).collect();
        let told = texts.iter().filter(|text| text.contains(NOTICE)).count();
        let stderr = b.stderr();
        assert!(b.stop().await);
        if shared_volume {
            assert_eq!(told, 0, "one volume: nothing to tell; posts {texts:?}");
        } else {
            assert_eq!(told, 1, "another volume: the chat is told once; posts {texts:?}\n{stderr}");
        }
        assert_eq!(texts.iter().filter(|text| *text == "answered").count(), 2, "both answered: {texts:?}");
    }
}

/// `bub db migrate` creates the tables on the database `BUB_DATABASE_URL`
/// names (the command operators run as a step of their own), and a URL that
/// is not PostgreSQL's is refused with what one looks like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bub_db_migrate_prepares_the_database_the_environment_names() {
    let url = support::postgres::fresh_database().await;
    let home = tempfile::tempdir().unwrap();
    let run = |database_url: &str, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bub"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BUB_HOME", home.path())
            .env("BUB_DATABASE_URL", database_url)
            .args(args)
            .output()
            .unwrap()
    };
    let migrated = run(&url, &["db", "migrate"]);
    let stdout = String::from_utf8_lossy(&migrated.stdout).to_string();
    assert!(migrated.status.success(), "{stdout}{}", String::from_utf8_lossy(&migrated.stderr));
    assert!(stdout.contains("postgres:postgres://bub@") && stdout.contains("migrated"), "{stdout}");
    assert!(!home.path().join("bub.db").exists(), "no SQLite file is made when the store is PostgreSQL");
    let listed = run(&url, &["tape", "list"]);
    assert!(listed.status.success(), "bub tape list reads the same store: {}", String::from_utf8_lossy(&listed.stderr));

    let refused = run("mysql://bub:secret@db/bub", &["db", "migrate"]);
    let stderr = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(!refused.status.success());
    assert!(stderr.contains("BUB_DATABASE_URL") && stderr.contains("postgres://"), "{stderr}");
    assert!(!stderr.contains("secret"), "the password is never printed: {stderr}");
}

/// A replica paused past its lease (SIGSTOP: a long GC-like stall, a frozen
/// VM) is taken for dead: the other runs its chat's turn and answers once.
/// When it wakes, its own turn can neither add to the tape nor answer, and
/// it stops with an error so that its supervisor restarts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_taken_for_dead_answers_nothing_when_it_wakes_and_stops() {
    let url = support::postgres::fresh_database().await;
    let fake = FakeModel::start();
    let fake = fake.await;
    // Long enough that the pause falls inside the turn's model call.
    fake.answer_all(Reply::slow_first_token(Duration::from_secs(4), Reply::text("answered")));
    let receiver = CallbackReceiver::start().await;
    let config = format!(
        "[store]\nlease_seconds = 2\n\n[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\
         callback_url = \"{}\"\n",
        receiver.url()
    );
    let env = replica_env(&fake, &url, None);
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = GatewayProcess::start_with_config(homes[0].path(), &env, &config).await;
    let b = GatewayProcess::start_with_config(homes[1].path(), &env, &config).await;
    let sent = signed_request(&client(), a.addr, "webhook", "async", &body("m1", "c1", "hello"), SECRET).await;
    assert_eq!(sent.unwrap().status(), 202);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let a_pid = rustix::process::Pid::from_raw(a.pid() as i32).unwrap();
    rustix::process::kill_process(a_pid, rustix::process::Signal::STOP).unwrap();
    // b takes the chat over once a's lease expired, and answers.
    let answered = receiver.wait_for_keys(1, Duration::from_secs(30)).await;
    rustix::process::kill_process(a_pid, rustix::process::Signal::CONT).unwrap();
    assert!(answered, "b answers after the takeover:\n{}", b.stderr());
    let (status, a_stderr) = a.wait_exit(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|status| !status.success()), "a stops with an error: {status:?}\n{a_stderr}");
    assert!(a_stderr.contains("taken for dead"), "{a_stderr}");
    // a's turn came back from the model meanwhile: nothing of it lands.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let replies = receiver.posts_per_key();
    assert_eq!(replies.get("reply:webhook:m1"), Some(&1), "answered once: {replies:?}");
    assert!(b.stop().await);
    let store = bub::db::PgTapeStore::connect(&url).await.unwrap();
    let answers = assistant_texts(&store).await;
    assert_eq!(answers, ["answered"], "one turn on the tape, b's");
}

/// The assistant messages of every tape.
async fn assistant_texts(store: &bub::db::PgTapeStore) -> Vec<String> {
    use bub::tape::{TapeQuery, TapeStore};
    let mut texts = Vec::new();
    for summary in store.list().await.unwrap() {
        let name = bub::tape::TapeName::new(summary.name.clone()).unwrap();
        for entry in store.read(&name, &TapeQuery::all()).await.unwrap() {
            if entry.payload.get("role").and_then(Value::as_str) == Some("assistant") {
                texts.push(entry.payload.get("content").and_then(Value::as_str).unwrap_or_default().to_string());
            }
        }
    }
    texts
}

/// Each replica reloads its policy from its own file (a ConfigMap mounted
/// in each pod): a secret removed from one replica's file stops verifying
/// there at once, while the other, whose file did not change yet, still
/// takes it; the same change to the other file applies there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_replica_reloads_its_own_config_file() {
    let url = support::postgres::fresh_database().await;
    let fake = FakeModel::start_answering("answered").await;
    let file = |secrets: &str| format!("[channels.webhook]\nkind = \"webhook\"\nsecrets = [{secrets}]\n");
    let env = replica_env(&fake, &url, None);
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let both = file("\"old-secret\", \"new-secret\"");
    let a = GatewayProcess::start_with_config(homes[0].path(), &env, &both).await;
    let b = GatewayProcess::start_with_config(homes[1].path(), &env, &both).await;
    let send = |addr, id: &str, secret: &'static str| {
        let body = body(id, "c1", "hi");
        async move { signed_request(&client(), addr, "webhook", "sync", &body, secret).await.unwrap().status() }
    };
    assert_eq!(send(a.addr, "k1", "old-secret").await, 200);
    std::fs::write(homes[0].path().join("bub.toml"), file("\"new-secret\"")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !a.stderr().contains("config reloaded") {
        assert!(std::time::Instant::now() < deadline, "a never reloaded:\n{}", a.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(send(a.addr, "k2", "old-secret").await, 401, "a's file dropped the old secret");
    assert_eq!(send(b.addr, "k3", "old-secret").await, 200, "b's file still names it");
    std::fs::write(homes[1].path().join("bub.toml"), file("\"new-secret\"")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !b.stderr().contains("config reloaded") {
        assert!(std::time::Instant::now() < deadline, "b never reloaded:\n{}", b.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(send(b.addr, "k4", "old-secret").await, 401);
    assert_eq!(send(b.addr, "k5", "new-secret").await, 200);
    assert!(a.stop().await && b.stop().await);
}
