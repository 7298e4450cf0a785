//! One way to run a consumer under test: `hotcount::service::run` as a task
//! in this process ([`InProcess`]), or the `hotcount run` binary as a child
//! process ([`Child`]): start, kill (SIGKILL), stop, its log, its exit
//! status, and what it says about itself (CPU, peak RSS, its `/metrics`).
//!
//! Invariant: a child consumer never outlives its handle (`kill_on_drop`);
//! its flags are derived from `RunArgs` itself ([`consumer_flags`], none
//! dropped) or given whole by the caller; its stderr goes to its log file
//! or to ours, its stdout nowhere. Nothing here decides a verdict: a
//! figure that cannot be read is `None` or 0.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Config, Endpoints, RunArgs, StoreLocation};
use hotcount::service::ServiceError;
use hotcount::telemetry::Stats;
use tokio::sync::watch;

use crate::procfs::{self, Proc};
use crate::run_error::RunError;

/// `hotcount::service::run` as a task of this process.
pub struct InProcess {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<Arc<Stats>, ServiceError>>,
    stats: Arc<Stats>,
}

impl InProcess {
    /// Starts the service with `config` against `endpoints`, with fresh
    /// counters.
    pub fn start(endpoints: &Endpoints, config: &Config) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let (endpoints, config) = (endpoints.clone(), config.clone());
        let stats = Arc::new(Stats::default());
        let task = tokio::spawn({
            let stats = stats.clone();
            async move { hotcount::service::run(&endpoints, &config, stop_rx, stats).await }
        });
        Self { stop, task, stats }
    }

    /// The service's own counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Waits (at most `timeout`) until the service is ready (its source
    /// runs, or its push endpoint takes messages); true if it is.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.stats.is_ready() {
            if Instant::now() >= deadline || self.task.is_finished() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Stops the service gracefully: it drains (flushes, commits, acks)
    /// and returns.
    pub async fn stop(self) -> Result<(), RunError> {
        let _ = self.stop.send(true);
        match self.task.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(RunError::Start(format!("consumer: {e}"))),
            Err(e) => Err(RunError::Start(format!("consumer task: {e}"))),
        }
    }
}

/// How to start a `hotcount run` child process.
#[derive(Clone, Debug)]
pub struct ChildSpec {
    /// The binary: `hotcount`, or `hotcount-null-consumer`.
    pub bin: PathBuf,
    /// Its arguments (for `hotcount`: `run` and e.g. [`consumer_flags`]).
    pub args: Vec<String>,
    /// Passed as `PUBSUB_EMULATOR_HOST` and `FIRESTORE_EMULATOR_HOST`.
    pub endpoints: Endpoints,
    /// Its stderr is appended to this file; `None` = this process's stderr.
    pub log: Option<PathBuf>,
    /// Where its `/metrics` listens, when the flags give it one.
    pub metrics: Option<SocketAddr>,
}

/// A running `hotcount run` child process (killed when dropped).
pub struct Child {
    child: tokio::process::Child,
    metrics: Option<SocketAddr>,
}

/// The `--store` flag and its value naming `store` for a child `hotcount`
/// command (`firestore`, or the PostgreSQL URL whole: unlike `Display`,
/// not redacted), so the child counts where the run reads back.
pub fn store_flag(store: &StoreLocation) -> [String; 2] {
    let value = match store {
        StoreLocation::Firestore => "firestore".to_string(),
        StoreLocation::Postgres { url } => url.clone(),
    };
    ["--store".to_string(), value]
}

/// Points a child command at the emulators of `endpoints`
/// (`PUBSUB_EMULATOR_HOST`, `FIRESTORE_EMULATOR_HOST`) and logs it at
/// `RUST_LOG=warn`.
pub fn toward_emulators(cmd: &mut tokio::process::Command, endpoints: &Endpoints) {
    if let Some(h) = &endpoints.pubsub_emulator_host {
        cmd.env("PUBSUB_EMULATOR_HOST", h);
    }
    if let Some(h) = &endpoints.firestore_emulator_host {
        cmd.env("FIRESTORE_EMULATOR_HOST", h);
    }
    cmd.env("RUST_LOG", "warn");
}

