//! A throwaway PostgreSQL server (for tests, and for the load generator's
//! runs), and a TCP proxy in front of it that counts round trips, can cut
//! a connection at COMMIT, can stop forwarding without closing anything (a
//! black hole: a partition, a server gone without a reset) and resume, and
//! can report another server version to its clients.
//!
//! [`PgCluster::start`] runs `initdb` into a fresh directory under the
//! temp dir and starts `postgres` on a free loopback port with its socket
//! in that directory; dropping the cluster (also while a test panics)
//! stops the server (`pg_ctl stop -m fast`) and removes the directory.
//! Each cluster has its own port and directory, so test binaries and tests
//! running in parallel never share one. The server is started with
//! `--pdeathsig` (setpriv), so a test process killed outright takes its
//! server with it; the next start removes directories left by dead
//! processes. With `HOTCOUNT_PG_KEEP` set, the directory (and the
//! server's `log`) is kept.
//!
//! Binaries: `$HOTCOUNT_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`
//! (Debian's `postgresql` package), else `initdb` on `PATH`. As root,
//! `initdb` and `postgres` refuse to run: they run as `$HOTCOUNT_PG_USER`,
//! else `postgres` (the user Debian's package creates), through `setpriv`.
//!
//! Errors: the `try_` constructors return [`PgTempError`]; the plain ones
//! ([`PgCluster::start`], [`Proxy::start`], [`connect`]) are the test
//! helpers and panic with the error, as a failed test setup should.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Prefix of every cluster directory under the temp dir.
const DIR_PREFIX: &str = "hotcount-pg-";

/// Clusters started by this process (names their directories).
static STARTED: AtomicU32 = AtomicU32::new(0);

