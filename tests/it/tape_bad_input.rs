//! Bad input gets a clear error that names the file or tape, and nothing is
//! written halfway.

use crate::support;

use bub::db::SqliteTapeStore;
use bub::tape::{EntryKind, NewEntry, Tape, TapeError, TapeName, TapeQuery};
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn a_corrupt_database_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    std::fs::write(&path, b"this is definitely not sqlite, just some bytes of text").unwrap();
    let error = SqliteTapeStore::open(&path).await.err().expect("refused");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("not a SQLite database"), "{message}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"this is definitely not sqlite, just some bytes of text",
        "file untouched"
    );
}

#[tokio::test]
async fn a_damaged_sqlite_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xA5u8, 4096));
    std::fs::write(&path, &bytes).unwrap();
    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("not a usable SQLite database") || message.contains("corrupt"), "{message}");
}

#[tokio::test]
async fn another_programs_database_is_not_touched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)").unwrap();
    conn.close().unwrap();

    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert!(message.contains("belongs to another program") && message.contains("invoices"), "{message}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut select = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").unwrap();
    let tables: Vec<String> = select.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
    assert_eq!(tables, vec!["invoices"], "no tables were added");
}

#[tokio::test]
async fn an_unwritable_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let path = file.join("home").join("bub.db");
    let message = SqliteTapeStore::open(&path).await.err().expect("refused").to_string();
    assert!(message.contains("cannot create directory") && message.contains("plain-file"), "{message}");
}

#[tokio::test]
async fn an_edited_row_is_reported_with_tape_entry_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.db");
    let store = SqliteTapeStore::open(&path).await.unwrap();
    let tape = Tape::new(Arc::new(store), TapeName::new("chat").unwrap());
    tape.append(NewEntry::chat("user", "fine")).await.unwrap();
    tape.append(NewEntry::chat("user", "to be damaged")).await.unwrap();

    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE tape_entries SET payload = '[1, 2' WHERE entry_id = 2", []).unwrap();
    conn.close().unwrap();

    let error = tape.read(&TapeQuery::all()).await.unwrap_err();
    assert!(matches!(error, TapeError::Corrupt { id: 2, .. }), "{error}");
    let message = error.to_string();
    assert!(message.starts_with("tape chat: entry 2 in sqlite:"), "{message}");
    assert!(message.contains("payload is not a JSON object"), "{message}");
}

#[tokio::test]
async fn a_payload_that_is_not_an_object_is_refused_before_any_store() {
    let error = NewEntry::new(EntryKind::Event, json!("just text")).unwrap_err();
    assert_eq!(error.to_string(), "event entry: payload must be a JSON object, got a string");
}

#[tokio::test]
async fn a_broken_entry_is_refused_with_the_tape_named_and_nothing_written() {
    let s = support::sqlite_store().await;
    let tape = s.tape("it's \"odd\" 🦀/chat");
    let mut anchor = NewEntry::anchor("ok", json!({}));
    anchor.payload.insert("name".into(), json!(42));
    let error = tape.append_all(vec![NewEntry::chat("user", "first"), anchor]).await.unwrap_err();
    assert_eq!(error.to_string(), "tape it's \"odd\" 🦀/chat: anchor entry: payload needs a non-empty string `name`");
    assert!(tape.read(&TapeQuery::all()).await.unwrap().is_empty());
    assert!(s.store.list().await.unwrap().is_empty(), "not even the tape row was created");
}

#[test]
fn invalid_tape_names_say_why() {
    assert_eq!(TapeName::new("").unwrap_err().to_string(), "invalid tape name \"\": it is empty");
    assert_eq!(
        TapeName::new("a\u{0}b").unwrap_err().to_string(),
        "invalid tape name \"a\\0b\": it contains a control character"
    );
}

/// A store written elsewhere that answers appends and `latest` with nothing.
struct ForgetfulStore(bub::tape::InMemoryTapeStore);

#[async_trait::async_trait]
impl bub::tape::TapeStore for ForgetfulStore {
    async fn append(&self, tape: &TapeName, entries: Vec<NewEntry>) -> bub::tape::TapeResult<Vec<bub::tape::Entry>> {
        self.0.append(tape, entries).await?;
        Ok(Vec::new())
    }
    async fn read(&self, tape: &TapeName, query: &TapeQuery) -> bub::tape::TapeResult<Vec<bub::tape::Entry>> {
        self.0.read(tape, query).await
    }
    async fn latest(
        &self,
        _tape: &TapeName,
        _queries: &[TapeQuery],
    ) -> bub::tape::TapeResult<Vec<Option<bub::tape::Entry>>> {
        Ok(Vec::new())
    }
    async fn stats(&self, tape: &TapeName) -> bub::tape::TapeResult<bub::tape::TapeStats> {
        self.0.stats(tape).await
    }
    async fn list(&self) -> bub::tape::TapeResult<Vec<bub::tape::TapeSummary>> {
        self.0.list().await
    }
    async fn reset(&self, tape: &TapeName) -> bub::tape::TapeResult<()> {
        self.0.reset(tape).await
    }
    fn location(&self) -> String {
        "forgetful".into()
    }
}

/// Issue 14.7: a store that breaks the contract fails the call (and a run on
/// it) with an error naming the tape; it never panics a run.
#[tokio::test]
async fn a_store_that_breaks_its_contract_fails_the_run_without_a_panic() {
    let store: Arc<dyn bub::tape::TapeStore> = Arc::new(ForgetfulStore(bub::tape::InMemoryTapeStore::new()));
    let tape = Tape::new(store.clone(), TapeName::new("chat").unwrap());
    let error = tape.append(NewEntry::event("x", json!({}))).await.unwrap_err();
    assert!(matches!(error, TapeError::StoreContract { .. }), "{error:?}");
    assert!(error.to_string().contains("broke its contract"), "{error}");
    assert!(matches!(tape.latest(&[TapeQuery::all()]).await, Err(TapeError::StoreContract { .. })));
    assert!(matches!(tape.handoff("phase", json!({})).await, Err(TapeError::StoreContract { .. })));

    let agent = bub::agent::Agent::builder().store(store).build();
    let outcome = agent.run("hello", bub::agent::RunOptions::new("chat")).collect().await;
    let (kind, message) = outcome.error.expect("the run fails");
    assert_eq!(kind, bub::agent::FailureKind::Tape);
    assert!(message.contains("broke its contract"), "{message}");
}
