//! The admin console's front door, on the real binary: off unless `[admin]`;
//! token login with a session cookie (HttpOnly, SameSite=Strict, no `Secure`
//! on loopback); CSRF on changes; bearer tokens for scripts; failed attempts
//! limited per address; a path prefix for reverse proxies.

use crate::support::gateway::{GatewayProcess, refused_start};
use std::path::Path;

const ALICE: &str = "alice-0123456789abcdef";
const BOB: &str = "bob-fedcba9876543210";

fn config(admin: &str) -> String {
    format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n{admin}")
}

/// A gateway whose console has alice's and bob's tokens in `admin.tokens`.
async fn console(home: &Path, extra: &str) -> GatewayProcess {
    std::fs::write(home.join("admin.tokens"), format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    let text = config(&format!("[admin]\ntoken_file = \"admin.tokens\"\n{extra}"));
    GatewayProcess::start_with_config(home, &[], &text).await
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// Logs in with `token`; the response.
async fn login(base: &str, token: &str) -> reqwest::Response {
    client().post(format!("{base}/login")).form(&[("token", token)]).send().await.unwrap()
}

/// The `bub_admin=…` pair of a login's `Set-Cookie`, and the whole header.
fn session_cookie(response: &reqwest::Response) -> (String, String) {
    let header = response.headers()["set-cookie"].to_str().unwrap().to_string();
    (header.split(';').next().unwrap().to_string(), header)
}

async fn session(base: &str, cookie: &str) -> (u16, serde_json::Value) {
    let response = client().get(format!("{base}/api/session")).header("cookie", cookie).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or_default())
}

#[tokio::test]
async fn without_an_admin_section_every_console_route_is_not_found() {
    let home = tempfile::tempdir().unwrap();
    let gateway = GatewayProcess::start_with_config(home.path(), &[], &config("")).await;
    let base = gateway.base_url();
    for path in ["/admin", "/admin/", "/admin/api/session", "/admin/api/openapi.json", "/admin/assets/app.js"] {
        let status = client().get(format!("{base}{path}")).send().await.unwrap().status();
        assert_eq!(status, 404, "{path}");
    }
    let status = client().post(format!("{base}/admin/login")).form(&[("token", ALICE)]).send().await.unwrap().status();
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_console_without_any_token_refuses_to_start() {
    let home = tempfile::tempdir().unwrap();
    let stderr = refused_start(home.path(), &config("[admin]\n"));
    assert!(stderr.contains("[admin] is configured but no admin token is: add `token_file`"), "{stderr}");
}

#[tokio::test]
async fn a_right_token_logs_in_with_a_strict_cookie_and_a_wrong_one_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());

    let page = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert!(page.text().await.unwrap().contains("Admin token"), "the login form, before a login");

    let wrong = login(&base, "alice-0123456789abcdeX").await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    assert!(wrong.text().await.unwrap().contains("That is not an admin token."));

    let right = login(&base, ALICE).await;
    assert_eq!(right.status(), 303);
    assert_eq!(right.headers()["location"], "/admin/");
    let (cookie, header) = session_cookie(&right);
    assert!(header.contains("HttpOnly") && header.contains("SameSite=Strict") && header.contains("Path=/admin"));
    assert!(!header.contains("Secure"), "on loopback the cookie is not Secure: {header}");
    let answer = client().get(format!("{base}/api/session")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(answer.headers()["cache-control"], "no-store", "API answers are not cached either");
    let (status, me) = session(&base, &cookie).await;
    assert_eq!(status, 200);
    assert_eq!(me["admin"], "alice", "the audit's name comes from the token file");
    assert_eq!(me["via"], "session");
    assert_eq!(me["replica"], "single");
    let app = client().get(format!("{base}/")).header("cookie", &cookie).send().await.unwrap();
    assert!(app.text().await.unwrap().contains("assets/app.js"), "the console itself once logged in");

    let forged = cookie.replace("alice", "bob");
    assert_eq!(session(&base, &forged).await.0, 401, "a cookie names the admin its MAC was made for");
    assert_eq!(session(&base, "bub_admin=1.2.alice").await.0, 401);
}

#[tokio::test]
async fn a_change_needs_the_csrf_header_and_must_not_come_from_another_site() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());
    let (cookie, _) = session_cookie(&login(&base, BOB).await);
    let (_, me) = session(&base, &cookie).await;
    let csrf = me["csrf"].as_str().unwrap().to_string();

    let logout = |csrf: Option<String>, origin: Option<&'static str>| {
        let mut request = client().post(format!("{base}/logout")).header("cookie", &cookie);
        if let Some(csrf) = csrf {
            request = request.header("x-bub-csrf", csrf);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin).header("sec-fetch-site", "cross-site");
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(logout(None, None).await, 403, "no CSRF header");
    assert_eq!(logout(Some("0".repeat(64)), None).await, 403, "a wrong CSRF header");
    assert_eq!(logout(Some(csrf.clone()), Some("https://evil.example")).await, 403, "cross-site");
    assert_eq!(session(&base, &cookie).await.0, 200, "none of those logged bob out");
    assert_eq!(logout(Some(csrf), None).await, 204);
    assert_eq!(session(&base, &cookie).await.0, 401, "a logged-out cookie is refused");

    let cross_site_login = client()
        .post(format!("{base}/login"))
        .header("origin", "https://evil.example")
        .form(&[("token", BOB)])
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site_login.status(), 403);
}

