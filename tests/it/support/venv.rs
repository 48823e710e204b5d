//! Python tools the tests drive, each pinned with everything it pulls in by
//! a requirements file, in a venv of its own: the MCP Python SDK
//! ([`super::mcp_python`]), schemathesis (`admin_api_schema`).
//!
//! A venv is `$CARGO_TARGET_TMPDIR/<name>-<first 16 hex digits of the
//! SHA-256 of its requirements file>`, made the first time a test asks on
//! a machine, the way the install scripts `.ci/run` runs make it
//! (`tests/mcp/install-python`, `tests/admin-api/install`): under a file
//! lock, so test binaries running at once install it once; an install that
//! stopped half way (no `.installed` mark) is made again. A change of pin
//! names a new venv.

use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv `name` with `requirements` (a path under the crate) installed,
/// made if missing; its directory. An error says what failed, with pip's
/// output.
pub fn install(name: &str, requirements: &str) -> Result<PathBuf, String> {
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join(requirements);
    let pins = fs::read(&requirements).map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    let hash: String = Sha256::digest(&pins).iter().map(|b| format!("{b:02x}")).collect();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let venv = tmp.join(format!("{name}-{}", &hash[..16]));
    let lock_path = venv.with_extension("lock");
    let lock = File::create(&lock_path).map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    let mark = venv.join(".installed");
    if !mark.is_file() {
        // A venv left half made by an install that stopped.
        let _ = fs::remove_dir_all(&venv);
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        let pip = ["-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check", "-r"];
        run(Command::new(venv.join("bin/python")).args(pip).arg(&requirements))?;
        fs::write(&mark, "").map_err(|e| format!("cannot write {}: {e}", mark.display()))?;
    }
    Ok(venv)
}

fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|e| format!("cannot run {shown}: {e} (python3 with venv is needed)"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{shown} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    ))
}
