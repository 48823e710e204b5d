//! A summary within the budget its request asked for.
//!
//! The summary request sets `max_tokens`, but a model or a proxy can ignore
//! it and answer with a summary as long as the transcript: the context would
//! then be no smaller after the compaction than before, and the next one
//! would come at once. So the summary is cut on our side to the budget, at
//! the last sentence end that keeps at least half of what fits, else at the
//! last word boundary (marked with `…`), else between characters (a text
//! without spaces). The summary event records that it was cut.

use crate::message::tokens::TokenCounter;

/// Tokens kept free for the `…` that marks a cut inside a sentence.
const MARK_TOKENS: u64 = 2;

/// `text` within `max` tokens of `counter`; `None` when it fits as it is.
pub(super) fn cut_to(text: &str, counter: &TokenCounter, max: u64) -> Option<String> {
    if counter.count(text) <= max {
        return None;
    }
    let fits = &text[..counter.prefix_within(text, max.saturating_sub(MARK_TOKENS))];
    let half = fits.len() / 2;
    if let Some(end) = sentence_end(fits).filter(|end| *end >= half) {
        return Some(fits[..end].trim_end().to_string());
    }
    match fits.rfind(char::is_whitespace).filter(|at| *at >= half) {
        Some(at) => Some(format!("{} …", fits[..at].trim_end())),
        None => Some(format!("{fits}…")),
    }
}

/// The byte index just after the last sentence end in `text`: a full stop,
/// question or exclamation mark followed by a space or a line break (or
/// ending the text), a CJK full stop, or a line break.
fn sentence_end(text: &str) -> Option<usize> {
    let mut chars = text.char_indices().peekable();
    let mut last = None;
    while let Some((at, c)) = chars.next() {
        let after = at + c.len_utf8();
        let next_is_space = chars.peek().is_none_or(|(_, next)| next.is_whitespace());
        let ends = match c {
            '.' | '!' | '?' => next_is_space,
            '。' | '！' | '？' | '\n' => true,
            _ => false,
        };
        if ends {
            last = Some(after);
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_within_its_budget_is_left_alone() {
        assert_eq!(cut_to("Short and sweet.", &TokenCounter::estimate(), 100), None);
    }

    #[test]
    fn an_overlong_summary_ends_at_a_sentence_within_the_budget() {
        let counter = TokenCounter::estimate();
        let text = "Decision 12: keep the weekly report on Fridays. ".repeat(200);
        let cut = cut_to(&text, &counter, 120).expect("cut");
        assert!(counter.count(&cut) <= 120, "{}", counter.count(&cut));
        assert!(cut.ends_with("on Fridays."), "{cut}");
        assert!(counter.count(&cut) > 60, "most of the budget is used");
    }

    #[test]
    fn one_endless_sentence_is_cut_at_a_word_and_marked() {
        let counter = TokenCounter::estimate();
        let text = "and then the team talked about the release ".repeat(100);
        let cut = cut_to(&text, &counter, 50).expect("cut");
        assert!(counter.count(&cut) <= 50);
        assert!(cut.ends_with(" …") && !cut.ends_with("  …"), "{cut}");
    }

    #[test]
    fn text_without_spaces_is_cut_between_characters() {
        let counter = TokenCounter::estimate();
        let text = "团队决定每周五发布报告".repeat(50);
        let cut = cut_to(&text, &counter, 30).expect("cut");
        assert!(counter.count(&cut) <= 30, "{cut}");
        assert!(cut.ends_with('…'));
        let chinese = "团队决定每周五发布报告。".repeat(50);
        assert!(cut_to(&chinese, &counter, 30).unwrap().ends_with('。'));
    }
}
