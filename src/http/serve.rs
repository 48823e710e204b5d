//! Serves the router over HTTP/1.1 with the limits an internet-facing webhook
//! needs, which `axum::serve` does not set: a client that opens a connection
//! and never finishes its request headers is cut off after
//! [`ServeLimits::read_timeout`] (idle keep-alive connections too), and at most
//! [`ServeLimits::max_connections`] are served at once; past that, new ones
//! wait in the listen backlog. Request bodies have their own deadline in the
//! channel that reads them.
//!
//! Shutdown is axum's: stop accepting, let every open connection finish its
//! request in flight, then return.

pub use crate::config::ServeLimits;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Accepts connections on `listener` and serves `app` on each until `shutdown` completes,
/// then waits for the connections to finish what they are doing.
pub async fn serve(listener: TcpListener, app: Router, limits: ServeLimits, shutdown: impl Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Connections hold a receiver each; dropping `stop` tells them to finish, and
    // `open.closed()` resolves once the last one has.
    let (stop, stopped) = watch::channel(());
    let (open, _) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
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
        let mut stopped = stopped.clone();
        let open = open.subscribe();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.read_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
            let mut connection = std::pin::pin!(connection);
            let mut stopping = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(error) = result {
                            tracing::debug!(%peer, %error, "HTTP connection ended with an error");
                        }
                        break;
                    }
                    _ = stopped.changed(), if !stopping => {
                        stopping = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
            drop((slot, open));
        });
    }
    drop(stop);
    drop(listener);
    open.closed().await;
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
