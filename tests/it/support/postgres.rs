//! A throwaway PostgreSQL cluster for the tests, from the server binaries
//! installed on the machine (Debian's `postgresql-15`: not on PATH, in the
//! folder `pg_config --bindir` names; `BUB_PG_BINDIR` overrides it).
//!
//! [`shared`] starts one cluster per test binary (one for all of `tests/it`),
//! the first time a test asks, on a free loopback port with trust
//! authentication for the user `bub`; each test takes a database of its own
//! from it ([`fresh_database`]). The
//! cluster runs as a non-root user (`initdb` refuses root): as this user
//! when it is not root, else as `postgres` (the package's user) or `nobody`.
//! A watcher process stops the server and removes its directory once the
//! test binary is gone, however it ended (a panic, a SIGKILL).
//!
//! Nothing here passes by being left out: a machine without the binaries fails these tests
//! with the message of how to install them.
//!
//! [`DatabaseLink`] puts a loopback relay between one process and the
//! cluster that a test can cut and mend: that process alone loses the
//! database (a partition), the others keep it.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How to get the binaries, for every failure to find them.
const INSTALL: &str = "PostgreSQL's server binaries are needed: `apt-get install postgresql-15` (Debian), \
                       or set BUB_PG_BINDIR to the folder holding initdb and postgres";

/// A running cluster.
pub struct PgCluster {
    /// `postgres://bub@127.0.0.1:<port>`, without a database.
    pub base_url: String,
    pub port: u16,
    pub dir: PathBuf,
    bindir: PathBuf,
    /// Whether commits reach the disk (`fsync`, full page writes): off for
    /// the tests, on for the benches.
    durable: bool,
    server: parking_lot::Mutex<Option<std::process::Child>>,
}

/// The folder of `initdb`, `postgres` and `pg_isready`.
pub fn bindir() -> PathBuf {
    let dir = match std::env::var_os("BUB_PG_BINDIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let output = Command::new("pg_config")
                .arg("--bindir")
                .output()
                .unwrap_or_else(|e| panic!("pg_config: {e}. {INSTALL}"));
            assert!(output.status.success(), "pg_config --bindir failed. {INSTALL}");
            PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
        }
    };
    for binary in ["initdb", "postgres", "pg_isready"] {
        assert!(dir.join(binary).is_file(), "{} is missing. {INSTALL}", dir.join(binary).display());
    }
    dir
}

/// The uid and gid the server runs as: this process's unless it is root.
fn server_user() -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    for wanted in ["postgres", "nobody"] {
        for line in passwd.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() > 3
                && fields[0] == wanted
                && let (Ok(uid), Ok(gid)) = (fields[2].parse(), fields[3].parse())
            {
                return Some((uid, gid));
            }
        }
    }
    panic!("running as root, and neither a `postgres` nor a `nobody` user exists to run PostgreSQL as");
}

fn as_server_user(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port").port()
}

impl PgCluster {
    /// Creates and starts a cluster of its own (a test that stops its
    /// database uses one, not [`shared`]), without `fsync`.
    pub fn start() -> PgCluster {
        PgCluster::start_with(false)
    }

    /// A cluster that syncs its commits as a production server does (the
    /// benches: a durable append costs what it costs there).
    #[allow(dead_code)] // the benches'
    pub fn start_durable() -> PgCluster {
        PgCluster::start_with(true)
    }

    fn start_with(durable: bool) -> PgCluster {
        let bindir = bindir();
        let user = server_user();
        let dir = std::env::temp_dir().join(format!("bub-pg-{}-{}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("cluster dir");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown the cluster dir");
        }
        let data = dir.join("data");
        let initdb = as_server_user(&mut Command::new(bindir.join("initdb")), user)
            .args(["-D"])
            .arg(&data)
            .args(["-U", "bub", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])
            .current_dir(&dir)
            .output()
            .expect("run initdb");
        assert!(initdb.status.success(), "initdb failed: {}", String::from_utf8_lossy(&initdb.stderr));
        let mut cluster =
            PgCluster { base_url: String::new(), port: 0, dir, bindir, durable, server: Default::default() };
        cluster.run(user);
        cluster.watch();
        cluster
    }

