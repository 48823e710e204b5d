//! The admin API against its own OpenAPI document, on the real binary:
//! `schemathesis` (PyPI, pinned by `tests/admin-api/requirements.txt`, in a
//! venv of its own: [`crate::support::venv`]) reads `openapi.json` and sends
//! what the document allows and what it does not, with every check but one
//! (below), a fixed seed and a bounded number of examples, and fails on an
//! answer the document does not describe (a status, a content type, a body
//! that does not fit its schema), a 5xx, a request that fits the document
//! refused as malformed (400) or one that does not fit it accepted. Its
//! settings are in `tests/admin-api/schemathesis.toml`. The gateway has
//! something to list (a chat with a turn, a stranger's pairing code), and
//! the document's links (`GET /pairing` to approve and refuse its first
//! row) let the stateful phase chain calls.
//!
//! `ignored_auth` (a request without the token or with a wrong one must be
//! refused) is left out of the run with the token: each of its wrong tokens
//! counts as a failed attempt, and after five from one address every request
//! would get 429 for a minute, so the rest of the run would test nothing.
//! A second run without any token checks the same thing for every operation:
//! each answers 401.

use crate::support::fake_model::FakeModel;
use crate::support::gateway::{GatewayProcess, client, signed_request};
use crate::support::venv;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

const TOKEN: &str = "alice-0123456789abcdef";
const SECRET: &str = "s3cret";

/// A webhook channel where `hooks:alice` is answered and strangers get a
/// pairing code, and the console with alice's token.
const CONFIG: &str = r#"
[channels.hooks]
kind = "webhook"
secrets = ["s3cret"]

[channels.hooks.policy]
allow_users = ["hooks:alice"]
dm_policy = "pairing"

[admin]
token_file = "admin.tokens"
"#;

/// A console with something to list: a chat with a turn on its tape, and a
/// stranger's pending pairing code.
async fn console_with_data(home: &Path, fake: &FakeModel) -> GatewayProcess {
    std::fs::write(home.join("admin.tokens"), format!("alice {TOKEN}\n")).unwrap();
    let gateway = GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), CONFIG).await;
    for (id, sender) in [("m1", "alice"), ("m2", "mallory")] {
        let body = json!({"message_id": id, "chat_id": format!("dm-{sender}"), "sender_id": sender, "text": "hello"});
        let response = signed_request(&client(), gateway.addr, "hooks", "sync", &body, SECRET).await.unwrap();
        assert!(response.status().is_success(), "{sender}'s message: {}", response.status());
    }
    gateway
}

/// What the document lists: each operation's method, path and whether it
/// needs no token.
struct Operation {
    method: String,
    path: String,
    public: bool,
}

impl Operation {
    /// Whether `path` (under the API) is this operation's, `{parameter}`
    /// standing for one segment.
    fn matches(&self, method: &str, path: &str) -> bool {
        let (mut template, mut given) = (self.path.split('/'), path.split('/'));
        self.method.eq_ignore_ascii_case(method)
            && loop {
                match (template.next(), given.next()) {
                    (None, None) => break true,
                    (Some(part), Some(segment))
                        if part == segment || (part.starts_with('{') && !segment.is_empty()) => {}
                    _ => break false,
                }
            }
    }
}

fn operations(document: &Value) -> Vec<Operation> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            let public = operation["security"].as_array().is_some_and(Vec::is_empty);
            operations.push(Operation { method: method.clone(), path: path.clone(), public });
        }
    }
    operations
}

/// One request schemathesis sent and the status it got.
#[derive(Debug)]
struct Exchange {
    method: String,
    /// Under the API (`/session`), without the query.
    path: String,
    status: u16,
}

/// What a run printed, whether it passed, and every request it sent (its HAR
/// report).
struct Run {
    passed: bool,
    output: String,
    exchanges: Vec<Exchange>,
}

/// `schemathesis run` on the document at `api/openapi.json`, with `token`
/// as `Authorization: Bearer` when given, and `args`.
fn schemathesis(api: &str, token: Option<&str>, args: &[&str], reports: &Path) -> Run {
    let venv = venv::install("schemathesis", "tests/admin-api/requirements.txt")
        .unwrap_or_else(|reason| panic!("schemathesis: {reason}"));
    let settings = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/admin-api/schemathesis.toml");
    let har = reports.join(format!("{}.har", if token.is_some() { "token" } else { "no-token" }));
    let mut command = Command::new(venv.join("bin/schemathesis"));
    command
        .arg("--config-file")
        .arg(&settings)
        .args(["run", &format!("{api}/openapi.json"), "--seed", "33", "--workers", "1", "--no-color"])
        .args(["--report", "har", "--report-har-path"])
        .arg(&har)
        .args(args)
        // Its example database and reports stay in the test's directory.
        .current_dir(reports);
    if let Some(token) = token {
        command.args(["--header", &format!("Authorization: Bearer {token}")]);
    }
    let output = command.output().expect("run schemathesis");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let exchanges = std::fs::read(&har).ok().map(|bytes| exchanges(&bytes, api)).unwrap_or_default();
    Run { passed: output.status.success(), output: text, exchanges }
}

