//! The container image's contract, without a container engine: the `bub`
//! binary run as `deploy/Dockerfile`'s last stage runs it, under bubblewrap.
//!
//! The test reads the image's `ENV`, `USER`, `WORKDIR`, `EXPOSE`,
//! `HEALTHCHECK`, `ENTRYPOINT` and `CMD` lines, so a change there that the
//! binary does not follow fails here. It runs the entrypoint with the
//! command's arguments as the image's uid and gid (a user namespace), with
//! exactly the image's environment (plus the base image's `PATH` and what the
//! test gives a gateway: the webhook secret and the fake model), in a root
//! where everything is read-only but `BUB_HOME` (a temporary directory, as the
//! volume) and `/tmp` (a tmpfs); `/proc` and `/dev` are fresh. It checks that
//! the gateway starts, answers a signed webhook with the model's reply, keeps
//! its data in `BUB_HOME`, and exits 0 on SIGTERM within the shutdown grace.
//! It does so twice: with no config (the image's `CMD`, the secret from
//! `BUB_WEBHOOK_SECRET`), and as the Kubernetes manifests run it (the pod's
//! `args`, which compose's `command` repeats): the shipped `bub.toml` in a
//! read-only `/etc/bub`, naming its webhook secret with `secrets_file` in a
//! read-only `/etc/bub/secrets` mounted beneath it. There, the shipped
//! (empty) secret file must stop the start first.
//!
//! Where it differs from a container, and why:
//! - the binary is the one under test (`BUB_CONTRACT_BIN`, else cargo's
//!   debug build) at its own path, not `/usr/local/bin/bub`;
//! - `tini` (the image's PID 1) is not run: the test signals bub itself,
//!   as tini would forward the signal;
//! - `--listen 0.0.0.0:<port>` becomes `127.0.0.1:0`, so tests never fight
//!   over a port; the port is checked against `EXPOSE` and the healthcheck;
//! - the host's network is shared, to reach the fake model on loopback;
//! - the root is the host's system read-only, not Debian slim's: the
//!   packages the image installs are hadolint's and `deploy/check`'s concern.
//!
//! Needs bubblewrap (`bwrap`; Debian: `apt-get install bubblewrap`, which
//! `deploy/check` does when it is missing) and user namespaces.

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::fake_model::FakeModel;
use support::gateway::{START_TIMEOUT, client, listening_addr, signed_request};

const DOCKERFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/Dockerfile");
const POD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/base/pod.yaml");
const COMPOSE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/compose.yaml");
/// The config the manifests ship, and the placeholder of its webhook secret.
const SHIPPED_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/base/bub.toml");
const SHIPPED_WEBHOOK_SECRETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes/base/webhook-secrets");
/// Where the manifests mount bub.toml (the ConfigMap) and, beneath it, the
/// channels' secrets (the Secret, key `webhook`).
const CONFIG_DIR: &str = "/etc/bub";
const SECRETS_DIR: &str = "/etc/bub/secrets";
/// The `PATH` of the Debian base image (the Dockerfile does not set one).
const BASE_IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// bub's shutdown grace when `[http] shutdown_grace_seconds` is unset; the
/// image's STOPSIGNAL, compose and Kubernetes budgets are counted from it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
const SECRET: &str = "contract-secret";

/// What the image's last stage says about how bub runs.
#[derive(Debug)]
struct Image {
    env: Vec<(String, String)>,
    uid: u32,
    gid: u32,
    workdir: String,
    expose: u16,
    stop_signal: String,
    healthcheck: Vec<String>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
}

