//! The official MCP Python SDK (PyPI `mcp`, pinned with everything it pulls
//! in by `tests/mcp/requirements.txt`) in a venv of its own
//! ([`super::venv`]: `mcp-python-<hash>`, as `tests/mcp/install-python`
//! makes it), for the tests that drive an MCP server with the SDK's client
//! ([`run_client`]). A failed install fails the test with pip's output:
//! nothing is skipped.

use std::ffi::OsStr;
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
    super::venv::install("mcp-python", "tests/mcp/requirements.txt").map(|venv| venv.join("bin/python"))
}