/// The throwaway server could not be made or reached.
#[derive(Debug, thiserror::Error)]
pub enum PgTempError {
    /// No PostgreSQL server binaries, or no user to run them as.
    #[error("{0}")]
    Setup(String),
    /// A file, directory or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// `initdb` or the server failed; the message carries its output or log.
    #[error("{0}")]
    Server(String),
    /// A client could not connect or a statement failed.
    #[error("{what}: {source}")]
    Client {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> PgTempError {
    move |source| PgTempError::Io { what, source }
}

/// How the throwaway server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `fsync=off`, `full_page_writes=off`: fast, for tests (a crash of the
    /// machine loses the cluster, which is thrown away anyway).
    Throwaway,
    /// The server's defaults (`fsync`, `synchronous_commit`,
    /// `full_page_writes` on): what a real deployment runs, for
    /// measurements.
    Durable,
}

/// A running throwaway server; stopped and removed on drop.
pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    bin: PathBuf,
    user: Option<(u32, u32)>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl PgCluster {
    /// `initdb` and start a server with the test settings (panics on failure).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`PgCluster::start`] with extra server settings (`-c name=value`).
    pub fn start_with(settings: &[(&str, &str)]) -> Self {
        match Self::try_start(Durability::Throwaway, settings) {
            Ok(cluster) => cluster,
            Err(e) => panic!("the test PostgreSQL server: {e}"),
        }
    }

    /// `initdb` and start a server at `durability`, with extra server
    /// settings (`-c name=value`, given after the defaults: they win).
    pub fn try_start(
        durability: Durability,
        settings: &[(&str, &str)],
    ) -> Result<Self, PgTempError> {
        sweep_dead_clusters();
        let bin = bin_dir()?;
        let user = server_user()?;
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).map_err(io("create the cluster directory"))?;
        let mut cluster = Self {
            dir,
            port: 0,
            bin,
            user,
            server: None,
        };
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&cluster.dir, Some(uid), Some(gid))
                .map_err(io("chown the cluster directory"))?;
        }
        let initdb = cluster
            .command("initdb")
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .args(["--no-instructions", "-D"])
            .arg(cluster.data())
            .output()
            .map_err(io("run initdb"))?;
        if !initdb.status.success() {
            return Err(PgTempError::Server(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&initdb.stderr)
            )));
        }
        for _ in 0..5 {
            cluster.port = free_port()?;
            if cluster.run_server(durability, settings)? {
                return Ok(cluster);
            }
        }
        Err(PgTempError::Server(format!(
            "the server did not start: {}",
            cluster.log()
        )))
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// A connection string for `database` on this server.
    pub fn url(&self, database: &str) -> String {
        url(self.addr(), database)
    }

    /// Creates `database` and returns its connection string (panics on failure).
    pub async fn create_database(&self, database: &str) -> String {
        match self.try_create_database(database).await {
            Ok(url) => url,
            Err(e) => panic!("create the test database: {e}"),
        }
    }

    /// Creates `database` (a plain identifier) and returns its connection string.
    pub async fn try_create_database(&self, database: &str) -> Result<String, PgTempError> {
        let client = try_connect(&self.url("postgres")).await?;
        client
            .batch_execute(&format!("CREATE DATABASE \"{database}\""))
            .await
            .map_err(|source| PgTempError::Client {
                what: "create the database",
                source,
            })?;
        Ok(self.url(database))
    }

    /// The server's version line (`bin/postgres --version`).
    pub fn version(&self) -> String {
        Command::new(self.bin.join("postgres"))
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// The cluster's directory (data directory `data`, socket, `log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// `program` from the server's bin dir, as the server's user.
    fn command(&self, program: &str) -> Command {
        self.command_with(program, false)
    }

    fn command_with(&self, program: &str, die_with_parent: bool) -> Command {
        let program = self.bin.join(program);
        let setpriv = Path::new("/usr/bin/setpriv");
        if self.user.is_none() && !(die_with_parent && setpriv.exists()) {
            return Command::new(program);
        }
        let mut command = Command::new(setpriv);
        if let Some((uid, gid)) = self.user {
            command.args([
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".into(),
            ]);
        }
        if die_with_parent {
            command.arg("--pdeathsig=KILL");
        }
        command.arg("--").arg(program);
        command
    }

    /// Starts the server on `self.port` and waits until it accepts
    /// connections; false if it exited first (the port was taken).
    fn run_server(
        &mut self,
        durability: Durability,
        settings: &[(&str, &str)],
    ) -> Result<bool, PgTempError> {
        let log = std::fs::File::create(self.dir.join("log")).map_err(io("create the log"))?;
        let log_too = log.try_clone().map_err(io("clone the log handle"))?;
        let mut command = self.command_with("postgres", true);
        command
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "max_connections=60"]);
        if durability == Durability::Throwaway {
            command.args(["-c", "fsync=off", "-c", "full_page_writes=off"]);
        }
        for (name, value) in settings {
            command.args(["-c", &format!("{name}={value}")]);
        }
        command.stdin(Stdio::null()).stdout(log_too).stderr(log);
        // The server is the child of a thread that lives as long as it does:
        // `--pdeathsig` fires when its parent thread ends, that is when the
        // server has stopped, or when the whole process dies.
        let (started, spawned) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || match command.spawn() {
            Ok(mut child) => {
                let _ = started.send(true);
                let _ = child.wait();
            }
            Err(_) => {
                let _ = started.send(false);
            }
        });
        if !spawned.recv().unwrap_or(false) {
            let _ = server.join();
            return Ok(false);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if server.is_finished() {
                let _ = server.join();
                return Ok(false);
            }
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-U", "postgres", "-h", "127.0.0.1", "-p"])
                .arg(self.port.to_string())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                self.server = Some(server);
                return Ok(true);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Stopped by the drop of `self` (the directory) and `--pdeathsig`
        // once this thread's handle is gone.
        self.server = Some(server);
        Err(PgTempError::Server(format!(
            "the server did not accept connections in 60 s: {}",
            self.log()
        )))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            let _ = self
                .command("pg_ctl")
                .args(["stop", "-m", "fast", "-w", "-t", "60", "-D"])
                .arg(self.data())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = server.join();
        }
        if std::env::var_os("HOTCOUNT_PG_KEEP").is_some() {
            eprintln!(
                "kept the PostgreSQL cluster's directory {}",
                self.dir.display()
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A connection string for `database` at `addr`.
pub fn url(addr: SocketAddr, database: &str) -> String {
    format!(
        "postgres://postgres@{}:{}/{database}?sslmode=disable",
        addr.ip(),
        addr.port()
    )
}

/// A plain client on `url`, its connection driven by a task (panics on failure).
pub async fn connect(url: &str) -> tokio_postgres::Client {
    match try_connect(url).await {
        Ok(client) => client,
        Err(e) => panic!("connect to the test server: {e}"),
    }
}

/// A plain client on `url`, its connection driven by a task.
pub async fn try_connect(url: &str) -> Result<tokio_postgres::Client, PgTempError> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|source| PgTempError::Client {
            what: "connect",
            source,
        })?;
    tokio::spawn(connection);
    Ok(client)
}

/// The directory of `initdb`, `postgres`, `pg_ctl` and `pg_isready`.
fn bin_dir() -> Result<PathBuf, PgTempError> {
    if let Some(dir) = std::env::var_os("HOTCOUNT_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("initdb"))
            .find(|initdb| initdb.exists())
    });
    if let Some(initdb) = on_path {
        let initdb = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        if let Some(dir) = initdb.parent() {
            return Ok(dir.to_path_buf());
        }
    }
    Err(PgTempError::Setup(
        "no PostgreSQL server binaries (initdb): install them (`apt-get install postgresql`, \
         as .ci/run does) or set HOTCOUNT_PG_BIN"
            .into(),
    ))
}

