//! [`Backoff`]: how long to wait before trying again, written once for
//! every retry loop of bub (model calls, outbound sends, Telegram polling).

use rand::Rng;
use std::time::Duration;

/// Exponential backoff with "equal jitter": before attempt `n` (1-based)
/// the ceiling is `first · 2^(n-1)`, capped at `max`; the wait is the lower
/// half of it plus a random share of the upper half. Many clients failing
/// at once spread out, and none retries sooner than half its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max }
    }

    /// The ceiling before attempt `attempt` (1-based; 0 counts as 1), unjittered.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.first.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// The wait before attempt `attempt`: between half the ceiling and the ceiling.
    pub fn delay(&self, attempt: u32) -> Duration {
        let half = self.ceiling(attempt) / 2;
        half + half.mul_f64(rand::rng().random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_stay_in_the_upper_half() {
        let backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        assert_eq!(backoff.ceiling(0), Duration::from_millis(200));
        assert_eq!(backoff.ceiling(1), Duration::from_millis(200));
        assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
        assert_eq!(backoff.ceiling(40), Duration::from_secs(30));
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(30));
        for attempt in 1..50 {
            let (ceiling, delay) = (backoff.ceiling(attempt), backoff.delay(attempt));
            assert!(delay >= ceiling / 2 && delay <= ceiling, "{attempt}: {delay:?} vs {ceiling:?}");
        }
    }
}
