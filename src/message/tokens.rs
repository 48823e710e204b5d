//! Counting the tokens of what goes to a model.
//!
//! OpenAI-family models (GPT-3.5 and later, the o-series) are counted with
//! their real tokenizer ([`tiktoken_rs`]: `o200k_base` for GPT-4o and later,
//! `cl100k_base` before); every other model with an estimate calibrated on
//! English and code (about 3.5 characters a token) and on scripts written
//! without spaces (a token a character), which errs on the high side so
//! compaction comes early rather than late. What the provider reports as
//! `usage` corrects the estimate where the agent has it (see
//! [`crate::agent::compaction`]). The tokenizers' tables load on first use
//! (a few tens of milliseconds), once per process.

use serde_json::{Map, Value};
use tiktoken_rs::CoreBPE;

/// What one chat message costs beyond its text (role and separators), as
/// OpenAI's cookbook counts it.
pub const MESSAGE_OVERHEAD: u64 = 4;

/// Counts tokens for one model family. Cheap to copy.
#[derive(Clone, Copy)]
pub struct TokenCounter {
    bpe: Option<&'static CoreBPE>,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.bpe.is_some() { "TokenCounter(bpe)" } else { "TokenCounter(estimate)" })
    }
}

impl TokenCounter {
    /// The counter for `model` (`provider:model` or the bare id).
    pub fn for_model(model: &str) -> TokenCounter {
        let id = model.split_once(':').map_or(model, |(_, id)| id);
        let id = id.rsplit('/').next().unwrap_or(id);
        let bpe = match tiktoken_rs::tokenizer::get_tokenizer(id) {
            Some(tiktoken_rs::tokenizer::Tokenizer::O200kBase | tiktoken_rs::tokenizer::Tokenizer::O200kHarmony) => {
                Some(tiktoken_rs::o200k_base_singleton())
            }
            Some(tiktoken_rs::tokenizer::Tokenizer::Cl100kBase) => Some(tiktoken_rs::cl100k_base_singleton()),
            _ => None,
        };
        TokenCounter { bpe }
    }

    /// The calibrated estimate, for any model.
    pub fn estimate() -> TokenCounter {
        TokenCounter { bpe: None }
    }

    /// Whether this counter is the model's real tokenizer.
    pub fn is_exact(&self) -> bool {
        self.bpe.is_some()
    }

    /// The tokens of `text`.
    pub fn count(&self, text: &str) -> u64 {
        match self.bpe {
            Some(bpe) => bpe.encode_ordinary(text).len() as u64,
            None => estimate(text),
        }
    }

    /// The length in bytes of the longest start of `text` (cut between
    /// characters) that counts at most `max` tokens: for cutting a text that
    /// must fit a budget.
    ///
    /// ```
    /// use bub::message::tokens::TokenCounter;
    ///
    /// let counter = TokenCounter::estimate();
    /// let text = "one two three four five six seven";
    /// let cut = counter.prefix_within(text, 4);
    /// assert!(counter.count(&text[..cut]) <= 4 && counter.count(&text[..=cut]) > 4);
    /// assert_eq!(counter.prefix_within(text, 1_000), text.len());
    /// ```
    pub fn prefix_within(&self, text: &str, max: u64) -> usize {
        if self.count(text) <= max {
            return text.len();
        }
        // Binary search over the character boundaries: a longer start never
        // counts fewer tokens (the estimate adds up; a BPE merges across a
        // cut by at most a token or two, which the search tolerates).
        let bounds: Vec<usize> = text.char_indices().map(|(at, _)| at).collect();
        let (mut low, mut high) = (0, bounds.len());
        while low + 1 < high {
            let middle = (low + high) / 2;
            if self.count(&text[..bounds[middle]]) <= max {
                low = middle;
            } else {
                high = middle;
            }
        }
        bounds.get(low).copied().unwrap_or(0)
    }

    /// The tokens of one chat message (OpenAI shape): its text, its tool
    /// calls and [`MESSAGE_OVERHEAD`]. Image parts count as a flat 765
    /// tokens (OpenAI's price of a high-detail 512×512 tile set).
    pub fn count_message(&self, message: &Map<String, Value>) -> u64 {
        let mut tokens = MESSAGE_OVERHEAD;
        match message.get("content") {
            Some(Value::String(text)) => tokens += self.count(text),
            Some(Value::Array(parts)) => {
                for part in parts {
                    tokens += match part.get("text").and_then(Value::as_str) {
                        Some(text) => self.count(text),
                        None => 765,
                    };
                }
            }
            _ => {}
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let text = |pointer: &str| call.pointer(pointer).and_then(Value::as_str).unwrap_or("");
                tokens +=
                    MESSAGE_OVERHEAD + self.count(text("/function/name")) + self.count(text("/function/arguments"));
            }
        }
        tokens
    }
}

/// The estimate: ASCII at 3.5 characters a token (rounded up), any other
/// character a token (CJK, emoji; accented Latin errs high).
fn estimate(text: &str) -> u64 {
    let ascii = text.bytes().filter(u8::is_ascii).count() as u64;
    let other = text.chars().count() as u64 - ascii;
    (ascii * 2).div_ceil(7) + other
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn openai_models_get_their_tokenizer() {
        let counter = TokenCounter::for_model("openai:gpt-4o-mini");
        assert!(counter.is_exact());
        assert_eq!(counter.count("hello world"), 2);
        assert!(TokenCounter::for_model("gpt-4").is_exact());
        assert!(!TokenCounter::for_model("anthropic:claude-sonnet-4-5").is_exact());
    }

    #[test]
    fn the_estimate_is_near_the_tokenizer_on_prose_and_high_on_cjk() {
        let prose = "The quick brown fox jumps over the lazy dog, and then it rests for a while. ".repeat(20);
        let exact = TokenCounter::for_model("gpt-4o").count(&prose) as f64;
        let guess = TokenCounter::estimate().count(&prose) as f64;
        assert!(guess >= exact && guess < exact * 1.6, "estimate {guess} vs tokenizer {exact}");
        assert_eq!(TokenCounter::estimate().count("你好世界"), 4);
    }

    #[test]
    fn a_message_counts_its_text_and_its_calls() {
        let counter = TokenCounter::estimate();
        let text = json!({"role": "user", "content": "1234567"});
        assert_eq!(counter.count_message(text.as_object().unwrap()), MESSAGE_OVERHEAD + 2);
        let call = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}
        ]});
        assert!(counter.count_message(call.as_object().unwrap()) > 2 * MESSAGE_OVERHEAD);
    }
}