impl Child {
    /// Spawns `spec` with `RUST_LOG=warn`, stdin and stdout closed.
    pub fn spawn(spec: &ChildSpec) -> Result<Self, RunError> {
        let mut cmd = tokio::process::Command::new(&spec.bin);
        cmd.args(&spec.args);
        toward_emulators(&mut cmd, &spec.endpoints);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        if let Some(log) = &spec.log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| RunError::Start(format!("consumer log: {e}")))?;
            cmd.stderr(file);
        }
        let child = cmd
            .spawn()
            .map_err(|e| RunError::Start(format!("spawning {}: {e}", spec.bin.display())))?;
        Ok(Self {
            child,
            metrics: spec.metrics,
        })
    }

    /// How it ended, if it has exited (without waiting).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills it with SIGKILL (no drain: what it had not acked is
    /// redelivered) and reaps it.
    pub async fn kill(mut self) -> std::io::Result<()> {
        self.child.kill().await
    }

    /// Stops it with SIGTERM (it drains: commits what it holds, refreshes
    /// its rollups, acks) and reaps it; SIGKILL if it has not exited after
    /// `grace`.
    pub async fn terminate(mut self, grace: Duration) -> std::io::Result<()> {
        if let Some(pid) = self.child.id() {
            let sent = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
            if sent.is_ok_and(|s| s.success())
                && tokio::time::timeout(grace, self.child.wait()).await.is_ok()
            {
                return Ok(());
            }
        }
        self.child.kill().await
    }

    /// Its CPU time (user + system) so far.
    pub fn cpu_time(&self) -> Option<Duration> {
        self.child
            .id()
            .and_then(|pid| procfs::cpu_time(Proc::Pid(pid)))
    }

    /// Its peak resident set so far, in bytes (0 when unknown).
    pub fn peak_rss_bytes(&self) -> u64 {
        self.child
            .id()
            .map_or(0, |pid| procfs::peak_rss_bytes(Proc::Pid(pid)))
    }
}

/// The consumer under test of a measured run: in this process, or a child.
pub enum Consumer {
    /// `hotcount::service::run` in this process.
    InProcess(InProcess),
    /// `hotcount run` as a child process.
    Child(Child),
    /// `hotcount-null-consumer` as a child process: the delivery floor
    /// (receive and ack on the same stream settings, nothing else); with
    /// the address its push endpoint listens on, when it is the push floor.
    Null(Child, Option<SocketAddr>),
}

impl Consumer {
    /// Starts the consumer of `run_args` (validated as `config`): as the
    /// binary `bin` in a child process with its `/metrics` on a free
    /// loopback port and its stderr appended to `log` (ours when `None`),
    /// or in-process when `bin` is `None` (it logs where this process does).
    pub fn start(
        bin: Option<&Path>,
        endpoints: &Endpoints,
        (run_args, config): (&RunArgs, &Config),
        log: Option<&Path>,
    ) -> Result<Self, RunError> {
        let Some(bin) = bin else {
            return Ok(Consumer::InProcess(InProcess::start(endpoints, config)));
        };
        // Read at the end of the measured window.
        let metrics = free_loopback_port("the consumer's metrics")?;
        let flags = known_flags(bin, consumer_flags(run_args, &metrics.to_string()));
        let spec = ChildSpec {
            bin: bin.to_path_buf(),
            args: std::iter::once("run".to_string()).chain(flags).collect(),
            endpoints: endpoints.clone(),
            log: log.map(Path::to_path_buf),
            metrics: Some(metrics),
        };
        Ok(Consumer::Child(Child::spawn(&spec)?))
    }

    /// Starts `hotcount-null-consumer` (the binary `bin`) on the stream
    /// settings of `run_args` as `mode` says (receiving and acking, the
    /// write floor on the Firestore emulator of `endpoints`, or the push
    /// floor serving `POST /pubsub/push`), its stderr appended to `log`
    /// (ours when `None`).
    pub fn start_null(
        bin: &Path,
        endpoints: &Endpoints,
        run_args: &RunArgs,
        (mode, log): (NullMode, Option<&Path>),
    ) -> Result<Self, RunError> {
        let mut args = null_consumer_flags(run_args);
        let push_addr = match mode {
            NullMode::Pull => None,
            NullMode::WriteFloor => {
                args.push("--commit-writes".into());
                None
            }
            NullMode::ExactFloor => {
                args.extend(["--commit-writes", "--preconditions", "--rollups"].map(String::from));
                None
            }
            NullMode::Push(addr) | NullMode::ExactPush(addr) => {
                if matches!(mode, NullMode::ExactPush(_)) {
                    args.extend(
                        ["--commit-writes", "--preconditions", "--rollups"].map(String::from),
                    );
                }
                args.extend(["--delivery".into(), "push".into()]);
                args.extend(["--push-addr".into(), addr.to_string()]);
                Some(addr)
            }
        };
        let spec = ChildSpec {
            bin: bin.to_path_buf(),
            args,
            endpoints: endpoints.clone(),
            log: log.map(Path::to_path_buf),
            metrics: None,
        };
        Ok(Consumer::Null(Child::spawn(&spec)?, push_addr))
    }

