//! Markdown from the model, rendered as the HTML subset Telegram's Bot API accepts.
//!
//! Replies are sent with `parse_mode = "HTML"`, whose subset is small: `<b>`, `<strong>`, `<i>`,
//! `<em>`, `<u>`, `<s>`, `<strike>`, `<del>`, `<span class="tg-spoiler">`, `<a href="…">`,
//! `<code>`, `<pre>`, `<pre><code class="language-…">` and `<blockquote>`; no paragraphs, line
//! breaks or lists (newlines are literal `\n`), and only the `&lt;`, `&gt;`, `&amp;` and `&quot;`
//! entities.
//!
//! Why HTML rather than MarkdownV2: MarkdownV2 requires escaping 18 characters everywhere outside
//! of its markup, and Telegram rejects the whole message ("can't parse entities") on a single
//! mistake, which an LLM's free-form Markdown makes likely. HTML needs only 3 escapes (`<`, `>`,
//! `&`), and the tags written here are produced by one renderer that always closes what it opens.
//!
//! The Markdown is parsed by `pulldown-cmark` and its events are walked once: every Markdown
//! element is a frame on a stack, whose opening tag is written lazily before the first visible
//! content inside it (so no empty tags are ever sent) and whose closing tag is written when it
//! ends, so the tags are balanced whatever the events look like.

use pulldown_cmark::{CodeBlockKind, Event, LinkType, Options, Parser, Tag};

/// What a horizontal rule renders as: Telegram has no `<hr>`.
const RULE: &str = "———";

/// The entities Telegram understands, each counted as one character.
const ENTITIES: [&str; 4] = ["&lt;", "&gt;", "&amp;", "&quot;"];

/// Renders `markdown` as Telegram HTML (parse_mode = HTML). Never fails: text that is not Markdown comes out escaped.
pub fn to_telegram_html(markdown: &str) -> String {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_STRIKETHROUGH);
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_TASKLISTS);
    let mut renderer = Renderer::default();
    for event in Parser::new_ext(markdown, options) {
        renderer.event(event);
    }
    renderer.finish()
}

/// The visible text of `to_telegram_html(markdown)` as Telegram counts it (tags removed, entities as one character each): used to check a rendered part still fits 4096 characters.
///
/// Telegram measures messages in UTF-16 code units, so that is what is counted here (an emoji
/// outside the Basic Multilingual Plane counts 2).
pub fn visible_len(html: &str) -> usize {
    let mut len = 0;
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        if c == '<'
            && let Some(end) = rest.find('>')
        {
            rest = &rest[end + 1..];
            continue;
        }
        if c == '&'
            && let Some(entity) = ENTITIES.iter().find(|entity| rest.starts_with(**entity))
        {
            len += 1;
            rest = &rest[entity.len()..];
            continue;
        }
        len += c.len_utf16();
        rest = &rest[c.len_utf8()..];
    }
    len
}

/// The Markdown element a frame stands for; decides what happens when it ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Paragraph,
    Heading,
    Quote,
    List,
    Item,
    CodeBlock,
    HtmlBlock,
    Table,
    TableRow,
    TableCell,
    Bold,
    Italic,
    Strike,
    Link,
    Image,
    /// An inline element with no Telegram counterpart (superscript, subscript): its text only.
    Inline,
    /// A block with no Telegram counterpart (footnote definition, definition list…): its text only.
    Block,
}

/// One open Markdown element.
#[derive(Debug)]
struct Frame {
    kind: Kind,
    /// Written just before the first content inside the frame: an opening tag, a list item's
    /// marker, or nothing. Writing it lazily means an empty element leaves no empty tag behind.
    open: String,
    /// Written when the frame ends, if `open` was written.
    close: &'static str,
    /// Per kind: a code block's opening tag, a link's or image's URL, a list item's indentation.
    extra: String,
    /// The raw text of a code or HTML block, written in one piece when the block ends.
    buf: String,
}

impl Frame {
    fn new(kind: Kind) -> Self {
        Self::tagged(kind, "", "")
    }

    fn tagged(kind: Kind, open: &str, close: &'static str) -> Self {
        Self { kind, open: open.to_owned(), close, extra: String::new(), buf: String::new() }
    }
}

