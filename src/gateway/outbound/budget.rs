//! When a chat or a channel may send next: the configured budgets (governor
//! quotas) and the pauses platforms impose with a 429.

use bub_channel::RateScope;
use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{NotUntil, Quota, RateLimiter};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// How fast the gateway may send on one channel: across all its chats, and to
/// any one chat. `None` is unlimited (the platform's 429s still hold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget {
    pub per_channel: Option<Quota>,
    pub per_chat: Option<Quota>,
}

/// governor's clock on tokio's time, so budgets and 429 pauses share one
/// timeline and tests can run them under paused time. governor's own
/// `until_ready` sleeps on a separate timer, so [`Gate::wait`] sleeps on tokio's.
#[derive(Debug, Clone, Copy, Default)]
struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> std::time::Instant {
        Instant::now().into_std()
    }
}

type ChannelLimiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<std::time::Instant>>;
type ChatLimiter = RateLimiter<String, DefaultKeyedStateStore<String>, TokioClock, NoOpMiddleware<std::time::Instant>>;

/// Chats with more tracked budget state than this get their idle entries pruned.
const CHAT_STATE_PRUNE_AT: usize = 10_000;

/// A channel's budgets in force, with the chats whose policy sets a per-chat
/// rate of its own.
struct Limits {
    budget: Budget,
    own_rates: HashMap<String, Option<Quota>>,
    /// The channel's budget counted as platforms count theirs: calls in any window (see [`Window`]).
    per_channel: Option<Window>,
    /// The share of `per_channel` hints may use: half of it.
    hints: Option<ChannelLimiter>,
    per_chat: Option<ChatLimiter>,
    /// The chats of `own_rates` that have a rate (the others are unlimited).
    own: HashMap<String, ChannelLimiter>,
}

impl Limits {
    fn new(budget: Budget, own_rates: HashMap<String, Option<Quota>>) -> Limits {
        let own = own_rates
            .iter()
            .filter_map(|(chat, quota)| Some((chat.clone(), RateLimiter::direct_with_clock((*quota)?, TokioClock))))
            .collect();
        Limits {
            per_channel: budget.per_channel.map(Window::new),
            hints: budget.per_channel.and_then(half).map(|quota| RateLimiter::direct_with_clock(quota, TokioClock)),
            per_chat: budget.per_chat.map(|quota| RateLimiter::new(quota, Default::default(), TokioClock)),
            budget,
            own_rates,
            own,
        }
    }

    /// Takes room in `chat`'s budget, or says when there will be some.
    fn take_chat(&self, chat: &str) -> Result<(), NotUntil<std::time::Instant>> {
        match self.own_rates.get(chat) {
            Some(Some(_)) => self.own.get(chat).map_or(Ok(()), |limiter| limiter.check()),
            Some(None) => Ok(()),
            None => match &self.per_chat {
                Some(limiter) => {
                    let taken = limiter.check_key(&chat.to_owned());
                    if limiter.len() > CHAT_STATE_PRUNE_AT {
                        limiter.retain_recent();
                    }
                    taken
                }
                None => Ok(()),
            },
        }
    }

    /// Takes room in the channel's budget, or says how long until there is some.
    fn take_channel(&self) -> Result<(), Duration> {
        self.per_channel.as_ref().map_or(Ok(()), Window::take)
    }

    fn take_hint(&self) -> bool {
        self.hints.as_ref().is_none_or(|limiter| limiter.check().is_ok())
    }
}

/// "`count` per `period`" as platforms count it: at most `count` calls in
/// any window of `period` (Discord's 50 requests in any second, Telegram's
/// 30 messages a second), `count` of them at once if they come together.
/// A governor quota of the same rate is a smooth flow with a burst of
/// `count` on top, which lets up to twice `count` through in one window,
/// and the platform answers the excess with 429s.
struct Window {
    count: usize,
    period: Duration,
    /// When the calls of the last `period` were let through, oldest first.
    sent: Mutex<std::collections::VecDeque<Instant>>,
}

impl Window {
    /// The window of `quota` (`count` per `period` is a burst of `count`, one cell per `period / count`).
    fn new(quota: Quota) -> Window {
        let count = quota.burst_size().get();
        Window { count: count as usize, period: quota.replenish_interval() * count, sent: Mutex::default() }
    }

    fn take(&self) -> Result<(), Duration> {
        let now = Instant::now();
        let mut sent = self.sent.lock();
        while sent.front().is_some_and(|at| now.duration_since(*at) >= self.period) {
            sent.pop_front();
        }
        match sent.front() {
            Some(oldest) if sent.len() >= self.count => Err(self.period - now.duration_since(*oldest)),
            _ => {
                sent.push_back(now);
                Ok(())
            }
        }
    }
}

/// Half of `quota`: twice the time per cell, half the burst (at least one).
fn half(quota: Quota) -> Option<Quota> {
    let burst = NonZeroU32::new((quota.burst_size().get() / 2).max(1))?;
    Quota::with_period(quota.replenish_interval() * 2).map(|half| half.allow_burst(burst))
}