#[tokio::test]
async fn scripts_use_bearer_tokens_and_guessing_is_stopped_per_address() {
    let home = tempfile::tempdir().unwrap();
    let env = [("BUB_ADMIN_TOKEN".to_string(), "carol carol-00112233445566778899".to_string())];
    std::fs::write(home.path().join("admin.tokens"), format!("alice {ALICE}\n")).unwrap();
    let text = config("[admin]\ntoken_file = \"admin.tokens\"\n");
    let gateway = GatewayProcess::start_with_config(home.path(), &env, &text).await;
    let base = format!("{}/admin", gateway.base_url());
    let bearer = |token: &str| client().get(format!("{base}/api/session")).bearer_auth(token).send();

    let me: serde_json::Value = bearer("carol-00112233445566778899").await.unwrap().json().await.unwrap();
    assert_eq!(me["admin"], "carol", "BUB_ADMIN_TOKEN's admin");
    assert_eq!(me["via"], "bearer");
    assert!(me.get("csrf").is_none());

    for _ in 0..5 {
        assert_eq!(bearer("not-a-token-of-anyone").await.unwrap().status(), 401);
    }
    let limited = bearer(ALICE).await.unwrap();
    assert_eq!(limited.status(), 429, "after 5 failures even a right token waits");
    let wait: u64 = limited.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let body: serde_json::Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["kind"], "too_many_attempts");
    assert_eq!(login(&base, ALICE).await.status(), 429, "the login form too");
}

#[tokio::test]
async fn behind_a_proxy_the_console_lives_under_its_base_path() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "base_path = \"/tools/bub\"\n").await;
    let prefixed = format!("{}/tools/bub/admin", gateway.base_url());
    let page = client().get(format!("{prefixed}/")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("<base href=\"/tools/bub/admin/\">"), "{page}");
    let right = login(&prefixed, ALICE).await;
    assert_eq!(right.headers()["location"], "/tools/bub/admin/");
    let (cookie, header) = session_cookie(&right);
    assert!(header.contains("Path=/tools/bub/admin;"), "{header}");
    // A proxy that strips the prefix reaches the same console at /admin.
    let (status, me) = session(&format!("{}/admin", gateway.base_url()), &cookie).await;
    assert_eq!((status, me["base"].as_str()), (200, Some("/tools/bub/admin")));
    let document: serde_json::Value =
        client().get(format!("{prefixed}/api/openapi.json")).send().await.unwrap().json().await.unwrap();
    assert_eq!(document["servers"][0]["url"], "/tools/bub/admin/api");
    assert_eq!(document["openapi"], "3.1.0");
}

