//! The admin console in a real browser (Debian's Chromium, driven by the
//! scenarios in `tests/admin-e2e/`, see [`crate::support::browser`]) against
//! the real `bub gateway`: logging in, the sections, the policy editor (an
//! error at its line, a widening previewed, an apply a chat then obeys, two
//! admins at once, a file broken on disk), a long tape, a pairing approved,
//! the live charts under load, forms posted from another site, a path
//! prefix behind a proxy. Screenshots of every step are in
//! `$CARGO_TARGET_DIR/admin-screenshots`.

use crate::support::browser;
use crate::support::fake_model::FakeModel;
use crate::support::gateway::{CallbackReceiver, GatewayProcess, client, signed_request};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const ALICE: &str = "alice-0123456789abcdef";
const BOB: &str = "bob-fedcba9876543210";
const SECRET: &str = "s3cret";

/// A webhook channel `webhook` (alice operates it) and the console (alice's
/// and bob's tokens), `extra` in `[admin]`.
fn config(callback: &str, extra: &str) -> String {
    format!(
        "[policy.defaults]\noperators = [\"webhook:alice\"]\n\n[channels.webhook]\nkind = \"webhook\"\nsecrets = \
         [\"{SECRET}\"]\ncallback_url = \"{callback}\"\n\n[admin]\ntoken_file = \"admin.tokens\"\n{extra}"
    )
}

