//! Discord's REST rate limits, applied by the fake by itself: each channel's `create_message` and
//! `edit_message` have a bucket of their own (Discord's default: 5 per 5 s), and all calls share a global
//! one (50 per second). Every answer of a bucketed route says where its bucket stands
//! (`X-RateLimit-Limit`, `-Remaining`, `-Reset`, `-Reset-After`, `-Bucket`), successful ones too, so a client
//! can keep under it; a call over it gets Discord's 429 (`retry_after` in the body, `Retry-After`,
//! `X-RateLimit-Scope`) and is counted as a [`RateLimitHit`]: a 429 the client could have avoided.

use axum::http::header::{HeaderName, HeaderValue};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The fake's buckets ([`super::FakeDiscord::set_rate_limits`]).
#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    /// Calls of one route (`create_message`, `edit_message`) to one channel per `per_channel_window`.
    pub per_channel: u32,
    pub per_channel_window: Duration,
    /// Calls of any route per second.
    pub global_per_second: u32,
}

impl Default for RateLimits {
    fn default() -> RateLimits {
        RateLimits { per_channel: 5, per_channel_window: Duration::from_secs(5), global_per_second: 50 }
    }
}

/// A 429 the fake made from its buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitHit {
    /// The route name (see [`super::FakeDiscord::calls`]).
    pub route: String,
    pub channel_id: Option<u64>,
    /// `X-RateLimit-Scope`: "user" (the route's bucket) or "global".
    pub scope: &'static str,
    /// `retry_after`, seconds.
    pub retry_after: f64,
}

/// One bucket's window: it refills to its limit at `reset`.
#[derive(Debug, Clone, Copy)]
struct Window {
    reset: Instant,
    remaining: u32,
}

impl Window {
    /// Takes one call, refilling first if the window is over; `Err(seconds until the refill)` when empty.
    fn take(&mut self, limit: u32, length: Duration, now: Instant) -> Result<(), f64> {
        if now >= self.reset {
            *self = Window { reset: now + length, remaining: limit };
        }
        if self.remaining == 0 {
            return Err(self.reset.saturating_duration_since(now).as_secs_f64());
        }
        self.remaining -= 1;
        Ok(())
    }
}

/// Where a route's bucket stands, for the `X-RateLimit-*` headers.
#[derive(Debug, Clone)]
pub(super) struct BucketState {
    limit: u32,
    remaining: u32,
    reset_after: f64,
    bucket: String,
}

#[derive(Debug, Default)]
pub(super) struct Buckets {
    limits: RateLimits,
    routes: HashMap<(String, u64), Window>,
    global: Option<Window>,
}

impl Buckets {
    pub(super) fn set_limits(&mut self, limits: RateLimits) {
        *self = Buckets { limits, ..Buckets::default() };
    }

    /// Takes one call of `route` (to `channel_id`, for the bucketed routes) from the global bucket and the
    /// route's; the route's state afterwards (None for routes without a bucket), or the 429 to answer.
    pub(super) fn take(&mut self, route: &str, channel_id: Option<u64>) -> Result<Option<BucketState>, RateLimitHit> {
        let now = Instant::now();
        let limits = self.limits;
        let global = self.global.get_or_insert(Window { reset: now, remaining: 0 });
        if let Err(retry_after) = global.take(limits.global_per_second, Duration::from_secs(1), now) {
            return Err(RateLimitHit { route: route.to_string(), channel_id, scope: "global", retry_after });
        }
        let Some(channel) = channel_id.filter(|_| matches!(route, "create_message" | "edit_message")) else {
            return Ok(None);
        };
        let window = self.routes.entry((route.to_string(), channel)).or_insert(Window { reset: now, remaining: 0 });
        let taken = window.take(limits.per_channel, limits.per_channel_window, now);
        let state = BucketState {
            limit: limits.per_channel,
            remaining: window.remaining,
            reset_after: window.reset.saturating_duration_since(now).as_secs_f64(),
            bucket: format!("fake-{route}"),
        };
        match taken {
            Ok(()) => Ok(Some(state)),
            Err(retry_after) => Err(RateLimitHit { route: route.to_string(), channel_id, scope: "user", retry_after }),
        }
    }
}

/// Adds the `X-RateLimit-*` headers of `state` to `headers`.
pub(super) fn add_headers(headers: &mut HeaderMap, state: &BucketState) {
    let reset = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64() + state.reset_after;
    headers.insert(HeaderName::from_static("x-ratelimit-limit"), HeaderValue::from(state.limit));
    headers.insert(HeaderName::from_static("x-ratelimit-remaining"), HeaderValue::from(state.remaining));
    for (name, value) in
        [("x-ratelimit-reset", format!("{reset:.3}")), ("x-ratelimit-reset-after", format!("{:.3}", state.reset_after))]
    {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    if let Ok(bucket) = HeaderValue::from_str(&state.bucket) {
        headers.insert(HeaderName::from_static("x-ratelimit-bucket"), bucket);
    }
}

/// Discord's 429: `{"message", "retry_after", "global"}` (and `code` when it is a special limit, e.g.
/// 20016 for slowmode), `Retry-After` in whole seconds rounded up, `X-RateLimit-Scope`, and for a route's
/// bucket its state (empty).
pub(super) fn too_many(retry_after: f64, scope: &'static str, code: Option<u64>, message: &str) -> Response {
    let global = scope == "global";
    let mut body = json!({"message": message, "retry_after": retry_after, "global": global});
    if let (Some(code), Some(fields)) = (code, body.as_object_mut()) {
        fields.insert("code".to_string(), json!(code));
    }
    let mut response = super::respond(StatusCode::TOO_MANY_REQUESTS, body);
    let headers = response.headers_mut();
    let whole_seconds = retry_after.max(0.0).ceil() as u64;
    headers.insert(HeaderName::from_static("retry-after"), HeaderValue::from(whole_seconds));
    headers.insert(HeaderName::from_static("x-ratelimit-scope"), HeaderValue::from_static(scope));
    if global {
        headers.insert(HeaderName::from_static("x-ratelimit-global"), HeaderValue::from_static("true"));
    } else {
        let state =
            BucketState { limit: 5, remaining: 0, reset_after: retry_after.max(0.0), bucket: "fake-bucket".into() };
        add_headers(headers, &state);
    }
    response
}

/// The 429 for `hit`, a bucket of the fake's own running out.
pub(super) fn hit_response(hit: &RateLimitHit) -> Response {
    too_many(hit.retry_after, hit.scope, None, "You are being rate limited.")
}
