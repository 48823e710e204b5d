//! The database (reachable, at this build's schema, writable) and the free
//! disk where the home keeps it, the sessions' workspaces and archives.

use super::{Finding, NETWORK_TIMEOUT};
use crate::db::StoreLocation;
use crate::db::health::{Schema, StoreHealth};
use crate::home::BubHome;
use crate::setup::SetupError;
use std::path::Path;

const GIB: u64 = 1024 * 1024 * 1024;
/// Free space under which the disk check warns: whichever is reached first.
const WARN_BELOW_BYTES: u64 = GIB;
const WARN_BELOW_PERCENT: u64 = 5;
/// Free space under which it fails: a SQLite write or a workspace file may
/// not fit any more.
const FAIL_BELOW_BYTES: u64 = 256 * 1024 * 1024;

/// The store `location` names (or why it names none).
pub(crate) async fn check_database(location: Result<StoreLocation, SetupError>) -> Finding {
    let location = match location {
        Ok(location) => location,
        Err(error) => {
            return Finding::fail("database", error.to_string(), "correct [store] in the config, or BUB_DATABASE_URL");
        }
    };
    let (shown, sqlite) = match &location {
        StoreLocation::Sqlite(path) => (format!("sqlite:{}", path.display()), Some(path.as_path())),
        StoreLocation::Postgres(url) => (format!("postgres:{}", crate::db::postgres::redacted(url)), None),
    };
    let reach = match sqlite {
        Some(path) => format!("check the permissions of {} and of its folder", path.display()),
        None => "check [store] url (or BUB_DATABASE_URL), that the server is up and that it lets this user in".into(),
    };
    match crate::db::health::check(&location, NETWORK_TIMEOUT).await {
        StoreHealth::Missing => Finding::warn(
            "database",
            format!("{shown}: no database yet"),
            "`bub db migrate` creates it (the gateway's first start does too)",
        ),
        StoreHealth::Unusable(why) => Finding::fail("database", format!("{shown}: {why}"), reach),
        StoreHealth::Open { schema: Schema::Refused(why), .. } => Finding::fail(
            "database",
            format!("{shown}: {why}"),
            "use the bub that migrated it, or restore the database",
        ),
        StoreHealth::Open { schema: Schema::Behind { due, version }, .. } => Finding::fail(
            "database",
            format!(
                "{shown}: not migrated: {due} of this bub's migrations are not applied (its schema version is {version})"
            ),
            "run `bub db migrate` (with the same --config or BUB_DATABASE_URL)",
        ),
        StoreHealth::Open { schema: Schema::Current { version }, writable } => match writable {
            Some(Err(why)) => {
                let fix = match sqlite {
                    Some(path) => format!("let the gateway's user write {} and its folder", path.display()),
                    None => "grant the URL's user INSERT, UPDATE and DELETE on bub's tables".into(),
                };
                Finding::fail("database", format!("{shown}: schema version {version}, but a write failed: {why}"), fix)
            }
            _ => Finding::ok("database", format!("{shown}: schema version {version}, writable")),
        },
    }
}

/// The free space of the disk the home is on (the nearest folder of it that
/// exists, when it does not yet).
pub(crate) async fn check_disk(home: &BubHome) -> Finding {
    let Some(dir) = home.root().ancestors().find(|dir| dir.exists()) else {
        return Finding::warn("disk", format!("{}: no folder of it exists", home.root().display()), "create BUB_HOME");
    };
    let dir = dir.to_path_buf();
    match tokio::task::spawn_blocking(move || free_space(&dir)).await {
        Ok(Ok((free, total))) => judge(home.root(), free, total),
        Ok(Err(error)) => Finding::warn("disk", format!("cannot read the free space: {error}"), "check BUB_HOME"),
        Err(error) => Finding::warn("disk", format!("cannot read the free space: {error}"), "check BUB_HOME"),
    }
}

/// (free to this user, total) bytes of the file system `dir` is on.
fn free_space(dir: &Path) -> std::io::Result<(u64, u64)> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok((stat.f_bavail.saturating_mul(stat.f_frsize), stat.f_blocks.saturating_mul(stat.f_frsize)))
}

fn judge(root: &Path, free: u64, total: u64) -> Finding {
    let percent = free.saturating_mul(100).checked_div(total).unwrap_or(100);
    let detail = format!("{} free of {} ({percent}%) on the disk of {}", size(free), size(total), root.display());
    let fix = format!("free space on the disk of {}, or move BUB_HOME to a larger one", root.display());
    if free < FAIL_BELOW_BYTES {
        Finding::fail("disk", detail, fix)
    } else if free < WARN_BELOW_BYTES || percent < WARN_BELOW_PERCENT {
        Finding::warn("disk", detail, fix)
    } else {
        Finding::ok("disk", detail)
    }
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= GIB => format!("{:.1} GiB", b as f64 / GIB as f64),
        b => format!("{} MiB", b / (1024 * 1024)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::doctor::Status;

    #[test]
    fn the_disk_warns_under_a_gibibyte_or_five_percent_and_fails_under_256_mebibytes() {
        let at = |free, total| judge(Path::new("/data"), free, total).status;
        assert_eq!(at(50 * GIB, 100 * GIB), Status::Ok);
        assert_eq!(at(GIB / 2, 100 * GIB), Status::Warn);
        assert_eq!(at(4 * GIB, 100 * GIB), Status::Warn, "4%");
        assert_eq!(at(100 * 1024 * 1024, 100 * GIB), Status::Fail);
        let finding = judge(Path::new("/data"), GIB / 2, 2 * GIB);
        assert_eq!(finding.detail, "512 MiB free of 2.0 GiB (25%) on the disk of /data");
    }
}