/// How many frames of each interesting kind are open: decides which tags may still be written,
/// since Telegram can't nest a link in a link, a tag in `<pre>`, or a quote in a quote.
#[derive(Default, Debug)]
struct Depths {
    bold: usize,
    italic: usize,
    strike: usize,
    link: usize,
    /// Inside a table (rendered in `<pre>`) or an image's alt text: no tags at all.
    plain: usize,
    quote: usize,
    item: usize,
}

impl Depths {
    /// The counter a frame kind contributes to, if any.
    fn counter(&mut self, kind: Kind) -> Option<&mut usize> {
        match kind {
            Kind::Bold | Kind::Heading => Some(&mut self.bold),
            Kind::Italic => Some(&mut self.italic),
            Kind::Strike => Some(&mut self.strike),
            Kind::Link => Some(&mut self.link),
            Kind::Table | Kind::Image => Some(&mut self.plain),
            Kind::Quote => Some(&mut self.quote),
            Kind::Item => Some(&mut self.item),
            _ => None,
        }
    }
}

/// The state of one rendering: the output so far and the stack of open elements.
#[derive(Default, Debug)]
struct Renderer {
    out: String,
    stack: Vec<Frame>,
    /// The frames `stack[..opened]` have had their `open` written; the others have not yet.
    opened: usize,
    depths: Depths,
    /// Newlines owed before the next content: block separators are only written once something
    /// follows them, so the output never ends with them.
    pending_newlines: usize,
    /// Whether any content was written: no newlines before the first.
    started: bool,
    /// The next number of each open list (`None` for bullets), innermost last.
    lists: Vec<Option<u64>>,
    /// Rows and cells started in the current table, for the separators between them.
    table_rows: usize,
    table_cells: usize,
}

