//! `[http]`: the settings of bub's one HTTP server, and the connection
//! limits ([`ServeLimits`]) the server applies. The limits are plain values
//! kept here, beside the keys that set them, so the file's model needs
//! nothing from the server (`http` imports `config`, never the reverse).

use super::value::Seconds;
use serde::Deserialize;
use serde::de::{self, Deserializer};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// `[http]`: the one HTTP server (health, metrics, webhooks, admin API).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Address and port to listen on; default `127.0.0.1:8080`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// How long a client has to send a request's whole head (from the
    /// accept, or the end of the previous request), and a webhook request's
    /// body; also how long an idle connection is kept. Default 30.
    #[serde(default, deserialize_with = "above_zero")]
    pub read_timeout_seconds: Option<Seconds>,
    /// Connections served at once; more wait to be accepted, but for health
    /// and readiness probes (see `http::serve`). Default 1024.
    #[serde(default, deserialize_with = "above_zero")]
    pub max_connections: Option<u32>,
    /// Connections one client address (an IPv6 /64) may hold at once; past
    /// it a new one is closed at once. Default 64. Behind a reverse proxy
    /// every client is the proxy's address: raise it to `max_connections`.
    #[serde(default, deserialize_with = "above_zero")]
    pub max_connections_per_address: Option<u32>,
    /// How long a stop (SIGTERM, SIGINT) lets turns in flight finish before
    /// leaving them to the next start. Default 10.
    pub shutdown_grace_seconds: Option<Seconds>,
}

/// For limits where 0 would shut the server: the value must be above zero.
fn above_zero<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + PartialOrd + Default + fmt::Display,
{
    let value = T::deserialize(deserializer)?;
    if value <= T::default() {
        return Err(de::Error::custom(format!("{value} must be above 0")));
    }
    Ok(Some(value))
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

/// Connection limits of the HTTP server (`[http]` in the config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeLimits {
    /// How long a client has to send a request's headers (and, in the
    /// webhook channel, its body); also how long an idle connection is kept.
    pub read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections one client address may hold at once (IPv6: one /64).
    pub max_connections_per_address: usize,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits { read_timeout: Duration::from_secs(30), max_connections: 1024, max_connections_per_address: 64 }
    }
}

impl HttpConfig {
    /// How long a stop waits for turns in flight: `shutdown_grace_seconds`, else 10 s.
    pub fn shutdown_grace(&self) -> Duration {
        self.shutdown_grace_seconds.map_or(Duration::from_secs(10), Seconds::duration)
    }

    /// The server's connection limits: these values, else the defaults.
    pub fn limits(&self) -> ServeLimits {
        let defaults = ServeLimits::default();
        ServeLimits {
            read_timeout: self.read_timeout_seconds.map_or(defaults.read_timeout, Seconds::duration),
            max_connections: self.max_connections.map_or(defaults.max_connections, |count| count as usize),
            max_connections_per_address: self
                .max_connections_per_address
                .map_or(defaults.max_connections_per_address, |count| count as usize),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            listen: default_listen(),
            read_timeout_seconds: None,
            max_connections: None,
            max_connections_per_address: None,
            shutdown_grace_seconds: None,
        }
    }
}
