//! Markdown → Telegram HTML (`bub_telegram::markdown`).
//!
//! Invariants, as the module documents them:
//! - only the tags Telegram accepts, balanced and properly nested, with only
//!   `href` / `class` attributes whose values hold no raw quote;
//! - no raw `<`, `>` or `&` in the text: only the four entities Telegram knows;
//! - what Telegram cannot nest is not nested: no tag inside `<pre>` but its
//!   `<code>`, none inside `<code>`, no code in a link, no link in a link,
//!   no quote in a quote;
//! - no empty element (every tag holds visible text) and no trailing whitespace;
//! - `visible_len` counts at most the UTF-16 length of the HTML, and exactly
//!   that of the text when there is no markup.
#![no_main]

use bub_telegram::markdown::{to_telegram_html, visible_len};
use libfuzzer_sys::fuzz_target;

const ALLOWED: [&str; 13] =
    ["b", "strong", "i", "em", "u", "s", "strike", "del", "span", "a", "code", "pre", "blockquote"];
const ENTITIES: [(&str, char); 4] = [("&lt;", '<'), ("&gt;", '>'), ("&amp;", '&'), ("&quot;", '"')];

fuzz_target!(|data: &[u8]| {
    let Ok(markdown) = std::str::from_utf8(data) else { return };
    let html = to_telegram_html(markdown);
    let visible = check_well_formed(&html);
    assert_eq!(html, html.trim_end(), "trailing whitespace");
    let len = visible_len(&html);
    assert_eq!(len, visible.encode_utf16().count(), "visible_len of {html:?}");
    assert!(len <= html.encode_utf16().count());
});

/// Checks the tags and entities of `html` and returns its visible text.
fn check_well_formed(html: &str) -> String {
    // Open elements: name and the visible length when it opened.
    let mut stack: Vec<(&str, usize)> = Vec::new();
    let mut visible = String::new();
    let mut visible_chars = 0;
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest.find('>').unwrap_or_else(|| panic!("unclosed `<` in {html:?}"));
                let tag = &rest[1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    let (open, at) = stack.pop().unwrap_or_else(|| panic!("</{name}> closes nothing in {html:?}"));
                    assert_eq!(open, name, "misnested </{name}> in {html:?}");
                    assert!(visible_chars > at, "empty <{name}> in {html:?}");
                } else {
                    let name = tag.split(' ').next().unwrap_or_default();
                    assert!(ALLOWED.contains(&name), "tag <{tag}> in {html:?}");
                    let attrs = &tag[name.len()..];
                    if !attrs.is_empty() {
                        let value = attrs
                            .strip_prefix(" href=\"")
                            .or_else(|| attrs.strip_prefix(" class=\""))
                            .and_then(|v| v.strip_suffix('"'))
                            .unwrap_or_else(|| panic!("attributes {attrs:?} in {html:?}"));
                        assert!(!value.contains('"'), "quote in {attrs:?} in {html:?}");
                    }
                    let parent = stack.last().map(|(parent, _)| *parent);
                    match parent {
                        Some("pre") => assert_eq!(name, "code", "<{name}> in <pre> in {html:?}"),
                        Some("code") => panic!("<{name}> in <code> in {html:?}"),
                        _ => {}
                    }
                    if matches!(name, "code" | "pre") {
                        assert!(stack.iter().all(|(open, _)| *open != "a"), "<{name}> in <a> in {html:?}");
                    }
                    for unnestable in ["a", "blockquote", "pre", "code"] {
                        if name == unnestable {
                            assert!(stack.iter().all(|(open, _)| *open != name), "<{name}> in <{name}> in {html:?}");
                        }
                    }
                    stack.push((name, visible_chars));
                }
                rest = &rest[end + 1..];
            }
            '>' => panic!("raw `>` in {html:?}"),
            '&' => {
                let (entity, shown) = ENTITIES
                    .iter()
                    .find(|(entity, _)| rest.starts_with(entity))
                    .unwrap_or_else(|| panic!("raw `&` in {html:?}"));
                visible.push(*shown);
                visible_chars += 1;
                rest = &rest[entity.len()..];
            }
            c => {
                visible.push(c);
                visible_chars += 1;
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?} in {html:?}");
    visible
}
