//! `bub doctor` on the real binary, against the fakes: a healthy setup is
//! all ok (exit 0, and `--json` parses), then each check fails once, with
//! the fix it prints and exit status 1.

use crate::support::fake_model::FakeModel;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use tempfile::TempDir;

/// 64 hex characters, as `openssl rand -hex 32` prints.
const STRONG_SECRET: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

/// A home (mode 0700, as the gateway would want it), a model, and a config.
struct Setup {
    home: TempDir,
    model: FakeModel,
    /// Extra variables for every run.
    env: Vec<(String, String)>,
}

impl Setup {
    async fn new() -> Setup {
        let home = tempfile::tempdir().expect("a home");
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod the home");
        let model = FakeModel::start().await;
        let env = model.vars("openai:gpt-test");
        Setup { home, model, env }
    }

    /// Writes `<home>/bub.toml` (mode 0600) and returns its path.
    fn config(&self, text: &str) -> String {
        let path = self.home.path().join("bub.toml");
        std::fs::write(&path, text).expect("write bub.toml");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod bub.toml");
        path.to_str().expect("a UTF-8 path").to_string()
    }

    fn set(&mut self, name: &str, value: &str) {
        self.env.retain(|(key, _)| key != name);
        self.env.push((name.to_string(), value.to_string()));
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        command.env("HOME", self.home.path()).env("BUB_HOME", self.home.path()).envs(self.env.clone()).args(args);
        command
    }

    /// `bub db migrate`, which must succeed.
    async fn migrate(&self) {
        let (code, stdout, stderr) = run(self.command(env!("CARGO_BIN_EXE_bub"), &["db", "migrate"])).await;
        assert_eq!(code, 0, "bub db migrate: {stdout}{stderr}");
    }

    /// `bub doctor --json`: its exit status and findings.
    async fn doctor(&self) -> (i32, Vec<Value>) {
        self.doctor_through(env!("CARGO_BIN_EXE_bub"), &[]).await
    }

    /// `bub doctor --json` started by `program` with `args` before bub's path.
    async fn doctor_through(&self, program: &str, args: &[&str]) -> (i32, Vec<Value>) {
        let mut all: Vec<&str> = args.to_vec();
        if program != env!("CARGO_BIN_EXE_bub") {
            all.push(env!("CARGO_BIN_EXE_bub"));
        }
        all.extend(["doctor", "--json"]);
        let (code, stdout, stderr) = run(self.command(program, &all)).await;
        let findings: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("--json is one JSON document ({e}):\n{stdout}\n{stderr}"));
        (code, findings.as_array().expect("an array").clone())
    }
}

async fn run(mut command: Command) -> (i32, String, String) {
    let output = tokio::task::spawn_blocking(move || command.output().expect("run")).await.expect("join");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// The finding of `check`, which must be there once.
fn finding<'a>(findings: &'a [Value], check: &str) -> &'a Value {
    let found: Vec<&Value> = findings.iter().filter(|f| f["check"] == check).collect();
    assert_eq!(found.len(), 1, "one `{check}` finding in {findings:#?}");
    found[0]
}

/// Asserts `check` failed, its detail holds `detail` and its fix holds `fix`.
fn assert_fails(findings: &[Value], check: &str, detail: &str, fix: &str) {
    let found = finding(findings, check);
    assert_eq!(found["status"], "fail", "{found:#}");
    let text = |key: &str| found[key].as_str().unwrap_or_default().to_string();
    assert!(text("detail").contains(detail), "detail of {check}: {found:#}");
    assert!(text("fix").contains(fix), "fix of {check}: {found:#}");
}

