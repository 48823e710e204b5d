//! Rules on a channel's settings that several adapters share, written once:
//! each adapter applies them when it is built, and bub's config applies the
//! same functions at load to say where in the file a value breaks them.
//! (A token's presence is [`Secret::is_blank`](crate::Secret::is_blank).)

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_and_https_urls_pass() {
        assert_eq!(http_url("https://x/y").map(|url| url.to_string()), Ok("https://x/y".to_string()));
        assert_eq!(http_url("ftp://x"), Err(UrlError::NotHttp));
        assert!(matches!(http_url("/relative"), Err(UrlError::NotAUrl(_))));
        assert!(matches!(http_url("http://"), Err(UrlError::NotAUrl(_))));
    }
}
