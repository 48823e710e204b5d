//! `web.fetch`: GET an http(s) URL and return the body as text.
//!
//! The model chooses the URL, so the fetch must not become a way into the
//! gateway's own network (SSRF). Before every hop the host is resolved and
//! each address checked by [`blocked_reason`]; the connection is then pinned
//! to exactly those addresses (so a second, different DNS answer cannot slip
//! in), proxies from the environment are ignored (they would connect
//! elsewhere), and redirects are followed by hand so each target is checked
//! the same way. A host is refused when *any* of its addresses is blocked:
//! by its range ([`blocked_reason`]), or because it is one of this host's
//! own interfaces' ([`interfaces`]), which reach its `0.0.0.0` listeners.
//! Operators open the check with [`WebFetchSettings::allow_private`] or per
//! host with [`WebFetchSettings::allowed_hosts`].
//!
//! - [`address`]: which addresses are blocked, and why.
//! - [`interfaces`]: this host's own addresses, blocked too.

pub mod address;
pub mod interfaces;

pub use address::blocked_reason;

use crate::tools::{Capability, Tool, ToolContext, ToolError};
use reqwest::header::{ACCEPT, HeaderMap, HeaderName, HeaderValue, LOCATION};
use reqwest::{Client, Response, Url};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub const ACCEPT_VALUE: &str = "text/markdown, text/plain;q=0.9, */*;q=0.8";
/// Redirects followed before giving up.
pub const MAX_REDIRECTS: usize = 5;
/// Longest timeout the model may ask for, in seconds.
pub const MAX_TIMEOUT_SECONDS: f64 = 60.0;
/// Characters of an error response's body shown with the error.
const EXCERPT_CHARS: usize = 500;

/// How `web.fetch` may reach the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebFetchSettings {
    /// Allow loopback, private, link-local and other non-public addresses.
    pub allow_private: bool,
    /// Hosts (as written in URLs, e.g. `wiki.internal` or `10.0.0.5`) whose
    /// addresses are not checked, for operators who trust one internal service.
    pub allowed_hosts: Vec<String>,
    /// Most response bytes read; the rest is cut with a note. Default 1 MiB.
    pub max_bytes: usize,
    /// Timeout when the model gives none. Default 10 s.
    pub default_timeout: Duration,
}

impl Default for WebFetchSettings {
    fn default() -> WebFetchSettings {
        WebFetchSettings {
            allow_private: false,
            allowed_hosts: Vec::new(),
            max_bytes: 1024 * 1024,
            default_timeout: Duration::from_secs(10),
        }
    }
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("invalid URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("only http and https URLs can be fetched, not {scheme}: ({url})")]
    Scheme { scheme: String, url: String },
    #[error("refused to fetch {url}: {host} resolves to {addr}, which is {reason}")]
    Blocked { url: String, host: String, addr: IpAddr, reason: &'static str },
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("cannot check {url} against this host's own addresses: {reason}")]
    OwnAddresses { url: String, reason: String },
    #[error("more than {MAX_REDIRECTS} redirects (the last one to {0})")]
    TooManyRedirects(String),
    #[error("HTTP {status} from {url}")]
    Status { status: u16, url: String, excerpt: String },
    #[error("fetching {url} failed: {source}")]
    Request { url: String, source: reqwest::Error },
    #[error("timed out after {0} seconds")]
    Timeout(f64),
}

impl From<FetchError> for ToolError {
    fn from(error: FetchError) -> ToolError {
        let message = error.to_string();
        match error {
            FetchError::BadUrl { .. } | FetchError::Scheme { .. } => ToolError::invalid_input(message),
            FetchError::Blocked { .. } => ToolError::denied(message),
            FetchError::Status { status, url, excerpt } => {
                ToolError::failed(message).with_details(json!({"status": status, "url": url, "body": excerpt}))
            }
            _ => ToolError::failed(message),
        }
    }
}

/// Parses a URL and accepts only http and https.
pub fn parse_url(text: &str) -> Result<Url, FetchError> {
    let url = Url::parse(text.trim())
        .map_err(|error| FetchError::BadUrl { url: text.to_string(), reason: error.to_string() })?;
    match url.scheme() {
        "http" | "https" if url.host_str().is_some() => Ok(url),
        "http" | "https" => Err(FetchError::BadUrl { url: text.to_string(), reason: "it has no host".into() }),
        scheme => Err(FetchError::Scheme { scheme: scheme.to_string(), url: url.to_string() }),
    }
}

/// GETs `url` under `settings`, following redirects, within `timeout`.
pub async fn fetch(
    settings: &WebFetchSettings,
    url: &str,
    headers: HeaderMap,
    timeout: Duration,
) -> Result<String, FetchError> {
    let url = parse_url(url)?;
    tokio::time::timeout(timeout, fetch_following(settings, url, headers, timeout))
        .await
        .map_err(|_| FetchError::Timeout(timeout.as_secs_f64()))?
}

async fn fetch_following(
    settings: &WebFetchSettings,
    mut url: Url,
    headers: HeaderMap,
    timeout: Duration,
) -> Result<String, FetchError> {
    let origin = url.origin();
    for _ in 0..=MAX_REDIRECTS {
        let (host, addrs) = checked_addresses(settings, &url).await?;
        let mut client = Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().timeout(timeout);
        if host.parse::<IpAddr>().is_err() {
            client = client.resolve_to_addrs(&host, &addrs);
        }
        let failed = |source| FetchError::Request { url: url.to_string(), source };
        let client = client.build().map_err(failed)?;
        let mut request = client.get(url.clone()).header(ACCEPT, ACCEPT_VALUE);
        // The model's headers (tokens, cookies) never follow a redirect elsewhere.
        if url.origin() == origin {
            request = request.headers(headers.clone());
        }
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let location = response.headers().get(LOCATION).and_then(|l| l.to_str().ok());
        if let (true, Some(location)) = (status.is_redirection(), location) {
            let next = url
                .join(location)
                .map_err(|error| FetchError::BadUrl { url: location.to_string(), reason: error.to_string() })?;
            url = parse_url(next.as_str())?;
            continue;
        }
        if !status.is_success() {
            let (body, _) = read_capped(response, 4 * EXCERPT_CHARS).await.unwrap_or_default();
            return Err(FetchError::Status {
                status: status.as_u16(),
                url: url.to_string(),
                excerpt: body.chars().take(EXCERPT_CHARS).collect(),
            });
        }
        let (mut body, truncated) = read_capped(response, settings.max_bytes).await.map_err(failed)?;
        if truncated {
            body.push_str(&format!(
                "\n[truncated: the response is larger than {} bytes; only the first {} bytes are shown]",
                settings.max_bytes, settings.max_bytes
            ));
        }
        return Ok(body);
    }
    Err(FetchError::TooManyRedirects(url.to_string()))
}

/// The host of `url` and the addresses it may be reached at, refused when any
/// of them is blocked (unless the settings exempt it).
async fn checked_addresses(settings: &WebFetchSettings, url: &Url) -> Result<(String, Vec<SocketAddr>), FetchError> {
    let host = url.host_str().unwrap_or_default().to_string();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = url.port_or_known_default().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|error| FetchError::Resolve { host: host.clone(), reason: error.to_string() })?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(FetchError::Resolve { host, reason: "no addresses".into() });
    }
    let exempt = settings.allow_private || settings.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(bare));
    if !exempt {
        for addr in &addrs {
            if let Some(reason) = blocked_reason(addr.ip()) {
                return Err(FetchError::Blocked { url: url.to_string(), host, addr: addr.ip(), reason });
            }
        }
        // Listed only when every address is public: the common refusals cost nothing.
        let own = interfaces::own_addresses()
            .map_err(|error| FetchError::OwnAddresses { url: url.to_string(), reason: error.to_string() })?;
        if let Some(addr) = addrs.iter().find(|addr| interfaces::is_own(addr.ip(), &own)) {
            let reason = "an address of this host's own interfaces";
            return Err(FetchError::Blocked { url: url.to_string(), host, addr: addr.ip(), reason });
        }
    }
    Ok((bare.to_string(), addrs))
}

