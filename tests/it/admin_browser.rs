//! The admin console in a real browser (Debian's Chromium, driven by the
//! scenarios in `tests/admin-e2e/`, see [`crate::support::browser`]) against
//! the real `bub gateway`: logging in, the sections, the policy editor,
//! forms posted from another site, a path prefix behind a proxy.
//! Screenshots of every step are in `$CARGO_TARGET_DIR/admin-screenshots`.

use crate::support::browser;
use crate::support::gateway::GatewayProcess;
use std::path::Path;

const ALICE: &str = "alice-0123456789abcdef";
const BOB: &str = "bob-fedcba9876543210";

/// A webhook channel and the console (alice's and bob's tokens), `extra` in `[admin]`.
fn config(extra: &str) -> String {
    format!(
        "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n\n[admin]\ntoken_file = \"admin.tokens\"\n{extra}"
    )
}

async fn console(home: &Path, text: &str) -> GatewayProcess {
    std::fs::write(home.join("admin.tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    GatewayProcess::start_with_config(home, &[], text).await
}

#[tokio::test]
async fn an_admin_logs_in_after_a_wrong_token_is_refused_and_walks_every_section() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), &config("")).await;
    let output = browser::run("login", &format!("{}/admin", gateway.base_url()), ALICE, &[]).await;
    for step in ["ok wrong-token", "ok console", "ok policy", "ok live", "ok audit", "ok dark", "ok logged-out"] {
        assert!(output.lines().any(|line| line == step), "{step} missing:\n{output}");
    }
}

#[tokio::test]
async fn forms_posted_from_another_site_change_nothing() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), &config("")).await;
    let file = home.path().join("bub.toml");
    let before = std::fs::read_to_string(&file).unwrap();
    let env = [("BUB_CONFIG_FILE", file.display().to_string())];
    let output = browser::run("cross-site", &format!("{}/admin", gateway.base_url()), ALICE, &env).await;
    for line in ["logout refused with 403", "login refused with 403", "ok still-logged-in"] {
        assert!(output.contains(line), "{line} missing:\n{output}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before, "the config file");
}

#[tokio::test]
async fn behind_a_proxy_under_a_prefix_the_console_works_and_stays_under_it() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), &config("base_path = \"/bub\"\n")).await;
    let env = [("BUB_GATEWAY", gateway.base_url())];
    // The scenario starts the proxy; the console's URL it is given is the gateway's own.
    let output = browser::run("prefix", &format!("{}/admin", gateway.base_url()), BOB, &env).await;
    assert!(output.contains("ok logged-out"), "{output}");
}