    /// Peak RSS so far, and whether it is the consumer's alone (in-process
    /// it is this whole process's).
    pub fn peak_rss_bytes(&self) -> (u64, bool) {
        match self {
            Consumer::InProcess(_) => (procfs::peak_rss_bytes(Proc::This), false),
            Consumer::Child(child) | Consumer::Null(child, _) => (child.peak_rss_bytes(), true),
        }
    }

    /// CPU time of the consumer process so far (`None` in-process).
    pub fn cpu_time(&self) -> Option<Duration> {
        match self {
            Consumer::InProcess(_) => None,
            Consumer::Child(child) | Consumer::Null(child, _) => child.cpu_time(),
        }
    }

    /// Waits (at most `timeout`) until the consumer says it is ready (its
    /// stats in-process, `/readyz` of a child); true if it did. The null
    /// consumer has no such signal: true at once when it pulls, once its
    /// push endpoint takes connections when it is the push floor.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let client = hotcount_scrape::Client::new(Duration::from_millis(500)).ok();
        loop {
            let ready = match self {
                Consumer::InProcess(consumer) => return consumer.wait_ready(timeout).await,
                Consumer::Child(child) => match (child.metrics, &client) {
                    (Some(addr), Some(client)) => {
                        matches!(client.get(addr, "/readyz").await, Ok((200, _)))
                    }
                    _ => true,
                },
                Consumer::Null(_, None) => true,
                Consumer::Null(_, Some(addr)) => tokio::net::TcpStream::connect(addr).await.is_ok(),
            };
            if ready {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (at most `timeout`) until no post this consumer changed waits
    /// for its rollup's refresh (its pending-posts gauge reads 0); returns
    /// how many still wait, `None` when none does or it cannot say (the
    /// null consumer, rollups off, metrics unreadable). So a run's rollups
    /// are checked after the refresher caught up, not cut short by the
    /// drain's deadline at stop (whose leftovers another replica takes
    /// over, and a lone consumer in a bench has none).
    pub async fn wait_rollups_refreshed(&self, timeout: Duration) -> Option<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = rollups_pending(&self.own_metrics().await?)?;
            if left == 0 {
                return None;
            }
            if Instant::now() >= deadline {
                return Some(left);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The consumer's own metrics text (its `Stats` in-process, its
    /// `/metrics` as a child); `None` for the null consumer or when it
    /// cannot be read.
    async fn own_metrics(&self) -> Option<String> {
        match self {
            Consumer::InProcess(consumer) => Some(consumer.stats().render_prometheus()),
            Consumer::Child(child) => metrics_text(child.metrics?).await,
            Consumer::Null(..) => None,
        }
    }

    /// What the consumer measures of its own timing so far, from one read
    /// of its metrics (one scrape of a child, at one moment).
    pub async fn own_timings(&self) -> OwnTimings {
        let Some(text) = self.own_metrics().await else {
            return OwnTimings::default();
        };
        let exposition = hotcount_scrape::Exposition::parse(&text);
        let commit = hotcount::telemetry::names::COMMIT_DURATION.name;
        OwnTimings {
            commit_duration: p50_and_p99(&exposition, commit),
            push_hold: mean_and_p99(&exposition, hotcount::telemetry::names::PUSH_HOLD.name),
            rollup_lag: p50_and_p99(&exposition, hotcount::telemetry::names::ROLLUP_LAG.name),
        }
    }

    /// Stops the consumer once the window is over: in-process it drains; a
    /// `hotcount` child gets SIGTERM and drains too (so its rollups are
    /// exact at rest), SIGKILL after 15 s; the null consumer is killed. A
    /// child that already exited is an error.
    pub async fn stop(self) -> Result<(), RunError> {
        match self {
            Consumer::InProcess(consumer) => consumer.stop().await,
            Consumer::Child(mut child) => {
                if let Some(status) = child.exit_status() {
                    return Err(RunError::Start(format!("consumer exited early: {status}")));
                }
                // Drained, so its rollups are exact at rest (the window is
                // measured already).
                let _ = child.terminate(Duration::from_secs(15)).await;
                Ok(())
            }
            Consumer::Null(mut child, _) => {
                if let Some(status) = child.exit_status() {
                    return Err(RunError::Start(format!("consumer exited early: {status}")));
                }
                let _ = child.kill().await;
                Ok(())
            }
        }
    }
}

/// The `hotcount run` flags that reproduce `args` (every flag: derived
/// from `RunArgs` itself, so none is dropped), with its metrics endpoint on
/// `metrics_addr` (`off` for none).
pub fn consumer_flags(args: &RunArgs, metrics_addr: &str) -> Vec<String> {
    let mut args = args.clone();
    args.observability.metrics_addr = metrics_addr.to_string();
    args.to_flags()
}

/// Of `flags` (`--name=value` or `--name`), those `bin run --help` lists:
/// an older build (`bench --compare-bin`) runs without the flags added
/// after it, each dropped one named in a WARN line. All of them when the
/// help cannot be read.
fn known_flags(bin: &Path, flags: Vec<String>) -> Vec<String> {
    let help = match std::process::Command::new(bin)
        .args(["run", "--help"])
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => return flags,
    };
    let listed: std::collections::HashSet<&str> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']')
        .filter(|word| word.starts_with("--"))
        .map(|word| word.split(['=', '<']).next().unwrap_or(word))
        .collect();
    let (known, dropped): (Vec<String>, Vec<String>) = flags.into_iter().partition(|flag| {
        let name = flag.split('=').next().unwrap_or(flag);
        listed.contains(name)
    });
    if !dropped.is_empty() {
        tracing::warn!(bin = %bin.display(), ?dropped, "this build does not know these run flags; it runs without them");
    }
    known
}

/// What `hotcount-null-consumer` runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NullMode {
    /// Receive and ack, nothing else (the null consumer).
    Pull,
    /// The write floor (`--commit-writes`).
    WriteFloor,
    /// The exact floor (`--commit-writes --preconditions --rollups`).
    ExactFloor,
    /// The push floor, serving `POST /pubsub/push` at this address.
    Push(SocketAddr),
    /// The exact push floor (`--delivery push --commit-writes
    /// --preconditions --rollups`), serving at this address.
    ExactPush(SocketAddr),
}

