//! The data directory (`BUB_HOME`): it holds the database, the sessions'
//! workspaces and secrets, so it belongs to the user the gateway runs as,
//! nobody else may write in it (or read it), and that user can write in it.

use super::Finding;
use crate::home::BubHome;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

pub(crate) async fn check(home: &BubHome) -> Vec<Finding> {
    let home = home.clone();
    tokio::task::spawn_blocking(move || inspect(&home))
        .await
        .unwrap_or_else(|error| vec![Finding::warn("home", format!("the check stopped: {error}"), "run it again")])
}

fn inspect(home: &BubHome) -> Vec<Finding> {
    let root = home.root();
    let shown = root.display();
    let metadata = match std::fs::metadata(root) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return vec![Finding::warn(
                "home",
                format!("{shown} does not exist yet"),
                format!("the gateway creates it at its first start; or `mkdir -m 700 {shown}` as its user"),
            )];
        }
        Err(error) => {
            return vec![Finding::fail("home", format!("{shown}: {error}"), "check the permissions of its parents")];
        }
    };
    if !metadata.is_dir() {
        return vec![Finding::fail("home", format!("{shown} is not a directory"), "point BUB_HOME at a directory")];
    }
    let mut findings = Vec::new();
    let user = rustix::process::geteuid().as_raw();
    if metadata.uid() != user {
        findings.push(Finding::fail(
            "home",
            format!("{shown} belongs to uid {}, not to this user (uid {user})", metadata.uid()),
            format!("run bub as the user that owns it, or `chown -R {user} {shown}`"),
        ));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        findings.push(Finding::fail(
            "home",
            format!(
                "{shown} is writable by other users (mode {mode:04o}): they could replace the database or a workspace"
            ),
            format!("chmod go-w {shown} (700 is best)"),
        ));
    } else if mode & 0o005 != 0 {
        findings.push(Finding::warn(
            "home",
            format!("other users may look into {shown} (mode {mode:04o}): chats, workspaces and secrets are there"),
            format!("chmod 700 {shown}"),
        ));
    }
    if let Err(error) = try_write(home) {
        findings.push(Finding::fail(
            "home",
            format!("cannot write in {shown}: {error}"),
            format!("let the gateway's user write in {shown}"),
        ));
    }
    if findings.is_empty() {
        findings.push(Finding::ok("home", format!("{shown}: owned by uid {user}, mode {mode:04o}, writable")));
    }
    findings
}

/// Creates and removes a scratch file in the home.
fn try_write(home: &BubHome) -> std::io::Result<()> {
    let path = home.root().join(format!(".bub-doctor-{}", std::process::id()));
    std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    std::fs::remove_file(&path)
}
