//! Streamable HTTP over the workspace's reqwest 0.12: rmcp's
//! [`StreamableHttpClient`] implemented by [`HttpClient`], so a `url` server
//! is reached on the same HTTP stack as the model providers (rmcp's own
//! client is reqwest 0.13, a second stack in the lock).
//!
//! Guarantees: a JSON body is read up to the transport's
//! `max_json_response_size`, one SSE event up to `max_sse_event_size`, an
//! error body only up to a short prefix; the configured headers go with
//! every request and never into a log line.

use futures::stream::{BoxStream, StreamExt};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, SseError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// The most of an error body kept for the message (a server's HTML error page is not read whole).
const ERROR_BODY_PREFIX: usize = 2048;

/// A reqwest 0.12 client as rmcp's Streamable HTTP client. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct HttpClient(reqwest::Client);

impl HttpClient {
    pub fn new(client: reqwest::Client) -> HttpClient {
        HttpClient(client)
    }
}

type Failure = StreamableHttpError<reqwest::Error>;

fn with_headers(
    mut request: reqwest::RequestBuilder,
    session_id: Option<&str>,
    auth_header: Option<String>,
    custom_headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(token) = auth_header {
        request = request.bearer_auth(token);
    }
    for (name, value) in custom_headers {
        request = request.header(name, value);
    }
    if let Some(session_id) = session_id {
        request = request.header(HEADER_SESSION_ID, session_id);
    }
    request
}

fn media_type_is(value: Option<&HeaderValue>, wanted: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(wanted))
}

/// 401 and 403 with a challenge, 429 and 5xx: the errors rmcp classifies.
fn status_failure(status: StatusCode, headers: &HeaderMap) -> Option<Failure> {
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
        && let Some(challenge) = headers.get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok())
    {
        return Some(StreamableHttpError::AuthRequired(AuthRequiredError::new(challenge.to_string())));
    }
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        let retry_after = headers.get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
        return Some(HttpStatusError::new(status.as_u16(), retry_after).into());
    }
    None
}

/// The body, failing past `limit` bytes without reading further.
async fn read_bounded(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, Failure> {
    if response.content_length().is_some_and(|length| length > limit as u64) {
        return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(StreamableHttpError::Client)?;
        if body.len() + chunk.len() > limit {
            return Err(StreamableHttpError::ResponseBodyTooLarge { max_size: limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Up to [`ERROR_BODY_PREFIX`] bytes of the body, as text.
async fn body_prefix(response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= ERROR_BODY_PREFIX {
            body.truncate(ERROR_BODY_PREFIX);
            break;
        }
    }
    String::from_utf8_lossy(&body).trim().to_string()
}

/// An event stream whose events may not pass `max_event` bytes: a server
/// that never ends its event cannot grow our memory without bound.
fn bounded_events(response: reqwest::Response, max_event: usize) -> BoxStream<'static, Result<Sse, SseError>> {
    let mut since_boundary = 0usize;
    let mut last = 0u8;
    let bytes = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|error| std::io::Error::other(error.to_string()))?;
        for &byte in chunk.iter() {
            // An event ends at a blank line (`\n\n`; `\r\n\r\n` ends with it too).
            if byte == b'\n' && last == b'\n' {
                since_boundary = 0;
            } else if byte != b'\r' {
                since_boundary += 1;
            }
            if byte != b'\r' {
                last = byte;
            }
        }
        if since_boundary > max_event {
            return Err(std::io::Error::other(format!("an event of the server's stream passed {max_event} bytes")));
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

impl StreamableHttpClient for HttpClient {
    type Error = reqwest::Error;

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        let limits = StreamableHttpResponseLimits::default();
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            limits.max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        let mut request =
            self.0.get(uri.as_ref()).header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"));
        if let Some(last_event_id) = last_event_id {
            request = request.header(HEADER_LAST_EVENT_ID, last_event_id);
        }
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(failure) = status_failure(status, response.headers()) {
            return Err(failure);
        }
        if !status.is_success() {
            let body = body_prefix(response).await;
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}: {body}"))));
        }
        let content_type = response.headers().get(CONTENT_TYPE);
        if !media_type_is(content_type, EVENT_STREAM_MIME_TYPE) && !media_type_is(content_type, JSON_MIME_TYPE) {
            let content_type = content_type.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            return Err(StreamableHttpError::UnexpectedContentType(content_type));
        }
        Ok(bounded_events(response, max_sse_event_size))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        let request = with_headers(self.0.delete(uri.as_ref()), Some(&session_id), auth_header, custom_headers);
        let response = request.send().await.map_err(StreamableHttpError::Client)?;
        if response.status() == StatusCode::METHOD_NOT_ALLOWED {
            return Ok(());
        }
        response.error_for_status().map_err(StreamableHttpError::Client)?;
        Ok(())
    }

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let request = self.0.post(uri.as_ref()).header(ACCEPT, format!("{EVENT_STREAM_MIME_TYPE}, {JSON_MIME_TYPE}"));
        let session_attached = session_id.is_some();
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.json(&message).send().await.map_err(StreamableHttpError::Client)?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == StatusCode::NOT_FOUND && session_attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_no_response = !matches!(message, ClientJsonRpcMessage::Request(_));
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let is_json = media_type_is(content_type.as_ref(), JSON_MIME_TYPE);
        let new_session = response.headers().get(HEADER_SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_string);
        if !status.is_success() {
            // A JSON-RPC error in an error response is the server's answer.
            if is_json && !matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                let classified = status_failure(status, response.headers());
                let body = read_bounded(response, limits.max_json_response_size).await?;
                if let Ok(error @ ServerJsonRpcMessage::Error(_)) = serde_json::from_slice(&body) {
                    return Ok(StreamableHttpPostResponse::Json(error, new_session));
                }
                if let Some(failure) = classified {
                    return Err(failure);
                }
                let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_PREFIX)]).into_owned();
                return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                    "HTTP {status}: {text}"
                ))));
            }
            if let Some(failure) = status_failure(status, response.headers()) {
                return Err(failure);
            }
            let body = body_prefix(response).await;
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("HTTP {status}: {body}"))));
        }
        if media_type_is(content_type.as_ref(), EVENT_STREAM_MIME_TYPE) {
            return Ok(StreamableHttpPostResponse::Sse(
                bounded_events(response, limits.max_sse_event_size),
                new_session,
            ));
        }
        if is_json {
            let body = read_bounded(response, limits.max_json_response_size).await?;
            return match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                Ok(parsed) => Ok(StreamableHttpPostResponse::Json(parsed, new_session)),
                Err(_) if awaits_no_response => Ok(StreamableHttpPostResponse::Accepted),
                Err(error) => {
                    let text = String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned();
                    Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!(
                        "the answer is not JSON-RPC ({error}): {text}"
                    ))))
                }
            };
        }
        if awaits_no_response {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        let content_type = content_type.map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        Err(StreamableHttpError::UnexpectedContentType(content_type))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_ignore_parameters_and_case() {
        let value = HeaderValue::from_static("Application/JSON; charset=utf-8");
        assert!(media_type_is(Some(&value), JSON_MIME_TYPE));
        assert!(!media_type_is(Some(&value), EVENT_STREAM_MIME_TYPE));
        assert!(!media_type_is(None, JSON_MIME_TYPE));
    }
}
