//! The one writing connection of a SQLite database, on a thread of its own,
//! with group commit.
//!
//! Every write of the process (tape appends, the gateway's inbox and outbox)
//! goes to one thread that owns the connection. Writes that arrive while it is
//! busy are committed together: one `BEGIN IMMEDIATE`, each write in order,
//! one `COMMIT` — one sync to disk and one trip through SQLite's write lock
//! for the whole group instead of one per write. Writes are serialized
//! anyway, so under load this is what bounds throughput.
//!
//! The thread runs SQLite synchronously: a write costs one hand-off to the
//! thread and one back, however many statements it runs, and the thread never
//! waits for a busy async runtime between statements. (Through an async
//! driver each statement was a round trip of its own, and a group of writes
//! took several times longer than its disk sync.)
//!
//! Guarantees:
//! - a write's effects are committed when [`Writer::write`] returns `Ok`, and
//!   not at all when it returns `Err`; a write always runs inside a
//!   transaction, so its statements land together or not at all;
//! - writes run in the order they were submitted;
//! - a write that fails never takes others down with it: when any write of a
//!   group fails (or the group's commit does), the group is rolled back and
//!   each write runs again on its own, so each gets its own verdict. A write's
//!   work may therefore run more than once, and must not keep side effects
//!   outside the database (return them instead);
//! - a caller that stops waiting does not cancel the write (nor anybody
//!   else's); a write whose caller is already gone when its turn comes is
//!   skipped.

use super::DbError;
use super::checkpoint;
use crate::db::Flush;
use rusqlite::Connection;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Writes per group at most, so one commit's latency stays bounded.
const MAX_GROUP: usize = 256;

/// A write: what it does on the connection (inside a transaction). Called
/// again if its group failed.
pub(crate) type Work<T> = Box<dyn Fn(&Connection) -> rusqlite::Result<T> + Send>;

/// A queued write, its output type erased.
trait Job: Send {
    /// The caller stopped waiting: running it would help nobody.
    fn abandoned(&self) -> bool;
    /// Runs the work, keeping its output until [`Job::finish`].
    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()>;
    /// Tells the caller: the kept output if `committed`, else `error`.
    fn finish(self: Box<Self>, outcome: rusqlite::Result<()>);
    /// Whether the write may reach the disk with a later one.
    fn deferred(&self) -> bool;
}

struct Pending<T> {
    work: Work<T>,
    output: Option<T>,
    reply: oneshot::Sender<Result<T, DbError>>,
    flush: Flush,
}

impl<T: Send + 'static> Job for Pending<T> {
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        // A write that panics fails alone (its group is rolled back and the
        // others run again); the thread, and every later write, go on.
        let work = &self.work;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(conn))) {
            Ok(output) => {
                self.output = Some(output?);
                Ok(())
            }
            Err(_) => {
                tracing::error!("a database write panicked; it was rolled back");
                Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some("the write panicked (a bug in bub; see the log)".into()),
                ))
            }
        }
    }

    fn finish(self: Box<Self>, outcome: rusqlite::Result<()>) {
        let result = match (outcome, self.output) {
            (Ok(()), Some(output)) => Ok(output),
            (Ok(()), None) => Err(DbError::Lost("a write finished without running")),
            (Err(error), _) => Err(DbError::Sqlite(error)),
        };
        let _ = self.reply.send(result);
    }

    fn deferred(&self) -> bool {
        self.flush == Flush::WithNext
    }
}

enum Request {
    Write(Box<dyn Job>),
    Close(oneshot::Sender<()>),
}

/// The handle to the writing thread; cheap to clone.
#[derive(Clone)]
pub(crate) struct Writer {
    requests: mpsc::Sender<Request>,
}

impl Writer {
    /// Starts the thread that owns `conn`.
    pub(crate) fn spawn(conn: Connection) -> std::io::Result<Writer> {
        let (requests, inbox) = mpsc::channel();
        // A span of its own, not the opener's: its group commits serve every caller.
        std::thread::Builder::new().name("bub-db-writer".into()).spawn(move || {
            let _span = tracing::info_span!("db.writer").entered();
            serve(conn, inbox)
        })?;
        Ok(Writer { requests })
    }

