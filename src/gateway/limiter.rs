//! Inbound rate limits per user, and the outbound budgets a policy asks for.

use super::outbound::Budget;
use crate::policy::{EffectivePolicy, Rate};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A governor quota for "`count` per `per`", allowing a burst of `count`.
pub(crate) fn quota(rate: Rate) -> Option<Quota> {
    let count = NonZeroU32::new(rate.count)?;
    let period = rate.period.checked_div(rate.count)?;
    Quota::with_period(period).map(|quota| quota.allow_burst(count))
}

/// The outbound budgets of a channel's policy.
pub(crate) fn outbound_budget(policy: &EffectivePolicy) -> Budget {
    Budget {
        per_channel: policy.outbound_per_channel.value.and_then(quota),
        per_chat: policy.outbound_per_chat.value.and_then(quota),
    }
}

/// A channel and the rate its policy sets.
type RateKey = (String, u32, Duration);

/// One keyed limiter per channel and rate, so a policy reload that changes a
/// rate starts counting afresh under the new one.
#[derive(Default)]
pub(crate) struct InboundLimiter {
    limiters: Mutex<HashMap<RateKey, Arc<DefaultKeyedRateLimiter<String>>>>,
}

impl InboundLimiter {
    /// `Err(wait)` when `user` has used up `rate` on `channel`.
    pub(crate) fn check(&self, channel: &str, user: &str, rate: Rate) -> Result<(), Duration> {
        let Some(quota) = quota(rate) else { return Ok(()) };
        let limiter = {
            let mut limiters = self.limiters.lock().unwrap_or_else(|p| p.into_inner());
            let limiter = limiters
                .entry((channel.to_string(), rate.count, rate.period))
                .or_insert_with(|| Arc::new(DefaultKeyedRateLimiter::keyed(quota)))
                .clone();
            if limiter.len() > 10_000 {
                limiter.retain_recent();
            }
            limiter
        };
        limiter
            .check_key(&user.to_string())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}