/// The gateway on `text`, with the fake model answering "hi".
async fn console(home: &Path, fake: &FakeModel, text: &str) -> GatewayProcess {
    std::fs::write(home.join("admin.tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), text).await
}

fn url(gateway: &GatewayProcess) -> String {
    format!("{}/admin", gateway.base_url())
}

/// A message from `sender` in `chat` (a group that mentions the bot, or a
/// direct message), answered in sync mode: the reply's JSON.
async fn say(gateway: &GatewayProcess, id: &str, chat: &str, sender: &str, text: &str, group: bool) -> Value {
    let body = json!({
        "message_id": id, "chat_id": chat, "sender_id": sender, "text": text, "group": group, "mentions_bot": group,
    });
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn text(reply: &Value) -> String {
    reply["text"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn an_admin_logs_in_after_a_wrong_token_is_refused_and_walks_every_section() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let gateway = console(home.path(), &fake, &config(&receiver.url(), "")).await;
    let output = browser::run("login", &url(&gateway), ALICE, &[]).await;
    for step in ["ok wrong-token", "ok console", "ok policy", "ok live", "ok audit", "ok dark", "ok logged-out"] {
        assert!(output.lines().any(|line| line == step), "{step} missing:\n{output}");
    }
}

#[tokio::test]
async fn forms_posted_from_another_site_change_nothing() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let gateway = console(home.path(), &fake, &config(&receiver.url(), "")).await;
    let file = home.path().join("bub.toml");
    let before = std::fs::read_to_string(&file).unwrap();
    let env = [("BUB_CONFIG_FILE", file.display().to_string())];
    let output = browser::run("cross-site", &url(&gateway), ALICE, &env).await;
    for line in ["apply refused with 403", "logout refused with 403", "login refused with 403", "ok still-logged-in"] {
        assert!(output.contains(line), "{line} missing:\n{output}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before, "the config file");
}

#[tokio::test]
async fn behind_a_proxy_under_a_prefix_the_console_works_and_stays_under_it() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let gateway = console(home.path(), &fake, &config(&receiver.url(), "base_path = \"/bub\"\n")).await;
    // The scenario starts the proxy in front of the gateway's own URL.
    let env = [("BUB_GATEWAY", gateway.base_url())];
    let output = browser::run("prefix", &url(&gateway), BOB, &env).await;
    assert!(output.contains("ok logged-out"), "{output}");
}

#[tokio::test]
async fn a_policy_edit_shows_its_error_previews_a_widening_and_once_applied_a_chat_obeys_it() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let gateway = console(home.path(), &fake, &config(&receiver.url(), "")).await;
    let before = say(&gateway, "p0", "room", "alice", ",tape.info", true).await;
    assert!(text(&before).contains("name: webhook:room"), "tape.info runs before the edit: {before}");

    let output = browser::run("policy", &url(&gateway), ALICE, &[]).await;
    assert!(output.contains("ok error-at-line") && output.contains("ok preview-widening"), "{output}");
    assert!(output.lines().any(|line| line.starts_with("gains:") && line.contains("bash")), "{output}");
    assert!(output.contains("\napplied\n"), "{output}");

    let written = std::fs::read_to_string(home.path().join("bub.toml")).unwrap();
    assert!(written.contains("denied_tools = [\"tape.info\"]"), "{written}");
    let after = say(&gateway, "p1", "room", "alice", ",tape.info", true).await;
    assert!(text(&after).contains("denied"), "the next turn obeys the applied policy: {after}");
}

#[tokio::test]
async fn two_admins_at_once_the_second_is_told_and_a_config_broken_on_disk_is_repaired() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let gateway = console(home.path(), &fake, &config(&receiver.url(), "")).await;
    let file = home.path().join("bub.toml");
    let env = [("BUB_TOKEN_2", BOB.to_string()), ("BUB_CONFIG_FILE", file.display().to_string())];
    let output = browser::run("policy-conflict", &url(&gateway), ALICE, &env).await;
    assert!(output.contains("conflict resolved") && output.contains("repaired"), "{output}");
    let repaired = say(&gateway, "r0", "room", "alice", ",policy explain web.fetch", true).await;
    assert!(text(&repaired).contains("denied"), "the repaired config runs: {repaired}");
}

#[tokio::test]
async fn a_long_tape_opens_at_its_newest_page_and_pages_jumps_searches_and_exports() {
    use bub::db::SqliteTapeStore;
    use bub::tape::{NewEntry, TapeName, TapeStore};
    const TOTAL: usize = 30_000;
    let home = tempfile::tempdir().unwrap();
    {
        let store = SqliteTapeStore::open(home.path().join("bub.db")).await.unwrap();
        let name = TapeName::new("webhook:longroom").unwrap();
        let mut entries = Vec::with_capacity(TOTAL);
        for n in 1..=TOTAL {
            entries.push(match n {
                n if n % 5_000 == 1 => NewEntry::anchor(format!("chapter-{}", n / 5_000 + 1), json!({})),
                4_321 => NewEntry::chat("user", "the needle-in-the-haystack message"),
                n => NewEntry::chat(if n % 2 == 0 { "user" } else { "assistant" }, format!("message number {n}")),
            });
        }
        for batch in entries.chunks(5_000) {
            store.append(&name, batch.to_vec()).await.unwrap();
        }
    }
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let gateway = console(home.path(), &fake, &config(&receiver.url(), "")).await;
    let env = [
        ("BUB_TAPE", "webhook:longroom".to_string()),
        ("BUB_TAPE_TOTAL", TOTAL.to_string()),
        ("BUB_NEEDLE", "needle-in-the-haystack".to_string()),
    ];
    let output = browser::run("tape", &url(&gateway), ALICE, &env).await;
    assert!(output.contains(&format!("exported {TOTAL} lines")), "{output}");
    assert!(output.contains("searched further back"), "the needle is older than one search window: {output}");
}

#[tokio::test]
async fn a_stranger_s_pairing_request_is_approved_in_the_console_and_then_answered() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let text_config =
        config(&receiver.url(), "").replace("[policy.defaults]\n", "[policy.defaults]\ndm_policy = \"pairing\"\n");
    let gateway = console(home.path(), &fake, &text_config).await;
    let asked = text(&say(&gateway, "m0", "mallory-dm", "mallory", "hello?", false).await);
    let code = asked
        .split("Your pairing code is ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("a pairing code in {asked}"))
        .to_string();
    let env = [("BUB_PAIRING_CODE", code), ("BUB_PAIRING_SUBJECT", "mallory".to_string())];
    let output = browser::run("pairing", &url(&gateway), ALICE, &env).await;
    assert!(output.contains("\napproved\n"), "{output}");
    let answered = say(&gateway, "m1", "mallory-dm", "mallory", "hello again", false).await;
    assert_eq!(text(&answered), "hi", "an approved stranger is answered: {answered}");
}

#[tokio::test]
async fn the_live_charts_move_while_a_load_runs() {
    let home = tempfile::tempdir().unwrap();
    let (fake, receiver) = (FakeModel::start_answering("hi").await, CallbackReceiver::start().await);
    let text_config =
        config(&receiver.url(), "").replace("[policy.defaults]\n", "[policy.defaults]\ngroup_policy = \"open\"\n");
    let gateway = Arc::new(console(home.path(), &fake, &text_config).await);
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn({
        let (gateway, stop) = (gateway.clone(), stop.clone());
        async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                say(&gateway, &format!("l{n}"), &format!("load-{}", n % 4), "alice", "hello", true).await;
            }
            n
        }
    });
    let output = browser::run("live", &url(&gateway), ALICE, &[]).await;
    stop.store(true, Ordering::Relaxed);
    let sent = load.await.unwrap();
    assert!(sent > 0 && output.contains("ok moving"), "{sent} messages sent:\n{output}");
}