    /// Starts the server on a new free port (or the same one, after [`PgCluster::stop`]).
    fn run(&mut self, user: Option<(u32, u32)>) {
        if self.port == 0 {
            self.port = free_port();
        }
        let log = std::fs::File::create(self.dir.join("server.log")).expect("server log");
        if let Some((uid, gid)) = user {
            let _ = std::os::unix::fs::chown(self.dir.join("server.log"), Some(uid), Some(gid));
        }
        let unsynced: &[&str] = if self.durable { &[] } else { &["-c", "fsync=off", "-c", "full_page_writes=off"] };
        let server = as_server_user(&mut Command::new(self.bindir.join("postgres")), user)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(unsynced)
            .args(["-c", "max_connections=300", "-c", "shared_buffers=32MB"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            // Its own process group: a Ctrl-C of the test run reaches the watcher, which stops it.
            .process_group(0)
            .spawn()
            .expect("start postgres");
        *self.server.lock() = Some(server);
        self.base_url = format!("postgres://bub@127.0.0.1:{}", self.port);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(self.bindir.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "bub", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "PostgreSQL did not start within 60 s:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The postmaster's process id (its backends are its children), while it runs.
    #[allow(dead_code)] // benches/replicas_load.rs's
    pub fn pid(&self) -> Option<u32> {
        self.server.lock().as_ref().map(std::process::Child::id)
    }

    /// Stops the server at once (`SIGQUIT`: connections drop mid-statement).
    pub fn stop(&self) {
        let Some(mut server) = self.server.lock().take() else { return };
        if let Some(pid) = rustix::process::Pid::from_raw(server.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::QUIT);
        }
        let _ = server.wait();
    }

    /// Starts the stopped server again on the same port.
    pub fn restart(&mut self) {
        self.run(server_user());
    }

    /// A watcher that outlives this process: once it is gone, it stops the
    /// server (whatever pid it has then) and removes the directory.
    fn watch(&self) {
        let script = format!(
            "while kill -0 {me} 2>/dev/null; do sleep 0.2; done; \
             pid=$(head -1 '{data}/postmaster.pid' 2>/dev/null); \
             [ -n \"$pid\" ] && kill -QUIT \"$pid\" 2>/dev/null; \
             while [ -n \"$pid\" ] && kill -0 \"$pid\" 2>/dev/null; do sleep 0.1; done; \
             rm -rf '{dir}'",
            me = std::process::id(),
            data = self.dir.join("data").display(),
            dir = self.dir.display(),
        );
        // Started in the background by a shell that exits at once (and is
        // waited for), so the watcher is nobody's zombie.
        let started = Command::new("sh")
            .args(["-c", &format!("( {script} ) >/dev/null 2>&1 &")])
            .stdin(Stdio::null())
            .process_group(0)
            .status()
            .expect("start the cluster's watcher");
        assert!(started.success(), "the cluster's watcher did not start");
    }

    /// A new, empty database on this cluster; its URL.
    pub async fn database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("test_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let admin = format!("{}/postgres", self.base_url);
        let mut conn = <sqlx_postgres::PgConnection as sqlx_core::connection::Connection>::connect(&admin)
            .await
            .unwrap_or_else(|e| panic!("connect to {admin}: {e}"));
        sqlx_core::query::query::<sqlx_postgres::Postgres>(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        format!("{}/{name}", self.base_url)
    }
}

/// The test binary's cluster, started on first use.
pub fn shared() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(PgCluster::start)
}

/// A new database on the shared cluster.
pub async fn fresh_database() -> String {
    let cluster = tokio::task::spawn_blocking(shared).await.expect("start the cluster");
    cluster.database().await
}

/// A TCP relay to the database of `url` for one process: [`DatabaseLink::cut`]
/// drops its connections and refuses new ones until [`DatabaseLink::mend`].
/// Stops with the test's runtime. (Its one user, `gateway_replicas_telegram`,
/// is built with the `telegram` feature.)
#[cfg(feature = "telegram")]
pub struct DatabaseLink {
    /// The database's URL through the relay.
    pub url: String,
    state: std::sync::Arc<parking_lot::Mutex<Relay>>,
}

#[cfg(feature = "telegram")]
#[derive(Default)]
struct Relay {
    cut: bool,
    connections: Vec<tokio::task::JoinHandle<()>>,
}

#[cfg(feature = "telegram")]
impl DatabaseLink {
    /// A relay to the database `url` (`postgres://user@127.0.0.1:<port>/<name>`).
    pub async fn to(url: &str) -> DatabaseLink {
        let (head, rest) = url.rsplit_once('@').expect("a URL with a user");
        let (server, database) = rest.split_once('/').expect("a URL with a database");
        let server: std::net::SocketAddr = server.parse().expect("a loopback address and port");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the relay");
        let relay = listener.local_addr().expect("the relay's address");
        let state = std::sync::Arc::new(parking_lot::Mutex::new(Relay::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut relay = shared.lock();
                if relay.cut {
                    continue;
                }
                relay.connections.push(tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(server).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                }));
            }
        });
        DatabaseLink { url: format!("{head}@{relay}/{database}"), state }
    }

    /// From now on the process behind the relay has no database: its
    /// connections drop and new ones are closed at once.
    pub fn cut(&self) {
        let mut relay = self.state.lock();
        relay.cut = true;
        for connection in relay.connections.drain(..) {
            connection.abort();
        }
    }

    /// The database is reachable again.
    pub fn mend(&self) {
        self.state.lock().cut = false;
    }
}