    /// Runs `work` on the writing connection, possibly in one transaction
    /// with other writes (see the module's guarantees);
    /// `Err(DbError::Closed)` after [`Writer::close`].
    pub(crate) async fn write<T: Send + 'static>(&self, work: Work<T>) -> Result<T, DbError> {
        self.write_with(work, Flush::Now).await
    }

    /// [`Writer::write`], its sync to disk deferred when `flush` says so:
    /// a group of deferred writes only commits (see [`Flush`]).
    pub(crate) async fn write_with<T: Send + 'static>(&self, work: Work<T>, flush: Flush) -> Result<T, DbError> {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Pending { work, output: None, reply, flush });
        self.requests.send(Request::Write(job)).map_err(|_| DbError::Closed)?;
        answer.await.map_err(|_| DbError::Closed)?
    }

    /// Finishes the writes already queued, then closes the connection.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.requests.send(Request::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

fn serve(conn: Connection, inbox: mpsc::Receiver<Request>) {
    checkpoint::watch(&conn);
    // Deferring a flush means committing with `synchronous = NORMAL`, which
    // only changes anything on a connection that syncs every commit; the
    // level set now (`None`: the connection's own, never changed).
    let syncs_each_commit =
        conn.query_row("PRAGMA synchronous", [], |row| row.get::<_, i64>(0)).is_ok_and(|level| level >= 2);
    let mut level = syncs_each_commit.then_some(FULL);
    let mut group: Vec<Box<dyn Job>> = Vec::new();
    let mut closing = None;
    // A request taken while looking for an idle moment, served next.
    let mut held: Option<Request> = None;
    loop {
        let request = match held.take() {
            Some(request) => request,
            None => match inbox.recv() {
                Ok(request) => request,
                Err(_) => return,
            },
        };
        match request {
            Request::Write(job) => group.push(job),
            Request::Close(done) => closing = Some(done),
        }
        while closing.is_none() && group.len() < MAX_GROUP {
            match inbox.try_recv() {
                Ok(Request::Write(job)) => group.push(job),
                Ok(Request::Close(done)) => closing = Some(done),
                Err(_) => break,
            }
        }
        group.retain(|job| !job.abandoned());
        let group = std::mem::take(&mut group);
        match level {
            Some(now) if !group.is_empty() => {
                let wanted = if group.iter().all(|job| job.deferred()) { NORMAL } else { FULL };
                match set_synchronous(&conn, now, wanted) {
                    Ok(()) => {
                        level = Some(wanted);
                        commit_group(&conn, group);
                    }
                    // Writes that must sync are refused rather than committed
                    // without their sync; a deferred group commits synced.
                    Err(error) if wanted == FULL => refuse_group(group, error),
                    Err(_) => commit_group(&conn, group),
                }
            }
            _ => commit_group(&conn, group),
        }
        if let Some(done) = closing {
            // Writes queued behind the close are answered `Closed` by the drop.
            drop(inbox);
            if let Err((_, error)) = conn.close() {
                tracing::warn!(%error, "closing the database's writing connection");
            }
            let _ = done.send(());
            return;
        }
        if let Some(forced) = checkpoint::due() {
            match inbox.try_recv() {
                Ok(request) => {
                    held = Some(request);
                    if forced {
                        checkpoint::run(&conn);
                    }
                }
                Err(_) => checkpoint::run(&conn),
            }
        }
    }
}

const FULL: &str = "FULL";
const NORMAL: &str = "NORMAL";

/// Sets how commits sync, from `now` to `wanted` (outside a transaction,
/// where SQLite takes it). Tried again for the next group when it fails.
fn set_synchronous(conn: &Connection, now: &str, wanted: &'static str) -> rusqlite::Result<()> {
    if now == wanted {
        return Ok(());
    }
    conn.execute_batch(&format!("PRAGMA synchronous = {wanted}")).inspect_err(|error| {
        tracing::error!(%error, wanted, "cannot set how the database syncs its commits");
    })
}

/// Answers every write of `group` with `error`, none of them run.
fn refuse_group(group: Vec<Box<dyn Job>>, error: rusqlite::Error) {
    let message = format!("the database cannot sync its commits: {error}");
    for job in group {
        job.finish(Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some(message.clone()),
        )));
    }
}

