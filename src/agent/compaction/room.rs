//! The notice a compaction leaves when it cannot make room for several
//! turns: a small window mostly filled by the system prompt and the tool
//! schemas (a local model with a 4k window), or a `keep_recent_tokens` that
//! takes most of the room. Compaction then comes every turn or two, each
//! time a model call and a new cached prefix; saying so every time would
//! only add noise, so it is said once per tape and window: an event
//! [`WARNING_EVENT`] (which `tape.info` shows) and a log warning.

use super::{Budget, CompactionSettings};
use crate::tape::{Tape, TapeResult};
use serde_json::{Value, json};

pub use crate::tape::COMPACTION_WARNING as WARNING_EVENT;

/// Fewer turns than this between two compactions is too few.
pub const MIN_TURNS_BETWEEN: u64 = 3;

/// What a compaction leaves for the turns after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Room {
    /// Whole turns of `turn_tokens` that fit before the next compaction, at
    /// the least (with the largest summary the budget allows).
    pub turns: u64,
    /// The average turn of the context being compacted.
    pub turn_tokens: u64,
}

impl Room {
    /// The room `budget` leaves for turns of `turn_tokens`.
    pub fn of(budget: &Budget, turn_tokens: u64) -> Room {
        let turn_tokens = turn_tokens.max(1);
        Room { turns: budget.free_after_compaction() / turn_tokens, turn_tokens }
    }

    /// What to tell the user, when there is too little room.
    pub fn notice(&self, budget: &Budget, settings: &CompactionSettings) -> Option<String> {
        if self.turns >= MIN_TURNS_BETWEEN {
            return None;
        }
        let turns = match self.turns {
            0 => "less than one turn".to_string(),
            1 => "about 1 turn".to_string(),
            n => format!("about {n} turns"),
        };
        let Budget { window, fixed, threshold, keep, summary, room } = *budget;
        let advice = match settings.keep_recent_tokens {
            Some(_) if keep > room / 3 => {
                "keep fewer recent tokens (BUB_KEEP_RECENT_TOKENS, keep_recent_tokens), or give the model a larger window"
            }
            _ => "give the model a larger window (on its server, then BUB_CONTEXT_WINDOW or context_window)",
        };
        Some(format!(
            "compaction leaves room for {turns} of {turn_tokens} tokens before the next one: the system prompt and \
             tool schemas take {fixed} of the {window}-token window, compaction starts at {threshold}, the recent \
             turns kept take {keep} and the summary up to {summary}; {advice}",
            turn_tokens = self.turn_tokens,
        ))
    }
}

/// Writes the notice for `room` unless this tape has one for this window
/// already; logs it when it writes it.
pub(super) async fn warn_once(
    tape: &Tape,
    budget: &Budget,
    settings: &CompactionSettings,
    room: Room,
) -> TapeResult<()> {
    let Some(message) = room.notice(budget, settings) else { return Ok(()) };
    let last = tape.last_event_data(WARNING_EVENT).await?;
    if last.and_then(|data| data.get("window").and_then(Value::as_u64)) == Some(budget.window) {
        return Ok(());
    }
    tracing::warn!(
        session = %tape.name(),
        window = budget.window,
        fixed = budget.fixed,
        threshold = budget.threshold,
        turns = room.turns,
        turn_tokens = room.turn_tokens,
        "{message}"
    );
    let data = json!({
        "message": message,
        "window": budget.window,
        "fixed": budget.fixed,
        "threshold": budget.threshold,
        "keep": budget.keep,
        "summary": budget.summary,
        "turns": room.turns,
        "turn_tokens": room.turn_tokens,
    });
    tape.append_event(WARNING_EVENT, data).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_4k_window_with_every_tool_is_too_small_and_says_why() {
        let settings = CompactionSettings::default();
        let budget = settings.budget(4_096, 3_900);
        let notice = Room::of(&budget, 280).notice(&budget, &settings).expect("a notice");
        assert!(notice.starts_with("compaction leaves room for about 1 turn of 280 tokens"), "{notice}");
        assert!(notice.contains("take 3900 of the 4096-token window"), "{notice}");
        assert!(
            notice
                .ends_with("give the model a larger window (on its server, then BUB_CONTEXT_WINDOW or context_window)")
        );
    }

    #[test]
    fn an_8k_window_leaves_room_for_several_turns_unless_keep_takes_it() {
        let settings = CompactionSettings::default();
        let budget = settings.budget(8_000, 3_900);
        assert_eq!(Room::of(&budget, 280).notice(&budget, &settings), None);
        let settings = CompactionSettings { keep_recent_tokens: Some(1_000), ..CompactionSettings::default() };
        let budget = settings.budget(8_000, 3_900);
        let notice = Room::of(&budget, 280).notice(&budget, &settings).expect("a notice");
        assert!(notice.contains("keep fewer recent tokens (BUB_KEEP_RECENT_TOKENS"), "{notice}");
    }
}