fn exchanges(har: &[u8], api: &str) -> Vec<Exchange> {
    let har: Value = serde_json::from_slice(har).expect("schemathesis's HAR report is JSON");
    let entries = har["log"]["entries"].as_array().cloned().unwrap_or_default();
    entries
        .iter()
        .filter_map(|entry| {
            let url = entry["request"]["url"].as_str()?;
            let path = url.strip_prefix(api)?.split('?').next()?.to_string();
            let method = entry["request"]["method"].as_str()?.to_string();
            let status = u16::try_from(entry["response"]["status"].as_u64()?).ok()?;
            Some(Exchange { method, path, status })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_answers_as_its_openapi_document_says() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("hello, alice").await;
    let gateway = console_with_data(home.path(), &fake).await;
    let api = format!("{}/admin/api", gateway.base_url());
    let document: Value = client().get(format!("{api}/openapi.json")).send().await.unwrap().json().await.unwrap();
    let operations = operations(&document);
    let pairing: Value =
        client().get(format!("{api}/pairing")).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!(pairing["requests"][0]["state"], "pending", "mallory's code is listed: {pairing}");
    let reports = home.path().to_path_buf();

    let (url, dir) = (api.clone(), reports.clone());
    let with_token = tokio::task::spawn_blocking(move || {
        let args = ["--checks", "all", "--exclude-checks", "ignored_auth", "--max-examples", "25"];
        schemathesis(&url, Some(TOKEN), &args, &dir)
    })
    .await
    .unwrap();
    assert!(with_token.passed, "schemathesis found answers the document does not describe:\n{}", with_token.output);
    // Each operation succeeded at least once, so its answer was checked
    // against its schema, not only its errors: `pairing/approve` through the
    // stateful phase (`GET /pairing` links to it with mallory's code).
    for operation in operations.iter().filter(|operation| !operation.public) {
        let statuses: Vec<u16> = with_token
            .exchanges
            .iter()
            .filter(|exchange| operation.matches(&exchange.method, &exchange.path))
            .map(|exchange| exchange.status)
            .collect();
        assert!(
            statuses.iter().any(|status| (200..300).contains(status)),
            "{} {} never succeeded, so its answers were never checked: {statuses:?}\n{}",
            operation.method,
            operation.path,
            with_token.output
        );
    }

    let (url, dir) = (api.clone(), reports.clone());
    let without_token = tokio::task::spawn_blocking(move || {
        // The same checks; no warning fails this run, as "every request was
        // refused for want of a token" is what it is for.
        let args = [
            "--checks",
            "all",
            "--max-examples",
            "5",
            "--warnings",
            "off",
            "--generation-with-security-parameters",
            "false",
        ];
        schemathesis(&url, None, &args, &dir)
    })
    .await
    .unwrap();
    assert!(without_token.passed, "without a token:\n{}", without_token.output);
    let mut refused = 0;
    for exchange in &without_token.exchanges {
        let operation = operations.iter().find(|operation| operation.matches(&exchange.method, &exchange.path));
        match operation {
            Some(operation) if operation.public => {}
            Some(_) => {
                assert_eq!(exchange.status, 401, "without a token: {exchange:?}\n{}", without_token.output);
                refused += 1;
            }
            // A method the path does not have: 405 before any token is looked at.
            None => assert_eq!(exchange.status, 405, "without a token: {exchange:?}\n{}", without_token.output),
        }
    }
    assert!(refused > 0, "no request without a token reached an operation:\n{}", without_token.output);

    // A method a path does not take: JSON like every answer, and `Allow`.
    let wrong_method = client().delete(format!("{api}/session")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(wrong_method.status(), 405);
    assert_eq!(wrong_method.headers()["allow"], "GET,HEAD");
    let body: Value = wrong_method.json().await.unwrap();
    assert_eq!(body["error"]["kind"], "method_not_allowed", "{body}");
    gateway.stop().await;
}