impl Image {
    /// Reads the last stage of `deploy/Dockerfile` (continuation lines joined).
    fn read() -> Image {
        let text = std::fs::read_to_string(DOCKERFILE).expect("read deploy/Dockerfile");
        let joined = text.replace("\\\n", " ");
        let lines: Vec<&str> =
            joined.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).collect();
        let last_from = lines.iter().rposition(|line| instruction(line).0 == "FROM").expect("a FROM line");
        let mut image = Image {
            env: Vec::new(),
            uid: 0,
            gid: 0,
            workdir: "/".into(),
            expose: 0,
            stop_signal: "SIGTERM".into(),
            healthcheck: Vec::new(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
        };
        for line in &lines[last_from + 1..] {
            let (name, rest) = instruction(line);
            match name.as_str() {
                "ENV" => image.env.extend(rest.split_whitespace().map(|pair| {
                    let (key, value) = pair.split_once('=').expect("ENV KEY=VALUE pairs");
                    assert!(!value.contains('"'), "ENV values without quotes, for this reader: {pair}");
                    (key.to_string(), value.to_string())
                })),
                "USER" => {
                    let (uid, gid) = rest.split_once(':').expect("USER UID:GID, numeric");
                    image.uid = uid.parse().expect("a numeric uid");
                    image.gid = gid.parse().expect("a numeric gid");
                }
                "WORKDIR" => image.workdir = rest.to_string(),
                "EXPOSE" => image.expose = rest.parse().expect("EXPOSE one port"),
                "STOPSIGNAL" => image.stop_signal = rest.to_string(),
                "HEALTHCHECK" => {
                    let (_, command) = rest.split_once(" CMD ").expect("HEALTHCHECK [options] CMD [...]");
                    image.healthcheck = exec_form(command);
                }
                "ENTRYPOINT" => image.entrypoint = exec_form(rest),
                "CMD" => image.cmd = exec_form(rest),
                _ => {}
            }
        }
        image
    }

    fn var(&self, name: &str) -> &str {
        self.env.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str()).unwrap_or_default()
    }

    /// The argument after `--listen` in CMD.
    fn listen(&self) -> &str {
        let at = self.cmd.iter().position(|arg| arg == "--listen").expect("CMD passes --listen");
        &self.cmd[at + 1]
    }
}

/// `("ENV", "A=b C=d")` from `ENV A=b C=d`.
fn instruction(line: &str) -> (String, &str) {
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    (name.to_ascii_uppercase(), rest.trim())
}

/// The JSON array of an exec-form ENTRYPOINT, CMD or HEALTHCHECK CMD.
fn exec_form(text: &str) -> Vec<String> {
    serde_json::from_str(text.trim())
        .unwrap_or_else(|error| panic!("exec form (a JSON array) expected: {text}: {error}"))
}

/// The exec-form list on the first line of the manifest at `path` that
/// starts with `key:` (the pod's `args`, compose's `command`).
fn manifest_list(path: &str, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {path}: {error}"));
    let line = text
        .lines()
        .find_map(|line| line.trim().strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{path} has a `{key}:` line"));
    exec_form(line)
}

/// The binary under test: `BUB_CONTRACT_BIN` (a release build, say), else cargo's.
fn bub_binary() -> PathBuf {
    let path =
        std::env::var_os("BUB_CONTRACT_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bub")), PathBuf::from);
    std::fs::canonicalize(&path).unwrap_or_else(|error| panic!("BUB_CONTRACT_BIN {}: {error}", path.display()))
}

/// `bwrap` on `PATH`, or a failure that says how to get it.
fn bwrap() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("bwrap"))
        .find(|path| path.is_file())
        .expect("bubblewrap's `bwrap` is needed to run bub as the image does (Debian: apt-get install bubblewrap)")
}

/// The manifests' mounts: `config` (holding bub.toml and an empty `secrets`
/// folder, as Kubernetes makes the mount point) read-only at [`CONFIG_DIR`],
/// `secrets` read-only at [`SECRETS_DIR`].
struct ConfigMounts<'a> {
    config: &'a Path,
    secrets: &'a Path,
}

