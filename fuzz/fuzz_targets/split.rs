//! Splitting a reply under a platform's limit (`bub::gateway::split::split_message`).
//!
//! The first two bytes are the limit (0..=1023), the rest the text.
//!
//! Invariants, as `split_message` documents them:
//! - every part fits the limit (0 read as 1) in characters and in UTF-16
//!   units; only a lone character wider than the limit (an emoji under a limit of
//!   1) may exceed it in units;
//! - no part is empty or whitespace-only, and whitespace-only text gives none;
//! - text within the limit (in both counts) is one part, unchanged;
//! - the parts, joined, hold the text's non-whitespace characters in order:
//!   exactly those when the text has no fence characters (`` ` ``, `~`), else
//!   with the fence lines added around cuts in between.
#![no_main]

use bub::gateway::split::split_message;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [a, b, rest @ ..] = data else { return };
    let max_chars = usize::from(u16::from_le_bytes([*a, *b]) % 1024);
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let parts = split_message(text, max_chars);
    let max = max_chars.max(1);

    for part in &parts {
        assert!(part.chars().count() <= max, "{part:?} over {max} characters");
        let units = part.encode_utf16().count();
        assert!(units <= max || part.chars().count() == 1, "{part:?} over {max} UTF-16 units");
        assert!(!part.trim().is_empty(), "blank part {part:?}");
    }
    if text.trim().is_empty() {
        assert!(parts.is_empty(), "{parts:?} from blank text");
        return;
    }
    if text.chars().count() <= max && text.encode_utf16().count() <= max {
        assert_eq!(parts, [text], "text within the limit");
    }
    let original: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    let joined: Vec<char> = parts.concat().chars().filter(|c| !c.is_whitespace()).collect();
    if !text.contains(['`', '~']) {
        assert_eq!(joined, original, "non-whitespace text changed");
    } else {
        let mut kept = joined.iter();
        let lost = original.iter().position(|c| !kept.any(|k| k == c));
        assert_eq!(lost, None, "non-whitespace character lost, or out of order");
    }
});