/// The body up to `max` bytes, decoded lossily, and whether more was left.
async fn read_capped(mut response: Response, max: usize) -> Result<(String, bool), reqwest::Error> {
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    if truncated {
        // Do not show a character the cap cut in half as garbage.
        if let Err(error) = std::str::from_utf8(&body)
            && error.error_len().is_none()
        {
            body.truncate(error.valid_up_to());
        }
    }
    Ok((String::from_utf8_lossy(&body).into_owned(), truncated))
}

/// Fetch a web page or file with an HTTP GET and return its body as text
/// (servers that offer markdown are asked for it). Only http and https;
/// redirects are followed; local and private network addresses are refused.
/// Very large bodies are cut, with a note saying so.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebFetchArgs {
    /// The http:// or https:// URL.
    pub url: String,
    /// Extra request headers, like {"Authorization": "Bearer ..."}. Sent to the URL's own origin only, never to a redirect target elsewhere.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Seconds to wait for the whole fetch, at most 60. Default 10.
    #[serde(default)]
    pub timeout: Option<f64>,
}

/// `web.fetch` under `settings`.
pub fn web_fetch_tool(settings: WebFetchSettings) -> Tool {
    Tool::typed("web.fetch", move |args: WebFetchArgs, ctx: ToolContext| {
        let settings = settings.clone();
        async move {
            let timeout = match args.timeout {
                None => settings.default_timeout,
                Some(t) if t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_SECONDS => Duration::from_secs_f64(t),
                Some(t) => {
                    return Err(ToolError::invalid_input(format!(
                        "timeout must be more than 0 and at most {MAX_TIMEOUT_SECONDS} seconds, got {t}"
                    )));
                }
            };
            let headers = header_map(args.headers.unwrap_or_default())?;
            let result = fetch(&settings, &args.url, headers, timeout).await;
            match &result {
                Ok(body) => {
                    tracing::info!(tool = "web.fetch", session = %ctx.tape.name(), url = %args.url, bytes = body.len(), "fetched")
                }
                Err(error) => {
                    tracing::info!(tool = "web.fetch", session = %ctx.tape.name(), url = %args.url, %error, "fetch failed")
                }
            }
            Ok(result?)
        }
    })
    .with_capabilities([Capability::Network])
}

fn header_map(headers: BTreeMap<String, String>) -> Result<HeaderMap, ToolError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let bad = |what: &str| ToolError::invalid_input(format!("header {name:?}: invalid {what}"));
        let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad("name"))?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| bad("value"))?;
        map.insert(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_with_a_host_are_accepted() {
        assert!(parse_url("https://example.com/a").is_ok());
        assert!(matches!(parse_url("file:///etc/passwd"), Err(FetchError::Scheme { .. })));
        assert!(matches!(parse_url("ftp://example.com"), Err(FetchError::Scheme { .. })));
        assert!(matches!(parse_url("not a url"), Err(FetchError::BadUrl { .. })));
    }
}
