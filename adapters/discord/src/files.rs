//! Attached files, downloaded from Discord's CDN.
//!
//! An attachment's reference is the URL in the message Discord delivered;
//! it is fetched only when it points at Discord's file servers
//! (`https://cdn.discordapp.com`, `https://media.discordapp.net`) or, when
//! `api_url` is set, at that base (a proxy or a test fake serving the files).
//! Anything else is refused: a URL taken from a message must never make the
//! gateway reach an arbitrary host (server-side request forgery).

use bub_channel::{CappedBytes, FetchError};
use std::time::Duration;
use url::Url;

/// Discord's hosts for attached files.
const CDN_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];
/// How long one download may take, all in.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The client for downloads: no redirects (a redirect could leave the CDN).
pub(crate) fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(DOWNLOAD_TIMEOUT).build()
}

/// `reference` as a URL the channel may fetch, or why not.
pub(crate) fn allowed_url(reference: &str, api_url: Option<&str>) -> Result<Url, FetchError> {
    let refused = || FetchError::Refused(format!("{reference:?} is not a file on Discord's CDN; not fetched"));
    let url = Url::parse(reference).map_err(|_| refused())?;
    let on_cdn = url.scheme() == "https" && url.host_str().is_some_and(|host| CDN_HOSTS.contains(&host));
    let on_api = api_url.and_then(|base| Url::parse(base).ok()).is_some_and(|base| {
        url.scheme() == base.scheme()
            && url.host() == base.host()
            && url.port_or_known_default() == base.port_or_known_default()
    });
    if (on_cdn || on_api) && url.username().is_empty() && url.password().is_none() { Ok(url) } else { Err(refused()) }
}

/// The bytes at `url`, at most `max` of them (`size`: what Discord reported).
pub(crate) async fn fetch(
    client: &reqwest::Client,
    url: Url,
    size: Option<u64>,
    max: u64,
) -> Result<Vec<u8>, FetchError> {
    if let Some(size) = size.filter(|size| *size > max) {
        return Err(FetchError::TooLarge { size, max });
    }
    let failed = |error: reqwest::Error| FetchError::Failed(format!("downloading from Discord failed: {error}"));
    let mut response = client.get(url).send().await.map_err(failed)?;
    if !response.status().is_success() {
        return Err(FetchError::Failed(format!("Discord's CDN answered {}", response.status())));
    }
    if let Some(length) = response.content_length().filter(|length| *length > max) {
        return Err(FetchError::TooLarge { size: length, max });
    }
    let mut bytes = CappedBytes::new(max);
    while let Some(chunk) = response.chunk().await.map_err(failed)? {
        bytes.push(&chunk)?;
    }
    Ok(bytes.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_discords_cdn_or_the_configured_base_is_fetched() {
        let cdn = "https://cdn.discordapp.com/attachments/1/2/cat.png?ex=1&hm=2";
        assert_eq!(allowed_url(cdn, None).map(String::from), Ok(cdn.to_string()));
        assert!(allowed_url("https://media.discordapp.net/attachments/1/2/a.png", None).is_ok());
        for hostile in [
            "http://cdn.discordapp.com/attachments/1/2/a.png",
            "https://cdn.discordapp.com.evil.example/a.png",
            "https://user@cdn.discordapp.com/a.png",
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:9000/cdn/a.png",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(matches!(allowed_url(hostile, None), Err(FetchError::Refused(_))), "{hostile}");
        }
        let fake = Some("http://127.0.0.1:9000");
        assert!(allowed_url("http://127.0.0.1:9000/cdn/a.png", fake).is_ok(), "the configured base (a fake)");
        assert!(allowed_url("http://127.0.0.1:9001/cdn/a.png", fake).is_err(), "another port is another host");
    }
}
