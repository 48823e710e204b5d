//! Inbound rate limits per user, and the outbound budgets a policy asks for.

use super::outbound::Budget;
use crate::config::{GatewayConfig, Rate};
use crate::policy::EffectivePolicy;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
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

/// The outbound budgets `config` sets for `channel`, with the chats whose
/// own policy sets a different per-chat rate (`None`: unlimited).
pub(crate) fn outbound_budgets(
    config: &GatewayConfig,
    channel: &str,
) -> (Budget, HashMap<String, Option<governor::Quota>>) {
    let budget = outbound_budget(&config.effective(channel, ""));
    let mut own_rates = HashMap::new();
    if let Some(channel_config) = config.channels.get(channel) {
        for chat in channel_config.chats.keys() {
            let rate = config.effective(channel, chat).outbound_per_chat.value.and_then(quota);
            if rate != budget.per_chat {
                own_rates.insert(chat.clone(), rate);
            }
        }
    }
    (budget, own_rates)
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
            let mut limiters = self.limiters.lock();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A chat section that sets its own per-chat rate (or turns it off) is
    /// an override; one that does not, or repeats the channel's, is not.
    #[test]
    fn chats_with_their_own_outbound_rate_are_overrides() {
        let config = GatewayConfig::parse(
            r#"
[channels.hooks]
kind = "webhook"
secrets = ["s"]

[channels.hooks.policy]
rate = { outbound_per_chat = "5/s", outbound_per_channel = "30/s" }

[channels.hooks.chats."slow".policy]
rate = { outbound_per_chat = "1/min" }

[channels.hooks.chats."same".policy]
rate = { outbound_per_chat = "5/s" }

[channels.hooks.chats."other".policy]
busy = "drop"
"#,
            "bub.toml",
        )
        .unwrap();
        let (budget, own) = outbound_budgets(&config, "hooks");
        let rate = |text: &str| quota(text.parse().unwrap());
        assert_eq!(budget, Budget { per_chat: rate("5/s"), per_channel: rate("30/s") });
        assert_eq!(own, HashMap::from([("slow".to_string(), rate("1/min"))]));
    }
}
