//! The real agent (every builtin tool, as `bub gateway` builds it) against
//! the fake model server, for the routes that go through the agent alone.

use crate::support::fake_model::FakeModel;
use bub::agent::{RunOptions, RunOutcome, StreamEvent};
use bub::db::SqliteTapeStore;
use bub::home::BubHome;
use bub::setup::Setup;
use bub::tape::{Entry, TapeQuery};
use std::sync::Arc;
use tempfile::TempDir;

pub struct World {
    pub setup: Setup,
    /// Kept alive for the store and the stubs under it.
    pub _home: TempDir,
    pub workspace: TempDir,
}

impl World {
    pub async fn new(fake: &FakeModel) -> World {
        let (home, workspace) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let bub_home = BubHome::at(home.path());
        let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
        let setup =
            Setup::build(&bub_home, workspace.path().to_path_buf(), store, fake.vars("openai:gpt-test")).unwrap();
        World { setup, _home: home, workspace }
    }

    /// One turn on `session`.
    pub async fn say(&self, session: &str, text: &str) -> RunOutcome {
        self.run(text, RunOptions::new(session)).await
    }

    pub async fn run(&self, text: &str, options: RunOptions) -> RunOutcome {
        self.setup.agent.run(text, options.workspace(self.workspace.path())).collect().await
    }

    /// Every entry of `session`'s tape.
    pub async fn entries(&self, session: &str) -> Vec<Entry> {
        self.setup.agent.tape(session).unwrap().read(&TapeQuery::all()).await.unwrap()
    }

    /// The events named `name` on `session`'s tape.
    pub async fn events_named(&self, session: &str, name: &str) -> Vec<Entry> {
        self.entries(session).await.into_iter().filter(|e| e.name() == Some(name)).collect()
    }
}

/// The tool results of a run, in order: (output, is_error).
pub fn tool_results(outcome: &RunOutcome) -> Vec<(String, bool)> {
    outcome
        .events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}