/// `POST` `body` to `api/{path}` with alice's bearer token: status and JSON.
async fn post(base: &str, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let response = client().post(format!("{base}/api/{path}")).bearer_auth(ALICE).json(&body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or_default())
}

#[tokio::test]
async fn explain_answers_for_any_chat_as_the_chat_command_would() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());
    let ask = |kind: &str, tool: &str| serde_json::json!({"channel": "hooks", "chat": "room-1", "kind": kind, "tool": tool, "user": "hooks:dana"});
    let (status, direct) = post(&base, "explain", ask("direct", "bash")).await;
    assert_eq!(status, 200, "{direct}");
    assert_eq!(direct["tool"], "bash");
    assert_eq!(direct["model_call"]["allowed"], true);
    assert_eq!(direct["command"]["allowed"], false, "no operators named: {direct}");
    let (_, group) = post(&base, "explain", ask("group", "bash")).await;
    assert_eq!(group["model_call"]["allowed"], false, "rule 4 keeps the shell out of groups: {group}");
    assert!(group["text"].as_str().unwrap().contains("bash (exec) for hooks:dana in this group chat (hooks/room-1)"));
    let (status, unknown) = post(&base, "explain", ask("direct", "bsh")).await;
    assert_eq!(status, 422);
    assert!(unknown["error"]["message"].as_str().unwrap().contains("did you mean bash"), "{unknown}");
    let (status, _) = post(&base, "explain", serde_json::json!({"channel": "hooks"})).await;
    assert_eq!(status, 400, "a body missing fields does not fit the document");
    let raw = client().post(format!("{base}/api/explain")).bearer_auth(ALICE).body("{").send().await.unwrap();
    assert_eq!(raw.status(), 415, "not sent as JSON");
}

#[tokio::test]
async fn pairing_codes_that_do_not_exist_are_not_found_and_refusing_nothing_removes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());
    let listed: serde_json::Value =
        client().get(format!("{base}/api/pairing")).bearer_auth(BOB).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["requests"], serde_json::json!([]));
    let (status, body) =
        post(&base, "pairing/approve", serde_json::json!({"channel": "hooks", "code": "ABCD-EFGH"})).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("no pending pairing code ABCD-EFGH"), "{body}");
    let (status, body) = post(&base, "pairing/refuse", serde_json::json!({"channel": "hooks", "id": "42"})).await;
    assert_eq!((status, body["removed"].as_u64()), (200, Some(0)));
    let (status, _) = post(&base, "pairing/refuse", serde_json::json!({"channel": "nope", "id": "42"})).await;
    assert_eq!(status, 422);
}

async fn get(base: &str, path: &str) -> (u16, serde_json::Value) {
    get_with(base, path, &[]).await
}

/// `GET api/{path}?{query}` with alice's bearer token: status and JSON.
async fn get_with(base: &str, path: &str, query: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let response = client().get(format!("{base}/api/{path}")).query(query).bearer_auth(ALICE).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or_default())
}

/// The console's config with `[channels.hooks.policy]` set to `policy`.
fn with_policy(policy: &str) -> String {
    config(&format!("[admin]\ntoken_file = \"admin.tokens\"\n[channels.hooks.policy]\n{policy}"))
}

