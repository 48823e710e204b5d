//! Serves the router over HTTP/1.1 with the limits an internet-facing webhook
//! needs, which `axum::serve` does not set:
//!
//! - **One deadline for the whole request head**: a client has
//!   [`ServeLimits::read_timeout`] from the accept (on keep-alive: from the
//!   end of the previous response) to send every header line; a line dribbled
//!   now and then does not extend it. This is hyper's `header_read_timeout`:
//!   hyper 1.x arms its timer when it starts reading a head and disarms it
//!   only when the head is parsed (`proto/h1/conn.rs`, `poll_read_head`), not
//!   on each read; `tests/it/red_team/front_door.rs` pins it. Request bodies have
//!   their own deadline in the channel that reads them.
//! - **Connection slots**: at most [`ServeLimits::max_connections`] are
//!   served at once, and at most [`ServeLimits::max_connections_per_address`]
//!   from one client address ([`peers`](super::peers)): a connection past
//!   that is closed at once, unanswered.
//! - **Probes while the slots are full**: a small reserve of connections
//!   past `max_connections` answers `/healthz` and `/readyz` at once and
//!   holds any other request until a main slot frees
//!   ([`slots`](super::slots) says why). While the reserve is full too,
//!   new connections wait in the listen backlog.
//!
//! Shutdown is hyper-util's [`GracefulShutdown`]: when `shutdown` completes
//! the listener closes, every connection finishes the request it is serving
//! (an idle one closes at once), and [`serve`] returns when the last one has.
//! Connections are tasks owned by [`serve`]: dropping its future (the
//! gateway's stop does after 5 s) cuts the ones still open. Connections are
//! plain HTTP/1.1 (no protocol upgrades: no route of bub's needs one).

use super::peers::Peers;
use super::slots::{RESERVE_HEAD_DEADLINE, ReserveSlot, Slot, Slots, busy};
pub use crate::config::ServeLimits;
use axum::Router;
use hyper::body::Incoming;
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::Instrument;

/// Accepts connections on `listener` and serves `app` on each until `shutdown` completes,
/// then waits for the connections to finish what they are doing.
pub async fn serve(listener: TcpListener, app: Router, limits: ServeLimits, shutdown: impl Future<Output = ()>) {
    let slots = Slots::new(limits.max_connections);
    let peers = Peers::new(limits.max_connections_per_address);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Reap the connections that ended, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            slot = slots.next() => slot,
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
        let Some(counted) = peers.admit(peer.ip()) else {
            // Dropping the stream closes it; the slot goes back with it.
            metrics::counter!("bub_http_connections_refused_total", "reason" => "per_address").increment(1);
            tracing::debug!(%peer, "connection refused: its address holds max_connections_per_address");
            continue;
        };
        // No Nagle delay on small responses (a sync reply, an SSE event).
        let _ = stream.set_nodelay(true);
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new());
        let (main, reserve) = match slot.settle() {
            Slot::Main(permit) => {
                builder.header_read_timeout(limits.read_timeout);
                (Some(permit), None)
            }
            Slot::Reserve(reserve) => {
                builder.header_read_timeout(limits.read_timeout.min(RESERVE_HEAD_DEADLINE)).keep_alive(false);
                (None, Some(Arc::new(reserve)))
            }
        };
        let service = routed(&app, reserve, limits.read_timeout, peer);
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        // Each connection in a span of its own, a child of the server's: what
        // its requests log names the peer, never another connection's.
        let span = tracing::info_span!("http.connection", %peer);
        let serving = async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error");
            }
            drop((main, counted));
        };
        connections.spawn(serving.instrument(span));
    }
    drop(listener);
    graceful.shutdown().await;
}

/// `app` as one connection's service; each request carries the
/// connection's [`Peer`](super::Peer) address. On a reserve connection a request
/// other than a probe first waits (up to `wait`) for a main slot, and gets
/// [`busy`] when none frees; the reserve's slot is released with the
/// service, that is when the connection closes.
fn routed(
    app: &Router,
    reserve: Option<Arc<ReserveSlot>>,
    wait: Duration,
    peer: std::net::SocketAddr,
) -> impl Service<
    hyper::Request<Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + use<> {
    let app = TowerToHyperService::new(app.clone());
    service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(super::Peer(peer));
        let admitted = reserve.as_ref().and_then(|reserve| reserve.admit(request.uri().path(), wait));
        // Routing starts when this is first polled, after the admission.
        let response = app.call(request);
        async move {
            if let Some(admitted) = admitted
                && !admitted.await
            {
                metrics::counter!("bub_http_connections_refused_total", "reason" => "busy").increment(1);
                return Ok(busy());
            }
            response.await
        }
    })
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