impl Renderer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(_) => self.end(),
            Event::Text(text) => self.text(&text),
            Event::Code(code) => self.inline_code(&code),
            Event::Html(html) | Event::InlineHtml(html) => self.raw_html(&html),
            Event::SoftBreak | Event::HardBreak => self.write_text("\n"),
            Event::Rule => {
                self.write_text(RULE);
                self.end_block();
            }
            Event::TaskListMarker(checked) => self.task_marker(checked),
            Event::FootnoteReference(label) => self.write_text(&format!("[{label}]")),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.write_text(&math),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.push(Frame::new(Kind::Paragraph)),
            Tag::Heading { .. } => self.push_styled(Kind::Heading, "<b>", "</b>"),
            Tag::BlockQuote(_) => {
                // Telegram can't nest quotes: inner ones render as their content.
                if self.depths.quote == 0 && self.depths.plain == 0 {
                    self.push(Frame::tagged(Kind::Quote, "<blockquote>", "</blockquote>"));
                } else {
                    self.push(Frame::new(Kind::Quote));
                }
            }
            Tag::CodeBlock(kind) => {
                let mut frame = Frame::new(Kind::CodeBlock);
                frame.extra = match kind {
                    CodeBlockKind::Fenced(info) => match language(&info) {
                        Some(lang) => format!("<pre><code class=\"language-{lang}\">"),
                        None => "<pre>".to_owned(),
                    },
                    CodeBlockKind::Indented => "<pre>".to_owned(),
                };
                self.push(frame);
            }
            Tag::HtmlBlock => self.push(Frame::new(Kind::HtmlBlock)),
            Tag::List(start) => {
                self.lists.push(start);
                self.push(Frame::new(Kind::List));
            }
            Tag::Item => self.start_item(),
            Tag::Table(_) => {
                self.table_rows = 0;
                self.push(Frame::tagged(Kind::Table, "<pre>", "</pre>"));
            }
            Tag::TableHead | Tag::TableRow => {
                if self.table_rows > 0 {
                    self.write_text("\n");
                }
                self.table_rows += 1;
                self.table_cells = 0;
                self.push(Frame::new(Kind::TableRow));
            }
            Tag::TableCell => {
                if self.table_cells > 0 {
                    self.write_text(" | ");
                }
                self.table_cells += 1;
                self.push(Frame::new(Kind::TableCell));
            }
            Tag::Emphasis => self.push_styled(Kind::Italic, "<i>", "</i>"),
            Tag::Strong => self.push_styled(Kind::Bold, "<b>", "</b>"),
            Tag::Strikethrough => self.push_styled(Kind::Strike, "<s>", "</s>"),
            Tag::Link { link_type, dest_url, .. } => self.start_link(link_type, &dest_url),
            Tag::Image { dest_url, .. } => {
                let mut frame = Frame::new(Kind::Image);
                frame.extra = dest_url.to_string();
                self.push(frame);
            }
            Tag::Superscript | Tag::Subscript => self.push(Frame::new(Kind::Inline)),
            _ => self.push(Frame::new(Kind::Block)),
        }
    }

    /// Pushes an inline style, without its tag where it would be redundant (bold in bold) or not
    /// allowed (inside a table's `<pre>` or an image's alt text).
    fn push_styled(&mut self, kind: Kind, open: &str, close: &'static str) {
        let already = self.depths.counter(kind).is_some_and(|depth| *depth > 0);
        if already || self.depths.plain > 0 {
            self.push(Frame::new(kind));
        } else {
            self.push(Frame::tagged(kind, open, close));
        }
    }

    /// A list item's marker is its frame's lazy `open`, so a task marker can still replace it and
    /// it lands after any enclosing quote's tag.
    fn start_item(&mut self) {
        self.pending_newlines = self.pending_newlines.max(1);
        let indent = "  ".repeat(self.lists.len().saturating_sub(1));
        let marker = match self.lists.last_mut() {
            Some(Some(number)) => {
                let marker = format!("{number}. ");
                *number = number.saturating_add(1);
                marker
            }
            _ => "• ".to_owned(),
        };
        let mut frame = Frame::new(Kind::Item);
        frame.open = format!("{indent}{marker}");
        frame.extra = indent;
        self.push(frame);
    }

    /// Links become `<a>` unless inside another link or a plain region, where only their text
    /// remains; the URL is kept to show if the link has no text.
    fn start_link(&mut self, link_type: LinkType, dest_url: &str) {
        let href = match link_type {
            LinkType::Email => format!("mailto:{dest_url}"),
            _ => dest_url.to_owned(),
        };
        let mut frame = if self.depths.link == 0 && self.depths.plain == 0 && !href.trim().is_empty() {
            let mut open = String::from("<a href=\"");
            push_escaped_attr(&mut open, &href);
            open.push_str("\">");
            Frame::tagged(Kind::Link, &open, "</a>")
        } else {
            Frame::new(Kind::Link)
        };
        frame.extra = dest_url.to_owned();
        self.push(frame);
    }

    fn end(&mut self) {
        let Some(top) = self.stack.last() else {
            return;
        };
        let kind = top.kind;
        let has_content = self.stack.len() <= self.opened;
        // What some frames still write inside themselves as they end.
        match kind {
            // an empty item still shows its marker
            Kind::Item if !has_content => self.write_html(""),
            Kind::Link if !has_content => {
                let url = top.extra.clone();
                self.write_text(&url);
            }
            Kind::Image if !top.extra.is_empty() => {
                let url = if has_content { format!(" ({})", top.extra) } else { top.extra.clone() };
                self.write_text(&url);
            }
            _ => {}
        }
        self.pop();
    }

    /// Closes the innermost frame: its closing tag if it was opened, then what its kind needs.
    fn pop(&mut self) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        if self.stack.len() < self.opened {
            self.opened = self.stack.len();
            self.out.push_str(frame.close);
        }
        if let Some(depth) = self.depths.counter(frame.kind) {
            *depth = depth.saturating_sub(1);
        }
        match frame.kind {
            Kind::CodeBlock => {
                let code = frame.buf.strip_suffix('\n').unwrap_or(&frame.buf);
                if !code.is_empty() {
                    if self.depths.plain > 0 {
                        self.write_text(code);
                    } else {
                        let mut html = frame.extra.clone();
                        push_escaped(&mut html, code);
                        html.push_str(if frame.extra.ends_with("\">") { "</code></pre>" } else { "</pre>" });
                        self.write_html(&html);
                    }
                }
                self.end_block();
            }
            Kind::HtmlBlock => {
                self.write_text(frame.buf.trim_end_matches('\n'));
                self.end_block();
            }
            Kind::List => {
                self.lists.pop();
                self.end_block();
            }
            Kind::Item => self.pending_newlines = self.pending_newlines.max(1),
            Kind::Paragraph | Kind::Heading | Kind::Quote | Kind::Table | Kind::Block => {
                self.end_block();
            }
            Kind::TableRow
            | Kind::TableCell
            | Kind::Bold
            | Kind::Italic
            | Kind::Strike
            | Kind::Link
            | Kind::Image
            | Kind::Inline => {}
        }
    }

    fn push(&mut self, frame: Frame) {
        if let Some(depth) = self.depths.counter(frame.kind) {
            *depth += 1;
        }
        self.stack.push(frame);
    }

    /// Text goes into the buffer of a code or HTML block, else out escaped.
    fn text(&mut self, text: &str) {
        match self.stack.last_mut() {
            Some(frame) if matches!(frame.kind, Kind::CodeBlock | Kind::HtmlBlock) => {
                frame.buf.push_str(text);
            }
            _ => self.write_text(text),
        }
    }

    /// Inline code is `<code>`, except where Telegram allows no nested entity (in a link, a
    /// table's `<pre>` or an image's alt text): there it is its text.
    fn inline_code(&mut self, code: &str) {
        if code.is_empty() {
            return;
        }
        if self.depths.plain > 0 || self.depths.link > 0 {
            self.write_text(code);
        } else {
            let mut html = String::from("<code>");
            push_escaped(&mut html, code);
            html.push_str("</code>");
            self.write_html(&html);
        }
    }

    /// Raw HTML is never passed through: Telegram would reject most tags.
    fn raw_html(&mut self, html: &str) {
        match self.stack.last_mut() {
            Some(frame) if frame.kind == Kind::HtmlBlock => frame.buf.push_str(html),
            _ => self.write_text(html),
        }
    }

    /// Replaces the marker of the innermost list item with a check box, if not yet written.
    fn task_marker(&mut self, checked: bool) {
        let symbol = if checked { "☑ " } else { "☐ " };
        let opened = self.opened;
        let item = self.stack.iter_mut().enumerate().rev().find(|(_, frame)| frame.kind == Kind::Item);
        match item {
            Some((index, frame)) if index >= opened => {
                frame.open = format!("{}{symbol}", frame.extra);
            }
            _ => self.write_text(symbol),
        }
    }

    /// Owes the separator after a block: a blank line, or a line break between list items'
    /// blocks so that items stay one to a line.
    fn end_block(&mut self) {
        let gap = if self.depths.item > 0 { 1 } else { 2 };
        self.pending_newlines = self.pending_newlines.max(gap);
    }

    /// Writes `text` escaped, after whatever is owed before content.
    fn write_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.before_content();
        push_escaped(&mut self.out, text);
    }

    /// Writes markup made here (balanced in itself), after whatever is owed before content.
    fn write_html(&mut self, html: &str) {
        self.before_content();
        self.out.push_str(html);
    }

    /// Writes the owed newlines, then the opening tags and markers of the frames not yet opened.
    fn before_content(&mut self) {
        if self.started {
            for _ in 0..self.pending_newlines {
                self.out.push('\n');
            }
        }
        self.pending_newlines = 0;
        self.started = true;
        while let Some(frame) = self.stack.get(self.opened) {
            self.out.push_str(&frame.open);
            self.opened += 1;
        }
    }

    /// Closes whatever is still open and drops the trailing whitespace.
    fn finish(mut self) -> String {
        while !self.stack.is_empty() {
            self.pop();
        }
        let len = self.out.trim_end().len();
        self.out.truncate(len);
        self.out
    }
}

