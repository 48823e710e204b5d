//! Route 7 (issue 28): the sandbox held every attack from inside, but not
//! from the host's side. A sandboxed command pushed keystrokes into the
//! terminal the gateway was started from; outlived a SIGKILLed gateway;
//! held gigabytes across processes that were capped one by one; read the
//! files beside the config; filled the disk the database lives on. Each
//! test here drives the real gateway binary's sandboxed `bash` through an
//! operator's `,bash` over the webhook and asserts what the attacker got.

use crate::support::fake_model::FakeModel;
use crate::support::gateway::{GatewayProcess, client, signed_request};
use serde_json::json;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

const SECRET: &str = "host-side";

/// A webhook channel whose chat `a` runs in the sandbox, with `ops` as operator.
pub(crate) fn config(extra: &str) -> String {
    format!(
        "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\
         [channels.webhook.policy]\noperators = [\"webhook:ops\"]\n\
         [channels.webhook.chats.\"a\".policy]\nenvironment = \"sandbox\"\n{extra}"
    )
}

/// The sandboxed chat's workspace.
pub(crate) fn workspace(home: &Path) -> std::path::PathBuf {
    home.join("workspaces").join("webhook%3Aa")
}

/// The operator says `text` in chat `a`; the reply's text.
pub(crate) async fn say(addr: SocketAddr, id: &str, text: &str) -> String {
    let body = json!({"message_id": id, "chat_id": "a", "sender_id": "ops", "text": text});
    let response =
        signed_request(&client(), addr, "webhook", "sync", &body, SECRET).await.expect("the webhook answers");
    response.json::<serde_json::Value>().await.expect("a JSON reply")["text"].as_str().unwrap_or_default().to_string()
}

/// A pseudo-terminal: (master, slave).
fn open_terminal() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; no name, termios or size given.
    let opened =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here.
    unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Tries TIOCSTI, one byte at a time, on fds 0 to 2 and on `/dev/tty`,
/// printing `<where> INJECTED` or `<where> refused <errno>`.
const INJECT: &str = r#"
import fcntl, os, sys, termios
line = sys.argv[1].encode() + b"\n"
def inject(fd, where):
    try:
        for byte in line:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        print(where, "INJECTED")
    except OSError as error:
        print(where, "refused", error.errno)
for fd in (0, 1, 2):
    inject(fd, "fd%d" % fd)
try:
    inject(os.open("/dev/tty", os.O_RDWR), "tty")
except OSError as error:
    print("tty", "refused", error.errno)
"#;

/// Started from an interactive terminal, the gateway's sandboxed `bash`
/// pushed `touch …` into that terminal with TIOCSTI; the shell reading it
/// next ran it on the host as the gateway's user. Now the sandbox has no
/// controlling terminal and the ioctl is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_command_cannot_type_into_the_gateways_terminal() {
    let home = tempfile::tempdir().unwrap();
    let pwned = home.path().join("pwned");
    let fake = FakeModel::start_answering("text").await;
    let (master, slave) = open_terminal();
    // Whatever the terminal shows is read, so that nothing blocks on a full buffer.
    let mut shown = std::fs::File::from(master.try_clone().unwrap());
    std::thread::spawn(move || std::io::copy(&mut shown, &mut std::io::sink()));
    let path = home.path().join("bub.toml");
    std::fs::write(&path, config("")).unwrap();
    let terminal = slave.try_clone().unwrap();
    let gateway = GatewayProcess::start_with(
        home.path(),
        &fake.vars("openai:gpt-test"),
        &["--config", path.to_str().unwrap()],
        move |command| {
            command.stdin(terminal.try_clone().unwrap()).stdout(terminal);
            // SAFETY: setsid and ioctl are raw syscalls, fine between fork and exec.
            unsafe {
                command.pre_exec(|| {
                    // A login shell's job: a session whose controlling terminal this is.
                    if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        },
    )
    .await;
    std::fs::create_dir_all(workspace(home.path())).unwrap();
    std::fs::write(workspace(home.path()).join("inject.py"), INJECT).unwrap();
    let line = format!("touch {}", pwned.display());
    let reply = say(gateway.addr, "m1", &format!(",bash cmd='python3 inject.py \"{line}\"'")).await;
    assert!(gateway.stop().await, "the gateway stops cleanly");

    // The terminal's next reader (the shell the gateway was started from) runs what was typed.
    let mut shell = std::process::Command::new("sh")
        .arg("-s")
        .stdin(slave.try_clone().unwrap())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut keyboard = std::fs::File::from(master);
    std::io::Write::write_all(&mut keyboard, b"exit\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while shell.try_wait().unwrap().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = shell.kill();
    let _ = shell.wait();
    assert!(!pwned.exists(), "a command typed into the gateway's terminal ran on the host: {reply}");
    assert!(!reply.contains("INJECTED"), "{reply}");
    for fd in ["fd0", "fd1", "fd2"] {
        assert!(reply.contains(&format!("{fd} refused {}", libc::EPERM)), "the ioctl is refused: {reply}");
    }
    assert!(reply.contains("tty refused"), "no terminal to open: {reply}");
    drop(slave);
}

/// The pids of processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(marker))
        })
        .collect()
}