#[tokio::test]
async fn the_editor_checks_at_the_line_previews_who_gains_and_applies_with_an_audit_row() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "[channels.hooks.policy]\ndenied_tools = [\"bash\"]\n").await;
    let base = format!("{}/admin", gateway.base_url());
    let (status, file) = get(&base, "config").await;
    assert_eq!(status, 200, "{file}");
    assert!(file["problem"].is_null());
    assert_eq!(file["version"], file["running"]);
    let version = file["version"].as_str().unwrap().to_string();

    let broken = with_policy("denied_tools = [\"bash\"]\nbusy = \"sometimes\"\n");
    let (status, checked) = post(&base, "config/check", serde_json::json!({"text": broken})).await;
    assert_eq!(status, 200);
    assert_eq!(checked["ok"], false);
    assert_eq!(
        (checked["problems"][0]["line"].as_u64(), checked["problems"][0]["column"].as_u64()),
        (Some(8), Some(8))
    );
    assert!(checked["problems"][0]["message"].as_str().unwrap().contains("sometimes"), "{checked}");

    let wider = with_policy("allowed_tools = [\"*\", \"bash\"]\n");
    let (status, preview) = post(&base, "config/preview", serde_json::json!({"text": wider})).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["widens"], true);
    assert!(preview["diff"].as_str().unwrap().contains("-denied_tools = [\"bash\"]"), "{preview}");
    let gains = preview["changes"][0]["gains"].to_string();
    assert!(gains.contains("`bash` (exec) as a model call in direct and group chats"), "{preview}");

    let (status, invalid) = post(&base, "config/apply", serde_json::json!({"text": broken, "version": version})).await;
    assert_eq!(status, 422, "{invalid}");
    assert_eq!(invalid["error"]["detail"]["problems"][0]["line"], 8);
    let (status, applied) = post(&base, "config/apply", serde_json::json!({"text": wider, "version": version})).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["applied"], true);
    assert_eq!(std::fs::read_to_string(home.path().join("bub.toml")).unwrap(), wider);
    let ask = serde_json::json!({"channel": "hooks", "chat": "g", "kind": "group", "tool": "bash", "user": "hooks:x"});
    assert_eq!(post(&base, "explain", ask).await.1["model_call"]["allowed"], true, "the new policy is in force");

    let (status, stale) = post(&base, "config/apply", serde_json::json!({"text": broken, "version": version})).await;
    assert_eq!(status, 409, "an edit of the old version: {stale}");
    assert_eq!(stale["error"]["detail"]["text"], wider.as_str(), "the conflict carries what the file holds now");

    let (_, audit) = get(&base, "audit").await;
    let row = &audit["entries"][0];
    assert_eq!(
        (row["admin"].as_str(), row["action"].as_str(), row["outcome"].as_str()),
        (Some("alice"), Some("config.apply"), Some("applied"))
    );
    assert!(row["diff"].as_str().unwrap().contains("+allowed_tools = [\"*\", \"bash\"]"), "{row}");
    assert_eq!(audit["entries"].as_array().unwrap().len(), 1, "refused edits are not applied changes");

    let (_, channels) = get(&base, "channels").await;
    assert_eq!(
        (channels["channels"][0]["name"].as_str(), channels["channels"][0]["kind"].as_str()),
        (Some("hooks"), Some("webhook"))
    );
    let policy = channels["channels"][0]["policy"].as_str().unwrap();
    assert!(policy.contains("channels.hooks.policy"), "each value with its layer: {policy}");
}

