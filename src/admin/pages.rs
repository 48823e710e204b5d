//! The console's pages: the login form, the console itself and its assets,
//! all embedded in the binary (`assets/`: plain HTML, CSS and JavaScript,
//! no build step). Every response under the console gets the headers that
//! keep it from being framed, sniffed or fed scripts from elsewhere
//! ([`security_headers`]).

use super::auth::{COOKIE, Change, check_session, cookie, find_admin, is_cross_site, session_value};
use super::{AdminState, ApiError};
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use std::convert::Infallible;
use std::net::IpAddr;

const LOGIN: &str = include_str!("assets/login.html");
const APP: &str = include_str!("assets/app.html");
/// The assets by name: (name, media type, content).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("lib.js", "text/javascript; charset=utf-8", include_str!("assets/lib.js")),
    ("policy.js", "text/javascript; charset=utf-8", include_str!("assets/policy.js")),
    ("views.js", "text/javascript; charset=utf-8", include_str!("assets/views.js")),
    ("live.js", "text/javascript; charset=utf-8", include_str!("assets/live.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
];

/// The pages under `prefix` (`/admin`, `/bub/admin`).
pub(crate) fn routes(prefix: &str) -> Router<AdminState> {
    Router::new()
        .route(prefix, get(to_console))
        .route(&format!("{prefix}/"), get(console))
        .route(&format!("{prefix}/login"), post(login))
        .route(&format!("{prefix}/logout"), post(logout))
        .route(&format!("{prefix}/assets/{{name}}"), get(asset))
        .layer(axum::middleware::map_response(security_headers))
}

/// What every console response carries, the API's too: only this origin's
/// scripts and styles, never in a frame, no sniffing, no referrer, not
/// cached (answers hold the config's text and people's messages).
pub(super) async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.entry(name).or_insert(HeaderValue::from_static(value));
    };
    set(
        headers,
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'self'",
    );
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "x-frame-options", "DENY");
    set(headers, "referrer-policy", "no-referrer");
    set(headers, "cache-control", "no-store");
    response
}

/// The client's address (see [`super::client_address`]).
pub(crate) struct ClientAddress(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<ClientAddress, Infallible> {
        Ok(ClientAddress(super::client_address(parts)))
    }
}

async fn to_console(State(state): State<AdminState>) -> Response {
    if state.settings().is_none() {
        return StatusCode::NOT_FOUND.into_response();
    }
    Redirect::permanent(&format!("{}/", state.base())).into_response()
}

/// The console for a logged-in admin, else the login form.
async fn console(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    let Some(tokens) = state.tokens() else { return StatusCode::NOT_FOUND.into_response() };
    let logged_in = cookie(&headers, COOKIE)
        .filter(|value| !state.is_revoked(value))
        .and_then(|value| check_session(&tokens, value))
        .is_some();
    if logged_in { page(APP, &state, "") } else { page(LOGIN, &state, "") }
}

fn page(template: &str, state: &AdminState, error: &str) -> Response {
    let error = if error.is_empty() { String::new() } else { format!("<p class=\"error\" role=\"alert\">{error}</p>") };
    let html = template.replace("{{BASE}}", state.base()).replace("{{ERROR}}", &error);
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

#[derive(serde::Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

/// A token from the form: right → the session cookie and the console;
/// wrong → the form again with 401, counted against the address.
async fn login(
    State(state): State<AdminState>,
    ClientAddress(address): ClientAddress,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let (Some(tokens), Some(settings)) = (state.tokens(), state.settings()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if is_cross_site(&headers) {
        tracing::warn!(%address, "admin login refused: it came from another site");
        return with_status(StatusCode::FORBIDDEN, page(LOGIN, &state, "A login from another site is refused."));
    }
    if let Some(wait) = state.failures().blocked_for(address) {
        let message = format!("Too many wrong tokens from your address: try again in {} s.", wait.as_secs().max(1));
        let mut response = with_status(StatusCode::TOO_MANY_REQUESTS, page(LOGIN, &state, &message));
        if let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let given = form.map(|Form(form)| form.token).unwrap_or_default();
    let Some(token) = find_admin(&tokens, given.trim()) else {
        state.failures().record(address);
        tracing::warn!(%address, "admin login with a wrong token");
        return with_status(StatusCode::UNAUTHORIZED, page(LOGIN, &state, "That is not an admin token."));
    };
    tracing::info!(admin = %token.name, %address, "admin logged in");
    let value = session_value(token, settings.session);
    let cookie = session_cookie(&state, &value, settings.session.as_secs());
    let mut response = Redirect::to(&format!("{}/", state.base())).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

fn session_cookie(state: &AdminState, value: &str, max_age: u64) -> String {
    let secure = if state.secure_cookies() { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}", state.base())
}

fn with_status(status: StatusCode, mut response: Response) -> Response {
    *response.status_mut() = status;
    response
}

/// Ends the session: the cookie is cleared, and this replica refuses it
/// until it would have expired.
async fn logout(Change(admin): Change, State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let (Some(value), Some(settings)) = (cookie(&headers, COOKIE), state.settings()) {
        state.revoke(value, settings.session);
    }
    tracing::info!(admin = %admin.name, "admin logged out");
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(cookie) = HeaderValue::from_str(&session_cookie(&state, "", 0)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn asset(State(state): State<AdminState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    state.settings().ok_or_else(ApiError::console_off)?;
    let Some((_, media, content)) = ASSETS.iter().find(|(known, _, _)| *known == name) else {
        return Err(ApiError::not_found(format!("no asset {name}")));
    };
    Ok(([(header::CONTENT_TYPE, *media)], *content).into_response())
}
