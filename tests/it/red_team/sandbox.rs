//! Route 4: `bash` and `run_code` were unconfined host processes: `subprocess`,
//! `open("$BUB_HOME/bub.db")`, `open(".../bub.toml")` (the secrets) all
//! worked. With the shortest chat-platform config they now run in the
//! sandbox; here the real gateway's `bash`, driven by the model, tries what
//! an injected prompt would. The chat bot is on Telegram (the `telegram`
//! feature); a webhook's chat moved into the sandbox holds in every build.

use crate::support::fake_model::FakeModel;
use crate::support::gateway::GatewayProcess;
use serde_json::json;
use std::time::Duration;

#[cfg(feature = "telegram")]
mod chat_bot {
    use super::*;
    use crate::support::fake_model::Reply;
    use crate::support::fake_telegram::{FakeTelegram, TOKEN};

    const WAIT: Duration = Duration::from_secs(90);

    #[tokio::test(flavor = "multi_thread")]
    async fn the_shell_of_a_chat_bot_runs_in_the_sandbox() {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("webhook.secret"), "the-secret").unwrap();
        let telegram = FakeTelegram::start().await;
        let fake = FakeModel::start().await;
        // The shortest config, plus the one user it answers without pairing.
        let config = format!(
            "[channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n\
             [channels.tg.policy]\nallow_users = [\"tg:1001\"]\n",
            telegram.api_url()
        );
        // The port is known once the gateway listens: the script reads it from a file the test writes.
        let h = home.path().display();
        let probe = format!(
            "for f in {h}/bub.toml {h}/bub.db {h}/webhook.secret; do cat $f >/dev/null 2>&1 && echo READ $f || echo NOREAD; done\n\
             touch /etc/bub-escape 2>/dev/null && echo WROTE-ETC || echo NOWRITE-ETC\n\
             touch {h}/escape 2>/dev/null && echo WROTE-HOME || echo NOWRITE-HOME\n\
             echo inside > inside.txt && echo WROTE-WS\n\
             (exec 3<>/dev/tcp/127.0.0.1/$(cat port)) 2>/dev/null && echo CONNECTED || echo NOCONNECT\n\
             echo uid=$(id -u)\n"
        );
        fake.push(Reply::tool_calls(vec![("bash", json!({"cmd": probe}))]))
            .push(Reply::text("probed"))
            .push(Reply::tool_calls(vec![(
                "bash",
                json!({"cmd": "bomb() { bomb | bomb & }; bomb; sleep 3", "timeout_seconds": 20}),
            )]))
            .push(Reply::text("bombed"))
            .push(Reply::tool_calls(vec![(
                "bash",
                json!({"cmd": "python3 -c 'x = bytearray(4 * 1024 ** 3)' 2>&1 | tail -1; echo hog-exit=$?"}),
            )]))
            .push(Reply::text("hogged"))
            .push(Reply::text("still serving"));
        let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config).await;
        assert!(gateway.stderr().contains("run in the sandbox"), "{}", gateway.stderr());
        let workspace = home.path().join("workspaces").join("tg%3A1001");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("port"), gateway.addr.port().to_string()).unwrap();

        for (n, text) in ["probe", "bomb", "hog", "hello?"].into_iter().enumerate() {
            telegram.user_says(1001, text);
            let turns = [2, 4, 6, 7][n];
            let answered = telegram.wait_until(WAIT, |_| fake.request_count() >= turns).await;
            assert!(answered, "turn {text} never reached the model ({} requests)", fake.request_count());
        }
        let probed = fake.tool_results(1);
        assert_eq!(probed.matches("NOREAD").count(), 3, "bub.toml, bub.db and the secret stay hidden: {probed}");
        for expected in ["NOWRITE-ETC", "NOWRITE-HOME", "WROTE-WS", "NOCONNECT", "uid=1000"] {
            assert!(probed.contains(expected), "{expected}: {probed}");
        }
        assert_eq!(
            std::fs::read_to_string(workspace.join("inside.txt")).unwrap(),
            "inside\n",
            "writes reach the workspace"
        );
        assert!(!home.path().join("escape").exists());
        let bombed = fake.tool_results(3);
        assert!(bombed.contains("Resource temporarily unavailable"), "the process limit held: {bombed}");
        let hogged = fake.tool_results(5);
        assert!(hogged.contains("MemoryError"), "{hogged}");
        assert_eq!(fake.request_count(), 7, "the gateway kept serving");
        assert!(gateway.stop().await);
    }

    /// Fail closed: a channel whose policy needs a sandbox that cannot be built
    /// does not start, and says what to do. The gateway runs where user
    /// namespaces are used up (`max_user_namespaces = 0`), as on hosts that
    /// forbid them.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_channel_that_needs_an_impossible_sandbox_does_not_start() {
        let home = tempfile::tempdir().unwrap();
        let telegram = FakeTelegram::start().await;
        let config =
            format!("[channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n", telegram.api_url());
        let path = home.path().join("bub.toml");
        std::fs::write(&path, config).unwrap();
        let script = format!(
            "echo 0 > /proc/sys/user/max_user_namespaces && exec {} gateway --listen 127.0.0.1:0 --config {}",
            env!("CARGO_BIN_EXE_bub"),
            path.display()
        );
        let output = std::process::Command::new("unshare")
            .args(["--user", "--map-root-user", "sh", "-c", &script])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BUB_HOME", home.path())
            .env("HOME", home.path())
            .output()
            .expect("run unshare (util-linux)");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "the gateway started without its sandbox: {stderr}");
        assert!(stderr.contains("channel tg runs the shell and code in the sandbox"), "{stderr}");
        assert!(stderr.contains("user namespaces"), "says what is missing: {stderr}");
        assert!(stderr.contains("environment = \"local\""), "{stderr}");
        assert!(telegram.calls().is_empty(), "nothing started: {:?}", telegram.calls());
    }
}