/// Waits up to `timeout` until no process holds `marker`; the ones left.
async fn wait_gone(marker: &str, timeout: Duration) -> Vec<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = processes_with(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A SIGKILLed (or crashed) gateway left its sandboxed commands running, as
/// root under the sandbox's setup processes, unknown to the next start;
/// some were alive 30 minutes later. Now the sandbox dies with the gateway.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_gateways_sandboxed_commands_die_with_it() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("text").await;
    let mut gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config("")).await;
    // Unique to this run: `sleep` takes any number.
    let marker = format!("sleep 98{}{}", std::process::id(), rand_suffix());
    let command = format!(",bash cmd='{marker}; echo x' timeout_seconds=900");
    let body = json!({"message_id": "m1", "chat_id": "a", "sender_id": "ops", "text": command});
    let addr = gateway.addr;
    // The turn never ends: its gateway is killed.
    let turn = tokio::spawn(async move { signed_request(&client(), addr, "webhook", "sync", &body, SECRET).await });
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the sandboxed command never started: {}", gateway.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gateway.kill_hard();
    let left = wait_gone(&marker, Duration::from_secs(30)).await;
    for pid in &left {
        // SAFETY: kill(2) on a process this test started (it carries the test's marker).
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "the sandboxed command outlived the killed gateway: pids {left:?}");
    turn.abort();
}

/// A number no other run of this test picks at the same time.
fn rand_suffix() -> u32 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos() % 1000)
}

/// A path under `/etc` unique to this test run, removed when dropped.
struct InEtc(std::path::PathBuf);

impl InEtc {
    fn new(name: &str) -> InEtc {
        InEtc(Path::new("/etc").join(format!("bub-red-team-{name}-{}-{}", std::process::id(), rand_suffix())))
    }
}

impl Drop for InEtc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// With the config in a folder of `/etc` (shown to the sandbox read-only),
/// only the config file was hidden: the `bub.env` holding the API key and
/// the editor's `bub.toml.bak` beside it were readable from the sandbox.
#[tokio::test(flavor = "multi_thread")]
async fn the_files_beside_the_config_are_hidden_from_the_sandbox() {
    let home = tempfile::tempdir().unwrap();
    let folder = InEtc::new("conf");
    std::fs::create_dir_all(&folder.0).unwrap();
    std::fs::write(folder.0.join("bub.env"), "OPENAI_API_KEY=sk-beside-the-config\n").unwrap();
    std::fs::write(folder.0.join("bub.toml.bak"), "secrets = [\"old-secret-beside\"]\n").unwrap();
    let path = folder.0.join("bub.toml");
    std::fs::write(&path, config("")).unwrap();
    let fake = FakeModel::start_answering("text").await;
    let gateway =
        GatewayProcess::start(home.path(), &fake.vars("openai:gpt-test"), &["--config", path.to_str().unwrap()]).await;
    let dir = folder.0.display();
    let command = format!(",bash cmd='cat {dir}/bub.env {dir}/bub.toml.bak; echo listing=$(ls -A {dir}).'");
    let reply = say(gateway.addr, "m1", &command).await;
    assert!(!reply.contains("beside"), "the files beside the config are readable: {reply}");
    assert!(reply.contains("listing=."), "the config's folder shows empty: {reply}");
    assert!(gateway.stop().await);
}

/// Hiding the config's folder would hide what the sandbox needs when that
/// folder is `/etc` itself: the gateway refuses to start and says what to do.
#[tokio::test(flavor = "multi_thread")]
async fn a_config_directly_in_etc_is_refused_with_a_sandbox() {
    let home = tempfile::tempdir().unwrap();
    let path = InEtc::new("direct.toml");
    std::fs::write(&path.0, config("")).unwrap();
    let gateway = GatewayProcess::spawn(home.path(), &[], &["--config", path.0.to_str().unwrap()]);
    let (status, stderr) = gateway.exit_within(Duration::from_secs(60)).await;
    assert!(status.is_some_and(|s| !s.success()), "started with its config folder shown to the sandbox: {stderr}");
    assert!(stderr.contains("/etc") && stderr.contains("folder of its own"), "says what to do: {stderr}");
}

/// Fills the command's `/tmp` with 200 MB, then starts four Python
/// processes that each take 700 MiB (under the 1 GiB each may have) and
/// hold it for ten seconds; prints `survived` for each that held it to the end.
const HOG: &str = r#"
head -c 200000000 /dev/zero > /tmp/fill
for i in 1 2 3 4; do
    python3 -c 'import time; x = b"x" * (700 << 20); time.sleep(10); print("survived")' &
