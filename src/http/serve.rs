//! Serves the router over HTTP/1.1 with the limits an internet-facing webhook
//! needs, which `axum::serve` does not set: a client that opens a connection
//! and never finishes its request headers is cut off after
//! [`ServeLimits::read_timeout`] (idle keep-alive connections too), and at most
//! [`ServeLimits::max_connections`] are served at once; past that, new ones
//! wait in the listen backlog. Request bodies have their own deadline in the
//! channel that reads them.
//!
//! Shutdown is hyper-util's [`GracefulShutdown`]: when `shutdown` completes
//! the listener closes, every connection finishes the request it is serving
//! (an idle one closes at once), and [`serve`] returns when the last one has.
//! Connections are tasks owned by [`serve`]: dropping its future (the
//! gateway's stop does after 5 s) cuts the ones still open. Connections are
//! plain HTTP/1.1 (no protocol upgrades: no route of bub's needs one).

pub use crate::config::ServeLimits;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Accepts connections on `listener` and serves `app` on each until `shutdown` completes,
/// then waits for the connections to finish what they are doing.
pub async fn serve(listener: TcpListener, app: Router, limits: ServeLimits, shutdown: impl Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Reap the connections that ended, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    pause_after_accept_error(&error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // No Nagle delay on small responses (a sync reply, an SSE event).
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(limits.read_timeout);
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Running out of file descriptors (or another transient accept failure) must
/// not spin: wait a moment, as `axum::serve` does, so connections can close.
async fn pause_after_accept_error(error: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(error.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::warn!(%error, "cannot accept an HTTP connection; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
