//! Request signatures: HMAC-SHA256 over `"<timestamp>.<raw body>"`.
//!
//! The same scheme signs requests in both directions: callers sign what they
//! POST to `/webhook/<name>`, and the channel signs what it POSTs to the
//! callback URL. The timestamp (unix seconds) is inside the signed bytes, so a
//! captured request cannot be replayed outside the replay window with a fresh
//! timestamp.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::time::Duration;

/// Header carrying the signing time, in unix seconds.
pub const TIMESTAMP_HEADER: &str = "x-bub-timestamp";
/// Header carrying `sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">`.
pub const SIGNATURE_HEADER: &str = "x-bub-signature";

const SCHEME: &str = "sha256=";

type HmacSha256 = Hmac<Sha256>;

/// Why a request's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("X-Bub-Timestamp must be unix seconds")]
    BadTimestamp,
    #[error("X-Bub-Timestamp is {skew_secs} s away from the server's clock; the limit is {window_secs} s")]
    Stale { skew_secs: i64, window_secs: u64 },
    #[error("X-Bub-Signature must be `sha256=<hex>`")]
    MalformedSignature,
    #[error("X-Bub-Signature does not match the body and timestamp for any configured secret")]
    Mismatch,
}

/// The `X-Bub-Signature` value for `body` sent at `timestamp` (unix seconds).
///
/// ```
/// let header = bub_webhook::sign("s3cret", 1_700_000_000, br#"{"text":"hi"}"#);
/// assert!(header.starts_with("sha256="));
/// assert_eq!(header.len(), "sha256=".len() + 64);
/// ```
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mac = keyed(secret, timestamp, body).finalize().into_bytes();
    format!("{SCHEME}{}", hex::encode(mac))
}

/// Checks a request's `timestamp` and `signature` header values against `body`.
///
/// Accepted when the timestamp is within `replay_window` of `now` (unix
/// seconds, either direction) and the signature matches for ANY of `secrets`
/// (so a secret can be rotated by configuring the old and the new one for a
/// while). The comparison is constant-time.
pub fn verify(
    secrets: &[impl AsRef<str>],
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: i64,
    replay_window: Duration,
) -> Result<(), VerifyError> {
    let sent_at: i64 = timestamp.trim().parse().map_err(|_| VerifyError::BadTimestamp)?;
    let skew = now.saturating_sub(sent_at);
    let window_secs = replay_window.as_secs();
    if skew.unsigned_abs() > window_secs {
        return Err(VerifyError::Stale { skew_secs: skew, window_secs });
    }
    let digest = signature
        .trim()
        .strip_prefix(SCHEME)
        .and_then(|hex_digest| hex::decode(hex_digest).ok())
        .ok_or(VerifyError::MalformedSignature)?;
    let matches = secrets.iter().any(|secret| keyed(secret.as_ref(), sent_at, body).verify_slice(&digest).is_ok());
    if matches { Ok(()) } else { Err(VerifyError::Mismatch) }
}

fn keyed(secret: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
    // HMAC takes keys of any length (longer ones are hashed first), so this
    // error is unreachable whatever the configured secret is.
    #[allow(clippy::expect_used)]
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(300);
    const OPENSSL_HMAC: &str = "9d713ed406bb7076d4123f0dc2c39d2df5c654ed4b0cd56b52c8b4c940bd63ae";

    #[test]
    fn signature_matches_an_independent_hmac_of_timestamp_dot_body() {
        // printf '%s' '1700000000.{}' | openssl dgst -sha256 -hmac key
        assert_eq!(sign("key", 1_700_000_000, b"{}"), format!("sha256={OPENSSL_HMAC}"));
    }

    #[test]
    fn any_configured_secret_verifies() {
        let signature = sign("new", 100, b"body");
        assert_eq!(verify(&["old", "new"], "100", &signature, b"body", 100, WINDOW), Ok(()));
        assert_eq!(verify(&["old"], "100", &signature, b"body", 100, WINDOW), Err(VerifyError::Mismatch));
    }

    #[test]
    fn changed_body_or_timestamp_fails() {
        let signature = sign("k", 100, b"body");
        assert_eq!(verify(&["k"], "100", &signature, b"bodY", 100, WINDOW), Err(VerifyError::Mismatch));
        assert_eq!(verify(&["k"], "101", &signature, b"body", 100, WINDOW), Err(VerifyError::Mismatch));
    }

    #[test]
    fn timestamps_outside_the_window_are_stale_both_ways() {
        let old = sign("k", 0, b"");
        assert!(matches!(verify(&["k"], "0", &old, b"", 301, WINDOW), Err(VerifyError::Stale { .. })));
        let future = sign("k", 1000, b"");
        assert!(matches!(verify(&["k"], "1000", &future, b"", 699, WINDOW), Err(VerifyError::Stale { .. })));
        assert_eq!(verify(&["k"], "0", &old, b"", 300, WINDOW), Ok(()));
    }

    #[test]
    fn malformed_headers_are_named() {
        assert_eq!(verify(&["k"], "soon", "sha256=00", b"", 0, WINDOW), Err(VerifyError::BadTimestamp));
        assert_eq!(verify(&["k"], "0", "md5=00", b"", 0, WINDOW), Err(VerifyError::MalformedSignature));
        assert_eq!(verify(&["k"], "0", "sha256=zz", b"", 0, WINDOW), Err(VerifyError::MalformedSignature));
    }
}