/// A webhook channel with a strong secret, its chats in the sandbox.
fn healthy_config() -> String {
    format!(
        "[policy.defaults]\nenvironment = \"sandbox\"\n\n[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_setup_is_all_ok() {
    let setup = Setup::new().await;
    #[cfg(feature = "telegram")]
    let telegram = crate::support::fake_telegram::FakeTelegram::start().await;
    #[cfg(feature = "telegram")]
    let telegram_channel = format!(
        "[channels.tg]\nkind = \"telegram\"\ntoken = \"{}\"\napi_url = \"{}\"\n\n",
        crate::support::fake_telegram::TOKEN,
        telegram.api_url()
    );
    #[cfg(not(feature = "telegram"))]
    let telegram_channel = String::new();
    #[cfg(feature = "discord")]
    let discord = crate::support::fake_discord::FakeDiscord::start().await;
    #[cfg(feature = "discord")]
    let discord_channel = format!(
        "[channels.dc]\nkind = \"discord\"\ntoken = \"{}\"\napi_url = \"{}\"\n",
        crate::support::fake_discord::TOKEN,
        discord.proxy_url()
    );
    #[cfg(not(feature = "discord"))]
    let discord_channel = String::new();
    let config = [healthy_config(), telegram_channel, discord_channel].concat();
    setup.config(&config);
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    for found in &findings {
        assert_eq!(found["status"], "ok", "{found:#}\nall: {findings:#?}");
        assert!(found["fix"].is_null(), "{found:#}");
    }
    assert_eq!(code, 0);
    let checks: Vec<&str> = findings.iter().filter_map(|f| f["check"].as_str()).collect();
    for check in [
        "config",
        "database",
        "disk",
        "channel hooks",
        "model openai:gpt-test",
        "sandbox",
        "code mode",
        "home",
        "clock",
    ] {
        assert!(checks.contains(&check), "{check} in {checks:?}");
    }
    #[cfg(feature = "telegram")]
    assert!(finding(&findings, "channel tg")["detail"].as_str().unwrap().contains("@bub_test_bot"), "{findings:#?}");
    #[cfg(feature = "discord")]
    assert!(finding(&findings, "channel dc")["detail"].as_str().unwrap().contains("bub-test"), "{findings:#?}");
    assert!(finding(&findings, "sandbox")["detail"].as_str().unwrap().contains("built and tried"), "{findings:#?}");

    // The lines a person reads: one per check, status first, then a summary.
    let (code, stdout, _) = run(setup.command(env!("CARGO_BIN_EXE_bub"), &["doctor"])).await;
    assert_eq!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), findings.len() + 1, "{stdout}");
    assert!(lines[..findings.len()].iter().all(|line| line.starts_with("ok ")), "{stdout}");
    assert_eq!(lines.last(), Some(&"0 failures, 0 warnings"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_line_fails_with_its_position() {
    let setup = Setup::new().await;
    setup.config(&format!("{}[http]\nlisen = \"127.0.0.1:80\"\n", healthy_config()));
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    let path = setup.home.path().join("bub.toml");
    let position = format!("{}:9:1: unknown key `lisen`; did you mean `listen`?", path.display());
    assert_fails(&findings, "config", &position, "bub policy check");
    assert_eq!(finding(&findings, "sandbox")["status"], "warn", "not checked without a config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_database_fails_until_migrated() {
    let setup = Setup::new().await;
    setup.config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n"));
    std::fs::write(setup.home.path().join("bub.db"), b"").expect("an empty database file");
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "database", "not migrated", "run `bub db migrate`");
    let unchanged = std::fs::metadata(setup.home.path().join("bub.db")).unwrap().len();
    assert_eq!(unchanged, 0, "the doctor migrates nothing");
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    assert_eq!(finding(&findings, "database")["status"], "ok", "{findings:#?}");
    assert_eq!(code, 0, "{findings:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_unreachable_then_unmigrated_then_ok() {
    let mut setup = Setup::new().await;
    setup.config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    setup.set("BUB_DATABASE_URL", &format!("postgres://bub:pw@127.0.0.1:{closed}/bub"));
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "database", "cannot connect", "BUB_DATABASE_URL");
    assert!(!finding(&findings, "database").to_string().contains(":pw@"), "no password shown");

    let url = crate::support::postgres::fresh_database().await;
    setup.set("BUB_DATABASE_URL", &url);
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "database", "not migrated", "run `bub db migrate`");
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    let database = finding(&findings, "database");
    assert_eq!(database["status"], "ok", "{database:#}");
    assert!(database["detail"].as_str().unwrap().starts_with("postgres:"), "{database:#}");
    assert_eq!(code, 0, "{findings:#?}");
}

#[cfg(feature = "telegram")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_token_the_bot_api_refuses_fails() {
    let setup = Setup::new().await;
    let telegram = crate::support::fake_telegram::FakeTelegram::start().await;
    setup.config(&format!(
        "[channels.tg]\nkind = \"telegram\"\ntoken = \"1:not-the-token\"\napi_url = \"{}\"\n\n\
         [channels.tg.policy]\nenvironment = \"local\"\n",
        telegram.api_url()
    ));
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "channel tg", "Telegram rejects the bot token", "channels.tg.token");
}