/// A reload that moves a chat into the sandbox holds from its next turn,
/// even though the chat's environment was open on the host.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_into_the_sandbox_holds_from_the_next_turn() {
    use crate::support::gateway::{client, signed_request};
    const SECRET: &str = "reload-sandbox";
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("text").await;
    let config = |b_layer: &str| {
        format!(
            "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\
             [channels.webhook.policy]\noperators = [\"webhook:ops\"]\n\
             [channels.webhook.chats.\"a\".policy]\nenvironment = \"sandbox\"\n{b_layer}"
        )
    };
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config("")).await;
    let say = |id: String, text: &'static str| {
        let body = json!({"message_id": id, "chat_id": "b", "sender_id": "ops", "text": text});
        let addr = gateway.addr;
        async move {
            let response = signed_request(&client(), addr, "webhook", "sync", &body, SECRET).await.unwrap();
            response.json::<serde_json::Value>().await.unwrap()["text"].as_str().unwrap_or_default().to_string()
        }
    };
    let on_host = say("u1".into(), ",bash cmd='echo uid=$(id -u)'").await;
    assert!(on_host.contains("uid=") && !on_host.contains("uid=1000"), "on the host first: {on_host}");
    std::fs::write(
        home.path().join("bub.toml"),
        config("[channels.webhook.chats.\"b\".policy]\nenvironment = \"sandbox\"\n"),
    )
    .unwrap();
    let mut shown = String::new();
    for attempt in 0..100 {
        shown = say(format!("p{attempt}"), ",policy show").await;
        if shown.contains("environment = sandbox") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(shown.contains("environment = sandbox"), "the reload never applied: {shown}");
    let sandboxed = say("u2".into(), ",bash cmd='echo uid=$(id -u)'").await;
    assert!(sandboxed.contains("uid=1000"), "in the sandbox after the reload: {sandboxed}");
    assert!(gateway.stop().await);
}
