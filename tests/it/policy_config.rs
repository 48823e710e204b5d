//! The gateway config as an admin meets it: errors with `file:line:col`, the
//! example file, `bub policy check` on the real binary, and the policy
//! enforced on a real agent (model calls, comma commands, the shell fallback,
//! code mode) plus `,policy explain`.

use crate::support;

use bub::agent::{Agent, RunOptions, StreamEvent, TurnState};
use bub::config::{ChannelKind, GatewayConfig};
use bub::db::SqliteTapeStore;
use bub::home::BubHome;
use bub::policy::{self, SessionPolicy};
use bub::setup::Setup;
use bub::tools::{Capabilities, Capability};
use bub_channel::ChatKind;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use support::{fake_bash, scripted_agent};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/bub.example.toml");

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Loads `text` from a file and returns the error as printed.
fn load_error(text: &str) -> (String, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bub.toml", text);
    let error = GatewayConfig::load(&path).unwrap_err().to_string();
    (error, path, dir)
}

/// The tools the binary's agent has, plus the gateway's `policy` command.
async fn binary_tools() -> Vec<String> {
    let home = tempfile::tempdir().unwrap();
    let bub_home = BubHome::at(home.path());
    let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
    let setup = Setup::build(&bub_home, home.path().to_path_buf(), store, Vec::new()).unwrap();
    let mut names: Vec<String> = setup.agent.tools().iter().map(|t| t.name().to_string()).collect();
    names.push(policy::policy_tool().name().to_string());
    names.push(bub::gateway::pairing::command::NAME.to_string());
    setup.shutdown().await;
    names
}

const HOOKS: &str = "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n";

#[test]
fn an_unknown_key_names_file_line_and_column_and_suggests_the_key() {
    let text = format!("{HOOKS}\n[channels.hooks.policy]\nbusy = \"queue\"\ndenied_tool = [\"bash\"]\n");
    let (error, path, _dir) = load_error(&text);
    assert_eq!(error, format!("{}:7:1: unknown key `denied_tool`; did you mean `denied_tools`?", path.display()));
}

#[tokio::test]
async fn an_unknown_tool_pattern_is_an_error_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{HOOKS}[policy.defaults]\nallowed_tools = [\"tape.*\",\n  \"fs.reed\"]\n");
    let path = write(dir.path(), "policies.toml", &text);
    let error = GatewayConfig::load_checked(&path, &binary_tools().await).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("{}:6:3: unknown tool pattern `fs.reed`; did you mean `fs.read`?", path.display())
    );
}

#[test]
fn a_bad_enum_value_lists_the_allowed_values() {
    let (error, path, _dir) = load_error(&format!("{HOOKS}[policy.defaults]\nsession_scope = \"room\"\n"));
    assert_eq!(error, format!("{}:5:17: unknown value `room`; expected one of thread, chat, sender", path.display()));
}

#[test]
fn a_webhook_channel_without_secrets_is_refused() {
    let (error, path, _dir) = load_error("[channels.hooks]\nkind = \"webhook\"\ncallback_url = \"http://x\"\n");
    assert_eq!(error, format!("{}:2:8: a webhook channel needs `secrets` (or `secrets_file`)", path.display()));
    let (error, path, _dir) = load_error("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"\"]\n");
    assert_eq!(error, format!("{}:3:11: `secrets` needs at least one non-empty secret", path.display()));
}

// The example names every kind: a build without one refuses it
// (`bub_policy_check_names_a_kind_this_build_lacks`).
#[tokio::test]
#[cfg(all(feature = "telegram", feature = "discord"))]
async fn the_example_file_loads_and_names_only_real_tools() {
    let config = GatewayConfig::load_checked(EXAMPLE, &binary_tools().await).unwrap();
    assert_eq!(config.channels.keys().collect::<Vec<_>>(), ["hooks", "tg", "discord"]);
    let room = config.effective("hooks", "room-1");
    let exec = Capabilities::of([Capability::Exec]);
    assert!(room.tool_verdict("bash", exec, Some("hooks:alice"), true, true).allowed);
    assert!(!room.tool_verdict("web.fetch", Capabilities::of([Capability::Network]), None, false, false).allowed);
}