/// As root, the (uid, gid) the server runs as; `None` otherwise.
fn server_user() -> Result<Option<(u32, u32)>, PgTempError> {
    let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return Ok(None);
    };
    if me != 0 {
        return Ok(None);
    }
    let name = std::env::var("HOTCOUNT_PG_USER").unwrap_or_else(|_| "postgres".into());
    let missing = || {
        PgTempError::Setup(format!(
            "running as root, the PostgreSQL server needs an unprivileged user `{name}` \
             (Debian's postgresql package creates `postgres`; or set HOTCOUNT_PG_USER)"
        ))
    };
    let id = |flag: &str| -> Result<u32, PgTempError> {
        let out = Command::new("id")
            .args([flag, &name])
            .output()
            .map_err(io("run id"))?;
        if !out.status.success() {
            return Err(missing());
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| missing())
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

/// A loopback port nothing listens on right now (the server may still lose
/// it to another process: [`PgCluster::try_start`] retries).
fn free_port() -> Result<u16, PgTempError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(io("find a free loopback port"))
}

/// Removes cluster directories whose process is gone.
fn sweep_dead_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next() else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Where [`Proxy`] cuts the next connection that reaches a COMMIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Before the server sees the COMMIT: it rolls the transaction back.
    BeforeCommit,
    /// After the server committed, before its answer reaches the client:
    /// the client cannot tell whether it committed.
    AfterCommit,
}

struct ProxyShared {
    armed: Mutex<Option<Cut>>,
    cuts: AtomicU64,
    /// Client sends that followed an answer of the server on the same
    /// connection (each connection's first send included).
    round_trips: AtomicU64,
    /// True while nothing is forwarded (a black hole).
    paused: tokio::sync::watch::Sender<bool>,
    /// Turn into a black hole at the next COMMIT ([`Proxy::stall_at_next_commit`]).
    stall_armed: AtomicBool,
    /// The `server_version` clients are told instead of the server's.
    server_version: Mutex<Option<String>>,
}

impl Default for ProxyShared {
    fn default() -> Self {
        Self {
            armed: Mutex::new(None),
            cuts: AtomicU64::new(0),
            round_trips: AtomicU64::new(0),
            paused: tokio::sync::watch::Sender::new(false),
            stall_armed: AtomicBool::new(false),
            server_version: Mutex::new(None),
        }
    }
}

impl ProxyShared {
    /// Returns once forwarding is not paused.
    async fn forwarding(&self) {
        let mut paused = self.paused.subscribe();
        // The sender lives as long as `self`: the wait ends only by a resume.
        let _ = paused.wait_for(|p| !*p).await;
    }
}

/// A loopback TCP proxy to a PostgreSQL server that parses the protocol's
/// message framing, to cut a connection at a COMMIT ([`Cut`]) and to count
/// round trips: client sends that follow an answer of the server on the
/// same connection, summed over all connections (requests pipelined
/// before an answer count once).
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<ProxyShared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `upstream` on a free loopback port (panics on failure).
    pub async fn start(upstream: SocketAddr) -> Self {
        match Self::try_start(upstream).await {
            Ok(proxy) => proxy,
            Err(e) => panic!("start the proxy: {e}"),
        }
    }

    /// A proxy to `upstream` on a free loopback port.
    pub async fn try_start(upstream: SocketAddr) -> Result<Self, PgTempError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io("bind the proxy"))?;
        let addr = listener.local_addr().map_err(io("the proxy's address"))?;
        let shared = Arc::new(ProxyShared::default());
        let accept = tokio::spawn(accept(listener, upstream, shared.clone()));
        Ok(Self {
            addr,
            shared,
            accept,
        })
    }

    /// The proxy's loopback address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A connection string for `database` through the proxy.
    pub fn url(&self, database: &str) -> String {
        url(self.addr, database)
    }

    /// Cuts the next connection that reaches a COMMIT, at `cut`.
    pub fn arm(&self, cut: Cut) {
        *self.shared.armed.lock() = Some(cut);
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Disarms the armed cut, if any.
    pub fn disarm(&self) {
        *self.shared.armed.lock() = None;
    }

    /// The cut armed and not yet made, if any.
    pub fn armed(&self) -> Option<Cut> {
        *self.shared.armed.lock()
    }

    /// Round trips since the last reset (over all connections).
    pub fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::SeqCst)
    }

    /// Restarts the round-trip count.
    pub fn reset_round_trips(&self) {
        self.shared.round_trips.store(0, Ordering::SeqCst);
    }

    /// Stops forwarding, both ways, on every connection and on the ones
    /// accepted from now on, without closing anything: data the peers send
    /// waits (in the proxy and the sockets' buffers), as over a partitioned
    /// network, until [`Proxy::resume`].
    pub fn black_hole(&self) {
        self.shared.paused.send_replace(true);
    }

    /// Forwards again whatever waited, and what follows.
    pub fn resume(&self) {
        self.shared.paused.send_replace(false);
    }

    /// Turns the proxy into a black hole ([`Proxy::black_hole`]) as the
    /// next COMMIT from a client reaches it, holding that COMMIT: nothing
    /// is closed, nothing answered. After [`Proxy::resume`] the server gets
    /// the COMMIT (and then, if the client gave up, its close): the client
    /// cannot tell whether it committed.
    pub fn stall_at_next_commit(&self) {
        self.shared.stall_armed.store(true, Ordering::SeqCst);
    }

    /// Whether the proxy is a black hole now.
    pub fn is_black_hole(&self) -> bool {
        *self.shared.paused.borrow()
    }

    /// Tells clients that connect from now on that the server is version
    /// `version` (its `server_version` start-up report rewritten), as an
    /// older or newer server would say; `None` tells the truth again.
    pub fn report_server_version(&self, version: Option<&str>) {
        *self.shared.server_version.lock() = version.map(str::to_string);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, shared: Arc<ProxyShared>) {
    // Dropped with the accept task: aborts every connection's relay.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue;
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            // Whether the server answered since the client's last send, on
            // this connection; the client's first send is a round trip.
            let answered = AtomicBool::new(true);
            let (to_server, to_client) = (
                Direction::ToServer(&answered),
                Direction::ToClient(&answered),
            );
            // Whichever direction ends (EOF or a cut) ends both.
            tokio::select! {
                _ = relay(client_read, server_write, to_server, &shared) => {}
                _ = relay(server_read, client_write, to_client, &shared) => {}
            }
        });
    }
}