done
wait
echo finished
"#;

/// Forks `argv[1]` children that sleep `argv[2]` seconds, says how many it
/// got and waits for them.
const FORKS: &str = r#"
import os, sys, time
n = 0
try:
    for _ in range(int(sys.argv[1])):
        if os.fork() == 0:
            time.sleep(int(sys.argv[2]))
            os._exit(0)
        n += 1
    print("forked", n, flush=True)
except OSError as error:
    print("refused after", n, error.errno, flush=True)
for _ in range(n):
    os.wait()
"#;

/// Memory was capped per process and processes per command, so one
/// command's four processes plus its `/tmp` held 2.9 GiB, and two commands
/// of one chat twice the process cap. Now a session's whole tree shares
/// `[sandbox] session_memory_bytes` and `session_processes` (a cgroup), and
/// the gateway keeps answering.
#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_whole_tree_shares_one_memory_and_process_cap() {
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("text").await;
    let limits = "[sandbox]\nsession_memory_bytes = 1073741824\nsession_processes = 64\n";
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config(limits)).await;
    assert!(gateway.stderr().contains("session limits: ok"), "the start-up report says: {}", gateway.stderr());
    std::fs::create_dir_all(workspace(home.path())).unwrap();
    std::fs::write(workspace(home.path()).join("hog.sh"), HOG).unwrap();
    std::fs::write(workspace(home.path()).join("forks.py"), FORKS).unwrap();

    let hogged = say(gateway.addr, "m1", ",bash cmd='sh hog.sh' timeout_seconds=120").await;
    assert!(hogged.contains("finished"), "{hogged}");
    // Any two survivors held 1.4 GiB at once (their ten seconds overlap): more than the session may.
    assert!(hogged.matches("survived").count() <= 1, "the tree held more than its cap: {hogged}");
    assert!(say(gateway.addr, "m2", ",bash cmd='echo alive'").await.contains("alive"), "the gateway still answers");

    let started = say(gateway.addr, "m3", ",bash cmd='python3 forks.py 40 60 > first.txt' background=true").await;
    assert!(started.contains("started"), "{started}");
    // Once the first command holds its 40 processes, the second asks for 40 more.
    let second = "until grep -q forked first.txt; do sleep 0.1; done; cat first.txt; python3 forks.py 40 1";
    let forked = say(gateway.addr, "m4", &format!(",bash cmd='{second}' timeout_seconds=60")).await;
    assert!(forked.contains("forked 40\nrefused after"), "two commands share the session's processes: {forked}");
    assert!(gateway.stop().await);
}

/// This process's cgroup directory in the hierarchy that counts processes
/// (v1's `pids`, else v2's): where a gateway it starts makes its sandboxes'.
fn own_pids_cgroup() -> std::path::PathBuf {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let find = |wanted: &dyn Fn(&str) -> bool| {
        text.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            wanted(controllers).then(|| path.trim_start_matches('/').to_string())
        })
    };
    match find(&|c| c.split(',').any(|c| c == "pids")) {
        Some(path) => Path::new("/sys/fs/cgroup/pids").join(path),
        None => Path::new("/sys/fs/cgroup").join(find(&str::is_empty).expect("a cgroup v2 line")),
    }
}

/// Whatever a SIGKILLed gateway's sandboxes still ran (had they escaped its
/// death) is in its sessions' cgroups: the next gateway to start there kills
/// it and removes them, so nothing is left unknown.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_start_empties_a_gone_gateways_cgroups() {
    // A pid that is free now: a process that has exited.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let base = own_pids_cgroup().join(format!("bub-sandboxes-{gone_pid}"));
    let session = base.join("session-0");
    std::fs::create_dir_all(&session).expect("a cgroup (the tests run as root)");
    let marker = format!("98{}{}", std::process::id(), rand_suffix());
    let mut left = std::process::Command::new("sleep").arg(&marker).spawn().unwrap();
    std::fs::write(session.join("cgroup.procs"), left.id().to_string()).unwrap();

    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("text").await;
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config("")).await;
    let alive = wait_gone(&format!("sleep {marker}"), Duration::from_secs(30)).await;
    let removed = !base.exists();
    let _ = left.kill();
    let _ = left.wait();
    let _ = std::fs::remove_dir(&session);
    let _ = std::fs::remove_dir(&base);
    assert!(alive.is_empty(), "the gone gateway's process is still running: {alive:?}");
    assert!(removed, "{} is left", base.display());
    assert!(gateway.stderr().contains("killed what a gone gateway left running"), "{}", gateway.stderr());
    assert!(gateway.stop().await);
}
