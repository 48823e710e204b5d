//! Shared helpers for integration tests. Fake platform servers join this module
//! as the gateway grows: [`fake_model`] is a scripted model server; the rest
//! builds tape stores on temporary files.
#![allow(dead_code)]

pub mod fake_model;

use bub::tape::{
    ForkStore, InMemoryTapeStore, SqliteTapeStore, Tape, TapeName, TapeSettings, TapeStore,
};
use std::sync::Arc;
use tempfile::TempDir;

/// A store and whatever must live as long as it (a temporary directory).
pub struct TestStore {
    pub store: Arc<dyn TapeStore>,
    pub dir: TempDir,
}

impl TestStore {
    pub fn tape(&self, name: &str) -> Tape {
        Tape::new(
            self.store.clone(),
            TapeName::new(name).expect("valid test tape name"),
        )
        .with_settings(TapeSettings {
            archive_dir: self.dir.path().join("archives"),
            ..TapeSettings::default()
        })
    }
}

pub async fn memory_store() -> TestStore {
    TestStore {
        store: Arc::new(InMemoryTapeStore::new()),
        dir: tempfile::tempdir().expect("tempdir"),
    }
}

pub async fn sqlite_store() -> TestStore {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteTapeStore::open(dir.path().join("bub.db"))
        .await
        .expect("open sqlite store");
    TestStore {
        store: Arc::new(store),
        dir,
    }
}

/// A fork over an empty in-memory store: every write lands in an overlay.
pub async fn fork_store() -> TestStore {
    let parent: Arc<dyn TapeStore> = Arc::new(InMemoryTapeStore::new());
    TestStore {
        store: Arc::new(ForkStore::new(parent)),
        dir: tempfile::tempdir().expect("tempdir"),
    }
}

pub fn name(text: &str) -> TapeName {
    TapeName::new(text).expect("valid test tape name")
}