/// The language of a fenced code block's info string, if usable as a class name: its first word,
/// made only of `[A-Za-z0-9_+-]`.
fn language(info: &str) -> Option<&str> {
    let word = info.split_whitespace().next()?;
    word.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-')).then_some(word)
}

/// Escapes the three characters Telegram's HTML requires escaped in text.
pub(crate) fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
}

/// Escapes an attribute value: the text escapes plus `"`; spaces are percent-encoded so that the
/// value stays one URL.
fn push_escaped_attr(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' => out.push_str("&quot;"),
            ' ' => out.push_str("%20"),
            c => push_escaped(out, c.encode_utf8(&mut [0; 4])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_escaped() {
        assert_eq!(to_telegram_html("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
    }

    #[test]
    fn inline_styles() {
        assert_eq!(
            to_telegram_html("**bold** *it* _it_ ~~gone~~ `a<b`"),
            "<b>bold</b> <i>it</i> <i>it</i> <s>gone</s> <code>a&lt;b</code>"
        );
    }

    #[test]
    fn fenced_code_with_language() {
        assert_eq!(
            to_telegram_html("```rust\nif a < b {\n    x();\n}\n```"),
            "<pre><code class=\"language-rust\">if a &lt; b {\n    x();\n}</code></pre>"
        );
    }

    #[test]
    fn fenced_code_without_language() {
        assert_eq!(
            to_telegram_html("text\n\n```\n<tag> & **not bold**\n```\n\nafter"),
            "text\n\n<pre>&lt;tag&gt; &amp; **not bold**</pre>\n\nafter"
        );
    }

    #[test]
    fn fenced_code_with_odd_info_has_no_class() {
        assert_eq!(to_telegram_html("```c\"x\n1\n```"), "<pre>1</pre>");
        assert_eq!(to_telegram_html("```c++ extra words\n1\n```"), "<pre><code class=\"language-c++\">1</code></pre>");
    }

    #[test]
    fn indented_code() {
        assert_eq!(to_telegram_html("    a <\n    b"), "<pre>a &lt;\nb</pre>");
    }

    #[test]
    fn link_with_quote_in_url() {
        assert_eq!(
            to_telegram_html("[the docs](https://example.com/?q=\"x\"&y=1)"),
            "<a href=\"https://example.com/?q=&quot;x&quot;&amp;y=1\">the docs</a>"
        );
    }

    #[test]
    fn autolinks_and_empty_links() {
        assert_eq!(
            to_telegram_html("<https://a.io> <me@a.io> [](https://b.io)"),
            "<a href=\"https://a.io\">https://a.io</a> <a href=\"mailto:me@a.io\">me@a.io</a> \
             <a href=\"https://b.io\">https://b.io</a>"
        );
    }

    #[test]
    fn heading_then_paragraph() {
        assert_eq!(
            to_telegram_html("# Title *here*\nSome text.\n\n### Next\n\nMore"),
            "<b>Title <i>here</i></b>\n\nSome text.\n\n<b>Next</b>\n\nMore"
        );
    }

    #[test]
    fn unordered_list() {
        assert_eq!(to_telegram_html("Items:\n\n- one\n- **two**\n\nafter"), "Items:\n\n• one\n• <b>two</b>\n\nafter");
    }

    #[test]
    fn ordered_list_respects_start() {
        assert_eq!(to_telegram_html("3. three\n4. four\n\n5. five"), "3. three\n4. four\n5. five");
    }

    #[test]
    fn nested_lists() {
        assert_eq!(to_telegram_html("- a\n  - b\n    1. c\n- d"), "• a\n  • b\n    1. c\n• d");
    }

    #[test]
    fn task_list() {
        assert_eq!(to_telegram_html("- [ ] todo\n- [x] done\n  - [x] nested"), "☐ todo\n☑ done\n  ☑ nested");
    }

    #[test]
    fn block_quote() {
        assert_eq!(
            to_telegram_html("> quoted *text*\n>\n> > inner\n\nafter"),
            "<blockquote>quoted <i>text</i>\n\ninner</blockquote>\n\nafter"
        );
    }

    #[test]
    fn raw_html_is_escaped() {
        assert_eq!(
            to_telegram_html("<script>alert(1)</script>\n\nhi <b>x</b>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;\n\nhi &lt;b&gt;x&lt;/b&gt;"
        );
    }

    #[test]
    fn table_is_preformatted() {
        assert_eq!(
            to_telegram_html("| a | **b** |\n|---|---|\n| 1 | x<y |\n| `c` | [l](http://l) |"),
            "<pre>a | b\n1 | x&lt;y\nc | l</pre>"
        );
    }

    #[test]
    fn image_is_alt_and_url() {
        assert_eq!(
            to_telegram_html("see ![a *cat*](https://x.io/c.png) and ![](https://x.io/d.png)"),
            "see a cat (https://x.io/c.png) and https://x.io/d.png"
        );
    }

    #[test]
    fn rule_and_breaks() {
        assert_eq!(to_telegram_html("a\nb  \nc\n\n---\n\nd"), "a\nb\nc\n\n———\n\nd");
    }

    #[test]
    fn empty_and_blank_input() {
        assert_eq!(to_telegram_html(""), "");
        assert_eq!(to_telegram_html(" \n\t\n "), "");
    }

    #[test]
    fn visible_len_counts_text_and_entities() {
        assert_eq!(visible_len("<b>a&lt;b</b> &amp; &quot;"), 7);
        assert_eq!(visible_len("<a href=\"x&quot;\">é😀</a>"), 3);
        assert_eq!(visible_len("a & b < c"), 9);
    }

    /// Checks `html` is what Telegram parses: only allowed tags, properly nested and closed, and
    /// no unescaped `<`, `>` or `&` in the text.
    fn assert_well_formed(input: &str, html: &str) {
        const ALLOWED: [&str; 13] =
            ["b", "strong", "i", "em", "u", "s", "strike", "del", "span", "a", "code", "pre", "blockquote"];
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = html;
        while let Some(c) = rest.chars().next() {
            match c {
                '<' => {
                    let end = rest.find('>').unwrap_or_else(|| panic!("unclosed `<` in {html:?} from {input:?}"));
                    let tag = &rest[1..end];
                    if let Some(name) = tag.strip_prefix('/') {
                        assert_eq!(stack.pop(), Some(name), "misnested </{name}> in {html:?} from {input:?}");
                    } else {
                        let name = tag.split(' ').next().unwrap_or_default();
                        assert!(ALLOWED.contains(&name), "tag <{tag}> in {html:?} from {input:?}");
                        let attrs = &tag[name.len()..];
                        if !attrs.is_empty() {
                            let value = attrs
                                .strip_prefix(" href=\"")
                                .or_else(|| attrs.strip_prefix(" class=\""))
                                .and_then(|v| v.strip_suffix('"'))
                                .unwrap_or_else(|| panic!("attributes {attrs:?} in {html:?}"));
                            assert!(!value.contains('"'), "quote in {attrs:?} in {html:?}");
                        }
                        stack.push(name);
                    }
                    rest = &rest[end + 1..];
                }
                '>' => panic!("raw `>` in {html:?} from {input:?}"),
                '&' => {
                    let entity = ENTITIES
                        .iter()
                        .find(|e| rest.starts_with(**e))
                        .unwrap_or_else(|| panic!("raw `&` in {html:?} from {input:?}"));
                    rest = &rest[entity.len()..];
                }
                c => rest = &rest[c.len_utf8()..],
            }
        }
        assert!(stack.is_empty(), "unclosed {stack:?} in {html:?} from {input:?}");
    }

    #[test]
    fn tricky_inputs_stay_well_formed() {
        let inputs = [
            "",
            "   \n\t  \n",
            "**unbalanced bold",
            "_half italic **and bold_ end**",
            "`unclosed code and <tag>",
            "``` \nunclosed fence <b>",
            "[unclosed link](http://x \"t",
            "[a [nested](http://in)](http://out)",
            "<b>not</b> <i>html & stuff",
            "😀 emoji **😀** _👍🏽_ `🦀`",
            "中文 **粗体** _斜体_ ~~删除~~ 「引用」",
            "> > > deep\n> quote\n\n- > quote in list\n  > ```\n  > code\n  > ```",
            "- \n- [ ] \n1.\n\n* * *",
            "***__~~`x`~~__***",
            "| a | <b> |\n|---|---|\n| & | `|` |\n",
            "# \n\n## **\n\n[](<>)",
            "![alt *x*](http://i \"t\") [![img](http://i)](http://l)",
            "<div>\n*not md*\n</div>\n\nok &amp; &copy; &#60;",
            "a\\\nb  \nc\\*d\\*",
            "[link `code` **b**](http://x?a=1&b=\"2\")",
            "[^1] footnote\n\n[^1]: note",
        ];
        for input in inputs {
            let html = to_telegram_html(input);
            assert_well_formed(input, &html);
            assert!(visible_len(&html) <= input.chars().count() * 2 + 10, "{html:?} is too long for {input:?}");
            assert_eq!(html, html.trim_end(), "trailing whitespace in {html:?}");
        }
    }
}
