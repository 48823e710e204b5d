//! The sandboxes the config's policies ask for, built and tried as the
//! gateway builds them at start (which refuses to start without them), and
//! the `python3` code mode runs.

use super::Finding;
use super::config::Checked;
use crate::gateway::confinement::{PolicyConfinement, hidden_paths, sandbox_needs};
use crate::home::BubHome;
use std::path::Path;
use std::time::Duration;

/// Building and trying a sandbox starts a few processes: seconds at most.
const SANDBOX_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) async fn check(home: &BubHome, config_file: Option<&Path>, checked: Option<&Checked>) -> Vec<Finding> {
    let (sandbox, python) = tokio::join!(sandbox(home, config_file, checked), python());
    vec![sandbox, python]
}

async fn sandbox(home: &BubHome, config_file: Option<&Path>, checked: Option<&Checked>) -> Finding {
    let Some(checked) = checked else {
        return Finding::warn("sandbox", "not checked: the config does not load", "fix the config first");
    };
    let mut channels: Vec<String> = sandbox_needs(&checked.config).into_iter().map(|(channel, _)| channel).collect();
    channels.dedup();
    if channels.is_empty() {
        return Finding::ok(
            "sandbox",
            "not used: every chat's shell and code run on the host (environment = \"local\")",
        );
    }
    let confinement = PolicyConfinement::new();
    let hidden = hidden_paths(home.root(), config_file);
    match tokio::time::timeout(SANDBOX_TIMEOUT, confinement.prepare(&checked.config, hidden)).await {
        Ok(Ok(_)) => Finding::ok("sandbox", format!("built and tried, as channels {} ask", channels.join(", "))),
        Ok(Err(unavailable)) => Finding::fail(
            "sandbox",
            format!("channel {} needs the sandbox, but {}", unavailable.channel, unavailable.source),
            format!(
                "enable what it names, or set environment = \"local\" in [channels.{}.policy] to run the shell and \
                 code on the host as the gateway's user",
                unavailable.channel
            ),
        ),
        Err(_) => Finding::fail(
            "sandbox",
            format!("building a trial sandbox took longer than {SANDBOX_TIMEOUT:?}"),
            "see `BUB_LOG=debug bub doctor`; or set environment = \"local\" in the channels' policy",
        ),
    }
}

/// Code mode's interpreter: `python3` on `PATH`, resolved as the sandbox
/// resolves it.
async fn python() -> Finding {
    let resolved =
        tokio::task::spawn_blocking(|| crate::environment::sandbox::resolve_python(Path::new("python3"))).await;
    match resolved {
        Ok(Ok(python)) => Finding::ok("code mode", format!("python3 is {}", python.executable.display())),
        Ok(Err(error)) => Finding::warn(
            "code mode",
            format!("run_code cannot run: {error}"),
            "install python3 on the gateway's PATH (code mode needs it; the rest works without)",
        ),
        Err(error) => Finding::warn("code mode", format!("the check stopped: {error}"), "run it again"),
    }
}
