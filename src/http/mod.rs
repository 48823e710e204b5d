//! The gateway's one HTTP server: `/healthz`, `/readyz`, `/metrics`, and the
//! routes of channels that receive over HTTP (`POST /webhook/<name>`).
//!
//! It knows nothing of the gateway: `/readyz` asks a [`Readiness`] (the
//! gateway is one), and the channels' routes are merged in as given. The
//! gateway's builder mounts it.

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

/// Health, readiness and metrics, plus the channels' routes.
pub fn router(state: HttpState, channels: Router) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
        .merge(channels)
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
