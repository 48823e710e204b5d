//! How a model's window is shared out between the part of every request
//! that compaction cannot shrink and the conversation.
//!
//! The system prompt and the tool schemas (the *fixed part*) go with every
//! request: with every builtin tool they are about 4,000 tokens, half of an
//! 8k window. They come off the budget first; what is left below
//! `compact_at` is the conversation's *room*. A compaction keeps a third of
//! the room of recent turns verbatim and asks for a summary of at most a
//! sixth, so at least half of the room is free for the turns that follow
//! (with a negligible fixed part these are the old shares: a quarter of the
//! window kept, an eighth for the summary). Taking the shares of the whole
//! window instead made a compaction on an 8k window leave the context over
//! `compact_at` again, and compact after every turn.
//!
//! When the fixed part leaves less than a quarter of the window below
//! `compact_at` (a 4k window with every tool), the room is that quarter
//! anyway, past `compact_at` if need be: compacting after every turn would
//! cost a summary call per turn and still not make the context fit.

use super::CompactionSettings;
use serde::Serialize;

/// The summary's share of the room, at the least and at the most (a summary
/// past 3,000 tokens is no longer notes, whatever the window).
const MIN_SUMMARY_TOKENS: u64 = 120;
const MAX_SUMMARY_TOKENS: u64 = 3_000;

/// One window shared out, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// The model's window.
    pub window: u64,
    /// The system prompt and the tool schemas, as last counted.
    pub fixed: u64,
    /// Where compaction starts: the fixed part plus the room.
    pub threshold: u64,
    /// The conversation's share: from the fixed part to `compact_at` of the
    /// window, and never less than a quarter of the window.
    pub room: u64,
    /// The recent turns a compaction keeps verbatim: `keep_recent_tokens`,
    /// else a third of the room; never more than half of it.
    pub keep: u64,
    /// The most a summary may take.
    pub summary: u64,
}

impl Budget {
    /// The room a compaction leaves free for the turns after it, at the
    /// least (with the largest summary it allows).
    pub fn free_after_compaction(&self) -> u64 {
        self.room.saturating_sub(self.keep + self.summary)
    }
}

impl CompactionSettings {
    /// How `window` is shared out when the system prompt and the tool
    /// schemas take `fixed` tokens of every request.
    ///
    /// ```
    /// use bub::agent::CompactionSettings;
    ///
    /// let settings = CompactionSettings::default();
    /// // 8k with every builtin tool: compaction leaves half the room free.
    /// let budget = settings.budget(8_000, 3_900);
    /// assert_eq!((budget.threshold, budget.room, budget.keep, budget.summary), (6_000, 2_100, 700, 350));
    /// // 4k: the fixed part is past compact_at; the conversation still gets a quarter.
    /// let budget = settings.budget(4_096, 3_900);
    /// assert_eq!((budget.room, budget.threshold), (1_024, 4_924));
    /// ```
    pub fn budget(&self, window: u64, fixed: u64) -> Budget {
        let room = self.threshold(window).saturating_sub(fixed).max(window / 4);
        let keep = self.keep_recent_tokens.unwrap_or(room / 3).min(room / 2);
        let summary = (room / 6).clamp(MIN_SUMMARY_TOKENS, MAX_SUMMARY_TOKENS);
        Budget { window, fixed, threshold: fixed + room, room, keep, summary }
    }

    /// `compact_at` of `window`, before the fixed part is counted.
    fn threshold(&self, window: u64) -> u64 {
        let at =
            if self.compact_at > 0.0 && self.compact_at <= 1.0 { self.compact_at } else { super::DEFAULT_COMPACT_AT };
        (window as f64 * at) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negligible_fixed_part_keeps_the_old_shares() {
        let budget = CompactionSettings::default().budget(128_000, 0);
        assert_eq!(budget.threshold, 96_000);
        assert_eq!(budget.keep, 32_000, "a quarter of the window");
        assert_eq!(budget.summary, MAX_SUMMARY_TOKENS);
    }

    #[test]
    fn a_compaction_leaves_at_least_half_the_room_free() {
        for (window, fixed) in [(4_096, 3_900), (8_000, 3_900), (12_000, 3_900), (32_768, 3_900), (200_000, 5_000)] {
            let budget = CompactionSettings::default().budget(window, fixed);
            assert!(budget.free_after_compaction() >= budget.room / 2, "{budget:?}");
        }
    }

    #[test]
    fn a_configured_keep_is_held_to_half_the_room() {
        let settings = CompactionSettings { keep_recent_tokens: Some(5_000), ..CompactionSettings::default() };
        assert_eq!(settings.budget(8_000, 3_900).keep, 1_050);
        let settings = CompactionSettings { keep_recent_tokens: Some(1_000), ..CompactionSettings::default() };
        assert_eq!(settings.budget(8_000, 3_900).keep, 1_000);
    }
}
