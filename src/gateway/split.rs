//! Splitting a long reply into messages a platform accepts.
//!
//! Platforms reject messages over a length (Telegram 4096, Discord 2000
//! characters), and a reply cut blindly reads badly: a word in two halves, or a
//! code block whose second half renders as prose. [`split_message`] cuts where a
//! reader expects a break, and closes and reopens a fenced code block it has to
//! cut through, so every message renders on its own.

use bub_channel::LengthUnit;

/// Splits `text` into parts of at most `max_chars` characters (Unicode scalar
/// values, not bytes, and UTF-16 code units too; see below) each, in order.
///
/// Guarantees:
/// - text within the limit comes back as one part, unchanged;
/// - no part is empty or whitespace-only (whitespace-only text gives no parts);
/// - cuts fall on character boundaries, preferably at a paragraph break, then
///   a line break, then a space, and only then anywhere; whitespace at a cut is
///   dropped, the indentation of the line after it is kept;
/// - a fenced code block (```` ``` ```` or `~~~`, with its info string) cut in
///   two is closed at the end of the first part and reopened, with the same
///   opening line, at the start of the next; the added fence lines count
///   toward the limit;
/// - when the limit is too small for the fence lines, the text is cut plainly
///   rather than not at all. A `max_chars` of 0 is treated as 1.
///
/// Platforms count their limit in UTF-16 code units (Telegram; Discord in
/// JavaScript string length), where a character outside the Basic
/// Multilingual Plane (most emoji) counts 2: a part over `max_chars` in those
/// units is split again, shorter, so every part fits that count too.
pub fn split_message(text: &str, max_chars: usize) -> Vec<String> {
    split_message_counting(text, max_chars, LengthUnit::Utf16)
}

/// [`split_message`] for a platform that counts length in `unit`: with
/// [`LengthUnit::CodePoints`] (Discord) parts are only cut to `max_chars`
/// characters, so 2000 emoji stay one Discord message.
pub fn split_message_counting(text: &str, max_chars: usize, unit: LengthUnit) -> Vec<String> {
    let max = max_chars.max(1);
    let parts = split_parts(text, max).into_iter().map(|part| part.text);
    match unit {
        LengthUnit::CodePoints => parts.collect(),
        LengthUnit::Utf16 => {
            let mut fitted = Vec::new();
            for part in parts {
                fit_utf16(part, max, &mut fitted);
            }
            fitted
        }
    }
}

/// Pushes `text` onto `parts`, split again until each piece is at most `max` UTF-16 units.
fn fit_utf16(text: String, max: usize, parts: &mut Vec<String>) {
    let units = text.encode_utf16().count();
    if units <= max {
        parts.push(text);
        return;
    }
    // Fewer characters per part, in proportion; each piece is checked again.
    let chars = text.chars().count();
    let shorter = (max * chars / units).clamp(1, chars.saturating_sub(1).max(1));
    let pieces = split_parts(&text, shorter);
    if let [only] = pieces.as_slice()
        && only.text == text
    {
        // Only when one character is itself over `max` (max = 1 and an emoji): nothing shorter exists.
        parts.push(text);
        return;
    }
    for piece in pieces {
        fit_utf16(piece.text, max, parts);
    }
}

/// One part of a split reply and the fence lines the splitter added to it, so
/// tests can tell the original text from the additions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) text: String,
    /// The first line is an added reopening fence.
    pub(crate) reopened: bool,
    /// The last line is an added closing fence.
    pub(crate) closed: bool,
}

