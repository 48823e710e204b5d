//! Editing the running gateway's config file (the admin console's policy
//! editor): a replacement is checked as a reload is, applied at once, never
//! overwrites a change made since it was read, repairs a file broken on
//! disk, and keeps the file's mode and a symlink.
//! (The watchers here also hear `policy_reload`'s SIGHUP, which reloads
//! them once more: these tests look at the config and the file, not at the
//! outcomes the watchers report; `config::edit`'s unit tests count those.)

use bub::config::{BusyRule, ConfigVersion, EditError, LiveConfig, ReloadOutcome};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::mpsc::Receiver;

fn config(busy: &str) -> String {
    format!(
        "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n\n[channels.hooks.policy]\nbusy = \"{busy}\"\n"
    )
}

fn busy(live: &LiveConfig) -> BusyRule {
    live.current().effective("hooks", "room").busy.value
}

/// A gateway's config watching `path` (the receiver kept, as the gateway's
/// reporter keeps it).
fn watch(path: &Path) -> (Arc<LiveConfig>, Receiver<ReloadOutcome>) {
    LiveConfig::watch(path, vec!["bash".to_string()]).unwrap()
}

/// [`LiveConfig::replace`] as the console calls it: on a blocking thread.
async fn replace(live: &Arc<LiveConfig>, text: &str, expected: &ConfigVersion) -> Result<ReloadOutcome, EditError> {
    let (live, text, expected) = (live.clone(), text.to_string(), expected.clone());
    tokio::task::spawn_blocking(move || live.replace(&text, &expected)).await.unwrap()
}

fn version_on_disk(live: &LiveConfig) -> ConfigVersion {
    live.on_disk().unwrap().file.version
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_is_applied_at_once_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, config("queue")).unwrap();
    let (live, _outcomes) = watch(&path);
    let before = live.on_disk().unwrap();
    assert_eq!(before.file.version, before.running, "the file is what runs");
    assert_eq!(before.problem, None);

    let outcome = replace(&live, &config("steer"), &before.file.version).await.unwrap();
    assert_eq!(outcome, ReloadOutcome::Applied { needs_restart: vec![] });
    assert_eq!(busy(&live), BusyRule::Steer, "in force without waiting for the watcher");
    let after = live.on_disk().unwrap();
    assert_eq!(after.file.text, config("steer"));
    assert_eq!(after.file.version, ConfigVersion::of(&config("steer")));
    assert_eq!(after.running, after.file.version);
    assert_eq!(live.running().unwrap().text, config("steer"));
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["bub.toml"], "no temporary file is left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_since_it_was_read_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, config("queue")).unwrap();
    let (live, _outcomes) = watch(&path);
    let read = version_on_disk(&live);

    // Somebody else saves the file meanwhile.
    std::fs::write(&path, config("drop")).unwrap();
    let Err(EditError::Conflict { current, text }) = replace(&live, &config("steer"), &read).await else {
        panic!("a stale version is a conflict")
    };
    assert_eq!(current, ConfigVersion::of(&config("drop")));
    assert_eq!(text, config("drop"), "the conflict shows what the file holds now");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), config("drop"));

    // Edited again from the new version, it applies.
    replace(&live, &config("steer"), &current).await.unwrap();
    assert_eq!(busy(&live), BusyRule::Steer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_text_is_refused_at_its_line_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, config("queue")).unwrap();
    let (live, _outcomes) = watch(&path);
    let version = version_on_disk(&live);

    let Err(EditError::Invalid(error)) = replace(&live, &config("wait"), &version).await else {
        panic!("an invalid text is refused")
    };
    assert_eq!(error.location(), Some((6, 8)));
    assert_eq!(
        error.to_string(),
        format!("{}:6:8: unknown value `wait`; expected one of steer, queue, drop", path.display())
    );
    let Err(EditError::Invalid(error)) =
        replace(&live, &format!("{}denied_tools = [\"bsh\"]\n", config("queue")), &version).await
    else {
        panic!("an unknown tool is refused as a reload refuses it")
    };
    assert!(error.to_string().ends_with("unknown tool pattern `bsh`; did you mean `bash`?"), "{error}");
    let Err(EditError::Invalid(error)) = replace(&live, "", &version).await else { panic!("an empty text is refused") };
    assert!(error.to_string().contains("the file is empty: no channels"), "{error}");

    assert_eq!(std::fs::read_to_string(&path).unwrap(), config("queue"));
    assert_eq!(busy(&live), BusyRule::Queue);
    assert_eq!(version_on_disk(&live), version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_broken_on_disk_is_shown_with_its_error_and_repaired_from_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, config("queue")).unwrap();
    let (live, _outcomes) = watch(&path);

    // Saved by hand with a typo: the reload refuses it, the old config runs.
    std::fs::write(&path, config("wait")).unwrap();
    let broken = live.on_disk().unwrap();
    assert_eq!(broken.file.text, config("wait"));
    assert_eq!(broken.running, ConfigVersion::of(&config("queue")), "the running config is the old one");
    let problem = broken.problem.expect("the broken file's error");
    assert_eq!((problem.line, problem.column), (Some(6), Some(8)));
    assert_eq!(problem.message, "unknown value `wait`; expected one of steer, queue, drop");
    assert_eq!(busy(&live), BusyRule::Queue);

    // Repaired from the version of the broken file.
    let outcome = replace(&live, &config("drop"), &broken.file.version).await.unwrap();
    assert_eq!(outcome, ReloadOutcome::Applied { needs_restart: vec![] });
    assert_eq!(busy(&live), BusyRule::Drop);
    let repaired = live.on_disk().unwrap();
    assert_eq!((repaired.problem, repaired.running), (None, ConfigVersion::of(&config("drop"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_mode_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, config("queue")).unwrap();
    let (live, _outcomes) = watch(&path);
    for mode in [0o640, 0o600, 0o644] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        replace(&live, &config(if mode == 0o600 { "drop" } else { "steer" }), &version_on_disk(&live)).await.unwrap();
        let kept = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(kept, mode, "mode {mode:o} became {kept:o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_file_stays_a_symlink_and_its_target_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("etc");
    std::fs::create_dir(&real).unwrap();
    let target = real.join("bub.toml");
    std::fs::write(&target, config("queue")).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("bub.toml");
    std::os::unix::fs::symlink(Path::new("etc/bub.toml"), &link).unwrap();
    let (live, _outcomes) = watch(&link);

    replace(&live, &config("steer"), &version_on_disk(&live)).await.unwrap();
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("etc/bub.toml"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), config("steer"));
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777, 0o640);
    assert_eq!(busy(&live), BusyRule::Steer);
    let names: Vec<_> = std::fs::read_dir(&real).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["bub.toml"], "no temporary file is left beside the target");
}
