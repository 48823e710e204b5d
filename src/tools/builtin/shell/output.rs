//! [`OutputBuffer`]: what a shell printed, decoded and capped.
//!
//! Bytes arrive in arbitrary pieces, so a multi-byte character may be split
//! between two reads; the buffer holds such a partial character back until the
//! rest arrives, and only bytes that can never become valid UTF-8 turn into
//! U+FFFD. Offsets are in characters and absolute (counted from the first
//! character the shell printed), so a caller polling with `next_offset` keeps
//! its place even after the front of the buffer was dropped to respect the cap.

/// Default cap on the text kept per shell: the last 1 MiB.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;

/// Decoded shell output, keeping at most about `cap` bytes of the newest text.
#[derive(Debug)]
pub struct OutputBuffer {
    text: String,
    /// Bytes of a character whose end has not arrived yet.
    partial: Vec<u8>,
    /// Characters dropped from the front to respect the cap.
    dropped_chars: usize,
    cap: usize,
}

/// A window of the output, by absolute character offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSlice {
    pub text: String,
    /// Where the next read should start.
    pub next_offset: usize,
    /// Characters before the window that are no longer kept (only when the
    /// requested offset fell into them).
    pub dropped_before: usize,
}

impl OutputBuffer {
    pub fn new(cap: usize) -> OutputBuffer {
        OutputBuffer { text: String::new(), partial: Vec::new(), dropped_chars: 0, cap: cap.max(4) }
    }

    /// Appends raw bytes, decoding what is complete.
    pub fn push(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let mut rest: &[u8] = &std::mem::take(&mut self.partial);
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    self.text.push_str(valid);
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    // from_utf8 just said this prefix is valid.
                    self.text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(bad) => {
                            self.text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None => {
                            self.partial = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        self.enforce_cap();
    }

    /// Decodes whatever partial character is left (the stream ended).
    pub fn finish(&mut self) {
        if !self.partial.is_empty() {
            let partial = std::mem::take(&mut self.partial);
            self.text.push_str(&String::from_utf8_lossy(&partial));
            self.enforce_cap();
        }
    }

    /// Characters dropped from the front so far.
    pub fn dropped_chars(&self) -> usize {
        self.dropped_chars
    }

    /// The text still kept.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The kept text from absolute character `offset`, at most `limit` characters.
    pub fn slice(&self, offset: usize, limit: Option<usize>) -> OutputSlice {
        let dropped_before = self.dropped_chars.saturating_sub(offset);
        let local = offset.saturating_sub(self.dropped_chars);
        let (text, taken) = slice_chars(&self.text, local, limit);
        OutputSlice { text: text.to_string(), next_offset: self.dropped_chars + local + taken, dropped_before }
    }

    /// Trims the front to `cap` bytes once it is an eighth over, so trimming
    /// (which counts the dropped characters) is not paid on every push.
    fn enforce_cap(&mut self) {
        if self.text.len() <= self.cap + self.cap / 8 {
            return;
        }
        let mut cut = self.text.len() - self.cap;
        while !self.text.is_char_boundary(cut) {
            cut += 1;
        }
        self.dropped_chars += self.text[..cut].chars().count();
        self.text.drain(..cut);
    }
}

/// The characters `offset..offset+limit` of `text` (clamped to its end), and
/// how many characters that is.
pub fn slice_chars(text: &str, offset: usize, limit: Option<usize>) -> (&str, usize) {
    let byte_at =
        |chars: usize, from: usize| text[from..].char_indices().nth(chars).map_or(text.len(), |(i, _)| from + i);
    let start = byte_at(offset, 0);
    let end = match limit {
        Some(limit) => byte_at(limit, start),
        None => text.len(),
    };
    let slice = &text[start..end];
    (slice, slice.chars().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_reads_is_decoded_whole() {
        let crab = "🦀".as_bytes();
        let mut buffer = OutputBuffer::new(DEFAULT_OUTPUT_CAP);
        buffer.push(b"a");
        buffer.push(&crab[..1]);
        buffer.push(&crab[1..3]);
        assert_eq!(buffer.text(), "a");
        buffer.push(&crab[3..]);
        assert_eq!(buffer.text(), "a🦀");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut buffer = OutputBuffer::new(DEFAULT_OUTPUT_CAP);
        buffer.push(b"ok\xffstill ok");
        buffer.push(&"é".as_bytes()[..1]);
        buffer.finish();
        assert_eq!(buffer.text(), "ok\u{fffd}still ok\u{fffd}");
    }

    #[test]
    fn slices_count_characters_not_bytes() {
        assert_eq!(slice_chars("héllo🦀!", 1, Some(5)), ("éllo🦀", 5));
        assert_eq!(slice_chars("héllo", 3, None), ("lo", 2));
        assert_eq!(slice_chars("abc", 10, Some(2)), ("", 0));
    }

    #[test]
    fn the_cap_drops_the_oldest_text_and_offsets_stay_absolute() {
        let mut buffer = OutputBuffer::new(8);
        buffer.push("0123456789abcdef".as_bytes());
        assert_eq!(buffer.text(), "89abcdef");
        assert_eq!(buffer.dropped_chars(), 8);

        let from_start = buffer.slice(0, Some(3));
        assert_eq!(from_start.text, "89a");
        assert_eq!(from_start.dropped_before, 8);
        assert_eq!(from_start.next_offset, 11);

        let later = buffer.slice(from_start.next_offset, None);
        assert_eq!(later.text, "bcdef");
        assert_eq!(later.dropped_before, 0);
        assert_eq!(later.next_offset, 16);
        assert_eq!(buffer.slice(16, None).text, "");
    }

    #[test]
    fn the_cap_never_cuts_a_character() {
        let mut buffer = OutputBuffer::new(5);
        buffer.push("éééééééé".as_bytes());
        assert!(buffer.text().chars().all(|c| c == 'é'));
        assert_eq!(buffer.dropped_chars() + buffer.text().chars().count(), 8);
    }
}
