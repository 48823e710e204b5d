//! The builtin tools, called as the runtime calls them: `Tool::call` with a
//! detached context over an in-memory tape and a temporary workspace.

use crate::support;

use bub::tape::{NewEntry, Tape, TapeName};
use bub::tools::builtin::{self, ShellManager, WebFetchSettings};
use bub::tools::{Tool, ToolContext, ToolError, ToolErrorKind, ToolRegistry};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use support::TestStore;
use tempfile::TempDir;

/// A session: a tape, a workspace and the builtin tools.
struct Session {
    store: TestStore,
    workspace: TempDir,
    shells: Arc<ShellManager>,
    tools: ToolRegistry,
    tape: Tape,
}

impl Session {
    async fn new() -> Session {
        Session::with_web(WebFetchSettings::default()).await
    }

    async fn with_web(web: WebFetchSettings) -> Session {
        let store = support::memory_store().await;
        let shells = Arc::new(ShellManager::new());
        let tools = builtin::tools(shells.clone(), web).into_iter().fold(ToolRegistry::new(), ToolRegistry::with);
        let tape = store.tape("chat");
        Session { store, workspace: tempfile::tempdir().expect("workspace"), shells, tools, tape }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.workspace.path().join(relative)
    }

    async fn call_on(&self, tape: &Tape, name: &str, args: Value) -> Result<String, ToolError> {
        let tool: &Tool = self.tools.get(name).expect("a builtin tool");
        let context = ToolContext::detached(tape.clone(), self.workspace.path());
        tool.call(args, context).await.map(|value| tool.render(&value))
    }

    async fn call(&self, name: &str, args: Value) -> Result<String, ToolError> {
        self.call_on(&self.tape, name, args).await
    }

    async fn ok(&self, name: &str, args: Value) -> String {
        self.ok_on(&self.tape, name, args).await
    }

    async fn ok_on(&self, tape: &Tape, name: &str, args: Value) -> String {
        self.call_on(tape, name, args).await.unwrap_or_else(|e| panic!("{name} failed: {e:?}"))
    }
}

/// Processes of group `pgid` that are alive (zombies excluded: PID 1 in a
/// container may never reap the orphans of a killed shell).
fn live_members(pgid: i32) -> Vec<String> {
    let pid = rustix::process::Pid::from_raw(pgid).expect("a pid");
    if rustix::process::test_kill_process_group(pid) == Err(rustix::io::Errno::SRCH) {
        return Vec::new();
    }
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            let fields: Vec<&str> = stat[stat.rfind(')').unwrap_or(0) + 1..].split_whitespace().collect();
            fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z")
        })
        .collect()
}

/// Polls `bash.output` until `done` holds (a liveness bound, not a timing assertion).
async fn output_until(s: &Session, id: &str, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..200 {
        let text = s.ok("bash.output", json!({"shell_id": id})).await;
        if done(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("bash.output never satisfied the condition");
}

#[tokio::test]
async fn bash_interleaves_stdout_and_stderr_and_marks_empty_output() {
    let s = Session::new().await;
    let out = s.ok("bash", json!({"cmd": "echo one; echo two >&2; echo three"})).await;
    assert_eq!(out, "one\ntwo\nthree\n");
    assert_eq!(s.ok("bash", json!({"cmd": "true"})).await, "(no output)");
}

#[tokio::test]
async fn bash_non_zero_exit_is_an_error_with_code_and_output() {
    let s = Session::new().await;
    let error = s.call("bash", json!({"cmd": "echo partial; exit 3"})).await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Tool);
    assert_eq!(error.message, "exit code 3");
    assert_eq!(error.details, Some(json!({"exit_code": 3, "output": "partial\n"})));
}

#[tokio::test]
async fn bash_creates_the_workspace_and_runs_in_cwd_relative_to_it() {
    let s = Session::new().await;
    std::fs::remove_dir(s.workspace.path()).unwrap();
    let pwd = s.ok("bash", json!({"cmd": "pwd"})).await;
    assert_eq!(PathBuf::from(pwd.trim()), s.workspace.path());
    std::fs::create_dir(s.path("sub")).unwrap();
    let pwd = s.ok("bash", json!({"cmd": "pwd", "cwd": "sub"})).await;
    assert_eq!(PathBuf::from(pwd.trim()), s.path("sub"));
    let missing = s.call("bash", json!({"cmd": "pwd", "cwd": "nope"})).await.unwrap_err();
    assert!(missing.message.contains("nope"), "{missing}");
}

#[tokio::test]
async fn bash_timeout_stops_every_process_of_the_command() {
    let s = Session::new().await;
    // 3 s: room for the shell to start and print its pid on a loaded machine.
    let out = s.ok("bash", json!({"cmd": "echo $$; sleep 100 & sleep 100", "timeout_seconds": 3})).await;
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("timed out after 3 seconds"));
    let pgid: i32 = lines.next().expect("the shell's pid").parse().unwrap();
    assert_eq!(live_members(pgid), Vec::<String>::new());
}