/// Commits `group` as one transaction, or each write alone when that fails.
fn commit_group(conn: &Connection, mut group: Vec<Box<dyn Job>>) {
    if group.len() == 1
        && let Some(mut job) = group.pop()
    {
        let outcome = in_transaction(conn, |conn| job.run(conn));
        job.finish(outcome);
        return;
    }
    if group.is_empty() {
        return;
    }
    match in_transaction(conn, |conn| group.iter_mut().try_for_each(|job| job.run(conn))) {
        Ok(()) => group.into_iter().for_each(|job| job.finish(Ok(()))),
        Err(error) => {
            tracing::debug!(%error, writes = group.len(), "a group commit failed; writing one by one");
            for mut job in group {
                let outcome = in_transaction(conn, |conn| job.run(conn));
                job.finish(outcome);
            }
        }
    }
}

/// Runs `work` between `BEGIN IMMEDIATE` and `COMMIT`, rolling back when it
/// or the commit fails.
fn in_transaction(conn: &Connection, work: impl FnOnce(&Connection) -> rusqlite::Result<()>) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let outcome = work(conn).and_then(|()| conn.execute_batch("COMMIT"));
    if outcome.is_err() && !conn.is_autocommit() {
        // A failed rollback leaves nothing to do but report the first error.
        let _ = conn.execute_batch("ROLLBACK");
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer_on(dir: &tempfile::TempDir) -> (Writer, Connection) {
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER PRIMARY KEY)").unwrap();
        let reader = Connection::open(&path).unwrap();
        (Writer::spawn(conn).unwrap(), reader)
    }

    fn insert(v: i64) -> Work<i64> {
        Box::new(move |conn| conn.execute("INSERT INTO t (v) VALUES (?1)", [v]).map(|_| v))
    }

    fn stored(reader: &Connection) -> Vec<i64> {
        let mut select = reader.prepare("SELECT v FROM t ORDER BY v").unwrap();
        select.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
    }

    /// Writes queued together commit together; one that fails (a duplicate
    /// key) is refused alone, and every other write still lands, once.
    #[tokio::test]
    async fn a_failing_write_in_a_group_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, reader) = writer_on(&dir);
        writer.write(insert(7)).await.unwrap();
        // A write that blocks the thread until all 50 are queued: one group.
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = parking_lot::Mutex::new(gate);
        let blocker = writer.write(Box::new(move |_| {
            let _ = gate.lock().recv_timeout(std::time::Duration::from_secs(5));
            Ok(())
        }));
        // Write 25 repeats the existing key 7.
        let values: Vec<i64> = (0..50).map(|i| if i == 25 { 7 } else { 100 + i }).collect();
        let writes = futures::future::join_all(values.iter().map(|v| writer.write(insert(*v))));
        let ((), results) = tokio::join!(
            async {
                tokio::task::yield_now().await;
                release.send(()).unwrap();
                blocker.await.unwrap();
            },
            writes
        );
        let mut refused = Vec::new();
        for (v, result) in values.iter().zip(results) {
            match result {
                Ok(got) => assert_eq!(got, *v),
                Err(_) => refused.push(*v),
            }
        }
        assert_eq!(refused, vec![7]);
        let mut expected: Vec<i64> = values.iter().copied().filter(|v| *v != 7).collect();
        expected.insert(0, 7);
        assert_eq!(stored(&reader), expected);
    }

    /// A write of several statements lands whole or not at all.
    #[tokio::test]
    async fn a_write_is_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, reader) = writer_on(&dir);
        writer.write(insert(1)).await.unwrap();
        let both = writer
            .write(Box::new(|conn| {
                conn.execute("INSERT INTO t (v) VALUES (2)", [])?;
                conn.execute("INSERT INTO t (v) VALUES (1)", [])
            }))
            .await;
        assert!(matches!(both, Err(DbError::Sqlite(_))));
        assert_eq!(stored(&reader), vec![1]);
    }

    /// Under a steady stream of writes the log is checkpointed and starts
    /// over, so it stays a few hundred pages long (each write here is a page
    /// or more: without checkpoints the log would pass 12 MB).
    #[tokio::test]
    async fn the_log_stays_short_under_steady_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _reader) = writer_on(&dir);
        writer.write(Box::new(|conn| conn.execute_batch("CREATE TABLE blobs (b BLOB)"))).await.unwrap();
        for _ in 0..30 {
            let writes = (0..100).map(|_| {
                writer.write(Box::new(|conn| {
                    conn.execute("INSERT INTO blobs (b) VALUES (zeroblob(4096))", []).map(|_| ())
                }))
            });
            for outcome in futures::future::join_all(writes).await {
                outcome.unwrap();
            }
        }
        let log = std::fs::metadata(dir.path().join("w.db-wal")).unwrap().len();
        let page = 4096;
        assert!(log < (checkpoint::FORCED_PAGES as u64 + MAX_GROUP as u64 * 3) * page, "log is {log} bytes");
    }

    /// A write that panics is refused alone, and the writer goes on.
    #[tokio::test]
    async fn a_panicking_write_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, reader) = writer_on(&dir);
        let panicking = writer.write(Box::new(|conn| -> rusqlite::Result<()> {
            conn.execute("INSERT INTO t (v) VALUES (1)", [])?;
            panic!("a bug")
        }));
        let (panicked, fine) = tokio::join!(panicking, writer.write(insert(2)));
        assert!(matches!(panicked, Err(DbError::Sqlite(_))), "{panicked:?}");
        assert_eq!(fine.unwrap(), 2);
        writer.write(insert(3)).await.unwrap();
        assert_eq!(stored(&reader), vec![2, 3]);
    }

    /// After `close`, queued writes have landed and new ones are refused.
    #[tokio::test]
    async fn close_finishes_queued_writes_then_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, reader) = writer_on(&dir);
        let queued = {
            let writer = writer.clone();
            tokio::spawn(async move { writer.write(insert(1)).await })
        };
        tokio::task::yield_now().await;
        writer.close().await;
        assert_eq!(queued.await.unwrap().unwrap(), 1);
        assert!(matches!(writer.write(insert(2)).await, Err(DbError::Closed)));
        assert_eq!(stored(&reader), vec![1]);
    }

    /// How the commit of the group a write runs in syncs, seen from inside
    /// the write (SQLite's `synchronous`: 2 is FULL, 1 NORMAL).
    fn sync_level() -> Work<i64> {
        Box::new(|conn| conn.query_row("PRAGMA synchronous", [], |row| row.get(0)))
    }

    /// A deferred write commits without a sync of its own; a write that
    /// needs its sync gets it, also when deferred writes share its group;
    /// and the connection syncs every commit again afterwards.
    #[tokio::test]
    async fn only_a_group_of_deferred_writes_skips_its_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL").unwrap();
        let writer = Writer::spawn(conn).unwrap();
        assert_eq!(writer.write_with(sync_level(), Flush::WithNext).await.unwrap(), 1);
        assert_eq!(writer.write(sync_level()).await.unwrap(), 2);

        // A write that holds the thread (it says when it runs) until the next
        // two are queued behind it: they are then one group.
        let (started_tx, started) = std::sync::mpsc::channel::<()>();
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = parking_lot::Mutex::new(gate);
        let hold: Work<()> = Box::new(move |_| {
            let _ = started_tx.send(());
            let _ = gate.lock().recv_timeout(std::time::Duration::from_secs(5));
            Ok(())
        });
        let blocker = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write_with(hold, Flush::WithNext).await }
        });
        tokio::task::spawn_blocking(move || started.recv_timeout(std::time::Duration::from_secs(5)))
            .await
            .unwrap()
            .unwrap();
        let (deferred, synced) = (writer.write_with(sync_level(), Flush::WithNext), writer.write(sync_level()));
        let (levels, ()) = tokio::join!(futures::future::join(deferred, synced), async {
            release.send(()).unwrap();
        });
        blocker.await.unwrap().unwrap();
        assert_eq!((levels.0.unwrap(), levels.1.unwrap()), (2, 2), "a group with a synced write syncs");
        assert_eq!(writer.write_with(sync_level(), Flush::WithNext).await.unwrap(), 1);
        assert_eq!(writer.write(sync_level()).await.unwrap(), 2, "FULL is restored");
    }
}