pub(crate) fn split_parts(text: &str, max_chars: usize) -> Vec<Part> {
    let max = max_chars.max(1);
    if text.trim().is_empty() {
        return Vec::new();
    }
    if text.chars().count() <= max {
        return vec![Part { text: text.to_owned(), reopened: false, closed: false }];
    }
    let layout = Layout::new(text);
    let n = layout.chars.len();
    let mut parts = Vec::new();
    let mut pos = layout.skip_cut_whitespace(0);
    // The fence open at `pos`, which the next part has to reopen.
    let mut open: Option<usize> = None;
    while pos < n {
        let first = layout.first_non_whitespace(pos);
        if first == n {
            break;
        }
        let prefix_len = open.map_or(0, |f| layout.fences[f].open_len());
        let fenced = if max > prefix_len { layout.choose_fenced(pos, first, max - prefix_len) } else { None };
        let (start, end, reopen, close) = match fenced {
            Some(end) => (pos, end, open, layout.open[end]),
            // Not even the fence lines fit: cut plainly, and drop the leading
            // whitespace so a long indentation cannot eat the whole part.
            None => (first, layout.choose_plain(first, max), None, None),
        };
        let mut part = String::new();
        if let Some(f) = reopen {
            part.push_str(&layout.fences[f].open);
            part.push('\n');
        }
        let body: String = layout.chars[start..end].iter().collect();
        part.push_str(body.trim_end());
        if let Some(f) = close {
            part.push('\n');
            part.push_str(&layout.fences[f].close);
        }
        parts.push(Part { text: part, reopened: reopen.is_some(), closed: close.is_some() });
        open = layout.open[end];
        pos = layout.skip_cut_whitespace(end);
    }
    parts
}

/// A fenced code block's opening line and the line that closes it.
#[derive(Debug, Clone)]
struct Fence {
    /// The opening line without indentation, e.g. ```` ```rust ````.
    open: String,
    /// The shortest closing line, e.g. ```` ``` ````.
    close: String,
}

impl Fence {
    /// Characters the reopening line adds, with its newline.
    fn open_len(&self) -> usize {
        self.open.chars().count() + 1
    }

    /// Characters the closing line adds, with its newline.
    fn close_len(&self) -> usize {
        self.close.chars().count() + 1
    }

    /// Parses an opening fence line (CommonMark: up to three spaces of
    /// indentation, three or more backticks or tildes, an info string without
    /// backticks for a backtick fence).
    fn parse_open(line: &str) -> Option<(Fence, char, usize)> {
        let rest = strip_fence_indent(line)?;
        let marker = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
        let count = rest.chars().take_while(|c| *c == marker).count();
        if count < 3 {
            return None;
        }
        let info = &rest[count * marker.len_utf8()..];
        if marker == '`' && info.contains('`') {
            return None;
        }
        let fence = Fence { open: rest.trim_end().to_owned(), close: marker.to_string().repeat(count) };
        Some((fence, marker, count))
    }
}

/// The line without its indentation, when that is at most three spaces.
fn strip_fence_indent(line: &str) -> Option<&str> {
    let indent = line.chars().take_while(|c| *c == ' ').count();
    (indent <= 3).then(|| &line[indent..])
}

/// Whether `line` closes a fence opened with `count` `marker`s.
fn closes(line: &str, marker: char, count: usize) -> bool {
    let Some(rest) = strip_fence_indent(line) else { return false };
    let run = rest.chars().take_while(|c| *c == marker).count();
    run >= count && rest[run * marker.len_utf8()..].trim().is_empty()
}

/// What a cut at a position would be, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cut {
    /// The end of the text.
    End = 0,
    /// Before a blank line.
    Paragraph = 1,
    /// Before a line break.
    Line = 2,
    /// Before a space.
    Space = 3,
    /// Inside a word.
    Anywhere = 4,
    /// Inside a line of code, which changes the code; the last resort.
    InCode = 5,
}

const CUTS: usize = 6;

/// The text as characters, with what a cut before each position would be.
/// Position `c` lies before `chars[c]`; `c == chars.len()` is the end.
struct Layout {
    chars: Vec<char>,
    fences: Vec<Fence>,
    /// The kind of cut at each position, ignoring fences.
    kind: Vec<Cut>,
    /// Cutting here keeps every fence line whole (and leaves no empty block).
    fence_ok: Vec<bool>,
    /// The fence still open in the text before each position.
    open: Vec<Option<usize>>,
}

