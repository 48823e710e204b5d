//! The server's connection slots: [`ServeLimits::max_connections`] main
//! slots that serve anything, and a small reserve, used only while every
//! main slot is taken, that answers health and readiness at once and holds
//! anything else until a main slot frees.
//!
//! Why a reserve: connections that never finish their request head (a
//! slowloris) can hold every main slot for a whole head deadline, again and
//! again; a liveness probe waiting behind them in the listen backlog times
//! out and the orchestrator restarts a healthy gateway. A second listener
//! for probes would need a port of its own in every deployment; a reserve
//! on the same port needs nothing. The reserve is kept for probes by
//! serving one request per connection, under a short head deadline, and by
//! letting any other request wait there only as long as it would have had
//! to send its head (then 503 with `Retry-After`, which webhook senders
//! retry on).
//!
//! [`ServeLimits::max_connections`]: crate::config::ServeLimits::max_connections

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections the reserve serves at once, past `max_connections`.
pub(super) const RESERVE: usize = 16;

/// How long a reserve connection has to send its head: a probe sends it in
/// one packet; the reserve must not be held as long as the main slots.
pub(super) const RESERVE_HEAD_DEADLINE: Duration = Duration::from_secs(5);

/// The paths a reserve connection answers without a main slot.
const PROBES: [&str; 2] = ["/healthz", "/readyz"];

/// The main slots and the reserve.
pub(super) struct Slots {
    main: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
}

/// A connection's claim on one slot, released when it is dropped.
pub(super) enum Slot {
    Main(OwnedSemaphorePermit),
    Reserve(ReserveSlot),
}

/// A reserve connection's claim: the reserve's permit until its request
/// moves to a main slot, then that one.
pub(super) struct ReserveSlot {
    main: Arc<Semaphore>,
    held: Mutex<OwnedSemaphorePermit>,
}

impl Slots {
    pub(super) fn new(max_connections: usize) -> Slots {
        Slots { main: Arc::new(Semaphore::new(max_connections.max(1))), reserve: Arc::new(Semaphore::new(RESERVE)) }
    }

    /// Waits for a free slot: a main one when there is one, else one of the
    /// reserve's. While both are full, new connections wait in the listen
    /// backlog.
    pub(super) async fn next(&self) -> Slot {
        tokio::select! {
            biased;
            Ok(permit) = self.main.clone().acquire_owned() => Slot::Main(permit),
            Ok(permit) = self.reserve.clone().acquire_owned() => {
                Slot::Reserve(ReserveSlot { main: self.main.clone(), held: Mutex::new(permit) })
            }
            // The semaphores are never closed; if they were, nothing would be served.
            else => std::future::pending().await,
        }
    }
}

impl Slot {
    /// A reserve slot taken while waiting for a connection becomes a main
    /// slot if one has freed since.
    pub(super) fn settle(self) -> Slot {
        match self {
            Slot::Reserve(reserve) => match reserve.main.clone().try_acquire_owned() {
                Ok(main) => Slot::Main(main),
                Err(_) => Slot::Reserve(reserve),
            },
            main => main,
        }
    }
}

impl ReserveSlot {
    /// What a request on this connection must wait for before it is routed:
    /// nothing for a probe (`None`), a main slot otherwise, for at most
    /// `wait` — the future answers whether it got one (and then holds it,
    /// giving the reserve's back, until the connection closes).
    pub(super) fn admit(self: &Arc<Self>, path: &str, wait: Duration) -> Option<impl Future<Output = bool> + use<>> {
        if PROBES.contains(&path) {
            return None;
        }
        let slot = self.clone();
        Some(async move {
            let Ok(Ok(main)) = tokio::time::timeout(wait, slot.main.clone().acquire_owned()).await else {
                return false;
            };
            // The reserve's permit is released here, for the next probe.
            *slot.held.lock() = main;
            true
        })
    }
}

/// The answer to a request that found no main slot in time.
pub(super) fn busy() -> Response {
    let body = json!({"error": "busy", "message": "every connection slot is in use; retry shortly"});
    (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1"), (header::CONNECTION, "close")], Json(body))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_reserve_is_used_only_while_the_main_slots_are_full() {
        let slots = Slots::new(1);
        let main = slots.next().await;
        assert!(matches!(main, Slot::Main(_)));
        let reserve = slots.next().await;
        assert!(matches!(reserve, Slot::Reserve(_)));
        drop(main);
        assert!(matches!(reserve.settle(), Slot::Main(_)), "a main slot freed: the connection takes it");
    }

    #[tokio::test]
    async fn a_probe_is_admitted_at_once_and_anything_else_waits_for_a_main_slot() {
        let slots = Slots::new(1);
        let main = slots.next().await;
        let Slot::Reserve(reserve) = slots.next().await else { panic!("the main slot is taken") };
        let reserve = Arc::new(reserve);
        assert!(reserve.admit("/healthz", Duration::ZERO).is_none());
        assert!(reserve.admit("/readyz", Duration::ZERO).is_none());
        let refused = reserve.admit("/webhook/hooks", Duration::from_millis(1)).expect("a wait");
        assert!(!refused.await, "no main slot freed");
        let waiting = reserve.admit("/metrics", Duration::from_secs(600)).expect("a wait");
        let free_reserve = slots.reserve.available_permits();
        drop(main);
        assert!(waiting.await, "the freed main slot is taken");
        assert_eq!(slots.reserve.available_permits(), free_reserve + 1, "the reserve's slot is given back");
        assert_eq!(slots.main.available_permits(), 0, "held until the connection closes");
        drop(reserve);
        assert_eq!(slots.main.available_permits(), 1);
    }
}
