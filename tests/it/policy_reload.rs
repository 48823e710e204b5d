//! Hot reload of the gateway config: edits take effect, invalid edits are
//! rejected and the running config stays, SIGHUP forces a reload.
//! (It sends SIGHUP to the whole test process, which the other modules of
//! `tests/it` share: only a `LiveConfig` watching a file listens for it, and
//! the only others in the process, `config_edit`'s, count on no outcome; see
//! `tests/it/main.rs`.)

use bub::config::{BusyRule, LiveConfig, ReloadOutcome};
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

    // A file emptied (a save cut short) would leave the channel on the open
    // defaults: refused, like one without the running channel or with
    // another kind for it.
    replace(&path, "");
    let ReloadOutcome::Rejected(error) = next_outcome(&mut outcomes).await else { panic!("an empty file is refused") };
    assert_eq!(
        error,
        format!(
            "{}: the file is empty: no channels, while channels hooks run; write the whole config back \
             (removing channels needs a restart)",
            path.display()
        )
    );
    assert_eq!(busy(&live), BusyRule::Drop);
    replace(&path, "[channels.other]\nkind = \"webhook\"\nsecrets = [\"x\"]\n");
    let ReloadOutcome::Rejected(error) = next_outcome(&mut outcomes).await else { panic!("a removal is refused") };
    assert!(
        error.ends_with(
            "removing channel hooks needs a restart; put [channels.hooks] back, or restart the gateway to remove it"
        ),
        "{error}"
    );
    replace(&path, "[channels.hooks]\nkind = \"telegram\"\ntoken = \"t\"\n");
    let ReloadOutcome::Rejected(error) = next_outcome(&mut outcomes).await else { panic!("a new kind is refused") };
    let refused = if cfg!(feature = "telegram") {
        "changing the kind of channel hooks from webhook to telegram needs a restart"
    } else {
        "kind `telegram` is not built into this bub"
    };
    assert!(error.contains(refused), "{error}");
    assert_eq!(busy(&live), BusyRule::Drop);
    assert!(live.current().channels.contains_key("hooks") && !live.current().channels.contains_key("other"));

    // A new channel is applied to policy, and needs a restart to run.
    replace(&path, &format!("{}[channels.more]\nkind = \"webhook\"\nsecrets = [\"m\"]\n", config("queue")));
    assert_eq!(
        next_outcome(&mut outcomes).await,
        ReloadOutcome::Applied { needs_restart: vec!["channels.more".into()] }
    );
    assert_eq!(busy(&live), BusyRule::Queue);

    // A change outside policy is applied, and reported as needing a restart.
    let moved = format!("[http]\nlisten = \"127.0.0.1:9999\"\n{}", config("steer"));
    replace(&path, &moved);
    assert_eq!(next_outcome(&mut outcomes).await, ReloadOutcome::Applied { needs_restart: vec!["http".into()] });
    assert_eq!(busy(&live), BusyRule::Steer);

    // SIGHUP reloads even an unchanged file. (In this one test: every
    // listener in the process gets the signal.) What needs a restart is
    // measured from the start, so the moved listener still does.
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::HUP).unwrap();
    assert_eq!(next_outcome(&mut outcomes).await, ReloadOutcome::Applied { needs_restart: vec!["http".into()] });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_without_channels_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bub.toml");
    std::fs::write(&path, "\n").unwrap();
    let error = LiveConfig::watch(&path, known()).expect_err("an empty file is refused").to_string();
    assert!(error.starts_with(&format!("{}: no channels: ", path.display())), "{error}");
}