/// bwrap's arguments for the image's file system: every top-level entry of
/// the host's root read-only (symlinks as symlinks), fresh `/proc`, `/dev`
/// and `/tmp`, `home` read-write at `BUB_HOME`, the binary visible at its
/// path, the config's mounts in an `/etc` that mirrors the host's (whose own
/// `/etc/bub`, if any, is left out), then the root and `/etc` made read-only.
fn file_system(image: &Image, home: &Path, binary: &Path, mounts: Option<&ConfigMounts<'_>>) -> Vec<String> {
    let bub_home = image.var("BUB_HOME");
    assert!(bub_home.starts_with('/') && bub_home.matches('/').count() == 1, "BUB_HOME is a top-level volume");
    let mut args = Vec::new();
    let mut skipped = vec!["/proc", "/dev", "/tmp", "/sys", bub_home];
    if mounts.is_some() {
        skipped.push("/etc");
    }
    mirror(Path::new("/"), &skipped, &mut args);
    let home = home.to_string_lossy().into_owned();
    let binary = binary.to_string_lossy().into_owned();
    args.extend(["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"].map(String::from));
    args.extend(["--bind".into(), home, bub_home.to_string()]);
    args.extend(["--ro-bind".into(), binary.clone(), binary]);
    if let Some(mounts) = mounts {
        args.extend(["--tmpfs", "/etc"].map(String::from));
        mirror(Path::new("/etc"), &[CONFIG_DIR], &mut args);
        args.extend(["--ro-bind".into(), mounts.config.to_string_lossy().into_owned(), CONFIG_DIR.into()]);
        args.extend(["--ro-bind".into(), mounts.secrets.to_string_lossy().into_owned(), SECRETS_DIR.into()]);
        args.extend(["--remount-ro", "/etc"].map(String::from));
    }
    args.extend(["--remount-ro", "/"].map(String::from));
    args
}

/// bwrap's arguments showing each entry of the host's `dir` but `skipped`
/// read-only at the same path (symlinks as symlinks).
fn mirror(dir: &Path, skipped: &[&str], args: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("list {}: {error}", dir.display()))
        .map(|entry| entry.expect("an entry of a listed folder").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.to_string_lossy().into_owned();
        if skipped.contains(&name.as_str()) {
            continue;
        }
        match std::fs::read_link(&path) {
            Ok(target) => args.extend(["--symlink".into(), target.to_string_lossy().into_owned(), name]),
            Err(_) => args.extend(["--ro-bind".into(), name.clone(), name]),
        }
    }
}

/// The command line the image runs, for the binary under test: the
/// entrypoint after its init (`tini --`), then `cmd` (the image's CMD, or
/// the manifests' arguments in its place) with `--listen` on a free
/// loopback port.
fn command_line(image: &Image, binary: &Path, cmd: &[String]) -> Vec<String> {
    let (init, program) = image.entrypoint.split_at(image.entrypoint.len() - 1);
    assert_eq!(init, ["/usr/bin/tini", "--"], "the entrypoint runs bub under tini");
    assert!(program[0].ends_with("/bub"), "the entrypoint's program is bub: {:?}", image.entrypoint);
    let mut line = vec![binary.to_string_lossy().into_owned()];
    line.extend(cmd.iter().map(|arg| if arg == image.listen() { "127.0.0.1:0".into() } else { arg.clone() }));
    line
}

/// bub, running in its image's file system under `bwrap`.
struct Contained {
    bwrap: Child,
    stderr_path: PathBuf,
}

