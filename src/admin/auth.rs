//! Who is asking: an admin token, checked in constant time, then a session
//! cookie; and the CSRF check every change needs.
//!
//! - **Tokens** come from `[admin] token_file` (as the config in force
//!   says: a reload rotates them) and from `BUB_ADMIN_TOKEN`. A given token
//!   is compared with every admin's, each as a SHA-256 digest with
//!   [`subtle`]'s constant-time equality, without stopping at a match: the
//!   time taken says nothing about how much of a token was right, nor whose.
//! - **Sessions** are stateless cookies, `EXPIRES.MAC.NAME`, the MAC an
//!   HMAC-SHA256 keyed by a digest of that admin's token. So every replica
//!   sharing the config accepts them, and rotating or removing a token ends
//!   its sessions. A logout is remembered by this replica until the cookie
//!   would have expired (other replicas only see it cleared in the browser).
//!   The cookie is `HttpOnly`, `SameSite=Strict`, scoped to the console's
//!   path, and `Secure` unless the gateway listens on loopback.
//! - **CSRF**: a change made with the cookie must carry `X-Bub-Csrf`, an
//!   HMAC of the cookie the page reads from `GET api/session` (a cross-site
//!   page can neither read it nor set the header without a CORS preflight
//!   bub never answers), and must not come from another site
//!   (`Sec-Fetch-Site`, else `Origin` against `Host`). A token in
//!   `Authorization: Bearer` is no ambient credential: scripts need no CSRF
//!   header.
//! - **Failed attempts** (logins and bearer tokens) are counted per client
//!   address ([`FailedAttempts`]).

use super::state::AdminState;
use super::{ApiError, limit::FailedAttempts};
use crate::config::AdminToken;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "bub_admin";
/// The header a cookie-authenticated change carries.
pub(crate) const CSRF_HEADER: &str = "x-bub-csrf";

/// The admin whose token matches `given`, comparing with every token.
pub(crate) fn find_admin<'a>(tokens: &'a [AdminToken], given: &str) -> Option<&'a AdminToken> {
    let given = Sha256::digest(given.as_bytes());
    let mut found = None;
    for token in tokens {
        let expected = Sha256::digest(token.token.expose().as_bytes());
        let equal: bool = given.as_slice().ct_eq(expected.as_slice()).into();
        if equal && found.is_none() {
            found = Some(token);
        }
    }
    found
}

/// HMAC-SHA256 under a key derived from `token` (never the token itself:
/// the cookie's MAC must not double as a way to test tokens offline more
/// cheaply than a login would).
fn mac(token: &AdminToken, purpose: &str, message: &str) -> String {
    let key =
        Sha256::new().chain_update(b"bub admin console\0").chain_update(token.token.expose().as_bytes()).finalize();
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key.as_slice()) else {
        unreachable!("HMAC takes a key of any length")
    };
    mac.update(purpose.as_bytes());
    mac.update(b"\0");
    mac.update(message.as_bytes());
    hex(mac.finalize().into_bytes().as_slice())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn now_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// A new session cookie's value for `token`'s admin, valid for `lasting`.
pub(crate) fn session_value(token: &AdminToken, lasting: Duration) -> String {
    let expires = now_seconds() + lasting.as_secs();
    let signed = format!("{expires}.{}", token.name);
    format!("{expires}.{}.{}", mac(token, "session", &signed), token.name)
}

/// The admin a cookie value stands for, when its MAC is right under that
/// admin's current token and it has not expired.
pub(crate) fn check_session<'a>(tokens: &'a [AdminToken], value: &str) -> Option<&'a AdminToken> {
    let mut parts = value.splitn(3, '.');
    let (expires, given_mac, name) = (parts.next()?, parts.next()?, parts.next()?);
    let expires: u64 = expires.parse().ok()?;
    if expires <= now_seconds() {
        return None;
    }
    let token = tokens.iter().find(|token| token.name == name)?;
    let expected = mac(token, "session", &format!("{expires}.{name}"));
    let equal: bool = expected.as_bytes().ct_eq(given_mac.as_bytes()).into();
    equal.then_some(token)
}

/// The CSRF token that goes with a session cookie.
pub(crate) fn csrf_for(token: &AdminToken, cookie: &str) -> String {
    mac(token, "csrf", cookie)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether the request comes from a page of another site: `Sec-Fetch-Site`
/// when the browser sends it, else an `Origin` whose host is not the
/// request's (`X-Forwarded-Host` first: behind a proxy that is the host the
/// browser used). A request with neither (a script) is not cross-site.
pub(crate) fn is_cross_site(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = text(header::ORIGIN.as_str()) else { return false };
    let host = text("x-forwarded-host").or_else(|| text(header::HOST.as_str()));
    let origin_host = origin.split_once("://").map(|(_, rest)| rest.trim_end_matches('/'));
    match (origin_host, host) {
        (Some(origin_host), Some(host)) => {
            !origin_host.eq_ignore_ascii_case(host.split(',').next().unwrap_or("").trim())
        }
        _ => true,
    }
}

/// How the admin was recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Via {
    /// The session cookie, with the CSRF token its changes must carry.
    Cookie { csrf: String },
    /// `Authorization: Bearer`.
    Bearer,
}

/// An admin, recognised by a bearer token or a session cookie: every admin
/// route takes one (or [`Change`]). Its rejection: 404 while the console is
/// off (the config in force has no `[admin]`), 429 after too many failed
/// attempts, 401 otherwise.
#[derive(Debug, Clone)]
pub(crate) struct Admin {
    pub name: String,
    pub via: Via,
}

