//! The one writing connection of a SQLite database, with group commit.
//!
//! Every write of the process (tape appends, the gateway's inbox and outbox)
//! goes to one task that owns the connection. Writes that arrive while it is
//! busy are committed together: one `BEGIN IMMEDIATE`, each write in order,
//! one `COMMIT` — one sync to disk and one trip through SQLite's write lock
//! for the whole group instead of one per write. Under load that is what
//! bounds throughput, since writes are serialized anyway.
//!
//! Guarantees:
//! - a write's effects are committed when [`Writer::write`] returns `Ok`, and
//!   not at all when it returns `Err`;
//! - writes run in the order they were submitted;
//! - a write that fails never takes others down with it: when any write of a
//!   group fails (or the group's commit does), the group is rolled back and
//!   each write runs again on its own, so each gets its own verdict. A write's
//!   work may therefore run more than once, and must not keep side effects
//!   outside the database (return them instead);
//! - a caller that stops waiting does not cancel the write (nor anybody
//!   else's); a write whose caller is already gone when its turn comes is
//!   skipped.

use futures::future::BoxFuture;
use sqlx::{Connection, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

/// Writes per group at most, so one commit's latency stays bounded.
const MAX_GROUP: usize = 256;

/// A write: what it does on the connection. Called again if its group failed.
pub(crate) type Work<T> =
    Box<dyn for<'c> Fn(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, sqlx::Error>> + Send + Sync>;

/// A queued write, its output type erased.
trait Job: Send {
    /// The caller stopped waiting: running it would help nobody.
    fn abandoned(&self) -> bool;
    /// Runs the work, keeping its output until [`Job::finish`].
    fn run<'a>(&'a mut self, conn: &'a mut SqliteConnection) -> BoxFuture<'a, Result<(), sqlx::Error>>;
    /// Tells the caller: the kept output if `committed`, else `error`.
    fn finish(self: Box<Self>, outcome: Result<(), sqlx::Error>);
}

struct Pending<T> {
    work: Work<T>,
    output: Option<T>,
    reply: oneshot::Sender<Result<T, sqlx::Error>>,
}

impl<T: Send + 'static> Job for Pending<T> {
    fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    fn run<'a>(&'a mut self, conn: &'a mut SqliteConnection) -> BoxFuture<'a, Result<(), sqlx::Error>> {
        Box::pin(async move {
            self.output = Some((self.work)(conn).await?);
            Ok(())
        })
    }

    fn finish(self: Box<Self>, outcome: Result<(), sqlx::Error>) {
        let result = match (outcome, self.output) {
            (Ok(()), Some(output)) => Ok(output),
            (Ok(()), None) => Err(sqlx::Error::Protocol("a write finished without running".into())),
            (Err(error), _) => Err(error),
        };
        let _ = self.reply.send(result);
    }
}

/// Runs `work` atomically: as it is inside a group's transaction (a group
/// that fails is rolled back whole, so no savepoint is needed), else in a
/// transaction of its own. For writes of more than one statement.
pub(crate) async fn atomically<T>(
    conn: &mut SqliteConnection,
    work: impl AsyncFnOnce(&mut SqliteConnection) -> Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    if conn.is_in_transaction() {
        return work(conn).await;
    }
    let mut tx = conn.begin().await?;
    let output = work(&mut tx).await?;
    tx.commit().await?;
    Ok(output)
}

enum Request {
    Write(Box<dyn Job>),
    Close(oneshot::Sender<()>),
}

/// The handle to the writing task; cheap to clone.
#[derive(Clone)]
pub(crate) struct Writer {
    requests: mpsc::UnboundedSender<Request>,
}

impl Writer {
    /// Starts the task that owns `conn` (on the current tokio runtime).
    pub(crate) fn spawn(conn: SqliteConnection) -> Writer {
        let (requests, inbox) = mpsc::unbounded_channel();
        tokio::spawn(serve(conn, inbox));
        Writer { requests }
    }

