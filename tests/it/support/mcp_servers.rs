//! The MCP servers the tests run, nobody here wrote them: npm's
//! `@modelcontextprotocol/server-everything`, `-filesystem` and `-memory`,
//! pinned by `tests/mcp/package-lock.json` and installed with `npm ci` into
//! `$CARGO_TARGET_TMPDIR/mcp-servers-<hash of the lock>` once per machine
//! (`tests/mcp/install` does the same for `.ci/run`). A file lock keeps
//! parallel tests (and test binaries) from installing at once. An install
//! that fails fails the test, with npm's own words: a test never passes by
//! skipping.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const PACKAGE: &str = include_str!("../../mcp/package.json");
const LOCK: &str = include_str!("../../mcp/package-lock.json");

/// Where the servers are, installed when they were not.
pub fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install)
}

fn install() -> PathBuf {
    super::npm::install("mcp-servers", PACKAGE, LOCK, &[], "the MCP test servers")
}

/// The command line of a server: `node <its entry point>` and `args`.
fn node(package: &str, args: &[&str]) -> Vec<String> {
    let entry = installed().join("node_modules/@modelcontextprotocol").join(package).join("dist/index.js");
    assert!(entry.is_file(), "{} is missing from the installed MCP servers", entry.display());
    let mut argv = vec!["node".to_string(), entry.display().to_string()];
    argv.extend(args.iter().map(|arg| arg.to_string()));
    argv
}

/// `server-everything` over stdio.
pub fn everything_stdio() -> Vec<String> {
    node("server-everything", &["stdio"])
}

/// `server-everything` serving Streamable HTTP (on `PORT`, at `/mcp`).
pub fn everything_streamable_http() -> Vec<String> {
    node("server-everything", &["streamableHttp"])
}

/// `server-filesystem` over stdio, allowed into `roots`.
pub fn filesystem(roots: &[&Path]) -> Vec<String> {
    let roots: Vec<String> = roots.iter().map(|root| root.display().to_string()).collect();
    node("server-filesystem", &roots.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `server-memory` over stdio.
pub fn memory() -> Vec<String> {
    node("server-memory", &[])
}

/// The fixture server `tests/mcp/fixtures/server.py` in `mode` (see its doc).
pub fn fixture(mode: &str, state: Option<&Path>) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fixtures/server.py");
    let mut argv = vec![python().to_string(), script.display().to_string(), mode.to_string()];
    argv.extend(state.map(|state| state.display().to_string()));
    argv
}

/// The interpreter itself, not a shim in front of it (pyenv's `python3` is a
/// shell script that adds variables of its own, which would blur what the
/// fixture reports of its environment).
fn python() -> &'static str {
    static PYTHON: OnceLock<String> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let output = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap_or_else(|error| panic!("the MCP fixture servers need python3: {error}"));
        assert!(output.status.success(), "python3 failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    })
}
