//! The official MCP Python SDK (PyPI `mcp`, pinned with everything it pulls
//! in by `tests/mcp/requirements.txt`) in a venv of its own, for the tests
//! that drive an MCP server with the SDK's client ([`run_client`]).
//!
//! The venv is `$CARGO_TARGET_TMPDIR/mcp-python-<first 16 hex digits of the
//! SHA-256 of requirements.txt>`, made the first time a test asks on a
//! machine, the way `tests/mcp/install-python` (run by `.ci/run`) makes it:
//! under a file lock, so test binaries running at once install it once; an
//! install that stopped half way (no `.installed` mark) is made again. A
//! failed install fails the test with pip's output: nothing is skipped.

use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The venv's python, installed if missing.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON.get_or_init(install).clone().unwrap_or_else(|reason| panic!("the MCP Python SDK: {reason}"))
}

/// Runs `tests/mcp/clients/<script>` with `args` on the venv's python and
/// returns the one JSON value it prints; panics with its stderr when it fails.
pub fn run_client(script: &str, args: &[&OsStr]) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/clients").join(script);
    let output = Command::new(python()).arg(&path).args(args).output().expect("run the python client");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{script} failed ({}):\n{stderr}", output.status);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!("{script} printed no JSON ({error}):\n{}\n{stderr}", String::from_utf8_lossy(&output.stdout))
    })
}

fn install() -> Result<PathBuf, String> {
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/requirements.txt");
    let pins = fs::read(&requirements).map_err(|e| format!("cannot read {}: {e}", requirements.display()))?;
    let hash: String = Sha256::digest(&pins).iter().map(|b| format!("{b:02x}")).collect();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let venv = tmp.join(format!("mcp-python-{}", &hash[..16]));
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
    Ok(venv.join("bin/python"))
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