#[cfg(feature = "discord")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_token_discord_refuses_fails() {
    let setup = Setup::new().await;
    let discord = crate::support::fake_discord::FakeDiscord::start().await;
    setup.config(&format!(
        "[channels.dc]\nkind = \"discord\"\ntoken = \"not-the-token\"\napi_url = \"{}\"\n\n\
         [channels.dc.policy]\nenvironment = \"local\"\n",
        discord.proxy_url()
    ));
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "channel dc", "Discord rejects the bot token", "channels.dc.token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weak_webhook_secret_fails() {
    let setup = Setup::new().await;
    setup.config("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n");
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(
        &findings,
        "channel hooks",
        "well-known word `s3cret`",
        "channels.hooks.secrets (`openssl rand -hex 32`)",
    );
    setup.config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{}\"]\n", "x".repeat(40)));
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "channel hooks", "only 1 distinct characters", "channels.hooks.secrets");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_key_the_provider_refuses_fails() {
    let mut setup = Setup::new().await;
    setup.config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n"));
    setup.migrate().await;
    setup.set("BUB_OPENAI_API_KEY", "sk-wrong");
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(
        &findings,
        "model openai:gpt-test",
        "Incorrect API key provided",
        "the API key is refused: set BUB_OPENAI_API_KEY",
    );
    assert!(!serde_json::to_string(&findings).unwrap().contains("sk-wrong"), "the key is never shown");
    assert_eq!(setup.model.request_count(), 0, "no prompt was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_sandbox_fails_the_sandbox_check() {
    let setup = Setup::new().await;
    setup.config(&healthy_config());
    setup.migrate().await;
    // A user namespace whose limit of nested user namespaces is 0: the sandbox's
    // first step (a user namespace of its own) is refused, as in a container
    // whose seccomp profile forbids it.
    let no_namespaces = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"";
    let (code, findings) = setup.doctor_through("unshare", &["-Ur", "sh", "-c", no_namespaces]).await;
    assert_eq!(code, 1, "{findings:#?}");
    assert_fails(
        &findings,
        "sandbox",
        "user namespaces: MISSING",
        "environment = \"local\" in [channels.hooks.policy]",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_world_writable_data_directory_fails() {
    let setup = Setup::new().await;
    setup.config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n"));
    setup.migrate().await;
    std::fs::set_permissions(setup.home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "home", "writable by other users (mode 0777)", "chmod go-w");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_off_by_more_than_the_replay_window_fails_and_a_few_seconds_warn() {
    let setup = Setup::new().await;
    setup.config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n"));
    setup.migrate().await;
    setup.model.set_date("Tue, 01 Jan 2030 00:00:00 GMT");
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 1);
    assert_fails(&findings, "clock", "behind", "NTP");
    assert!(finding(&findings, "clock")["detail"].as_str().unwrap().contains("refused beyond 300 s"), "{findings:#?}");

    let soon = chrono::Utc::now() - chrono::TimeDelta::seconds(40);
    setup.model.set_date(&soon.format("%a, %d %b %Y %H:%M:%S GMT").to_string());
    let (code, findings) = setup.doctor().await;
    assert_eq!(finding(&findings, "clock")["status"], "warn", "{findings:#?}");
    assert!(finding(&findings, "clock")["detail"].as_str().unwrap().contains("ahead of"), "{findings:#?}");
    assert_eq!(code, 0, "a warning does not fail: {findings:#?}");
}

/// A config that others may read is worth a warning when it holds a secret
/// itself, and none when every secret is read from a file (a ConfigMap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readable_config_warns_only_when_it_holds_a_secret_itself() {
    let setup = Setup::new().await;
    setup.migrate().await;
    let readable = |path: &str| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = setup.config(&healthy_config());
    readable(&path);
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 0, "a warning does not fail: {findings:#?}");
    let warned: Vec<&Value> = findings.iter().filter(|f| f["check"] == "config" && f["status"] == "warn").collect();
    assert_eq!(warned.len(), 1, "{findings:#?}");
    assert!(warned[0]["detail"].as_str().unwrap().contains("holds a secret (`secrets`)"), "{:#}", warned[0]);
    assert!(warned[0]["fix"].as_str().unwrap().contains("secrets_file"), "{:#}", warned[0]);

    let secret = setup.home.path().join("webhook.secrets");
    std::fs::write(&secret, format!("{STRONG_SECRET}\n")).unwrap();
    let text =
        healthy_config().replace(&format!("secrets = [\"{STRONG_SECRET}\"]"), "secrets_file = \"webhook.secrets\"");
    let path = setup.config(&text);
    readable(&path);
    let (code, findings) = setup.doctor().await;
    assert_eq!(code, 0, "{findings:#?}");
    assert_eq!(finding(&findings, "config")["status"], "ok", "{findings:#?}");
    assert_eq!(
        finding(&findings, "channel hooks")["status"],
        "ok",
        "the secret from the file is judged: {findings:#?}"
    );
}

/// A home on a nearly full disk: a 4 MiB tmpfs mounted over it in a mount
/// namespace of the test's own (nothing of the host's is touched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_home_on_a_full_disk_fails_the_disk_check() {
    let setup = Setup::new().await;
    let small_disk = "mount -t tmpfs -o size=4m,mode=0700 tmpfs \"$BUB_HOME\" && exec \"$0\" \"$@\"";
    let (code, findings) = setup.doctor_through("unshare", &["-Urm", "sh", "-c", small_disk]).await;
    assert_eq!(code, 1, "{findings:#?}");
    assert_fails(&findings, "disk", "free of 4 MiB", "move BUB_HOME to a larger one");
}