/// Waits (bounded) for a group to have no live member: after a KILL sent
/// without waiting, the processes need a moment to die.
async fn eventually_gone(pgid: i32) -> Vec<String> {
    for _ in 0..100 {
        if live_members(pgid).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    live_members(pgid)
}

#[tokio::test]
async fn foreground_leftovers_are_stopped_when_the_command_returns() {
    let s = Session::new().await;
    let out = s.ok("bash", json!({"cmd": "echo $$; sleep 100 &"})).await;
    let pgid: i32 = out.trim().parse().unwrap();
    assert_eq!(eventually_gone(pgid).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_cancelled_call_leaves_no_process_behind() {
    let s = Session::new().await;
    let pid_file = s.path("pid");
    let call = s.call("bash", json!({"cmd": "echo $$ > pid.tmp && mv pid.tmp pid; sleep 100 & sleep 100"}));
    tokio::select! {
        result = call => panic!("the command cannot finish: {result:?}"),
        () = async { while !pid_file.exists() { tokio::time::sleep(Duration::from_millis(20)).await } } => {}
    }
    let pgid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert_eq!(eventually_gone(pgid).await, Vec::<String>::new());
}

#[tokio::test]
async fn background_shell_reports_output_by_character_offsets_and_exit() {
    let s = Session::new().await;
    let started = s.ok("bash", json!({"cmd": "printf 'héllo wörld'", "background": true})).await;
    let id = started.strip_prefix("started: ").expect("started: <id>");
    assert!(id.len() == 13 && id.starts_with("bash-"), "{id}");
    assert!(id[5..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");

    let done = output_until(&s, id, |t| t.contains("status: exited")).await;
    assert_eq!(done, format!("id: {id}\nstatus: exited\nexit_code: 0\nnext_offset: 11\noutput:\nhéllo wörld"));
    let window = s.ok("bash.output", json!({"shell_id": id, "offset": 1, "limit": 4})).await;
    assert!(window.ends_with("next_offset: 5\noutput:\néllo"), "{window}");
}

#[tokio::test]
async fn bash_kill_stops_a_background_shell_and_its_children() {
    let s = Session::new().await;
    let started = s.ok("bash", json!({"cmd": "echo $$; sleep 100 & sleep 100", "background": true})).await;
    let id = started.trim_start_matches("started: ");
    let running = output_until(&s, id, |t| t.lines().count() > 5).await;
    assert!(running.contains("status: running\nexit_code: null"), "{running}");
    let pgid: i32 = running.lines().last().unwrap().parse().unwrap();

    let killed = s.ok("bash.kill", json!({"shell_id": id})).await;
    assert_eq!(killed, format!("id: {id}\nstatus: exited\nexit_code: -15"));
    assert_eq!(live_members(pgid), Vec::<String>::new());
    let after = s.ok("bash.output", json!({"shell_id": id})).await;
    assert!(after.contains("status: exited"), "{after}");
}

#[tokio::test]
async fn shells_are_private_to_their_session_and_killed_with_it() {
    let s = Session::new().await;
    let other = s.store.tape("other");
    let background = json!({"cmd": "sleep 100", "background": true});
    let first = s.ok("bash", background.clone()).await;
    s.ok("bash", background.clone()).await;
    let theirs = s.call_on(&other, "bash", background).await.unwrap();

    let id = first.trim_start_matches("started: ");
    let unknown = s.call_on(&other, "bash.output", json!({"shell_id": id})).await.unwrap_err();
    assert_eq!(unknown.kind, ToolErrorKind::InvalidInput);
    assert!(unknown.message.contains(id), "{unknown}");
    assert!(s.call("bash.kill", json!({"shell_id": "bash-00000000"})).await.is_err());

    assert_eq!(s.shells.kill_session(s.tape.name()).await, 2);
    assert!(s.shells.shell_ids(s.tape.name()).is_empty());
    let name = TapeName::new("other").unwrap();
    assert_eq!(s.shells.shell_ids(&name), vec![theirs.trim_start_matches("started: ").to_string()]);
    assert_eq!(s.shells.kill_all().await, 1);
}

/// `bub run` has no chat: the tool says so and reads nothing.
#[tokio::test]
async fn chat_send_file_outside_a_gateway_turn_says_there_is_no_chat() {
    let s = Session::new().await;
    std::fs::write(s.path("report.txt"), "data").unwrap();
    let error = s.call("chat.send_file", json!({"path": "report.txt"})).await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Tool);
    assert_eq!(error.message, builtin::chat::NO_CHAT);
}

#[tokio::test]
async fn fs_read_paginates_by_lines_and_reports_the_total() {
    let s = Session::new().await;
    let text: String = (1..=10).map(|n| format!("line{n}\n")).collect();
    std::fs::write(s.path("ten.txt"), &text).unwrap();
    assert_eq!(s.ok("fs.read", json!({"path": "ten.txt"})).await, text.trim_end());
    let page = s.ok("fs.read", json!({"path": "ten.txt", "offset": 2, "limit": 3})).await;
    assert_eq!(page, "line3\nline4\nline5\n[lines 3-5 of 10; continue with offset=5]");
    let missing = s.call("fs.read", json!({"path": "nope.txt"})).await.unwrap_err();
    assert!(missing.message.contains(&s.path("nope.txt").display().to_string()), "{missing}");
}

#[tokio::test]
async fn fs_write_creates_parent_directories_and_returns_the_path() {
    let s = Session::new().await;
    let out = s.ok("fs.write", json!({"path": "a/b/c.txt", "content": "hi 🦀"})).await;
    assert_eq!(out, format!("wrote: {}", s.path("a/b/c.txt").display()));
    assert_eq!(std::fs::read_to_string(s.path("a/b/c.txt")).unwrap(), "hi 🦀");
}

#[tokio::test]
async fn fs_edit_replaces_every_occurrence_from_start_and_fails_when_missing() {
    let s = Session::new().await;
    std::fs::write(s.path("f.txt"), "x\nx\nx x\n").unwrap();
    let out = s.ok("fs.edit", json!({"path": "f.txt", "old": "x", "new": "y", "start": 1})).await;
    assert!(out.ends_with("3 replacements"), "{out}");
    assert_eq!(std::fs::read_to_string(s.path("f.txt")).unwrap(), "x\ny\ny y\n");

    let error = s.call("fs.edit", json!({"path": "f.txt", "old": "zzz", "new": "y"})).await.unwrap_err();
    assert!(error.message.contains("f.txt") && error.message.contains("not found"), "{error}");
    assert_eq!(std::fs::read_to_string(s.path("f.txt")).unwrap(), "x\ny\ny y\n");
}

async fn seeded() -> Session {
    let s = Session::new().await;
    let tape = &s.tape;
    tape.ensure_bootstrap_anchor().await.unwrap();
    tape.append(NewEntry::chat("user", "Where is invoice 7?")).await.unwrap();
    tape.append(NewEntry::tool_call(vec![
        json!({"id": "c1", "type": "function", "function": {"name": "tape_search", "arguments": "{}"}}),
    ]))
    .await
    .unwrap();
    let old = "[tape.search] 1 matches\n{\"content\":\"invoice 7\"}";
    tape.append(NewEntry::tool_result(vec![json!(old)])).await.unwrap();
    tape.handoff("phase/1", json!({"summary": "found invoice 7"})).await.unwrap();
    tape.append(NewEntry::chat("assistant", "Invoice 7 is paid.")).await.unwrap();
    s
}

#[tokio::test]
async fn tape_info_and_anchors_describe_the_tape() {
    let s = seeded().await;
    let info = s.ok("tape.info", json!({})).await;
    assert!(info.contains("name: chat\nentries: 8\nanchors: 2\nlast_anchor: phase/1"), "{info}");
    let anchors = s.ok("tape.anchors", json!(null)).await;
    assert_eq!(anchors, "- session/start: {\"owner\":\"human\"}\n- phase/1: {\"summary\":\"found invoice 7\"}");
}

#[tokio::test]
async fn tape_search_leaves_out_earlier_search_results() {
    let s = seeded().await;
    let out = s.ok("tape.search", json!({"query": "INVOICE 7"})).await;
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("[tape.search] 2 matches (1 earlier search results left out)"));
    let hits: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(hits[0]["content"]["content"], "Invoice 7 is paid.");
    assert_eq!(hits[1]["content"]["content"], "Where is invoice 7?");
    assert_eq!((hits[1]["kind"].as_str(), hits[1]["id"].as_u64()), (Some("message"), Some(3)));

    let old = s.ok("tape.search", json!({"query": "invoice", "end": "2000-01-01"})).await;
    assert_eq!(old, "[tape.search] 0 matches");
    let anchors = s.ok("tape.search", json!({"query": "invoice", "kinds": ["anchor"]})).await;
    assert!(anchors.starts_with("[tape.search] 1 matches\n"), "{anchors}");
    let bad = s.call("tape.search", json!({"query": "x", "kinds": ["mesage"]})).await.unwrap_err();
    assert_eq!(bad.kind, ToolErrorKind::InvalidInput);
}

#[tokio::test]
async fn tape_handoff_and_reset_write_anchors_and_archives() {
    let s = seeded().await;
    let out = s.ok("tape.handoff", json!({"name": "phase/2", "summary": "paid"})).await;
    assert_eq!(out, "handoff created: phase/2");
    assert!(s.ok("tape.anchors", json!({})).await.ends_with("- phase/2: {\"summary\":\"paid\"}"));

    assert_eq!(s.ok("tape.reset", json!({})).await, "tape reset");
    let out = s.ok("tape.reset", json!({"archive": true})).await;
    let archive = out.strip_prefix("tape reset; archived to ").expect("archive path");
    assert!(std::path::Path::new(archive).starts_with(s.store.dir.path()));
    assert!(std::path::Path::new(archive).exists());
    assert!(s.ok("tape.info", json!({})).await.contains("last_anchor: session/start"));
}

#[tokio::test]
async fn spill_read_pages_a_real_spill_and_explains_bad_handles() {
    let s = Session::new().await;
    let text = "0123456789".repeat(4_000);
    let bub::tape::SpillOutcome::Spilled { handle, .. } = s.tape.spill_if_large("bash", text.clone()).await else {
        panic!("40 000 characters spill");
    };
    // Four chunks would not fit in one result under the default threshold
    // (16 384 characters): the page is one chunk, and says how to go on.
    let mut read_back = String::new();
    let mut cursor = Some(0);
    while let Some(at) = cursor {
        let page = s.ok("spill.read", json!({"handle": handle, "cursor": at, "count": 4})).await;
        assert!(!page.contains("tool result spilled"), "a page is never spilled again: {page}");
        let (header, content) = page.split_once('\n').unwrap();
        assert!(header.starts_with(&format!("[spill {handle}: chunks {at}-{at} of 3")), "{header}");
        let next = header.split("next_cursor: ").nth(1).unwrap().trim_end_matches(']');
        cursor = next.parse().ok();
        let content = match cursor {
            Some(_) => content
                .strip_suffix("\n[1 of the 4 chunks asked fit in one result; continue from next_cursor]")
                .unwrap(),
            None => content,
        };
        read_back.push_str(content);
    }
    assert_eq!(read_back, text);

    // With room for them, four chunks come at once.
    let roomy = s.tape.clone().with_settings(bub::tape::TapeSettings {
        spill: bub::tape::SpillSettings { threshold_tokens: 20_000 },
        archive_dir: s.store.dir.path().into(),
    });
    let page = s.ok_on(&roomy, "spill.read", json!({"handle": handle, "count": 4})).await;
    let (header, content) = page.split_once('\n').unwrap();
    assert!(header.starts_with(&format!("[spill {handle}: chunks 0-2 of 3")), "{header}");
    assert_eq!(content, text);

    let unknown = s.ok("spill.read", json!({"handle": "nope"})).await;
    assert!(unknown.starts_with("no spilled result has handle \"nope\""), "{unknown}");
    let bad = s.ok("spill.read", json!({"handle": handle, "count": 9})).await;
    assert_eq!(bad, "count must be between 1 and 4, got 9");
}

/// A local HTTP server: `/` markdown, `/accept` echoes the Accept header, `/big`
/// 2 MiB, `/missing` 404, `/to-localhost` and `/to-file` redirect.
async fn web_server() -> String {
    use axum::http::{HeaderMap, StatusCode, header::ACCEPT};
    use axum::{Router, response::Redirect, routing::get};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route("/", get(|| async { "# hello" }))
        .route(
            "/accept",
            get(|headers: HeaderMap| async move {
                headers.get(ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
            }),
        )
        .route("/big", get(|| async { "a".repeat(2 * 1024 * 1024) }))
        .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "nothing here") }))
        .route("/to-localhost", get(move || async move { Redirect::temporary(&format!("http://localhost:{port}/")) }))
        .route("/to-file", get(|| async { Redirect::temporary("file:///etc/passwd") }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://127.0.0.1:{port}")
}

fn private_allowed() -> WebFetchSettings {
    WebFetchSettings { allow_private: true, ..WebFetchSettings::default() }
}

#[tokio::test]
async fn web_fetch_refuses_loopback_by_default() {
    let base = web_server().await;
    let s = Session::new().await;
    let error = s.call("web.fetch", json!({"url": format!("{base}/")})).await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(error.message.contains("loopback"), "{error}");
}

#[tokio::test]
async fn web_fetch_with_private_allowed_returns_the_body_and_asks_for_markdown() {
    let base = web_server().await;
    let s = Session::with_web(private_allowed()).await;
    assert_eq!(s.ok("web.fetch", json!({"url": format!("{base}/"), "timeout": 2})).await, "# hello");
    let accept = s.ok("web.fetch", json!({"url": format!("{base}/accept")})).await;
    assert_eq!(accept, "text/markdown, text/plain;q=0.9, */*;q=0.8");

    let missing = s.call("web.fetch", json!({"url": format!("{base}/missing")})).await.unwrap_err();
    assert!(missing.message.starts_with("HTTP 404"), "{missing}");
    let details = missing.details.unwrap();
    assert_eq!((details["status"].as_u64(), details["body"].as_str()), (Some(404), Some("nothing here")));
    let slow = s.call("web.fetch", json!({"url": format!("{base}/"), "timeout": 600})).await.unwrap_err();
    assert_eq!(slow.kind, ToolErrorKind::InvalidInput);
}

#[tokio::test]
async fn web_fetch_cuts_bodies_at_the_size_cap() {
    let base = web_server().await;
    let s = Session::with_web(WebFetchSettings { max_bytes: 1024, ..private_allowed() }).await;
    let body = s.ok("web.fetch", json!({"url": format!("{base}/big")})).await;
    let (kept, note) = body.split_once('\n').unwrap();
    assert_eq!(kept, "a".repeat(1024));
    assert!(note.starts_with("[truncated: the response is larger than 1024 bytes"), "{note}");
}

#[tokio::test]
async fn web_fetch_refuses_other_schemes_even_after_a_redirect() {
    let base = web_server().await;
    let s = Session::with_web(private_allowed()).await;
    for url in ["file:///etc/passwd".to_string(), "ftp://example.com/x".to_string(), format!("{base}/to-file")] {
        let error = s.call("web.fetch", json!({"url": url})).await.unwrap_err();
        assert_eq!(error.kind, ToolErrorKind::InvalidInput, "{url}: {error}");
        assert!(error.message.contains("only http and https"), "{error}");
    }
}

#[tokio::test]
async fn web_fetch_rechecks_every_redirect_target() {
    let base = web_server().await;
    // The operator trusts 127.0.0.1 by name only; `localhost` is still checked.
    let trusted = WebFetchSettings { allowed_hosts: vec!["127.0.0.1".into()], ..WebFetchSettings::default() };
    let s = Session::with_web(trusted).await;
    assert_eq!(s.ok("web.fetch", json!({"url": format!("{base}/")})).await, "# hello");
    let error = s.call("web.fetch", json!({"url": format!("{base}/to-localhost")})).await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(error.message.contains("localhost resolves to") && error.message.contains("loopback"), "{error}");
}

/// A redirect to this host's own public address (a server on `0.0.0.0`
/// answers there) is refused like one to loopback, before any request.
#[tokio::test]
async fn web_fetch_refuses_a_redirect_to_the_hosts_own_address() {
    use axum::{Router, response::Redirect, routing::get};
    let host = support::host_address();
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = Router::new()
        .route("/", get(|| async { "# the host's own page" }))
        .route("/to-host", get(move || async move { Redirect::temporary(&format!("http://{host}:{port}/")) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let trusted = WebFetchSettings { allowed_hosts: vec!["127.0.0.1".into()], ..WebFetchSettings::default() };
    let s = Session::with_web(trusted).await;
    let error = s.call("web.fetch", json!({"url": format!("http://127.0.0.1:{port}/to-host")})).await.unwrap_err();
    assert_eq!(error.kind, ToolErrorKind::Denied, "{error}");
    assert!(error.message.contains(&format!("refused to fetch http://{host}:{port}/")), "{error}");
}
