//! The gateway's one HTTP server: `/healthz`, `/readyz`, `/metrics`, and the
//! routes of channels that receive over HTTP (`POST /webhook/<name>`).

mod serve;

pub use serve::{ServeLimits, serve};

use crate::gateway::Gateway;
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

/// Shared by the handlers.
#[derive(Clone)]
pub struct HttpState {
    gateway: Gateway,
    metrics: PrometheusHandle,
    /// Set once every channel started.
    started: Arc<AtomicBool>,
}

impl HttpState {
    pub fn new(gateway: Gateway) -> HttpState {
        HttpState { gateway, metrics: metrics_handle(), started: Arc::default() }
    }

    /// Marks the gateway ready (channels started).
    pub fn set_started(&self) {
        self.started.store(true, Ordering::SeqCst);
    }
}

/// Health, readiness and metrics, plus every channel's routes.
pub fn router(state: HttpState) -> Router {
    let channels = state.gateway.routes();
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
    let mut channels = state.gateway.channel_names();
    channels.sort();
    if !state.started.load(Ordering::SeqCst) {
        let body = json!({"status": "starting", "reason": "channels are not started yet", "channels": channels});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    match state.gateway.store().ping().await {
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
