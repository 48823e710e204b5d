//! The console's JSON API under `/admin/api`: what the page uses and
//! scripts can use (`Authorization: Bearer TOKEN`). Every answer is JSON
//! (errors too: `{"error": {"kind", "message"}}`, [`ErrorBody`]), and every
//! operation is in the OpenAPI document served at `openapi.json`.
//!
//! One module per concern; each has `routes(prefix)` and `document(&mut Document)`.
//! - [`session`]: who is logged in, the CSRF token, the replica.
//! - [`config`]: the policy editor: the file, check, preview, apply.
//! - [`audit`]: the changes admins applied.
//! - [`channels`]: the channels and their policies.
//! - [`chats`]: sessions and their chats' policies.
//! - [`tapes`]: a tape's pages, anchors, search, export.
//! - [`explain`]: `,policy explain` for any chat.
//! - [`live`]: the live rates (server-sent events).
//! - [`pairing`]: pairing codes to approve or refuse.

pub(crate) mod audit;
pub(crate) mod channels;
pub(crate) mod chats;
pub(crate) mod config;
pub(crate) mod explain;
pub(crate) mod live;
pub(crate) mod openapi;
pub(crate) mod pairing;
pub(crate) mod session;
pub(crate) mod tapes;

use super::AdminState;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// The API's routes under `prefix` (`/admin/api`, `/bub/admin/api`).
pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new()
        .route(&format!("{prefix}/openapi.json"), get(openapi_json))
        .merge(session::routes(prefix))
        .merge(config::routes(prefix))
        .merge(audit::routes(prefix))
        .merge(channels::routes(prefix))
        .merge(explain::routes(prefix))
        .merge(chats::routes(prefix))
        .merge(tapes::routes(prefix))
        .merge(live::routes(prefix))
        .merge(pairing::routes(prefix))
        .route(&format!("{prefix}/{{*rest}}"), axum::routing::any(unknown))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::map_response(super::pages::security_headers))
}

/// The OpenAPI document of every operation, served at `server`.
pub(crate) fn document(server: &str) -> serde_json::Value {
    let mut doc = openapi::Document::new();
    doc.op("get", "/openapi.json", "openapi", "This document.")
        .public()
        .json::<serde_json::Map<String, serde_json::Value>>(200, "The OpenAPI document.")
        .add();
    session::document(&mut doc);
    config::document(&mut doc);
    audit::document(&mut doc);
    channels::document(&mut doc);
    explain::document(&mut doc);
    chats::document(&mut doc);
    tapes::document(&mut doc);
    live::document(&mut doc);
    pairing::document(&mut doc);
    doc.finish(server)
}

async fn openapi_json(axum::extract::State(state): axum::extract::State<AdminState>) -> Result<Response, ApiError> {
    state.settings().ok_or_else(ApiError::console_off)?;
    /// The document last built, and the server it was built for.
    type Built = parking_lot::Mutex<Option<(String, Arc<String>)>>;
    static DOCUMENTS: std::sync::OnceLock<Built> = std::sync::OnceLock::new();
    let server = format!("{}/api", state.base());
    let cached = DOCUMENTS.get_or_init(Default::default);
    let text = {
        let mut cached = cached.lock();
        match cached.as_ref() {
            Some((built_for, text)) if *built_for == server => text.clone(),
            _ => {
                let text = Arc::new(document(&server).to_string());
                *cached = Some((server, text.clone()));
                text
            }
        }
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], text.as_str().to_owned()).into_response())
}

async fn unknown() -> ApiError {
    ApiError::not_found("no such API route: see openapi.json")
}

/// A method the path does not take: a JSON 405 like every other answer
/// (axum adds the `Allow` header).
async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not take that method: see openapi.json",
    )
}

/// Every error the API answers, as JSON.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ErrorDetail {
    /// A word a script can match: `unauthorized`, `forbidden`, `not_found`,
    /// `bad_request`, `invalid_body`, `invalid`, `conflict`, `method_not_allowed`,
    /// `too_many_attempts`, `internal`…
    pub kind: String,
    /// What to do about it, for a person.
    pub message: String,
    /// More, for some kinds (a conflict's current version, a check's errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// An API error: a status and an [`ErrorBody`].
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    /// Boxed: handlers return `Result<_, ApiError>` everywhere, and the error is rare.
    body: Box<ErrorDetail>,
    retry_after: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: Box::new(ErrorDetail { kind: kind.to_string(), message: message.into(), detail: None }),
            retry_after: None,
        }
    }

    /// With more for a script to read.
    pub(crate) fn with_detail(mut self, detail: serde_json::Value) -> ApiError {
        self.body.detail = Some(detail);
        self
    }

    /// The config in force has no `[admin]`: as any unknown path.
    pub(crate) fn console_off() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "not found")
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 422: fits the document, but not something bub can take (an unknown
    /// channel or tool, an invalid config). A body that does not fit the
    /// document is a 400 ([`ApiJson`]).
    pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message)
    }

    pub(crate) fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    pub(crate) fn too_many(wait: Duration) -> ApiError {
        let seconds = wait.as_secs().max(1);
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            format!("too many wrong tokens from this address: try again in {seconds} s"),
        );
        error.retry_after = Some(Duration::from_secs(seconds));
        error
    }

    /// 500, logged: what failed inside bub (the database, a file).
    pub(crate) fn internal(message: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %message, "admin API: an internal error");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(ErrorBody { error: *self.body })).into_response();
        if let Some(wait) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&wait.as_secs().to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// A JSON body; what is wrong with a bad one is an [`ApiError`].
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<ApiJson<T>, ApiError> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as `Content-Type: application/json`",
            )),
            // 400, as a body that is no JSON: it does not fit the document. 422
            // is kept for a body that fits it but names what bub does not have.
            Err(JsonRejection::JsonDataError(error)) => {
                Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", error.body_text()))
            }
            Err(JsonRejection::BytesRejection(error)) if error.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", error.body_text()))
            }
            Err(error) => Err(ApiError::bad_request(error.body_text())),
        }
    }
}

/// Query parameters; a bad query is a 400 [`ApiError`].
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiQuery<T>, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(ApiQuery(value)),
            Err(error) => Err(ApiError::bad_request(error.body_text())),
        }
    }
}
