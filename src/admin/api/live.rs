//! `GET /live`: server-sent events, one `sample` a second, each the rates
//! since the one before of the numbers `/metrics` exports
//! ([`crate::admin::live`]), and which replica they are from.

use super::openapi::Document;
use super::{ApiError, ApiQuery};
use crate::admin::AdminState;
use crate::admin::auth::Admin;
use crate::admin::live::{Rates, Sampler};
use axum::Router;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new().route(&format!("{prefix}/live"), get(live)).route(&format!("{prefix}/live/sample"), get(sample))
}

pub(crate) fn document(doc: &mut Document) {
    doc.op("get", "/live", "live", "The gateway's rates, one server-sent `sample` event a second.")
        .describe("Each event's data is a `LiveSample` (JSON). The stream ends after `samples` events when given.")
        .query::<LiveQuery>()
        .events::<LiveSample>(200, "sample", "`sample` events, each's data a `LiveSample`.")
        .add();
    // The event's schema, for clients (the stream's own schema is text).
    doc.op("get", "/live/sample", "liveSample", "One sample: the rates over the next second.")
        .ok::<LiveSample>("The rates.")
        .add();
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LiveQuery {
    /// Stop after this many samples (default: never).
    #[schemars(range(min = 1, max = 3600))]
    pub samples: Option<u32>,
}

/// The rates of one interval, and the replica they are from.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct LiveSample {
    /// This gateway's replica id among replicas on PostgreSQL, else `single`.
    pub replica: String,
    #[serde(flatten)]
    pub rates: Rates,
}

const INTERVAL: Duration = Duration::from_secs(1);

async fn live(
    _: Admin,
    State(state): State<AdminState>,
    ApiQuery(query): ApiQuery<LiveQuery>,
) -> Result<Response, ApiError> {
    if query.samples.is_some_and(|samples| !(1..=3600).contains(&samples)) {
        return Err(ApiError::bad_request("samples is 1 to 3600"));
    }
    let replica = replica(&state);
    let events = Sampler::new().every(INTERVAL).map(move |rates| {
        let sample = LiveSample { replica: replica.clone(), rates };
        Event::default().event("sample").json_data(&sample).map_err(axum::Error::new)
    });
    let events = match query.samples {
        Some(samples) => events.take(samples as usize).boxed(),
        None => events.boxed(),
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response())
}

async fn sample(_: Admin, State(state): State<AdminState>) -> Result<axum::Json<LiveSample>, ApiError> {
    let mut sampler = Sampler::new();
    sampler.poll();
    tokio::time::sleep(INTERVAL).await;
    let rates = sampler.poll().ok_or_else(|| ApiError::internal("no second sample"))?;
    Ok(axum::Json(LiveSample { replica: replica(&state), rates }))
}

fn replica(state: &AdminState) -> String {
    state.gateway().replica_id().unwrap_or_else(|| "single".to_string())
}