/// Which way a relay forwards, with its connection's "server answered" flag.
#[derive(Clone, Copy)]
enum Direction<'a> {
    ToServer(&'a AtomicBool),
    ToClient(&'a AtomicBool),
}

/// Forwards whole protocol messages from `from` to `to` until EOF or a cut.
async fn relay(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    direction: Direction<'_>,
    shared: &ProxyShared,
) -> std::io::Result<()> {
    let from_client = matches!(direction, Direction::ToServer(_));
    // The client's first message (startup) has no type byte.
    let mut untyped = from_client;
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        shared.forwarding().await;
        let n = from.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        match direction {
            Direction::ToServer(answered) => {
                if answered.swap(false, Ordering::SeqCst) {
                    shared.round_trips.fetch_add(1, Ordering::SeqCst);
                }
            }
            Direction::ToClient(answered) => answered.store(true, Ordering::SeqCst),
        }
        pending.extend_from_slice(&chunk[..n]);
        loop {
            let header = if untyped { 4 } else { 5 };
            if pending.len() < header {
                break;
            }
            let at = header - 4;
            let length = u32::from_be_bytes([
                pending[at],
                pending[at + 1],
                pending[at + 2],
                pending[at + 3],
            ]) as usize;
            let total = at + length;
            if pending.len() < total {
                break;
            }
            let mut message: Vec<u8> = pending.drain(..total).collect();
            if !untyped && cuts_here(shared, from_client, &message) {
                return Ok(());
            }
            if !from_client {
                rewrite_server_version(shared, &mut message);
            }
            untyped = false;
            shared.forwarding().await;
            to.write_all(&message).await?;
        }
    }
}

/// Whether `message` is where the armed cut closes the connection
/// (disarms it if so); an armed stall at a COMMIT pauses forwarding
/// instead (and the message waits for the resume).
fn cuts_here(shared: &ProxyShared, from_client: bool, message: &[u8]) -> bool {
    let body = &message[5..];
    let at = match (message[0], from_client) {
        (b'Q', true) if body.starts_with(b"COMMIT") => {
            if shared.stall_armed.swap(false, Ordering::SeqCst) {
                shared.paused.send_replace(true);
                return false;
            }
            Cut::BeforeCommit
        }
        (b'C', false) if body == b"COMMIT\0" => Cut::AfterCommit,
        _ => return false,
    };
    let mut armed = shared.armed.lock();
    if *armed != Some(at) {
        return false;
    }
    *armed = None;
    shared.cuts.fetch_add(1, Ordering::SeqCst);
    true
}

/// A `server_version` start-up report (ParameterStatus) rewritten to the
/// version the proxy was told to report, if any.
fn rewrite_server_version(shared: &ProxyShared, message: &mut Vec<u8>) {
    let name = b"server_version\0";
    if message[0] != b'S' || !message[5..].starts_with(name) {
        return;
    }
    let Some(version) = shared.server_version.lock().clone() else {
        return;
    };
    let mut body = name.to_vec();
    body.extend_from_slice(version.as_bytes());
    body.push(0);
    let mut rewritten = vec![b'S'];
    rewritten.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    rewritten.extend_from_slice(&body);
    *message = rewritten;
}