/// The `hotcount-null-consumer` flags with the subscription and stream
/// settings of `args` (the ones that shape what receiving costs).
pub fn null_consumer_flags(args: &RunArgs) -> Vec<String> {
    [
        ("--project", args.target.project.clone()),
        ("--subscription", args.identity.subscription.clone()),
        ("--streams", args.source.streams.to_string()),
        (
            "--max-outstanding-messages",
            args.source.max_outstanding_messages.to_string(),
        ),
        (
            "--max-outstanding-bytes",
            args.source.max_outstanding_bytes.to_string(),
        ),
        (
            "--lease-extension-secs",
            args.source.lease_extension_secs.to_string(),
        ),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect()
}

/// The `hotcount` binary next to the running executable (or its parent
/// directory, for test executables under `deps/`).
pub fn default_hotcount_bin() -> PathBuf {
    sibling_bin("hotcount")
}

/// The `hotcount-null-consumer` binary next to the running executable.
pub fn default_null_consumer_bin() -> PathBuf {
    sibling_bin("hotcount-null-consumer")
}

fn sibling_bin(stem: &str) -> PathBuf {
    let name = format!("{stem}{}", std::env::consts::EXE_SUFFIX);
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join(&name), dir.join("..").join(&name)] {
        if candidate.is_file() {
            return candidate;
        }
    }
    dir.join(name)
}

/// A loopback address with a port free right now, for a child's
/// `/metrics` (`what` names it in the error); nothing else binds ports in
/// this process meanwhile.
pub fn free_loopback_port(what: &str) -> Result<SocketAddr, RunError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| RunError::Start(format!("a port for {what}: {e}")))
}

/// The last `lines` lines of the log file `path` (empty when unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// What a consumer's `/metrics` says: the only reads of it.

