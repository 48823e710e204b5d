//! The read-only connections of a SQLite database, each on a thread of its
//! own.
//!
//! A read is a closure run on whichever reader thread is free: all of its
//! statements (and the decoding of the rows) happen there, so a read costs
//! one hand-off to the thread and one back, and never takes a runtime worker
//! away from the network while SQLite works. In WAL mode readers never wait
//! for the writer, and each statement sees a consistent snapshot.

use super::DbError;
use rusqlite::Connection;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::oneshot;

enum ReadJob {
    Read(Box<dyn FnOnce(&Connection) + Send>),
    /// Close the connection and end the thread, then say so.
    Stop(oneshot::Sender<()>),
}

/// The handle to the reader threads; cheap to clone.
#[derive(Clone)]
pub(crate) struct Readers {
    jobs: flume::Sender<ReadJob>,
    closed: Arc<AtomicBool>,
    threads: usize,
}

impl Readers {
    /// Starts one thread per connection.
    pub(crate) fn spawn(connections: Vec<Connection>) -> std::io::Result<Readers> {
        let (jobs, queue) = flume::unbounded::<ReadJob>();
        let threads = connections.len();
        for (n, conn) in connections.into_iter().enumerate() {
            let queue = queue.clone();
            std::thread::Builder::new().name(format!("bub-db-reader-{n}")).spawn(move || {
                let _span = tracing::info_span!("db.reader", n).entered();
                // Ends on a stop, or when every sender is gone (the store dropped).
                while let Ok(job) = queue.recv() {
                    match job {
                        // A read that panics drops its answer (its caller is
                        // told); the thread goes on serving the others.
                        ReadJob::Read(read) => {
                            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&conn))).is_err() {
                                tracing::error!("a database read panicked");
                            }
                        }
                        ReadJob::Stop(stopped) => {
                            drop(conn);
                            let _ = stopped.send(());
                            return;
                        }
                    }
                }
            })?;
        }
        Ok(Readers { jobs, closed: Arc::default(), threads })
    }

    /// Runs `work` on a free reader connection; `Err(DbError::Closed)` after
    /// [`Readers::close`].
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> T + Send + 'static,
    ) -> Result<T, DbError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(DbError::Closed);
        }
        let (reply, answer) = oneshot::channel();
        let job = ReadJob::Read(Box::new(move |conn| {
            // Nobody waits any more: skip the work.
            if !reply.is_closed() {
                let _ = reply.send(work(conn));
            }
        }));
        self.jobs.send(job).map_err(|_| DbError::Closed)?;
        answer.await.map_err(|_| DbError::Lost("the read stopped unexpectedly (a bug in bub; see the log)"))
    }

    /// Refuses new reads, lets the threads finish the queued ones, then
    /// closes their connections (so the writer's close, the last one, can
    /// fold the write-ahead log into the database file and remove it).
    pub(crate) async fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut stopped = Vec::with_capacity(self.threads);
        for _ in 0..self.threads {
            let (stop, done) = oneshot::channel();
            if self.jobs.send(ReadJob::Stop(stop)).is_ok() {
                stopped.push(done);
            }
        }
        for done in stopped {
            let _ = done.await;
        }
    }
}