impl Contained {
    /// bub as the image runs `cmd`, with `mounts` (the manifests' config) or none.
    fn start(
        image: &Image,
        cmd: &[String],
        mounts: Option<&ConfigMounts<'_>>,
        home: &Path,
        logs: &Path,
        env: &[(String, String)],
    ) -> Contained {
        let binary = bub_binary();
        let stderr_path = logs.join("gateway.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("create the gateway's stderr file");
        let mut command = Command::new(bwrap());
        command
            .env_clear()
            .env("PATH", BASE_IMAGE_PATH)
            .envs(image.env.iter().map(|(key, value)| (key.as_str(), value.as_str())))
            .envs(env.iter().map(|(key, value)| (key.as_str(), value.as_str())))
            .args(["--unshare-user", "--uid", &image.uid.to_string(), "--gid", &image.gid.to_string()])
            .args(["--unshare-ipc", "--unshare-uts", "--die-with-parent"])
            .args(file_system(image, home, &binary, mounts))
            .args(["--chdir", &image.workdir, "--"])
            .args(command_line(image, &binary, cmd))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        Contained { bwrap: command.spawn().expect("run bwrap"), stderr_path }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    async fn listening(&mut self) -> std::net::SocketAddr {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(addr) = listening_addr(&self.stderr()) {
                return addr;
            }
            if let Some(status) = self.bwrap.try_wait().expect("poll bwrap") {
                panic!("bub exited ({status}) before listening; stderr:\n{}", self.stderr());
            }
            assert!(Instant::now() < deadline, "bub did not listen within {START_TIMEOUT:?}:\n{}", self.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// bub's pid: bwrap's child (without a PID namespace of its own, bwrap
    /// forks the sandbox's process once and waits for it).
    fn bub_pid(&self) -> i32 {
        let bwrap = self.bwrap.id().to_string();
        let children: Vec<i32> = std::fs::read_dir("/proc")
            .expect("list /proc")
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
                let after_comm = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
                after_comm.split_whitespace().nth(1) == Some(bwrap.as_str())
            })
            .collect();
        assert_eq!(children.len(), 1, "bwrap has one child, bub: {children:?}");
        children[0]
    }

    /// Waits up to `limit` for bub to exit by itself; its status and stderr.
    async fn exited(&mut self, limit: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.bwrap.try_wait().expect("poll bwrap") {
                return (status.code(), self.stderr());
            }
            assert!(Instant::now() < deadline, "bub still runs after {limit:?}:\n{}", self.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal` to bub, as tini forwards the container's; waits up to
    /// `limit` for bwrap to exit with bub's status.
    async fn stop(mut self, signal: rustix::process::Signal, limit: Duration) -> (Option<i32>, Duration, String) {
        let pid = rustix::process::Pid::from_raw(self.bub_pid()).expect("a pid above 0");
        let sent = Instant::now();
        rustix::process::kill_process(pid, signal).expect("signal bub");
        loop {
            if let Some(status) = self.bwrap.try_wait().expect("poll bwrap") {
                return (status.code(), sent.elapsed(), self.stderr());
            }
            if sent.elapsed() > limit {
                let _ = self.bwrap.kill();
                let _ = self.bwrap.wait();
                return (None, sent.elapsed(), self.stderr());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        // --die-with-parent takes bub along when bwrap is killed.
        let _ = self.bwrap.kill();
        let _ = self.bwrap.wait();
    }
}

#[test]
fn the_dockerfile_runs_bub_as_its_manifests_expect() {
    let image = Image::read();
    assert_eq!((image.uid, image.gid), (10001, 10001), "the Kubernetes manifests run as 10001:10001");
    assert_eq!(image.var("BUB_HOME"), "/data", "the volume, the manifests' mounts and the README say /data");
    assert_eq!(image.stop_signal, "SIGTERM", "bub stops gracefully on SIGTERM");
    let port = image.listen().strip_prefix("0.0.0.0:").expect("CMD listens on every address");
    assert_eq!(port, image.expose.to_string(), "CMD listens on the EXPOSEd port");
    let url = format!("http://127.0.0.1:{port}/healthz");
    assert!(image.healthcheck.contains(&url), "the HEALTHCHECK asks {url}: {:?}", image.healthcheck);

    let mut with_config = image.cmd.clone();
    with_config.splice(1..1, ["--config".to_string(), format!("{CONFIG_DIR}/bub.toml")]);
    assert_eq!(manifest_list(POD, "args"), with_config, "the pod runs CMD with the mounted config");
    assert_eq!(manifest_list(COMPOSE, "command"), with_config, "compose runs what the pod runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_entrypoint_starts_answers_a_signed_webhook_and_stops_on_sigterm() {
    let image = Image::read();
    let home = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let fake = FakeModel::start_answering("pong from the image").await;
    let mut env = fake.vars("openai:gpt-test");
    env.push(("BUB_WEBHOOK_SECRET".into(), SECRET.into()));
    env.push(("BUB_LOG".into(), "info".into()));
    let bub = Contained::start(&image, &image.cmd, None, home.path(), logs.path(), &env);
    answers_a_signed_webhook_and_stops(&image, bub, home.path()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_manifests_config_refuses_the_shipped_secret_then_reads_a_mounted_one() {
    let image = Image::read();
    let home = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    std::fs::copy(SHIPPED_CONFIG, config.path().join("bub.toml")).expect("copy the shipped bub.toml");
    std::fs::create_dir(config.path().join("secrets")).expect("the mount point of the secrets");
    let webhook = secrets.path().join("webhook");
    std::fs::copy(SHIPPED_WEBHOOK_SECRETS, &webhook).expect("copy the shipped webhook secrets");
    let mounts = ConfigMounts { config: config.path(), secrets: secrets.path() };
    let args = manifest_list(POD, "args");
    let fake = FakeModel::start_answering("pong from the image").await;
    let mut env = fake.vars("openai:gpt-test");
    env.push(("BUB_LOG".into(), "info".into()));

    let mut unedited = Contained::start(&image, &args, Some(&mounts), home.path(), logs.path(), &env);
    let (status, stderr) = unedited.exited(START_TIMEOUT).await;
    assert_ne!(status, Some(0), "an unedited deploy does not start:\n{stderr}");
    let refusal = format!("`secrets_file` {SECRETS_DIR}/webhook: empty");
    assert!(stderr.contains(&format!("{CONFIG_DIR}/bub.toml:")) && stderr.contains(&refusal), "{stderr}");

    // A second key beside the one signing, as during a rotation.
    std::fs::write(&webhook, format!("old-secret\n{SECRET}\n")).expect("write the webhook secrets");
    let bub = Contained::start(&image, &args, Some(&mounts), home.path(), logs.path(), &env);
    answers_a_signed_webhook_and_stops(&image, bub, home.path()).await;
}

/// The contract of a started image: it listens, answers `/healthz` and a
/// webhook signed with [`SECRET`] with the fake model's reply, keeps its
/// database in `home` (the volume), and exits 0 on the image's STOPSIGNAL
/// within the shutdown grace, logging no error.
async fn answers_a_signed_webhook_and_stops(image: &Image, mut bub: Contained, home: &Path) {
    let addr = bub.listening().await;

    let health = client().get(format!("http://{addr}/healthz")).send().await.expect("GET /healthz");
    assert_eq!(health.status(), 200);
    let body = json!({"message_id": "m1", "chat_id": "c1", "sender_id": "u1", "text": "ping"});
    let response = signed_request(&client(), addr, "webhook", "sync", &body, SECRET).await.expect("the webhook");
    assert_eq!(response.status(), 200, "stderr:\n{}", bub.stderr());
    let reply: Value = response.json().await.expect("a JSON reply");
    assert_eq!(reply["text"], "pong from the image", "{reply}");
    assert!(home.join("bub.db").is_file(), "the database is in BUB_HOME (the volume)");

    let signal = match image.stop_signal.as_str() {
        "SIGTERM" => rustix::process::Signal::TERM,
        other => panic!("STOPSIGNAL {other}: the test sends SIGTERM"),
    };
    let (status, took, stderr) = bub.stop(signal, SHUTDOWN_GRACE).await;
    assert_eq!(status, Some(0), "bub exits 0 on SIGTERM (after {took:?}); stderr:\n{stderr}");
    assert!(!stderr.contains("ERROR"), "no error on the way:\n{stderr}");
}
