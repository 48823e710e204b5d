//! The admin console: pages at `/admin` and a JSON API at `/admin/api`,
//! served by the gateway's own HTTP server, off unless the config has an
//! `[admin]` section (then every admin route answers 404 as any unknown
//! path does; a reload that removes the section turns it off the same way).
//!
//! - `auth`: tokens, the session cookie, CSRF (`auth::Admin`,
//!   `auth::Change`: the extractors every route takes).
//! - `limit`: failed attempts per client address.
//! - `pages`: the login page, the console's page and its assets, embedded
//!   in the binary (no build step, nothing fetched from elsewhere).
//! - `api`: the JSON API and its OpenAPI document
//!   (`/admin/api/openapi.json`).
//! - `tape_view`: a tape's pages by id range, its anchors, search and
//!   JSON-lines export, as fast on a million entries as on ten.
//! - `live`: samples of the numbers `/metrics` exports and the rates
//!   between two of them, for the live charts.
//!
//! Behind a reverse proxy under a path prefix (`[admin] base_path = "/bub"`)
//! the console is served both at `/admin` and at `/bub/admin`, so a proxy
//! that strips the prefix and one that passes it both work; every URL the
//! console writes (links, redirects, the cookie's path) is under the prefix.

mod api;
mod auth;
mod limit;
pub(crate) mod live;
mod pages;
mod state;
pub(crate) mod tape_view;

pub(crate) use api::ApiError;
pub(crate) use state::AdminState;

use crate::config::AdminToken;
use crate::gateway::Gateway;
use axum::Router;
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};

/// Why the console cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "[admin] is configured but no admin token is: add `token_file` (one `NAME TOKEN` per line) or set \
         BUB_ADMIN_TOKEN; the console is never served without one"
    )]
    NoToken,
    #[error(
        "admin `{0}` has two tokens (token_file and BUB_ADMIN_TOKEN): rename one, so the audit log can tell them apart"
    )]
    NameTwice(String),
}

/// The console as a part of the gateway's HTTP server
/// ([`GatewayBuilder::http_part`](crate::gateway::GatewayBuilder::http_part)):
/// served when the config the gateway starts with has `[admin]`.
/// `env_tokens`: admin tokens besides the config's `token_file` (the `bub`
/// binary passes `BUB_ADMIN_TOKEN`'s).
///
/// ```no_run
/// # async fn run(agent: bub::agent::Agent) -> Result<(), Box<dyn std::error::Error>> {
/// let token = bub::config::AdminToken::parse_line("alice 7c1e0f9a2b4d6e8f0a1c3e5b")?;
/// let open = bub::gateway::Gateway::builder("/var/lib/bub")
///     .http_part(bub::admin::console(vec![token]))
///     .open()
///     .await?;
/// let running = open.config_file("/etc/bub/bub.toml").start(agent, std::future::pending()).await?;
/// running.wait().await;
/// # Ok(())
/// # }
/// ```
pub fn console(env_tokens: Vec<AdminToken>) -> crate::gateway::HttpPart {
    std::sync::Arc::new(move |gateway: &Gateway, listen: SocketAddr| {
        routes(gateway, env_tokens.clone(), listen).map_err(|error| error.to_string())
    })
}

/// The console's routes, when the config the gateway starts with has
/// `[admin]`; `env_tokens` are the environment's admin tokens, `listen`
/// the address the gateway listens on (loopback: cookies without `Secure`).
fn routes(gateway: &Gateway, env_tokens: Vec<AdminToken>, listen: SocketAddr) -> Result<Option<Router>, AdminError> {
    let Some(settings) = gateway.live_config().current().admin.clone() else { return Ok(None) };
    if let Some(token) = env_tokens.iter().find(|env| settings.tokens.iter().any(|file| file.name == env.name)) {
        return Err(AdminError::NameTwice(token.name.clone()));
    }
    if settings.tokens.is_empty() && env_tokens.is_empty() {
        return Err(AdminError::NoToken);
    }
    let base = format!("{}/admin", settings.base_path);
    let state = AdminState::new(gateway.clone(), env_tokens, base, !listen.ip().is_loopback());
    let mut prefixes = vec!["/admin".to_string()];
    if !settings.base_path.is_empty() {
        prefixes.push(format!("{}/admin", settings.base_path));
    }
    let router = prefixes
        .iter()
        .map(|prefix| pages::routes(prefix).merge(api::routes(&format!("{prefix}/api"))))
        .fold(Router::new(), Router::merge);
    Ok(Some(router.with_state(state)))
}

/// The client's address (the connection's; see [`crate::http::Peer`]), or
/// the unspecified address when the request came some other way (tests).
pub(crate) fn client_address(parts: &Parts) -> IpAddr {
    parts.extensions.get::<crate::http::Peer>().map_or(IpAddr::from([0, 0, 0, 0]), |peer| peer.0.ip())
}
