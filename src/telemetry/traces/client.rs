//! The exporter's HTTP client: reqwest 0.12's blocking client behind
//! opentelemetry-http's [`HttpClient`] trait, so the exporter shares the
//! workspace's one HTTP stack (its own client features pull reqwest 0.13).
//! Blocking, because the SDK's batch processor exports from a thread of its
//! own that runs no tokio runtime.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use std::io::Read;
use std::time::Duration;

/// The largest response body read from a collector (it answers with a few
/// bytes; opentelemetry-http's own clients stop at the same 4 MiB).
const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug)]
pub(super) struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    /// A client whose every request ends within `timeout`. Built and dropped
    /// outside any tokio runtime (reqwest's blocking client runs one of its own).
    pub(super) fn new(timeout: Duration) -> Result<BlockingClient, reqwest::Error> {
        Ok(BlockingClient(reqwest::blocking::Client::builder().timeout(timeout).build()?))
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let response =
            self.0.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body.to_vec()).send()?;
        let (status, headers) = (response.status(), response.headers().clone());
        let mut body = Vec::new();
        response.take(MAX_RESPONSE_BYTES).read_to_end(&mut body)?;
        let mut answer = Response::builder().status(status).body(Bytes::from(body))?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}