    /// Runs `work` on the writing connection, possibly in one transaction
    /// with other writes (see the module's guarantees); `Err(PoolClosed)`
    /// after [`Writer::close`].
    pub(crate) async fn write<T: Send + 'static>(&self, work: Work<T>) -> Result<T, sqlx::Error> {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(Pending { work, output: None, reply });
        self.requests.send(Request::Write(job)).map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }

    /// Finishes the writes already queued, then closes the connection.
    pub(crate) async fn close(&self) {
        let (done, closed) = oneshot::channel();
        if self.requests.send(Request::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

async fn serve(mut conn: SqliteConnection, mut inbox: mpsc::UnboundedReceiver<Request>) {
    let mut group: Vec<Box<dyn Job>> = Vec::new();
    let mut closing = None;
    while let Some(request) = inbox.recv().await {
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
        commit_group(&mut conn, std::mem::take(&mut group)).await;
        if let Some(done) = closing {
            inbox.close();
            // Writes queued behind the close are answered `PoolClosed` by the drop.
            drop(inbox);
            if let Err(error) = conn.close().await {
                tracing::warn!(%error, "closing the database's writing connection");
            }
            let _ = done.send(());
            return;
        }
    }
}

/// Commits `group` as one transaction, or each write alone when that fails.
async fn commit_group(conn: &mut SqliteConnection, mut group: Vec<Box<dyn Job>>) {
    match group.len() {
        0 => return,
        1 => {
            let mut job = group.pop().expect("one job");
            let outcome = job.run(conn).await;
            job.finish(outcome);
            return;
        }
        _ => {}
    }
    let together = async {
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        for job in group.iter_mut() {
            job.run(&mut tx).await?;
        }
        tx.commit().await
    };
    match together.await {
        Ok(()) => {
            for job in group {
                job.finish(Ok(()));
            }
        }
        Err(error) => {
            tracing::debug!(%error, writes = group.len(), "a group commit failed; writing one by one");
            for mut job in group {
                let outcome = job.run(conn).await;
                job.finish(outcome);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqliteConnectOptions;

    async fn writer_on(dir: &tempfile::TempDir) -> (Writer, SqliteConnection) {
        let options = SqliteConnectOptions::new().filename(dir.path().join("w.db")).create_if_missing(true);
        let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
        sqlx::query("CREATE TABLE t (v INTEGER PRIMARY KEY)").execute(&mut conn).await.unwrap();
        let reader = SqliteConnection::connect_with(&options).await.unwrap();
        (Writer::spawn(conn), reader)
    }

    fn insert(v: i64) -> Work<i64> {
        Box::new(move |conn| {
            Box::pin(async move { sqlx::query("INSERT INTO t (v) VALUES ($1)").bind(v).execute(conn).await.map(|_| v) })
        })
    }

    async fn stored(reader: &mut SqliteConnection) -> Vec<i64> {
        sqlx::query_scalar("SELECT v FROM t ORDER BY v").fetch_all(reader).await.unwrap()
    }

    /// Writes queued together commit together; one that fails (a duplicate
    /// key) is refused alone, and every other write still lands, once.
    #[tokio::test]
    async fn a_failing_write_in_a_group_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, mut reader) = writer_on(&dir).await;
        writer.write(insert(7)).await.unwrap();
        // Polled together on this one thread, all 50 are queued before the
        // writing task runs: one group. Write 25 repeats the existing key 7.
        let values: Vec<i64> = (0..50).map(|i| if i == 25 { 7 } else { 100 + i }).collect();
        let results = futures::future::join_all(values.iter().map(|v| writer.write(insert(*v)))).await;
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
        assert_eq!(stored(&mut reader).await, expected);
    }

    /// After `close`, queued writes have landed and new ones are refused.
    #[tokio::test]
    async fn close_finishes_queued_writes_then_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, mut reader) = writer_on(&dir).await;
        let queued = {
            let writer = writer.clone();
            tokio::spawn(async move { writer.write(insert(1)).await })
        };
        tokio::task::yield_now().await;
        writer.close().await;
        assert_eq!(queued.await.unwrap().unwrap(), 1);
        assert!(matches!(writer.write(insert(2)).await, Err(sqlx::Error::PoolClosed)));
        assert_eq!(stored(&mut reader).await, vec![1]);
    }
}
