//! npm packages the tests drive, pinned by a `package-lock.json`: the MCP
//! servers ([`super::mcp_servers`]) and playwright-core (the admin console's
//! browser tests, [`super::browser`]). Each is installed with `npm ci` into
//! `$CARGO_TARGET_TMPDIR/<name>-<first 12 hex digits of the lock's
//! SHA-256>` the first time a test asks on a machine, as the install
//! scripts `.ci/run` runs do (`tests/mcp/install`, `tests/admin-e2e/install`):
//! under a file lock, so test binaries running at once install it once; an
//! install that stopped half way (no `.installed` mark) is made again. An
//! install that fails fails the test with npm's own words: a test never
//! passes by skipping.

use sha2::{Digest, Sha256};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `package` and `lock` installed as `name` (with `env` set for npm); the
/// folder. `what` names it in a failure ("the MCP test servers").
pub fn install(name: &str, package: &str, lock: &str, env: &[(&str, &str)], what: &str) -> PathBuf {
    let hash: String = Sha256::digest(lock.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", &hash[..12]));
    let marker = dir.join(".installed");
    if marker.exists() {
        return dir;
    }
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    let file_lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    file_lock.lock().unwrap_or_else(|error| panic!("cannot lock the install folder of {what}: {error}"));
    if !marker.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("package.json"), package).unwrap();
        std::fs::write(dir.join("package-lock.json"), lock).unwrap();
        let output = Command::new("npm")
            .args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"])
            .envs(env.iter().copied())
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|error| panic!("{what} need npm (Node 20): cannot run npm: {error}"));
        assert!(
            output.status.success(),
            "installing {what} (npm ci in {}) failed:\n{}\n{}",
            dir.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::File::create(&marker).unwrap().write_all(b"ok").unwrap();
    }
    dir
}
