//! Connections per client address, so one address cannot take every slot
//! ([`ServeLimits::max_connections_per_address`]).
//!
//! An IPv6 client counts by its /64: one host is handed a whole /64 and can
//! pick any address in it. An IPv4-mapped IPv6 address counts as its IPv4
//! address. Behind a reverse proxy every client arrives from the proxy's
//! address, so there the cap must be raised to `max_connections` (the proxy
//! is where per-client limits then belong).
//!
//! [`ServeLimits::max_connections_per_address`]: crate::config::ServeLimits::max_connections_per_address

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// Open connections by client address, each at most `cap`.
pub(super) struct Peers {
    cap: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of an address; counted until dropped.
pub(super) struct PeerConnection {
    key: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Peers {
    pub(super) fn new(cap: usize) -> Peers {
        Peers { cap: cap.max(1), open: Arc::default() }
    }

    /// Counts a new connection from `address`; `None` when that address
    /// already holds `cap`.
    pub(super) fn admit(&self, address: IpAddr) -> Option<PeerConnection> {
        let key = key(address);
        let mut open = lock(&self.open);
        let count = open.entry(key).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(PeerConnection { key, open: self.open.clone() })
    }
}

impl Drop for PeerConnection {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// What an address is counted as: itself (IPv4), its /64 (IPv6).
pub(crate) fn key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((v6.to_bits() & !u128::from(u64::MAX)).into()),
        },
    }
}

/// The counts stay right even if a holder panicked: each change is one step.
fn lock(open: &Mutex<HashMap<IpAddr, usize>>) -> MutexGuard<'_, HashMap<IpAddr, usize>> {
    open.lock()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_holds_at_most_the_cap_and_a_closed_connection_frees_its_place() {
        let peers = Peers::new(2);
        let first = peers.admit(ip("192.0.2.1")).unwrap();
        let _second = peers.admit(ip("192.0.2.1")).unwrap();
        assert!(peers.admit(ip("192.0.2.1")).is_none());
        assert!(peers.admit(ip("192.0.2.2")).is_some(), "another address is not affected");
        drop(first);
        assert!(peers.admit(ip("192.0.2.1")).is_some());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let peers = Peers::new(1);
        let _held = peers.admit(ip("2001:db8:1:2::1")).unwrap();
        assert!(peers.admit(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        assert!(peers.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _v4 = peers.admit(ip("192.0.2.7")).unwrap();
        assert!(peers.admit(ip("::ffff:192.0.2.7")).is_none());
    }

    #[test]
    fn addresses_without_connections_are_forgotten() {
        let peers = Peers::new(1);
        drop(peers.admit(ip("192.0.2.1")));
        assert!(lock(&peers.open).is_empty());
    }
}