#[tokio::test]
async fn a_config_broken_on_disk_is_shown_with_its_error_and_repaired_from_the_console() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());
    let path = home.path().join("bub.toml");
    let good = std::fs::read_to_string(&path).unwrap();
    let broken = format!("{good}[channels.hooks.policy\n");
    std::fs::write(&path, &broken).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let file = loop {
        let (_, file) = get(&base, "config").await;
        if !file["problem"].is_null() || std::time::Instant::now() > deadline {
            break file;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(file["text"], broken.as_str(), "the editor holds the file as it is on disk");
    assert_eq!(file["problem"]["line"], 6, "{file}");
    assert_ne!(file["version"], file["running"], "the old config still runs");
    let repaired = format!("{good}[channels.hooks.policy]\nbusy = \"drop\"\n");
    let body = serde_json::json!({"text": repaired, "version": file["version"]});
    let (status, applied) = post(&base, "config/apply", body).await;
    assert_eq!(status, 200, "{applied}");
    let (_, file) = get(&base, "config").await;
    assert!(file["problem"].is_null());
    assert_eq!(file["version"], file["running"]);
}

#[tokio::test]
async fn chats_tapes_and_live_rates_are_read_from_the_gateway() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());
    for (n, text) in [",help", ",tape.info"].into_iter().enumerate() {
        let body = serde_json::json!({"message_id": format!("m{n}"), "chat_id": "c1", "sender_id": "u1", "text": text});
        let http = client();
        let reply = crate::support::gateway::signed_request(&http, gateway.addr, "hooks", "sync", &body, "s3cret");
        assert_eq!(reply.await.unwrap().status(), 200);
    }
    let (status, chats) = get(&base, "chats").await;
    assert_eq!(status, 200, "{chats}");
    let chat = &chats["chats"][0];
    assert_eq!(
        (chat["channel"].as_str(), chat["chat_id"].as_str(), chat["state"].as_str()),
        (Some("hooks"), Some("c1"), Some("idle"))
    );
    assert_eq!(chat["messages"], 2);
    let tape = chat["tape"].as_str().unwrap().to_string();

    let page = get_with(&base, "tape", &[("name", tape.as_str()), ("limit", "2")]).await.1;
    let total = page["total"].as_u64().unwrap();
    assert!(total >= 4, "two commands and their results: {page}");
    assert_eq!((page["last_id"].as_u64(), page["entries"].as_array().unwrap().len()), (Some(total), 2));
    assert_eq!(page["has_older"], true);
    let older = get_with(
        &base,
        "tape",
        &[("name", tape.as_str()), ("before", &page["first_id"].to_string()), ("limit", "500")],
    )
    .await
    .1;
    assert_eq!((older["first_id"].as_u64(), older["has_older"].as_bool()), (Some(1), Some(false)));
    let found = get_with(&base, "tape/search", &[("name", tape.as_str()), ("q", "tape.info")]).await.1;
    assert!(!found["hits"].as_array().unwrap().is_empty(), "{found}");
    let export = client()
        .get(format!("{base}/api/tape/export"))
        .query(&[("name", tape.as_str())])
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(export.headers()["content-type"], "application/jsonl");
    let lines = export.text().await.unwrap();
    assert_eq!(lines.lines().count() as u64, total);
    for line in lines.lines() {
        let entry: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(entry["id"].as_u64().is_some(), "{line}");
    }
    assert_eq!(get_with(&base, "tape", &[("name", "hooks:c1"), ("limit", "0")]).await.0, 400);

    let live =
        client().get(format!("{base}/api/live")).query(&[("samples", "2")]).bearer_auth(ALICE).send().await.unwrap();
    assert_eq!(live.headers()["content-type"], "text/event-stream");
    let events = live.text().await.unwrap();
    assert_eq!(events.matches("event: sample").count(), 2, "{events}");
    let data = events.lines().find_map(|line| line.strip_prefix("data: ")).unwrap();
    let sample: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(sample["replica"], "single");
    assert!(sample["turns_per_s"].as_f64().is_some(), "{sample}");
}

#[tokio::test]
async fn a_reload_rotates_tokens_ending_their_sessions_and_can_turn_the_console_off() {
    let home = tempfile::tempdir().unwrap();
    let gateway = console(home.path(), "").await;
    let base = format!("{}/admin", gateway.base_url());
    let (cookie, _) = session_cookie(&login(&base, ALICE).await);
    assert_eq!(session(&base, &cookie).await.0, 200);
    let rotated = "alice-rotated-0123456789";
    std::fs::write(home.path().join("admin.tokens"), format!("alice {rotated}\nbob {BOB}\n")).unwrap();
    let hangup = std::process::Command::new("kill").args(["-HUP", &gateway.pid().to_string()]).status().unwrap();
    assert!(hangup.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while session(&base, &cookie).await.0 != 401 {
        assert!(std::time::Instant::now() < deadline, "the old token's session outlived the rotation");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(login(&base, rotated).await.status(), 303, "the new token logs in");
    assert_eq!(login(&base, ALICE).await.status(), 401, "the old one does not");

    std::fs::write(home.path().join("bub.toml"), config("")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let status = client().get(format!("{base}/api/session")).bearer_auth(BOB).send().await.unwrap().status();
        if status == 404 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the console stayed on after [admin] was removed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(client().get(format!("{base}/")).send().await.unwrap().status(), 404);
}
