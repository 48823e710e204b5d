//! Pairing codes: eight characters from an alphabet without look-alikes
//! (no `0`/`O`, `1`/`I`), shown as `ABCD-EFGH`, read back in any case, with
//! or without the dash. 32 symbols, so 40 random bits: not guessable within
//! a code's hour, with at most [`super::store::MAX_PENDING`] alive per channel.

use rand::Rng;
use std::fmt;

const ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
const LENGTH: usize = 8;

/// A pairing code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code(String);

/// A fresh random code.
pub fn new_code() -> Code {
    let mut rng = rand::rng();
    Code((0..LENGTH).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect())
}

impl Code {
    /// What a person typed: upper-cased, dashes and spaces dropped (it may
    /// match no code; the store says so).
    pub fn parse(text: &str) -> Code {
        Code(text.chars().filter(|c| !c.is_whitespace() && *c != '-').flat_map(char::to_uppercase).collect())
    }

    /// As kept in the database.
    pub(crate) fn from_stored(text: String) -> Code {
        Code(text)
    }

    /// The form kept in the database: no dash.
    pub fn stored(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.get(..LENGTH / 2), self.0.get(LENGTH / 2..)) {
            (Some(head), Some(tail)) if self.0.len() == LENGTH => write!(f, "{head}-{tail}"),
            _ => f.write_str(&self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_back_however_they_are_typed() {
        let code = new_code();
        assert_eq!(code.stored().len(), LENGTH);
        assert!(code.stored().bytes().all(|b| ALPHABET.contains(&b)));
        let shown = code.to_string();
        assert_eq!(shown.len(), LENGTH + 1);
        assert_eq!(Code::parse(&shown), code);
        assert_eq!(Code::parse(&format!(" {} ", shown.to_lowercase())), code);
        assert_eq!(Code::parse(code.stored()), code);
    }
}
