//! The gateway's one HTTP server: `/healthz`, `/readyz`, `/metrics`, and the
//! routes of channels that receive over HTTP (`POST /webhook/<name>`).
//!
//! It knows nothing of the gateway: `/readyz` asks a [`Readiness`] (the
//! gateway is one), and the routes of the parts that serve HTTP (the
//! channels' webhooks, the admin console) are merged in as given
//! ([`router`]). The gateway's builder mounts it.

mod peers;
mod serve;
mod slots;

pub(crate) use peers::key as address_key;
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
    /// The other parts the gateway uses (its MCP servers), shown in the
    /// report; a `required` one that is not up makes the gateway unready.
    fn dependencies(&self) -> Vec<Dependency> {
        Vec::new()
    }
}

/// A part the gateway uses besides its database, as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Dependency {
    /// `mcp.github`.
    pub name: String,
    /// In a word: `ready`, `starting`, `restarting`, `failed`.
    pub state: String,
    pub up: bool,
    /// Ready only while it is up.
    pub required: bool,
    /// Why it is not up (its last error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The client address of the connection a request came on (a request
/// extension [`serve`] adds): behind a reverse proxy, the proxy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

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
    let dependencies = state.ready.dependencies();
    let mut body = json!({"status": "ready", "channels": channels});
    if !dependencies.is_empty() {
        body["dependencies"] = json!(dependencies);
    }
    let down = dependencies.iter().find(|dependency| dependency.required && !dependency.up);
    let reason = match state.ready.ping().await {
        Err(error) => Some(format!("database: {error}")),
        Ok(()) => down.map(|dependency| {
            let why = dependency.reason.as_deref().map(|reason| format!(": {reason}")).unwrap_or_default();
            format!("{} is required and {}{why}", dependency.name, dependency.state)
        }),
    };
    match reason {
        None => Json(body).into_response(),
        Some(reason) => {
            body["status"] = json!("unavailable");
            body["reason"] = json!(reason);
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

    /// One MCP server up, one required and down.
    struct Servers(bool);

    #[async_trait::async_trait]
    impl Readiness for Servers {
        fn channel_names(&self) -> Vec<String> {
            vec!["hooks".into()]
        }
        async fn ping(&self) -> Result<(), String> {
            Ok(())
        }
        fn dependencies(&self) -> Vec<Dependency> {
            let docs =
                Dependency { name: "mcp.docs".into(), state: "ready".into(), up: true, required: false, reason: None };
            let github = Dependency {
                name: "mcp.github".into(),
                state: "restarting".into(),
                up: false,
                required: self.0,
                reason: Some("exited with status 1".into()),
            };
            vec![docs, github]
        }
    }

    #[tokio::test]
    async fn a_server_down_shows_and_holds_readiness_back_only_when_required() {
        let ready = |required: bool| async move {
            let state = HttpState::new(Arc::new(Servers(required)));
            state.set_started();
            let response = readyz(State(state)).await;
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            (status, serde_json::from_slice::<serde_json::Value>(&body).unwrap())
        };
        let (status, body) = ready(false).await;
        assert_eq!(status, 200);
        assert_eq!(body["dependencies"][1]["state"], "restarting");
        assert_eq!(body["dependencies"][1]["reason"], "exited with status 1");
        let (status, body) = ready(true).await;
        assert_eq!(status, 503);
        assert_eq!(body["reason"], "mcp.github is required and restarting: exited with status 1");
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
