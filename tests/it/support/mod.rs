//! Shared helpers for the integration tests: [`fake_model`] is a scripted
//! model server, [`fake_telegram`] a Bot API and [`fake_discord`] Discord's
//! REST API and gateway (each built with its platform's feature, as are the
//! modules that use it), [`fake_otlp`] an OpenTelemetry trace receiver, [`gateway`] runs `bub gateway`, [`cli`] the other
//! commands, [`browser`] the admin console's browser scenarios, [`mcp_python`] the official MCP Python SDK's client, [`venv`] the Python tools' venvs, [`postgres`] the cluster; the rest builds tape stores on
//! temporary files and agents on the scripted model.

pub mod browser;
pub mod cli;
#[cfg(feature = "discord")]
pub mod fake_discord;
pub mod fake_model;
pub mod fake_otlp;
#[cfg(feature = "telegram")]
pub mod fake_telegram;
pub mod gateway;
pub mod mcp_python;
pub mod mcp_servers;
#[cfg(any(feature = "telegram", feature = "discord"))]
pub mod multipart;
pub mod npm;
pub mod postgres;
pub mod venv;

use bub::db::{PgTapeStore, SqliteTapeStore};
use bub::tape::{ForkStore, InMemoryTapeStore, Tape, TapeName, TapeSettings, TapeStore};
use std::sync::Arc;
use tempfile::TempDir;

/// A store and whatever must live as long as it (a temporary directory).
pub struct TestStore {
    pub store: Arc<dyn TapeStore>,
    pub dir: TempDir,
}

impl TestStore {
    pub fn tape(&self, name: &str) -> Tape {
        Tape::new(self.store.clone(), TapeName::new(name).expect("valid test tape name"))
            .with_settings(TapeSettings { archive_dir: self.dir.path().join("archives"), ..TapeSettings::default() })
    }
}

pub async fn memory_store() -> TestStore {
    TestStore { store: Arc::new(InMemoryTapeStore::new()), dir: tempfile::tempdir().expect("tempdir") }
}

pub async fn sqlite_store() -> TestStore {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteTapeStore::open(dir.path().join("bub.db")).await.expect("open sqlite store");
    TestStore { store: Arc::new(store), dir }
}

/// A store on a new database of the tests' shared PostgreSQL cluster.
pub async fn postgres_store() -> TestStore {
    let url = postgres::fresh_database().await;
    let store = PgTapeStore::connect(&url).await.expect("open postgres store");
    assert!(store.location().starts_with("postgres:postgres://"), "{}", store.location());
    TestStore { store: Arc::new(store), dir: tempfile::tempdir().expect("tempdir") }
}

/// A fork over an empty in-memory store: every write lands in an overlay.
pub async fn fork_store() -> TestStore {
    let parent: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
    TestStore { store: Arc::new(ForkStore::new(parent)), dir: tempfile::tempdir().expect("tempdir") }
}

pub fn name(text: &str) -> TapeName {
    TapeName::new(text).expect("valid test tape name")
}

pub mod scripted_model;

use bub::agent::Agent;
use bub::model::SingleClient;
use scripted_model::ScriptedModel;

/// An agent on a SQLite store with the scripted model as `scripted:test`,
/// commands on `,`, and the given tools. The store's directory is the workspace.
pub async fn scripted_agent(tools: Vec<bub::tools::Tool>) -> (Agent, Arc<ScriptedModel>, TestStore) {
    let store = sqlite_store().await;
    let model = ScriptedModel::new();
    let agent = Agent::builder()
        .store(store.store.clone())
        .model(Arc::new(SingleClient(model.clone())), "scripted:test")
        .command_prefix(",")
        .tools(tools)
        .workspace(store.dir.path())
        .tape_settings(TapeSettings { archive_dir: store.dir.path().join("archives"), ..TapeSettings::default() })
        .system_prompt("You are a test agent.")
        .build();
    (agent, model, store)
}

/// A stand-in `bash` that records what it was asked to run and echoes it.
pub fn fake_bash(seen: Arc<parking_lot::Mutex<Vec<String>>>) -> bub::tools::Tool {
    use serde_json::{Value, json};
    bub::tools::Tool::new(
        "bash",
        "run a shell command",
        json!({"type": "object", "properties": {"cmd": {"type": "string"}}}),
        move |args: Value, _| {
            let seen = seen.clone();
            async move {
                let cmd = args["cmd"].as_str().unwrap_or_default().to_string();
                seen.lock().push(cmd.clone());
                Ok(json!(format!("ran: {cmd}")))
            }
        },
    )
    .with_capabilities([bub::tools::Capability::Exec])
}

/// A non-loopback IPv4 address of this host's interfaces, preferring one no
/// range rule of `web.fetch` refuses (eth0's 192.0.2.2 on the test
/// machines). Panics, naming what is missing, on a host without one: the
/// tests that aim at the host's own address must not pass by skipping.
pub fn host_address() -> std::net::IpAddr {
    use bub::tools::builtin::web::{address::blocked_reason, interfaces::own_addresses};
    let mut candidates: Vec<std::net::IpAddr> = own_addresses()
        .expect("list this host's interfaces")
        .into_iter()
        .filter(|ip| ip.is_ipv4() && !ip.is_loopback() && !ip.is_unspecified())
        .collect();
    candidates.sort_by_key(|ip| blocked_reason(*ip).is_some());
    *candidates.first().unwrap_or_else(|| {
        panic!("this test needs a non-loopback IPv4 interface (such as eth0) to aim at; this host has none")
    })
}

/// Whether `process` has ended within `limit` (polled, for tests that kill it).
pub async fn gone_within(process: &dyn bub::environment::Process, limit: std::time::Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !process.is_running() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    false
}

/// Every case (an async fn taking a [`TestStore`]) as a test on SQLite and
/// one on PostgreSQL, in modules `sqlite` and `postgres`.
macro_rules! on_every_database {
    ($($case:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case($crate::support::sqlite_store().await).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case($crate::support::postgres_store().await).await } )* }
    };
}
pub(crate) use on_every_database;