/// MCP servers started as the gateway starts them: one up with its tools,
/// one that cannot start warns (the gateway runs without it), and fails the
/// run once the config makes it required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_servers_are_started_and_one_that_does_not_come_up_is_named() {
    let setup = Setup::new().await;
    let argv = crate::support::mcp_servers::fixture("normal", None);
    let (command, args) = argv.split_first().unwrap();
    let servers = |required: bool| {
        format!(
            "[mcp.fx]\ncommand = {}\nargs = {}\n\n[mcp.gone]\ncommand = \"/nonexistent/mcp-server\"\n\
             start_timeout_seconds = 2\nrequired = {required}\n",
            serde_json::json!(command),
            serde_json::json!(args)
        )
    };
    setup.config(&format!(
        "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n\n{}",
        servers(false)
    ));
    setup.migrate().await;
    let (code, findings) = setup.doctor().await;
    let up = finding(&findings, "mcp fx");
    assert_eq!((up["status"].as_str(), up["detail"].as_str()), (Some("ok"), Some("up, 7 tools")), "{up:#}");
    let gone = finding(&findings, "mcp gone");
    assert_eq!(gone["status"], "warn", "{gone:#}");
    assert!(gone["detail"].as_str().unwrap().contains("/nonexistent/mcp-server"), "{gone:#}");
    assert_eq!(code, 0, "a warning does not fail: {findings:#?}");

    setup
        .config(&format!("[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"{STRONG_SECRET}\"]\n\n{}", servers(true)));
    let (code, findings) = setup.doctor().await;
    assert_fails(&findings, "mcp gone", "required", "[mcp.gone]");
    assert_eq!(code, 1);
}