/// One channel's budgets and pauses. Pauses and budgets belong to the
/// platform's chat id: threads of one chat share them, as platforms count them.
pub(super) struct Gate {
    limits: RwLock<Arc<Limits>>,
    pauses: Mutex<Pauses>,
    /// Sends waiting in [`Gate::wait`] now (for a pause, or room in a budget).
    waiting: AtomicUsize,
}

#[derive(Default)]
struct Pauses {
    channel: Option<Instant>,
    chats: HashMap<String, Instant>,
}

impl Gate {
    pub(super) fn new(budget: Budget) -> Gate {
        Gate {
            limits: RwLock::new(Arc::new(Limits::new(budget, HashMap::new()))),
            pauses: Mutex::new(Pauses::default()),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Puts `budget`, and the chats' own rates, in force. Unchanged budgets
    /// keep counting; changed ones start afresh under the new rates.
    pub(super) fn set(&self, budget: Budget, own_rates: HashMap<String, Option<Quota>>) {
        let mut limits = self.limits.write();
        if limits.budget != budget || limits.own_rates != own_rates {
            *limits = Arc::new(Limits::new(budget, own_rates));
        }
    }

    fn limits(&self) -> Arc<Limits> {
        self.limits.read().clone()
    }

    /// Waits until no pause holds for `chat` and both budgets have room, and
    /// takes that room. Never gives up: a final reply only waits.
    pub(super) async fn wait(&self, chat: &str) {
        let _waiting = Waiting::enter(&self.waiting);
        self.wait_pauses(chat).await;
        let limits = self.limits();
        while let Err(not_until) = limits.take_chat(chat) {
            tokio::time::sleep(not_until.wait_time_from(TokioClock.now())).await;
        }
        while let Err(wait) = limits.take_channel() {
            tokio::time::sleep(wait).await;
        }
        // A 429 may have arrived while this send waited for its budget.
        self.wait_pauses(chat).await;
    }

    /// Takes room for one send without waiting; `false` when `chat` is paused
    /// or a budget is exhausted. For sends that may be dropped (live edits).
    pub(super) fn try_take(&self, chat: &str) -> bool {
        if self.paused_until(chat).is_some() {
            return false;
        }
        // governor cannot look without taking: when the channel budget then
        // refuses, the chat's room is spent anyway. That errs on sending less.
        let limits = self.limits();
        limits.take_chat(chat).is_ok() && limits.take_channel().is_ok()
    }

    /// Takes room for a hint ("typing…") only where it is spare: no send
    /// waits on this channel (for a pause or a budget, in any chat: it will
    /// want the channel's room), no pause holds `chat`, and both the hints'
    /// share (half the channel's budget) and the channel's budget have room
    /// now; `false` otherwise. A chat's own budget is left to its messages (a
    /// chat gets one hint every few seconds at most anyway).
    pub(super) fn try_take_hint(&self, chat: &str) -> bool {
        if self.waiting.load(Ordering::Acquire) > 0 || self.paused_until(chat).is_some() {
            return false;
        }
        // As in `try_take`, a hint's share spent on a refusal errs on sending fewer hints.
        let limits = self.limits();
        limits.take_hint() && limits.take_channel().is_ok()
    }

    /// Holds every send to `chat` (or, for [`RateScope::Channel`], to the whole
    /// channel) for `duration` from now. A longer pause already in place stays.
    pub(super) fn pause(&self, chat: &str, scope: RateScope, duration: Duration) {
        let now = Instant::now();
        let until = now + duration;
        let mut pauses = self.pauses.lock();
        let slot = match scope {
            RateScope::Channel => pauses.channel.get_or_insert(until),
            RateScope::Chat => {
                pauses.chats.retain(|_, until| *until > now);
                pauses.chats.entry(chat.to_owned()).or_insert(until)
            }
        };
        *slot = (*slot).max(until);
    }

    /// The end of the pause holding `chat` now, if one does.
    fn paused_until(&self, chat: &str) -> Option<Instant> {
        let pauses = self.pauses.lock();
        let until = pauses.channel.into_iter().chain(pauses.chats.get(chat).copied()).max()?;
        (until > Instant::now()).then_some(until)
    }

    async fn wait_pauses(&self, chat: &str) {
        while let Some(until) = self.paused_until(chat) {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// Counts a send waiting in [`Gate::wait`] while it lives (dropped when the
/// wait ends or is given up).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends through a gate as fast as it lets them for 3 s: the most that
    /// went out in any one second, and how many went out in all.
    async fn most_in_one_second(budget: Budget) -> (usize, usize) {
        let gate = Gate::new(budget);
        let start = Instant::now();
        let mut sent = Vec::new();
        while Instant::now() - start < Duration::from_secs(3) {
            gate.wait("chat").await;
            sent.push(Instant::now() - start);
        }
        let second = Duration::from_secs(1);
        let most = sent.iter().map(|from| sent.iter().filter(|at| **at >= *from && **at < *from + second).count());
        (most.max().unwrap_or(0), sent.len())
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_budget_never_lets_more_than_its_count_through_in_one_window() {
        let quota = crate::gateway::limiter::quota("50/s".parse().unwrap());
        let (most, total) = most_in_one_second(Budget { per_channel: quota, per_chat: None }).await;
        assert_eq!(most, 50, "Discord's 50 requests in any second");
        assert!((150..=151).contains(&total), "and the whole rate over time: {total}");
    }
}
