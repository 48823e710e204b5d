//! [`FailedAttempts`]: wrong admin tokens, counted per client address (an
//! IPv6 client by its /64) and in all, over a sliding minute. Past
//! [`PER_ADDRESS`] failures an address is refused (429) until its oldest
//! failure is a minute old; past [`IN_ALL`] everyone is, so guessing from
//! many addresses is slow too. Only failures count: an admin who logs in
//! often is never locked out by it.
//!
//! Hand-written rather than `governor`'s keyed limiter: a limiter spends a
//! cell on every check, while here a check must not count, only a failure.
//! Behind a reverse proxy every client has the proxy's address, so the
//! limit is then shared by everyone: the console still cannot be guessed at.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failures one address may have in a minute.
pub(crate) const PER_ADDRESS: usize = 5;
/// Failures all addresses together may have in a minute.
pub(crate) const IN_ALL: usize = 50;
const WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most (the oldest are forgotten past it).
const ADDRESSES: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct FailedAttempts {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    by_address: HashMap<IpAddr, VecDeque<Instant>>,
    all: VecDeque<Instant>,
}

impl FailedAttempts {
    /// Counts a failure of `address`.
    pub(crate) fn record(&self, address: IpAddr) {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.prune(now);
        if state.by_address.len() >= ADDRESSES {
            state.by_address.clear();
        }
        state.by_address.entry(crate::http::address_key(address)).or_default().push_back(now);
        state.all.push_back(now);
    }

    /// How long `address` must wait before its next attempt, when it must.
    pub(crate) fn blocked_for(&self, address: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.prune(now);
        let wait = |failures: &VecDeque<Instant>, cap: usize| {
            (failures.len() >= cap).then(|| failures.front().map_or(WINDOW, |oldest| WINDOW - (now - *oldest)))
        };
        let own =
            state.by_address.get(&crate::http::address_key(address)).and_then(|failures| wait(failures, PER_ADDRESS));
        own.or_else(|| wait(&state.all, IN_ALL))
    }
}

impl State {
    fn prune(&mut self, now: Instant) {
        let old = |at: &Instant| now.duration_since(*at) >= WINDOW;
        while self.all.front().is_some_and(old) {
            self.all.pop_front();
        }
        self.by_address.retain(|_, failures| {
            while failures.front().is_some_and(old) {
                failures.pop_front();
            }
            !failures.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_stopped_after_its_failures_and_others_are_not() {
        let attempts = FailedAttempts::default();
        let guesser: IpAddr = "203.0.113.9".parse().unwrap();
        let admin: IpAddr = "198.51.100.1".parse().unwrap();
        for _ in 0..PER_ADDRESS - 1 {
            attempts.record(guesser);
        }
        assert!(attempts.blocked_for(guesser).is_none());
        attempts.record(guesser);
        let wait = attempts.blocked_for(guesser).unwrap();
        assert!(wait > Duration::from_secs(55) && wait <= WINDOW, "{wait:?}");
        assert!(attempts.blocked_for(admin).is_none());
        let same_64: IpAddr = "2001:db8::1".parse().unwrap();
        for _ in 0..PER_ADDRESS {
            attempts.record(same_64);
        }
        assert!(attempts.blocked_for("2001:db8::ffff".parse().unwrap()).is_some(), "a /64 counts as one");
    }

    #[test]
    fn many_addresses_together_stop_everyone() {
        let attempts = FailedAttempts::default();
        for n in 0..IN_ALL {
            attempts.record(IpAddr::from([10, 0, (n / 250) as u8, (n % 250) as u8]));
        }
        assert!(attempts.blocked_for("192.0.2.1".parse().unwrap()).is_some());
    }
}
