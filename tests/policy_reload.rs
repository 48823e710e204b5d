//! Hot reload of the gateway config: edits take effect, invalid edits are
//! rejected and the running config stays, SIGHUP forces a reload.
//! (Its own test binary: it sends SIGHUP to the process.)

use bub::policy::{BusyRule, LiveConfig, ReloadOutcome};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Receiver;

const PATIENCE: Duration = Duration::from_secs(10);

fn config(busy: &str) -> String {
    format!(
        "[channels.hooks]\nkind = \"webhook\"\nsecrets = [\"s3cret\"]\n\n[channels.hooks.policy]\nbusy = \"{busy}\"\n"
    )
}

fn known() -> Vec<String> {
    ["bash", "fs.read"].map(String::from).to_vec()
}

fn busy(live: &LiveConfig) -> BusyRule {
    live.current().effective("hooks", "room").busy.value
}

/// Waits (generously) for the next reload outcome.
async fn next_outcome(outcomes: &mut Receiver<ReloadOutcome>) -> ReloadOutcome {
    tokio::time::timeout(PATIENCE, outcomes.recv()).await.expect("a reload outcome within 10 s").expect("open")
}

/// Replaces the file the way editors do: write a sibling, rename it over.
fn replace(path: &Path, text: &str) {
    let temporary = path.with_extension("toml.tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_apply_invalid_edits_keep_the_running_config_and_sighup_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, config("queue")).unwrap();
    let (live, mut outcomes) = LiveConfig::watch(&path, known()).unwrap();
    assert_eq!(busy(&live), BusyRule::Queue);

    // An in-place write.
    std::fs::write(&path, config("steer")).unwrap();
    let deadline = Instant::now() + PATIENCE;
    while busy(&live) != BusyRule::Steer {
        assert!(Instant::now() < deadline, "the edit was not applied within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(next_outcome(&mut outcomes).await, ReloadOutcome::Applied { needs_restart: vec![] });

    // A replacement by rename, as editors save.
    replace(&path, &config("drop"));
    assert_eq!(next_outcome(&mut outcomes).await, ReloadOutcome::Applied { needs_restart: vec![] });
    assert_eq!(busy(&live), BusyRule::Drop);

    // An invalid file: rejected with its position, the running config stays.
    replace(&path, &config("wait"));
    let ReloadOutcome::Rejected(error) = next_outcome(&mut outcomes).await else {
        panic!("an invalid file is rejected")
    };
    assert_eq!(error, format!("{}:6:8: unknown value `wait`; expected one of steer, queue, drop", path.display()));
    assert_eq!(busy(&live), BusyRule::Drop);

    // A tool pattern the agent does not know is just as invalid.
    let unknown_tool = format!("{}denied_tools = [\"bsh\"]\n", config("queue"));
    replace(&path, &unknown_tool);
    let ReloadOutcome::Rejected(error) = next_outcome(&mut outcomes).await else { panic!("unknown tool rejected") };
    assert!(error.ends_with("unknown tool pattern `bsh`; did you mean `bash`?"), "{error}");
    assert_eq!(busy(&live), BusyRule::Drop);

    // A change outside policy is applied, and reported as needing a restart.
    let moved = format!("[http]\nlisten = \"127.0.0.1:9999\"\n{}", config("steer"));
    replace(&path, &moved);
    assert_eq!(next_outcome(&mut outcomes).await, ReloadOutcome::Applied { needs_restart: vec!["http".into()] });
    assert_eq!(busy(&live), BusyRule::Steer);

    // SIGHUP reloads even an unchanged file. (In this one test: every
    // listener in the process gets the signal.)
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::HUP).unwrap();
    assert_eq!(next_outcome(&mut outcomes).await, ReloadOutcome::Applied { needs_restart: vec![] });
}
