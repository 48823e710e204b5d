//! `bub doctor [--config FILE] [--json]`: checks a setup the way the
//! gateway would use it and says, for each problem, what to fix.
//!
//! The config is the one `bub gateway` would run on (`--config`, else
//! `$BUB_HOME/bub.toml` when it exists, else the built-in default), and the
//! store, the model and the channels are the ones it names. One check per
//! file below, each giving [`Finding`]s:
//! - `config`: loaded as `bub policy check` loads it (one code path), and
//!   not readable by others when it holds a secret itself;
//! - `store`: the database reachable, at this build's schema version,
//!   writable (a write rolled back); the free disk of the home;
//! - `channels`: each channel's credentials, as its adapter checks them
//!   (Telegram `getMe`, Discord `GET /users/@me`, the strength of webhook
//!   secrets);
//! - `model`: `GET /models` at each configured model's provider, with its key;
//! - `sandbox`: the sandboxes the policies ask for, built and tried as the
//!   gateway builds them at start; code mode's `python3`;
//! - `mcp`: each MCP server of the config started as the gateway starts
//!   it, its tools counted, and stopped (a `required` one that does not come
//!   up fails; another warns);
//! - `home`: the data directory's owner, mode and writability;
//! - `clock`: the local clock against the `Date` of the model API's answer
//!   (signed webhook requests are refused beyond the replay window).
//!
//! Nothing is created, migrated or sent: the database write is rolled back,
//! the only file written is a scratch file in the home, removed at once.
//! The checks that talk to a server run together, each bounded by
//! [`NETWORK_TIMEOUT`]. The exit status is 1 when any check fails; warnings
//! do not fail.

mod channels;
mod clock;
mod config;
mod home;
mod mcp;
mod model;
mod sandbox;
mod store;

use super::env;
use super::exit::{self, Exit};
use crate::home::BubHome;
use anyhow::Result;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How long one call to a server (the database, a platform, the model API)
/// may take before its check fails.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(5);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    /// Works, but worth a look; does not fail the run.
    Warn,
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        })
    }
}

/// One check's outcome: an element of the `--json` array.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Finding {
    /// `config`, `database`, `channel NAME`, `model SPEC`, …
    pub check: String,
    pub status: Status,
    /// What was found, on one line.
    pub detail: String,
    /// What to do: a command, a config key, a permission; `None` when
    /// there is nothing to do.
    pub fix: Option<String>,
}

impl Finding {
    pub fn ok(check: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding::new(check, Status::Ok, detail, None)
    }

    pub fn warn(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding::new(check, Status::Warn, detail, Some(fix.into()))
    }

    pub fn fail(check: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Finding {
        Finding::new(check, Status::Fail, detail, Some(fix.into()))
    }

    fn new(check: impl Into<String>, status: Status, detail: impl Into<String>, fix: Option<String>) -> Finding {
        Finding { check: check.into(), status, detail: one_line(&detail.into()), fix: fix.map(|fix| one_line(&fix)) }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<5} {}: {}", self.status.to_string(), self.check, self.detail)?;
        match &self.fix {
            Some(fix) => write!(f, " -> fix: {fix}"),
            None => Ok(()),
        }
    }
}

/// Multi-line messages (a probe report, a config error's hint) joined into one line.
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join("; ")
}

/// Runs every check, prints them (a line each, or one JSON array), and
/// fails with status 1 when one failed.
pub(crate) async fn run_doctor(home: &BubHome, config: Option<PathBuf>, json: bool) -> Result<()> {
    let config_file = super::gateway::config_file(home, config);
    let vars = env::vars();
    let (mut findings, gateway_config) = config::check(home, config_file.as_deref());
    let location = crate::setup::store_location(home, config_file.as_deref(), &vars);
    let config = gateway_config.as_ref();
    let (database, disk, data_dir, channels, models, sandbox, mcp) = tokio::join!(
        store::check_database(location),
        store::check_disk(home),
        home::check(home),
        channels::check(config),
        model::check(&vars, config.map(|checked| &checked.config)),
        sandbox::check(home, config_file.as_deref(), config),
        mcp::check(config),
    );
    let (models, clock_source) = models;
    findings.push(database);
    findings.push(disk);
    findings.extend(channels);
    findings.extend(models);
    findings.extend(sandbox);
    findings.extend(mcp);
    findings.extend(data_dir);
    findings.push(clock::check(clock_source));
    if json {
        println!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        for finding in &findings {
            println!("{finding}");
        }
        let count = |status| findings.iter().filter(|finding| finding.status == status).count();
        let (warnings, failures) = (count(Status::Warn), count(Status::Fail));
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        println!("{}, {}", plural(failures, "failure"), plural(warnings, "warning"));
    }
    match findings.iter().any(|finding| finding.status == Status::Fail) {
        true => Err(Exit::quiet(exit::FAILED).into()),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_one_line_with_its_fix() {
        let finding = Finding::fail("database", "schema 3 of 8\nbehind", "run `bub db migrate`");
        assert_eq!(finding.to_string(), "FAIL  database: schema 3 of 8; behind -> fix: run `bub db migrate`");
        assert_eq!(Finding::ok("home", "/x").to_string(), "ok    home: /x");
        let json = serde_json::to_value(Finding::ok("home", "/x")).unwrap();
        assert_eq!(json, serde_json::json!({"check": "home", "status": "ok", "detail": "/x", "fix": null}));
    }
}