impl Layout {
    fn new(text: &str) -> Layout {
        let chars: Vec<char> = text.chars().collect();
        let n = chars.len();
        let mut kind = vec![Cut::Anywhere; n + 1];
        kind[n] = Cut::End;
        // Whether another line break follows in the same whitespace run.
        let mut newline_ahead = false;
        for c in (0..n).rev() {
            let ch = chars[c];
            if !ch.is_whitespace() {
                newline_ahead = false;
                continue;
            }
            kind[c] = match (ch, newline_ahead) {
                ('\n', true) => Cut::Paragraph,
                ('\n', false) => Cut::Line,
                _ => Cut::Space,
            };
            if ch == '\n' {
                newline_ahead = true;
            }
        }

        let mut fences = Vec::new();
        let mut fence_ok = vec![true; n + 1];
        let mut open = vec![None; n + 1];
        // The open fence: its index, marker and marker count.
        let mut current: Option<(usize, char, usize)> = None;
        let mut previous_opened = false;
        let mut start = 0;
        while start <= n {
            let end = chars[start..].iter().position(|c| *c == '\n').map_or(n, |i| start + i);
            let line: String = chars[start..end].iter().collect();
            match current {
                None => {
                    if let Some((fence, marker, count)) = Fence::parse_open(&line) {
                        let f = fences.len();
                        fences.push(fence);
                        // Interior and end of the opening line: not a place to cut.
                        fence_ok[start + 1..=end].fill(false);
                        open[end] = Some(f);
                        if end == n {
                            // The text ends with an opening line: the block is empty but must close.
                            fence_ok[n] = true;
                        }
                        current = Some((f, marker, count));
                        previous_opened = true;
                    } else {
                        previous_opened = false;
                    }
                }
                Some((f, marker, count)) => {
                    if closes(&line, marker, count) {
                        open[start..end].fill(Some(f));
                        fence_ok[start + 1..end].fill(false);
                        current = None;
                    } else {
                        open[start..=end].fill(Some(f));
                        if previous_opened {
                            // Right after the opening line: the part would end in an empty block.
                            fence_ok[start] = false;
                        }
                        for cut in &mut kind[start..end] {
                            if matches!(cut, Cut::Space | Cut::Anywhere) {
                                *cut = Cut::InCode;
                            }
                        }
                    }
                    previous_opened = false;
                }
            }
            start = end + 1;
        }
        Layout { chars, fences, kind, fence_ok, open }
    }

    fn first_non_whitespace(&self, from: usize) -> usize {
        self.chars[from..].iter().position(|c| !c.is_whitespace()).map_or(self.chars.len(), |i| from + i)
    }

    /// Where the next part starts after a cut at `c`: past the whitespace run
    /// and its line breaks, keeping the next line's indentation.
    fn skip_cut_whitespace(&self, c: usize) -> usize {
        let first = self.first_non_whitespace(c);
        if first == self.chars.len() {
            return first;
        }
        match self.chars[c..first].iter().rposition(|ch| *ch == '\n') {
            Some(i) => c + i + 1,
            None => first,
        }
    }

    /// The cut for a part starting at `pos` with `budget` characters left
    /// after the reopening fence, counting the closing fence the cut needs;
    /// `None` when no cut fits.
    fn choose_fenced(&self, pos: usize, first: usize, budget: usize) -> Option<usize> {
        let n = self.chars.len();
        let high = n.min(pos + budget);
        let low = first + 1;
        let mut best = [None; CUTS];
        for c in (low..=high).rev() {
            let cost = c - pos + self.open[c].map_or(0, |f| self.fences[f].close_len());
            if self.fence_ok[c] && cost <= budget {
                best[self.kind[c] as usize].get_or_insert(c);
            }
        }
        pick(best, pos, budget)
    }

    /// A cut that ignores fences; always makes progress.
    fn choose_plain(&self, first: usize, budget: usize) -> usize {
        let high = self.chars.len().min(first + budget);
        let mut best = [None; CUTS];
        for c in (first + 1..=high).rev() {
            best[self.kind[c] as usize].get_or_insert(c);
        }
        pick(best, first, budget).unwrap_or(high)
    }
}

/// The best cut among the farthest of each kind: the best kind that still
/// fills half the part, else the farthest break, else anywhere.
fn pick(best: [Option<usize>; CUTS], pos: usize, budget: usize) -> Option<usize> {
    if let Some(end) = best[Cut::End as usize] {
        return Some(end);
    }
    let breaks = [Cut::Paragraph, Cut::Line, Cut::Space];
    breaks
        .iter()
        .filter_map(|kind| best[*kind as usize])
        .find(|c| (c - pos) * 2 >= budget)
        .or_else(|| breaks.iter().filter_map(|kind| best[*kind as usize]).max())
        .or(best[Cut::Anywhere as usize])
        .or(best[Cut::InCode as usize])
}

#[cfg(test)]
mod tests;
