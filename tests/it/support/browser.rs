//! The admin console's browser scenarios (`tests/admin-e2e/*.mjs`): Debian's
//! Chromium (`/usr/bin/chromium`, or `BUB_CHROMIUM`) driven by npm's
//! `playwright-core`, pinned by `tests/admin-e2e/package-lock.json` and
//! installed with `npm ci` into `$CARGO_TARGET_TMPDIR/admin-e2e-<hash of the
//! lock>` once per machine (`tests/admin-e2e/install` does the same for
//! `.ci/run`), under a file lock. playwright-core downloads no browser. An
//! install that fails, or a missing Chromium, fails the test with the
//! reason: a test never passes by skipping.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

const PACKAGE: &str = include_str!("../../admin-e2e/package.json");
const LOCK: &str = include_str!("../../admin-e2e/package-lock.json");
/// How long one scenario may take before it is killed and fails.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(90);

/// Where playwright-core is, installed when it was not.
pub fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install)
}

fn install() -> PathBuf {
    super::npm::install(
        "admin-e2e",
        PACKAGE,
        LOCK,
        &[("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")],
        "the browser tests (playwright-core)",
    )
}

/// Where the scenarios' screenshots go: `$CARGO_TARGET_DIR/admin-screenshots`.
pub fn screenshots() -> PathBuf {
    let target =
        Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("CARGO_TARGET_TMPDIR is inside the target folder");
    target.join("admin-screenshots")
}

/// Runs `node tests/admin-e2e/<name>.mjs` with the console's URL (`console`,
/// ending in `/admin`), `token` and `env`; panics with its output when it
/// fails or takes longer than [`SCENARIO_TIMEOUT`]; what it printed
/// (`ok STEP` lines, `done NAME`, its notes).
pub async fn run(name: &str, console: &str, token: &str, env: &[(&str, String)]) -> String {
    let chromium = std::env::var("BUB_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string());
    assert!(
        Path::new(&chromium).exists(),
        "the browser tests need Debian's Chromium at {chromium} (apt-get install -y chromium)"
    );
    let modules = installed();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/admin-e2e/{name}.mjs"));
    let shots = screenshots();
    eprintln!("{name}: screenshots in {}", shots.display());
    let mut command = tokio::process::Command::new("node");
    command
        .arg(&script)
        .env("BUB_E2E_MODULES", modules)
        .env("BUB_CONSOLE", console)
        .env("BUB_TOKEN", token)
        .env("BUB_SCREENSHOTS", &shots)
        .env("BUB_CHROMIUM", &chromium)
        .envs(env.iter().map(|(key, value)| (*key, value.as_str())))
        .kill_on_drop(true);
    let output = tokio::time::timeout(SCENARIO_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("scenario {name} took longer than {SCENARIO_TIMEOUT:?}"))
        .unwrap_or_else(|error| panic!("the browser tests need node (20): {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "scenario {name} failed ({}); screenshots in {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        shots.display(),
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(&format!("done {name}")), "scenario {name} did not finish:\n{stdout}");
    stdout
}
