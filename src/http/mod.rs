//! The gateway's one HTTP server: `/healthz`, `/readyz`, `/metrics`, and the
//! routes of channels that receive over HTTP (`POST /webhook/<name>`).
//!
//! It knows nothing of the gateway: `/readyz` asks a [`Readiness`] (the
//! gateway is one), and the routes of the parts that serve HTTP (the
//! channels' webhooks, later an admin console) are merged in as given
//! ([`router`]). The gateway's builder mounts it.

mod peers;
mod serve;
mod slots;

pub use serve::{ServeLimits, serve};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The process-wide Prometheus recorder (installed on first use; the
/// `metrics` macros everywhere in bub report to it).
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Fails only when another recorder is installed (an embedding program's); then /metrics is empty.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics shows only bub's defaults");
            }
            handle
        })
        .clone()
}

/// What `/readyz` reports on.
#[async_trait::async_trait]
pub trait Readiness: Send + Sync + 'static {
    /// The channels served, for the report.
    fn channel_names(&self) -> Vec<String>;
    /// Whether the database answers; the error reads in the report's reason.
    async fn ping(&self) -> Result<(), String>;
}

/// Shared by the handlers.
#[derive(Clone)]
pub struct HttpState {
    ready: Arc<dyn Readiness>,
    metrics: PrometheusHandle,
    /// Set once every channel started.
    started: Arc<AtomicBool>,
}

impl HttpState {
    /// Not ready until [`HttpState::set_started`].
    pub fn new(ready: Arc<dyn Readiness>) -> HttpState {
        HttpState { ready, metrics: metrics_handle(), started: Arc::default() }
    }

    /// Marks the gateway ready (channels started).
    pub fn set_started(&self) {
        self.started.store(true, Ordering::SeqCst);
    }
}

/// The paths this module serves itself; no part may route them.
pub const PROBE_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Health, readiness and metrics, plus the routes of each part of the
/// program that serves HTTP (the channels' webhooks; an admin console),
/// merged as given: this module knows none of them. Each part keeps to
/// paths of its own (a channel's are under `/<kind>/<name>`) and off
/// [`PROBE_PATHS`]; overlapping routes are a programming error that axum
/// refuses when the router is built.
pub fn router(state: HttpState, parts: impl IntoIterator<Item = Router>) -> Router {
    let probes = Router::new()
        .route(PROBE_PATHS[0], get(healthz))
        .route(PROBE_PATHS[1], get(readyz))
        .route(PROBE_PATHS[2], get(metrics))
        .with_state(state);
    parts.into_iter().fold(probes, Router::merge)
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<HttpState>) -> Response {
    let mut channels = state.ready.channel_names();
    channels.sort();
    if !state.started.load(Ordering::SeqCst) {
        let body = json!({"status": "starting", "reason": "channels are not started yet", "channels": channels});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    match state.ready.ping().await {
        Ok(()) => Json(json!({"status": "ready", "channels": channels})).into_response(),
        Err(error) => {
            let body = json!({"status": "unavailable", "reason": format!("database: {error}"), "channels": channels});
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;

    struct Up;

    #[async_trait::async_trait]
    impl Readiness for Up {
        fn channel_names(&self) -> Vec<String> {
            vec![]
        }
        async fn ping(&self) -> Result<(), String> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_part_is_served_beside_the_probes() {
        let channels = Router::new().route("/webhook/team", post(|| async { "from the channel" }));
        let console = Router::new().route("/admin", get(|| async { "from the console" }));
        let app = router(HttpState::new(Arc::new(Up)), [channels, console]);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        let text = |r: reqwest::Response| async move { (r.status().as_u16(), r.text().await.unwrap()) };
        let posted = client.post(format!("{base}/webhook/team")).send().await.unwrap();
        assert_eq!(text(posted).await, (200, "from the channel".to_string()));
        let console = client.get(format!("{base}/admin")).send().await.unwrap();
        assert_eq!(text(console).await, (200, "from the console".to_string()));
        let health = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), 200);
        assert_eq!(client.get(format!("{base}/elsewhere")).send().await.unwrap().status(), 404);
    }
}