impl FromRequestParts<AdminState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AdminState) -> Result<Admin, ApiError> {
        let tokens = state.tokens().ok_or_else(ApiError::console_off)?;
        let address = super::client_address(parts);
        let bearer = parts.headers.get(header::AUTHORIZATION).and_then(|value| value.to_str().ok());
        if let Some(bearer) = bearer {
            let failures = state.failures();
            failures.check(address)?;
            let given = bearer.strip_prefix("Bearer ").or_else(|| bearer.strip_prefix("bearer ")).unwrap_or("");
            return match find_admin(&tokens, given.trim()) {
                Some(token) => Ok(Admin { name: token.name.clone(), via: Via::Bearer }),
                None => {
                    failures.record(address);
                    tracing::warn!(%address, "admin API: a bearer token that is no admin's");
                    Err(ApiError::unauthorized("the bearer token is not an admin token"))
                }
            };
        }
        let Some(value) = cookie(&parts.headers, COOKIE) else {
            return Err(ApiError::unauthorized("log in first (or send an admin token as `Authorization: Bearer`)"));
        };
        match check_session(&tokens, value).filter(|_| !state.is_revoked(value)) {
            Some(token) => Ok(Admin { name: token.name.clone(), via: Via::Cookie { csrf: csrf_for(token, value) } }),
            None => Err(ApiError::unauthorized("the session has expired or its token changed: log in again")),
        }
    }
}

/// An admin allowed to change something: with the session cookie, the
/// request carries the CSRF header and does not come from another site.
#[derive(Debug, Clone)]
pub(crate) struct Change(pub Admin);

impl FromRequestParts<AdminState> for Change {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AdminState) -> Result<Change, ApiError> {
        let admin = Admin::from_request_parts(parts, state).await?;
        if let Via::Cookie { csrf } = &admin.via {
            if is_cross_site(&parts.headers) {
                tracing::warn!(admin = %admin.name, "admin change refused: it came from another site");
                return Err(ApiError::forbidden("a change from another site is refused"));
            }
            let given = parts.headers.get(CSRF_HEADER).map(|value| value.as_bytes()).unwrap_or_default();
            let equal: bool = given.ct_eq(csrf.as_bytes()).into();
            if !equal || parts.method == Method::GET {
                return Err(ApiError::forbidden(
                    "the CSRF token is missing or wrong: reload the page (scripts: use a bearer token)",
                ));
            }
        }
        Ok(Change(admin))
    }
}

impl FailedAttempts {
    /// A 429 while `address` (or everyone) failed too often.
    pub(crate) fn check(&self, address: std::net::IpAddr) -> Result<(), ApiError> {
        match self.blocked_for(address) {
            Some(wait) => Err(ApiError::too_many(wait)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str, token: &str) -> AdminToken {
        AdminToken { name: name.into(), token: crate::config::Secret::new(token) }
    }

    #[test]
    fn a_token_finds_its_admin_and_a_near_miss_finds_none() {
        let tokens = [token("alice", "0123456789abcdef"), token("bob", "fedcba9876543210")];
        assert_eq!(find_admin(&tokens, "fedcba9876543210").map(|t| t.name.as_str()), Some("bob"));
        assert!(find_admin(&tokens, "fedcba987654321").is_none());
        assert!(find_admin(&tokens, "").is_none());
    }

    #[test]
    fn a_session_holds_until_its_token_changes_or_it_is_tampered_with() {
        let alice = token("alice", "0123456789abcdef");
        let value = session_value(&alice, Duration::from_secs(60));
        assert_eq!(check_session(std::slice::from_ref(&alice), &value).map(|t| t.name.as_str()), Some("alice"));
        let rotated = token("alice", "0123456789abcdeX");
        assert!(check_session(&[rotated], &value).is_none(), "a new token ends the old sessions");
        let as_bob = format!("{}bob", value.trim_end_matches("alice"));
        assert!(check_session(&[alice.clone(), token("bob", "fedcba9876543210")], &as_bob).is_none());
        let (expires, rest) = value.split_once('.').unwrap();
        let later = format!("{}.{rest}", expires.parse::<u64>().unwrap() + 3600);
        assert!(check_session(std::slice::from_ref(&alice), &later).is_none(), "the expiry is signed");
        let expired = session_value(&alice, Duration::ZERO);
        assert!(check_session(std::slice::from_ref(&alice), &expired).is_none());
        assert_ne!(csrf_for(&alice, &value), csrf_for(&alice, &later));
    }

    #[test]
    fn cross_site_is_told_by_fetch_metadata_then_by_origin() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        assert!(is_cross_site(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(is_cross_site(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(!is_cross_site(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(is_cross_site(&headers(&[("origin", "https://evil.example"), ("host", "bub.example")])));
        assert!(!is_cross_site(&headers(&[("origin", "https://bub.example"), ("host", "bub.example")])));
        let proxied =
            [("origin", "https://bub.example"), ("host", "127.0.0.1:8080"), ("x-forwarded-host", "bub.example")];
        assert!(!is_cross_site(&headers(&proxied)));
        assert!(!is_cross_site(&headers(&[])), "a script sends neither");
        assert!(is_cross_site(&headers(&[("origin", "null"), ("host", "bub.example")])));
    }
}
