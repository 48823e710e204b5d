use super::*;
use proptest::prelude::*;

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Whether a part, read alone, leaves no fenced block open.
fn fences_balanced(text: &str) -> bool {
    let mut open: Option<(char, usize)> = None;
    for line in text.split('\n') {
        match open {
            None => open = Fence::parse_open(line).map(|(_, marker, count)| (marker, count)),
            Some((marker, count)) => {
                if closes(line, marker, count) {
                    open = None;
                }
            }
        }
    }
    open.is_none()
}

/// The part's text without the fence lines the splitter added.
fn original_of(part: &Part) -> &str {
    let mut text = part.text.as_str();
    if part.reopened {
        text = text.split_once('\n').map_or("", |(_, rest)| rest);
    }
    if part.closed {
        text = text.rsplit_once('\n').map_or("", |(rest, _)| rest);
    }
    text
}

fn without_whitespace(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

#[test]
fn text_within_the_limit_comes_back_unchanged() {
    let text = "  hello,\n\nworld  ";
    assert_eq!(split_message(text, 100), vec![text.to_owned()]);
    assert_eq!(split_message(text, chars(text)), vec![text.to_owned()]);
}

#[test]
fn empty_and_whitespace_only_text_gives_no_parts() {
    assert!(split_message("", 10).is_empty());
    assert!(split_message(" \n\t\n ", 10).is_empty());
    assert!(split_message(&" ".repeat(50), 10).is_empty());
}

#[test]
fn prefers_a_paragraph_break_over_a_line_break_or_a_space() {
    let text = "first paragraph line one\nline two\n\nsecond paragraph with more words";
    let parts = split_message(text, 40);
    assert_eq!(parts[0], "first paragraph line one\nline two");
    assert_eq!(parts[1], "second paragraph with more words");
}

#[test]
fn prefers_a_line_break_over_a_space() {
    let text = "alpha beta gamma\ndelta epsilon zeta eta theta";
    let parts = split_message(text, 24);
    assert_eq!(parts[0], "alpha beta gamma");
    assert!(parts.iter().all(|p| chars(p) <= 24));
}

#[test]
fn prefers_a_space_over_cutting_a_word() {
    let parts = split_message("aaaa bbbb cccc dddd", 12);
    assert_eq!(parts, vec!["aaaa bbbb", "cccc dddd"]);
}

#[test]
fn cuts_a_word_longer_than_the_limit_anywhere() {
    let parts = split_message(&"x".repeat(25), 10);
    assert_eq!(parts, vec!["x".repeat(10), "x".repeat(10), "x".repeat(5)]);
}

#[test]
fn counts_characters_not_bytes() {
    let text = "é".repeat(9) + " " + &"日本".repeat(5);
    let parts = split_message(&text, 10);
    assert_eq!(parts, vec!["é".repeat(9), "日本".repeat(5)]);
}

#[test]
fn a_code_block_cut_in_two_is_closed_and_reopened_with_its_info_string() {
    let code: String = (0..10).map(|i| format!("let x{i} = {i};\n")).collect();
    let text = format!("Here:\n\n```rust\n{code}```\n\nDone.");
    let parts = split_message(&text, 80);
    assert!(parts.len() >= 2, "{parts:#?}");
    for part in &parts {
        assert!(chars(part) <= 80, "{part:?}");
        assert!(fences_balanced(part), "{part:?}");
    }
    assert!(parts[1].starts_with("```rust\n"), "{parts:#?}");
    assert!(parts[0].ends_with("\n```"), "{parts:#?}");
    // Code lines are never cut in the middle.
    let lines: Vec<&str> = parts.iter().flat_map(|p| p.lines()).collect();
    for i in 0..10 {
        assert!(lines.contains(&format!("let x{i} = {i};").as_str()), "{parts:#?}");
    }
}

#[test]
fn a_tilde_fence_reopens_with_tildes() {
    let text = format!("~~~~python\n{}~~~~\n", "print('hello world')\n".repeat(6));
    let parts = split_message(&text, 60);
    assert!(parts.len() >= 2);
    for part in &parts {
        assert!(part.starts_with("~~~~python\n"), "{part:?}");
        assert!(part.ends_with("\n~~~~"), "{part:?}");
    }
}

#[test]
fn an_unclosed_block_that_is_cut_is_closed_in_every_part() {
    let text = format!("```\n{}", "some code here\n".repeat(10));
    for part in split_message(&text, 50) {
        assert!(fences_balanced(&part), "{part:?}");
    }
}

#[test]
fn a_limit_smaller_than_the_fence_lines_still_splits() {
    let text = "```rust\nfn main() {}\n```";
    let parts = split_message(text, 3);
    assert!(!parts.is_empty());
    assert!(parts.iter().all(|p| chars(p) <= 3 && !p.trim().is_empty()), "{parts:?}");
    assert!(!split_message(text, 0).is_empty());
}

#[test]
fn long_indentation_under_a_tiny_limit_does_not_loop() {
    let parts = split_message(&format!("a\n{}b", " ".repeat(40)), 2);
    assert_eq!(parts, vec!["a", "b"]);
}

/// Markdown-ish text: words, line and paragraph breaks, fenced blocks.
fn markdown() -> impl Strategy<Value = String> {
    let word = "[a-zé日🙂]{1,12}";
    let line = prop::collection::vec(word, 1..8).prop_map(|words| words.join(" "));
    let prose = prop::collection::vec(line.clone(), 1..4).prop_map(|lines| lines.join("\n"));
    let fence = prop_oneof![Just("```"), Just("~~~"), Just("````")];
    let info = prop_oneof![Just(""), Just("rust"), Just("py")];
    let code_line = (0usize..5, line).prop_map(|(indent, l)| format!("{}{l}", " ".repeat(indent)));
    let code = (fence, info, prop::collection::vec(code_line, 0..6))
        .prop_map(|(fence, info, lines)| format!("{fence}{info}\n{}\n{fence}", lines.join("\n")));
    let block = prop_oneof![3 => prose, 1 => code];
    prop::collection::vec(block, 1..8).prop_map(|blocks| blocks.join("\n\n"))
}

#[test]
fn emoji_count_twice_toward_the_limit_as_platforms_count_them() {
    let text = "😀 ".repeat(3000);
    let parts = split_message(&text, 4096);
    assert!(parts.len() >= 2, "6,000 UTF-16 units need two messages");
    for part in &parts {
        assert!(part.encode_utf16().count() <= 4096, "{} units", part.encode_utf16().count());
    }
    assert_eq!(without_whitespace(&parts.concat()), without_whitespace(&text));
}

proptest! {
    #[test]
    fn parts_fit_in_utf16_units_and_nothing_is_lost(text in "[ \na-z😀🎉é]{0,300}", max in 2usize..60) {
        let parts = split_message(&text, max);
        for part in &parts {
            prop_assert!(part.encode_utf16().count() <= max, "{part:?}");
        }
        prop_assert_eq!(without_whitespace(&parts.concat()), without_whitespace(&text));
    }

    #[test]
    fn every_part_fits_and_nothing_is_lost(text in "\\PC{0,300}|[ \n`~a-z]{0,300}", max in 0usize..60) {
        let parts = split_parts(&text, max);
        for part in &parts {
            prop_assert!(chars(&part.text) <= max.max(1), "{part:?}");
            prop_assert!(!part.text.trim().is_empty(), "{part:?}");
        }
        let rebuilt: String = parts.iter().map(original_of).collect();
        prop_assert_eq!(without_whitespace(&rebuilt), without_whitespace(&text));
    }

    #[test]
    fn markdown_parts_fit_keep_fences_balanced_and_lose_nothing(text in markdown(), max in 30usize..300) {
        let parts = split_parts(&text, max);
        prop_assert!(!parts.is_empty());
        if chars(&text) <= max {
            prop_assert_eq!(&parts[0].text, &text);
        }
        for part in &parts {
            prop_assert!(chars(&part.text) <= max, "{part:?}");
            prop_assert!(!part.text.trim().is_empty(), "{part:?}");
            prop_assert!(fences_balanced(&part.text), "{part:?}");
        }
        let rebuilt: String = parts.iter().map(original_of).collect();
        prop_assert_eq!(without_whitespace(&rebuilt), without_whitespace(&text));
    }
}

#[test]
fn counted_in_code_points_2000_emoji_are_one_part_and_in_utf16_two() {
    let emoji = "😀".repeat(2000);
    assert_eq!(split_message_counting(&emoji, 2000, LengthUnit::CodePoints), [emoji.as_str()]);
    let halves = split_message_counting(&emoji, 2000, LengthUnit::Utf16);
    assert_eq!(halves.len(), 2);
    assert!(halves.iter().all(|part| part.encode_utf16().count() <= 2000));
    assert_eq!(halves.concat(), emoji);
}
