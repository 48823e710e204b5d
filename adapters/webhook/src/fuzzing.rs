//! The request reading of `POST /webhook/<name>`, for the fuzz targets in
//! `fuzz/`. Not part of the API: it may change with them.

use bub_channel::Inbound;

/// What the route makes of a request's query and body once its size and
/// signature passed: the message, or the error's HTTP status and message.
pub fn read_request(channel: &str, query: Option<&str>, body: &[u8]) -> Result<Inbound, (u16, String)> {
    let refused = |error: crate::ingress::WebhookError| (error.status().as_u16(), error.to_string());
    let mode = crate::ingress::Mode::from_query(query).map_err(refused)?;
    crate::ingress::read_message(channel, body, mode).map_err(refused)
}