/// Webhook senders hold the secret, so direct messages are open; but nobody
/// is an operator until named, so the shell is never a command by default.
#[test]
fn the_default_webhook_config_has_one_open_channel_and_no_operators() {
    let config = GatewayConfig::default_webhook("s".into());
    assert_eq!(config.http.listen.to_string(), "127.0.0.1:8080");
    let ChannelKind::Webhook(hook) = &config.channels["webhook"].kind else { panic!("a webhook channel") };
    assert_eq!(hook.callback_url, None);
    let policy = config.effective("webhook", "any");
    let exec = Capabilities::of([Capability::Exec]);
    assert!(policy.tool_verdict("bash", exec, Some("webhook:x"), false, false).allowed, "the model has bash");
    assert!(!policy.tool_verdict("bash", exec, Some("webhook:x"), false, true).allowed, "no shell command");
    assert!(!policy.tool_verdict("bash", exec, Some("webhook:x"), true, false).allowed, "no shell in groups");
    assert_eq!(policy.admission("webhook:x", ChatKind::Direct, "any"), policy::Admission::Admitted);
}

fn bub_policy_check(home: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_bub"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("BUB_HOME", home)
        .current_dir(home)
        .args(["policy", "check"])
        .args(args)
        .output()
        .expect("run bub");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

/// The shortest bot config is safe and checks clean; every line that opens
/// it wider is named, with its position, and still passes (an admin may mean it).
#[test]
#[cfg(feature = "telegram")]
fn bub_policy_check_warns_where_a_file_opens_access_wider_than_the_defaults() {
    let home = tempfile::tempdir().unwrap();
    let shortest = write(home.path(), "short.toml", "[channels.tg]\nkind = \"telegram\"\ntoken = \"1:x\"\n");
    let (ok, stdout, stderr) = bub_policy_check(home.path(), &[shortest.to_str().unwrap()]);
    assert!(ok && stderr.is_empty(), "{stderr}");
    assert_eq!(stdout, format!("{}: ok (1 channel)\n", shortest.display()));

    let open = "[channels.tg]\nkind = \"telegram\"\ntoken = \"1:x\"\n[channels.tg.policy]\n\
                operators = [\"tg:*\"]\ndm_policy = \"open\"\nallow_users = [\"*\"]\nenvironment = \"local\"\n";
    let open = write(home.path(), "open.toml", open);
    let (ok, stdout, stderr) = bub_policy_check(home.path(), &[open.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let path = open.display();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    assert!(lines[0].starts_with(&format!("{path}:5:14: warning: operators: `tg:*` makes everyone on tg an operator")));
    assert!(lines[1].starts_with(&format!("{path}:7:16: warning: allow_users: `*` lets everyone")), "{stderr}");
    assert!(lines[2].starts_with(&format!("{path}:6:13: warning: dm_policy = \"open\"")), "{stderr}");
    assert!(lines[2].contains("and use bash"), "{stderr}");
    assert!(lines[3].starts_with(&format!("{path}:8:15: warning: environment = \"local\"")), "{stderr}");
    assert_eq!(stdout, format!("{path}: ok (1 channel, 4 warnings above: access opened wider than the defaults)\n"));
}

#[test]
fn bub_policy_check_accepts_a_good_file_and_points_at_the_problem_in_a_bad_one() {
    let home = tempfile::tempdir().unwrap();
    if cfg!(all(feature = "telegram", feature = "discord")) {
        // The example names every kind.
        let (ok, stdout, stderr) = bub_policy_check(home.path(), &[EXAMPLE]);
        assert!(ok, "{stderr}");
        assert_eq!(stdout, format!("{EXAMPLE}: ok (3 channels)\n"));
    }

    let bad = write(home.path(), "bad.toml", &format!("{HOOKS}[policy.defaults]\ndenied_tools = [\"fs.reed\"]\n"));
    let (ok, stdout, stderr) = bub_policy_check(home.path(), &[bad.to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(stdout, "");
    assert_eq!(
        stderr,
        format!("error: {}:5:17: unknown tool pattern `fs.reed`; did you mean `fs.read`?\n", bad.display())
    );

    // An empty file, or one without channels, is not a gateway config.
    for (name, text) in [("empty.toml", ""), ("no-channels.toml", "[policy.defaults]\nbusy = \"drop\"\n")] {
        let file = write(home.path(), name, text);
        let (ok, stdout, stderr) = bub_policy_check(home.path(), &[file.to_str().unwrap()]);
        assert!(!ok && stdout.is_empty(), "{name}: {stdout}");
        assert!(stderr.starts_with(&format!("error: {}: no channels: ", file.display())), "{stderr}");
        assert!(stderr.contains("add one (see config/bub.example.toml)"), "a hint: {stderr}");
    }

    // Without FILE: $BUB_HOME/bub.toml, and the gateway's own `policy` command is a known tool.
    write(home.path(), "bub.toml", &format!("{HOOKS}[policy.defaults]\ndenied_tools = [\"policy\"]\n"));
    let (ok, stdout, stderr) = bub_policy_check(home.path(), &[]);
    assert!(ok, "{stderr}");
    assert_eq!(stdout, format!("{}: ok (1 channel)\n", home.path().join("bub.toml").display()));
}

/// A webhook-only build (`--no-default-features`) refuses a chat platform
/// where the file names it, and says how to get it: at `bub policy check`
/// and at the gateway's start alike.
#[test]
#[cfg(not(feature = "telegram"))]
fn bub_policy_check_names_a_kind_this_build_lacks() {
    let home = tempfile::tempdir().unwrap();
    let text = format!("{HOOKS}[channels.tg]\nkind = \"telegram\"\ntoken = \"1:x\"\n");
    let file = write(home.path(), "tg.toml", &text);
    let (ok, stdout, stderr) = bub_policy_check(home.path(), &[file.to_str().unwrap()]);
    assert!(!ok && stdout.is_empty(), "{stdout}");
    let refusal = "channel `tg`: kind `telegram` is not built into this bub (rebuild with --features telegram)";
    assert_eq!(stderr, format!("error: {}:5:8: {refusal}\n", file.display()));
    let stderr = support::gateway::refused_start(home.path(), &text);
    assert!(stderr.contains(&format!("bub.toml:5:8: {refusal}")), "{stderr}");
}

// ---- enforcement on a real agent ----

const GATEWAY: &str = r#"
[channels.hooks]
kind = "webhook"
secrets = ["s3cret"]

[channels.hooks.policy]
operators = ["hooks:alice"]
"#;

struct Fixture {
    agent: Agent,
    model: Arc<support::scripted_model::ScriptedModel>,
    shell: Arc<Mutex<Vec<String>>>,
    config: GatewayConfig,
    _store: support::TestStore,
}

async fn fixture() -> Fixture {
    let shell = Arc::new(Mutex::new(Vec::new()));
    let (agent, model, store) = scripted_agent(vec![fake_bash(shell.clone()), policy::policy_tool()]).await;
    policy::enforce(&agent);
    let config = GatewayConfig::parse(GATEWAY, "bub.toml").unwrap();
    Fixture { agent, model, shell, config, _store: store }
}

impl Fixture {
    fn options(&self, user: &str, kind: ChatKind) -> RunOptions {
        let state = TurnState::new();
        state.insert_extension(SessionPolicy::for_chat(&self.config, "hooks", "room-1", user, kind));
        RunOptions::new("hooks:room-1").state(state)
    }

    async fn say(&self, text: &str, user: &str, kind: ChatKind) -> bub::agent::RunOutcome {
        self.agent.run(text, self.options(user, kind)).collect().await
    }

    fn shell_ran(&self) -> Vec<String> {
        self.shell.lock().clone()
    }
}

const GROUP_DENIAL: &str = "bash is denied in group chats here: it can exec and no policy allows it by name \
                            (add \"bash\" to channels.hooks.chats.\"room-1\".policy.allowed_tools)";

#[tokio::test]
async fn a_model_call_to_bash_is_denied_in_a_group_and_the_model_reads_why() {
    let f = fixture().await;
    f.model.tool_calls(&[("bash", json!({"cmd": "ls"}))]);
    f.model.text("ok");
    let outcome = f.say("list files", "hooks:alice", ChatKind::Group).await;
    assert_eq!(outcome.text, "ok");
    assert!(f.shell_ran().is_empty(), "the shell never ran");
    let result = outcome
        .events
        .iter()
        .find_map(|e| match e {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .expect("a tool result");
    assert!(result.1, "a denial is an error result");
    let error: Value = serde_json::from_str(&result.0).unwrap();
    assert_eq!(error, json!({"kind": "denied", "message": GROUP_DENIAL}));
}

#[tokio::test]
async fn a_bash_command_and_the_shell_fallback_are_denied_in_a_group_but_run_in_a_direct_chat() {
    let f = fixture().await;
    let command = f.say(",bash cmd=ls", "hooks:alice", ChatKind::Group).await;
    assert_eq!(command.text, format!("error: {GROUP_DENIAL}"));
    let fallback = f.say(",ls -la", "hooks:alice", ChatKind::Thread).await;
    assert_eq!(fallback.text, format!("error: {GROUP_DENIAL}"));
    assert!(f.shell_ran().is_empty());

    let direct = f.say(",ls -la", "hooks:alice", ChatKind::Direct).await;
    assert_eq!(direct.text, "ran: ls -la");
    assert!(f.model.requests().is_empty(), "commands never reach the model");
}

#[tokio::test]
async fn a_non_operator_is_told_why_their_command_is_refused() {
    let f = fixture().await;
    let outcome = f.say(",ls", "hooks:eve", ChatKind::Direct).await;
    assert_eq!(
        outcome.text,
        "error: hooks:eve is not an operator here: commands other than help, tape.info, tape.anchors, tape.search, \
         policy are limited to channels.hooks.policy.operators"
    );
    assert!(f.shell_ran().is_empty());
    // The same person's message still reaches the model, which may use the shell in a direct chat.
    f.model.tool_calls(&[("bash", json!({"cmd": "date"}))]);
    f.model.text("done");
    assert_eq!(f.say("what time is it?", "hooks:eve", ChatKind::Direct).await.text, "done");
    assert_eq!(f.shell_ran(), ["date"]);
}

#[tokio::test]
async fn policy_explain_says_which_rule_decides() {
    let f = fixture().await;
    let outcome = f.say(",policy explain bash", "hooks:alice", ChatKind::Group).await;
    assert_eq!(
        outcome.text,
        format!(
            "bash (exec) for hooks:alice in this group chat (hooks/room-1):\n  model call: denied — {GROUP_DENIAL}\n  \
             command: denied — {GROUP_DENIAL}"
        )
    );
    let outcome = f.say(",policy explain bash hooks:eve", "hooks:alice", ChatKind::Direct).await;
    assert_eq!(
        outcome.text,
        "bash (exec) for hooks:eve in this direct chat (hooks/room-1):\n  \
         model call: allowed — bash is allowed here by `*` in the built-in default\n  \
         model call with untrusted text in the context: denied — bash can exec and is denied while untrusted \
         text is in the context (add \"bash\" to channels.hooks.chats.\"room-1\".policy.allow_with_untrusted_context \
         to allow it)\n  \
         context now: nothing untrusted since the last anchor\n  \
         command: denied — hooks:eve is not an operator here: commands other than help, tape.info, tape.anchors, \
         tape.search, policy are limited to channels.hooks.policy.operators"
    );
    let show = f.say(",policy show", "hooks:alice", ChatKind::Group).await.text;
    assert!(show.contains("  operators = hooks:alice  (channels.hooks.policy)"), "{show}");
}

#[tokio::test]
async fn runs_without_a_session_policy_are_untouched() {
    let f = fixture().await;
    let outcome = f.agent.run(",ls -la", RunOptions::new("cli")).collect().await;
    assert_eq!(outcome.text, "ran: ls -la");
    let outcome = f.agent.run(",policy", RunOptions::new("cli")).collect().await;
    assert_eq!(outcome.text, "no gateway policy for this session (policies apply to chats the gateway serves)");
}

#[tokio::test]
async fn a_tool_called_from_code_mode_is_denied_like_any_other() {
    let fake = support::fake_model::FakeModel::start().await;
    let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let bub_home = BubHome::at(home.path());
    let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
    let setup = Setup::build(&bub_home, workspace.path().to_path_buf(), store, fake.vars("openai:gpt-test")).unwrap();
    policy::enforce(&setup.agent);
    // run_code is opened to this group by name; tape.reset is denied.
    let text = format!(
        "{GATEWAY}[channels.hooks.chats.\"room-1\".policy]\nallowed_tools = [\"*\", \"run_code\"]\ndenied_tools = [\"tape.reset\"]\n"
    );
    let config = GatewayConfig::parse(&text, "bub.toml").unwrap();
    let options = || {
        let state = TurnState::new();
        let policy = Arc::new(config.effective("hooks", "room-1"));
        state.insert_extension(SessionPolicy { policy, user: "hooks:alice".into(), chat_kind: ChatKind::Group });
        RunOptions::new("hooks:room-1").workspace(workspace.path()).state(state)
    };
    setup.agent.run(",code_mode enable=true", options()).collect().await;
    let code =
        "try:\n    await tools.tape_reset(archive=False)\nexcept Exception as error:\n    print('refused:', error)";
    fake.push(support::fake_model::Reply::tool_calls(vec![("run_code", json!({"code": code, "timeout_seconds": 60}))]))
        .push(support::fake_model::Reply::text("ok"));
    let outcome = setup.agent.run("run it", options()).collect().await;
    let output = outcome
        .events
        .iter()
        .find_map(|e| match e {
            StreamEvent::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .expect("run_code's result");
    assert_eq!(
        output.trim(),
        "refused: tape.reset is denied here by `tape.reset` in channels.hooks.chats.\"room-1\".policy.denied_tools"
    );
    setup.shutdown().await;
}
