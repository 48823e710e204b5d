//! Rules on a channel's settings that several adapters share, written once:
//! each adapter applies them when it is built, and bub's config applies the
//! same functions at load to say where in the file a value breaks them.
//! (A token's presence is [`Secret::is_blank`](crate::Secret::is_blank).)
//! [`secret_weakness`] is advice rather than a rule: `bub doctor` applies it to
//! the secrets that sign or verify requests, and nothing refuses a weak one.

pub use url::Url;

/// Why a setting is not an `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("not a URL: {0}")]
    NotAUrl(url::ParseError),
    #[error("not an http(s) URL")]
    NotHttp,
}

/// `text` as an `http://` or `https://` URL (which always has a host): the
/// rule for every URL a channel calls or is called at.
pub fn http_url(text: &str) -> Result<Url, UrlError> {
    let url = Url::parse(text).map_err(UrlError::NotAUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(UrlError::NotHttp);
    }
    Ok(url)
}

/// The fewest bytes a signing secret should have: 256 bits, as many as the
/// HMAC-SHA256 it keys (`openssl rand -hex 32` gives 64 characters).
pub const MIN_SECRET_BYTES: usize = 32;

/// Secrets people write when asked for one; any of them, in any case and
/// repeated to any length, is guessed first.
const WELL_KNOWN_SECRETS: &[&str] =
    &["secret", "s3cret", "password", "passw0rd", "changeme", "change-me", "test", "example", "12345678", "abc"];

/// Why `secret` is easy to guess or to brute-force, or `None`: fewer than
/// [`MIN_SECRET_BYTES`], a well-known word (repeated or not), or fewer than
/// eight distinct characters (`aaaa…`, `abab…`).
pub fn secret_weakness(secret: &str) -> Option<String> {
    let lower = secret.to_ascii_lowercase();
    let well_known = WELL_KNOWN_SECRETS.iter().find(|word| !lower.is_empty() && lower.split(**word).all(str::is_empty));
    if let Some(word) = well_known {
        let repeated = if lower.len() > word.len() { " repeated" } else { "" };
        return Some(format!("it is the well-known word `{word}`{repeated}"));
    }
    if secret.len() < MIN_SECRET_BYTES {
        return Some(format!("it is {} bytes long, under the {MIN_SECRET_BYTES} a signing key needs", secret.len()));
    }
    let mut distinct: Vec<char> = secret.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 8 {
        return Some(format!("it uses only {} distinct characters", distinct.len()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_repeated_and_well_known_secrets_are_weak() {
        assert_eq!(secret_weakness(&"a1B2c3D4".repeat(8)), None);
        assert_eq!(secret_weakness("0123456789abcdef0123456789abcdef"), None);
        assert!(secret_weakness("s3cret").unwrap().contains("well-known word `s3cret`"));
        assert!(secret_weakness(&"Secret".repeat(8)).unwrap().contains("`secret` repeated"));
        assert!(secret_weakness("abcdefghij").unwrap().contains("10 bytes long"));
        assert!(secret_weakness(&"x".repeat(40)).unwrap().contains("only 1 distinct"));
        assert!(secret_weakness(&"ab".repeat(20)).unwrap().contains("only 2 distinct"));
        assert!(secret_weakness("").unwrap().contains("0 bytes"));
    }

    #[test]
    fn only_http_and_https_urls_pass() {
        assert_eq!(http_url("https://x/y").map(|url| url.to_string()), Ok("https://x/y".to_string()));
        assert_eq!(http_url("ftp://x"), Err(UrlError::NotHttp));
        assert!(matches!(http_url("/relative"), Err(UrlError::NotAUrl(_))));
        assert!(matches!(http_url("http://"), Err(UrlError::NotAUrl(_))));
    }
}