/// A child's `/metrics` text (`None` when it does not answer 200 within 1 s).
async fn metrics_text(metrics: SocketAddr) -> Option<String> {
    // Read at the end of the window: a slow answer is a missing
    // figure, not a failed run.
    let client = hotcount_scrape::Client::new(Duration::from_secs(1)).ok()?;
    let (status, text) = client.get(metrics, "/metrics").await.ok()?;
    if status != 200 {
        return None;
    }
    Some(text)
}

/// Waits (at most `give_up`) until the victim's
/// `hotcount_batches_committed_total` moves; true if it did.
pub async fn victim_committed(metrics: std::net::SocketAddr, give_up: Duration) -> bool {
    let Ok(client) = hotcount_scrape::Client::new(Duration::from_millis(500)) else {
        return false;
    };
    let read = || async {
        let exposition = client.metrics(metrics).await.ok()?;
        exposition.value(hotcount::telemetry::names::BATCHES_COMMITTED.name)
    };
    let Some(before) = read().await else {
        return false;
    };
    let deadline = Instant::now() + give_up;
    while Instant::now() < deadline {
        if read().await.is_some_and(|now| now > before) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// What a consumer measures of its own timing ([`Consumer::own_timings`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OwnTimings {
    /// Its commit duration p50 and p99; `None` when it could not be read.
    pub commit_duration: Option<(Duration, Duration)>,
    /// Its push hold (a pushed request's arrival to its answer) mean and
    /// p99; `None` when it answered no push request (a pull consumer) or
    /// could not be read.
    pub push_hold: Option<(Duration, Duration)>,
    /// Its rollup lag (a post's first change not in its rollup to the
    /// rollup showing it) p50 and p99; `None` when no rollup was written
    /// (rollups off) or it could not be read.
    pub rollup_lag: Option<(Duration, Duration)>,
}

/// How many posts wait for their rollup's refresh, by a consumer's metrics
/// text; `None` when it has no such gauge.
fn rollups_pending(metrics_text: &str) -> Option<u64> {
    let name = hotcount::telemetry::names::ROLLUP_PENDING.name;
    let left = hotcount_scrape::Exposition::parse(metrics_text).value(name)?;
    // A gauge of posts: a whole number far below 2^53.
    Some(left.max(0.0) as u64)
}

/// The p50 and p99 of histogram `name` (in seconds); `None` when it has
/// no observation or is absent.
fn p50_and_p99(
    exposition: &hotcount_scrape::Exposition,
    name: &str,
) -> Option<(Duration, Duration)> {
    quantile(exposition, name, 0.5).zip(quantile(exposition, name, 0.99))
}

/// The `q` quantile of histogram `name` (in seconds) in a Prometheus text
/// exposition, estimated from its buckets, as a duration.
fn quantile(exposition: &hotcount_scrape::Exposition, name: &str, q: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(exposition.histogram_quantile(name, q)?).ok()
}

/// The mean (its `_sum` over its `_count`: exact, where the buckets are
/// coarse) and the estimated p99 of histogram `name`; `None` when it
/// observed nothing.
fn mean_and_p99(
    exposition: &hotcount_scrape::Exposition,
    name: &str,
) -> Option<(Duration, Duration)> {
    let count = exposition.value(&format!("{name}_count"))?;
    if count < 1.0 {
        return None;
    }
    let sum = exposition.value(&format!("{name}_sum"))?;
    Some((
        Duration::try_from_secs_f64(sum / count).ok()?,
        quantile(exposition, name, 0.99)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_flag_names_firestore_or_the_whole_postgres_url() {
        assert_eq!(
            store_flag(&StoreLocation::Firestore),
            ["--store", "firestore"]
        );
        let url = "postgres://me:secret@db:5432/hc".to_string();
        assert_eq!(
            store_flag(&StoreLocation::Postgres { url: url.clone() }),
            ["--store".to_string(), url]
        );
    }

    #[test]
    fn an_older_build_gets_only_the_run_flags_its_help_lists() {
        use std::os::unix::fs::PermissionsExt as _;
        let bin = std::env::temp_dir().join(format!("old-hotcount-{}", std::process::id()));
        std::fs::write(
            &bin,
            "#!/bin/sh\necho '      --store <STORE>'\necho '      --shards <SHARDS>  [env: X=]'\necho '      --log-json'\n",
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let flags = [
            "--store=firestore",
            "--shards=4",
            "--tombstone-refresh-ms=5000",
            "--log-json",
        ]
        .map(String::from)
        .to_vec();
        let known = known_flags(&bin, flags);
        std::fs::remove_file(&bin).unwrap();
        assert_eq!(known, ["--store=firestore", "--shards=4", "--log-json"]);
    }

    #[test]
    fn the_push_holds_mean_and_p99_are_read_from_the_metrics_text() {
        let stats = Stats::default();
        let name = hotcount::telemetry::names::PUSH_HOLD.name;
        let parse = |text: String| hotcount_scrape::Exposition::parse(&text);
        assert_eq!(
            mean_and_p99(&parse(stats.render_prometheus()), name),
            None,
            "no push request answered: no figure"
        );
        for ms in [10, 20, 30, 940] {
            stats.push_hold.record(Duration::from_millis(ms));
        }
        let (mean, p99) = mean_and_p99(&parse(stats.render_prometheus()), name).expect("exported");
        assert!(
            mean >= Duration::from_millis(249) && mean <= Duration::from_millis(251),
            "{mean:?}"
        );
        assert!(p99 >= Duration::from_millis(750), "{p99:?}");
    }

    #[test]
    fn the_rollup_lags_p50_and_p99_are_read_from_the_metrics_text() {
        let stats = Stats::default();
        let name = hotcount::telemetry::names::ROLLUP_LAG.name;
        let parse = |text: String| hotcount_scrape::Exposition::parse(&text);
        assert_eq!(
            p50_and_p99(&parse(stats.render_prometheus()), name),
            None,
            "no rollup written: no figure"
        );
        for ms in [600, 700, 800, 900, 2_200] {
            stats.rollup_lag.record(Duration::from_millis(ms));
        }
        let (p50, p99) = p50_and_p99(&parse(stats.render_prometheus()), name).expect("exported");
        assert!(
            p50 > Duration::from_millis(500) && p50 <= Duration::from_millis(1_000),
            "{p50:?}"
        );
        assert!(p99 > Duration::from_millis(2_000), "{p99:?}");
    }

    #[test]
    fn the_posts_waiting_for_a_rollup_refresh_are_read_from_the_metrics_text() {
        let stats = Stats::default();
        assert_eq!(rollups_pending(&stats.render_prometheus()), Some(0));
        stats.rollup_pending.set(6279);
        assert_eq!(rollups_pending(&stats.render_prometheus()), Some(6279));
        assert_eq!(
            rollups_pending("hotcount_events_total 3\n"),
            None,
            "no gauge"
        );
    }

    #[test]
    fn commit_duration_quantiles_are_read_from_the_metrics_text() {
        let stats = Stats::default();
        for ms in [10, 20, 30, 400] {
            stats.commit_duration.record(Duration::from_millis(ms));
        }
        let exposition = hotcount_scrape::Exposition::parse(&stats.render_prometheus());
        let name = hotcount::telemetry::names::COMMIT_DURATION.name;
        let p50 = quantile(&exposition, name, 0.5).expect("p50 exported");
        let p99 = quantile(&exposition, name, 0.99).expect("p99 exported");
        assert!(
            p50 >= Duration::from_millis(19) && p50 <= Duration::from_millis(21),
            "{p50:?}"
        );
        assert!(p99 >= Duration::from_millis(390), "{p99:?}");
        assert_eq!(quantile(&exposition, "hotcount_absent", 0.5), None);
    }

    #[test]
    fn consumer_flags_reproduce_the_settings_with_the_metrics_address() {
        #[derive(clap::Parser)]
        struct Run {
            #[command(flatten)]
            run: RunArgs,
        }
        let parse = |flags: Vec<String>| {
            <Run as clap::Parser>::parse_from(std::iter::once("run".to_string()).chain(flags)).run
        };
        let mut args = parse(vec!["--shards=3".into(), "--commit-max-attempts=9".into()]);
        args.observability.metrics_addr = "off".into();
        let mut expected = args.clone();
        expected.observability.metrics_addr = "127.0.0.1:9999".into();
        assert_eq!(parse(consumer_flags(&args, "127.0.0.1:9999")), expected);
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let path = std::env::temp_dir().join(format!("hotcount-tail-{}.log", std::process::id()));
        std::fs::write(&path, "a\nb\nc\nd\n").expect("log written");
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert_eq!(log_tail(&path, 10), "a\nb\nc\nd");
        let _ = std::fs::remove_file(&path);
        assert_eq!(log_tail(&path, 2), "");
    }
}
