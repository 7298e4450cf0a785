//! Typed, validated settings of `hotcount run`, and where the services are.
//!
//! Invariant: a [`Config`] only exists validated ([`RunArgs::validate`]);
//! every duration and size carries its unit in its name. Each stage takes
//! its own settings from it ([`Config::source`], [`Config::flush`],
//! [`Config::store`]); the flags' defaults live here.

use std::time::Duration;

use crate::event::{check_id, MAX_EVENT_ID_BYTES};
use crate::pipeline::flusher::FlushConfig;
use crate::pipeline::milestones::DispatchConfig;
use crate::pipeline::push::{AuthConfig, GoogleAuth, PushConfig};
use crate::pipeline::rollup::RollupConfig;
use crate::pipeline::source::SourceConfig;
use crate::store::selected::StoreSettings;

/// Increments per second a counter shard document should take, by default
/// (Firestore's guidance for one document is about one sustained write per
/// second); `--counter-shard-target-writes-per-sec`.
pub const DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC: u32 = 1;

/// Counter shard documents per post at most, by default (`--counter-shards`
/// of `run`, and of `replay`, which must spread increments the same way).
pub const DEFAULT_COUNTER_SHARDS: u32 = 16;

/// Where Google publishes the keys it signs OIDC ID tokens with (a JWKS);
/// `--push-jwks-url`'s default.
pub const DEFAULT_PUSH_JWKS_URL: &str = "https://www.googleapis.com/oauth2/v3/certs";

/// The environment variable Cloud Run sets in every container of a
/// service (to the service's name): `--push-auth cloud-run` is accepted on
/// a non-loopback address only where it is set.
pub const CLOUD_RUN_SERVICE_ENV: &str = "K_SERVICE";

/// Where Pub/Sub and Firestore are: Google's endpoints with Application
/// Default Credentials, or emulators (anonymous) when an address is given.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Endpoints {
    /// Pub/Sub emulator address (`host:port`); unset = Google's endpoint with ADC.
    #[arg(long, env = "PUBSUB_EMULATOR_HOST", global = true)]
    pub pubsub_emulator_host: Option<String>,
    /// Firestore emulator address (`host:port`); unset = Google's endpoint with ADC.
    #[arg(long, env = "FIRESTORE_EMULATOR_HOST", global = true)]
    pub firestore_emulator_host: Option<String>,
}

/// Where the counts live: the store (Firestore unless `--store` names a
/// PostgreSQL database) and, for Firestore, which Google Cloud project,
/// database and collections.
///
/// Its flags are [`TargetFlags`]'s: `store` is what `--store-file` holds
/// when that is given, else `--store`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    /// The store.
    pub store: StoreLocation,
    /// Google Cloud project id.
    pub project: String,
    /// Firestore database id.
    pub database: String,
    /// Prefix of every Firestore collection hotcount writes.
    pub collection_prefix: String,
}

/// The flags of a [`Target`], as given: `--store` or `--store-file`
/// (never both), project, database and collection prefix.
#[derive(clap::Args, Clone, Debug)]
pub struct TargetFlags {
    /// The store: `firestore` (the default) or a PostgreSQL connection URL
    /// (`postgres://user:password@host:port/database`).
    #[arg(
        long = "store",
        env = "HOTCOUNT_STORE",
        default_value = "firestore",
        value_parser = StoreLocationParser,
        hide_env_values = true
    )]
    pub store: StoreLocation,
    /// A file holding the store as `--store` takes it (a PostgreSQL URL
    /// with its password: a mounted secret); trailing line breaks are
    /// ignored. Not with `--store`.
    #[arg(
        long = "store-file",
        env = "HOTCOUNT_STORE_FILE",
        value_name = "PATH",
        value_parser = FileParser::<StoreLocation>::new(),
        conflicts_with = "store"
    )]
    pub store_file: Option<FromFile<StoreLocation>>,
    /// Google Cloud project id.
    #[arg(long, env = "HOTCOUNT_PROJECT", default_value = "hotcount-local")]
    pub project: String,
    /// Firestore database id.
    #[arg(long, env = "HOTCOUNT_DATABASE", default_value = "(default)")]
    pub database: String,
    /// Prefix of every Firestore collection hotcount writes (e.g. `hc_`).
    #[arg(long, env = "HOTCOUNT_COLLECTION_PREFIX", default_value = "")]
    pub collection_prefix: String,
}

impl From<TargetFlags> for Target {
    fn from(flags: TargetFlags) -> Self {
        Target {
            store: flags.store_file.map_or(flags.store, |file| file.value),
            project: flags.project,
            database: flags.database,
            collection_prefix: flags.collection_prefix,
        }
    }
}

impl clap::FromArgMatches for Target {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        TargetFlags::from_arg_matches(matches).map(Target::from)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Target {
    fn group_id() -> Option<clap::Id> {
        TargetFlags::group_id()
    }

    fn augment_args(cmd: clap::Command) -> clap::Command {
        TargetFlags::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        TargetFlags::augment_args_for_update(cmd)
    }
}

/// Which database holds the counts. Its `Debug` and `Display` hide a
/// PostgreSQL URL's password (they end up in logs); `Serialize` keeps the
/// URL whole, as [`RunArgs::to_flags`] must reproduce it.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreLocation {
    /// Firestore, at the endpoints and [`Target`] given.
    #[default]
    Firestore,
    /// PostgreSQL, by libpq connection URL.
    Postgres {
        /// `postgres://` or `postgresql://` URL.
        url: String,
    },
}

impl std::str::FromStr for StoreLocation {
    type Err = String;

    /// The error never quotes the string: it may hold a password.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("firestore") {
            return Ok(Self::Firestore);
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            crate::store::postgres::conninfo::check_url(s)
                .map_err(|why| format!("not a PostgreSQL connection URL: {why}"))?;
            let (driver, _) = crate::store::postgres::tls::split(s).map_err(|e| e.to_string())?;
            return match driver.parse::<tokio_postgres::Config>() {
                Ok(_) => Ok(Self::Postgres { url: s.to_string() }),
                Err(e) => Err(url_error(s, &e)),
            };
        }
        Err("expected `firestore` or a `postgres://` URL".into())
    }
}

/// Why the driver refused `url`, without quoting it: its message names an
/// option at most, and not even that when a `password` parameter could
/// have run into it (an unencoded `&` in a password makes its tail look
/// like an option).
fn url_error(url: &str, error: &tokio_postgres::Error) -> String {
    let message = match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    };
    let secret_tail = url
        .split_once('?')
        .is_some_and(|(_, query)| query.contains("password"));
    let names_a_secret = message.contains('`') && secret_tail;
    let problem = if names_a_secret {
        "an option is not known or its value is not valid"
    } else {
        message.as_str()
    };
    format!(
        "not a PostgreSQL connection URL: {problem} (percent-encode `@`, `/`, `?`, `&`, `#` and `%` in a password)"
    )
}

/// Parses `--store` for clap without quoting the value in its error (clap
/// would print `invalid value '<the URL>'`, password and all).
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreLocationParser;

impl clap::builder::TypedValueParser for StoreLocationParser {
    type Value = StoreLocation;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<StoreLocation, clap::Error> {
        let flag = arg.map_or_else(|| "--store".to_string(), |a| format!("--{}", a.get_id()));
        let refuse = |reason: &str| {
            let message = format!(
                "invalid value for '{flag}' (not shown: it may hold a password): {reason}\n"
            );
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| refuse("not UTF-8"))?;
        text.parse().map_err(|reason: String| refuse(&reason))
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Firestore => f.write_str("firestore"),
            Self::Postgres { url } => f.write_str(&crate::store::postgres::conninfo::redact(url)),
        }
    }
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for StoreLocation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Firestore => serializer.serialize_str("firestore"),
            Self::Postgres { url } => serializer.serialize_str(url),
        }
    }
}

/// How events become transactions.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Buffer per post, one transaction per batch (the design).
    Batched,
    /// The naive baseline: one transaction per event, several in flight,
    /// same parsing and membership semantics, ack after commit. Exists only
    /// to be measured against (docs/BENCHMARKS.md).
    PerEvent,
}

/// How messages reach the service.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// StreamingPull: hotcount pulls, with flow control and lease extension.
    Pull,
    /// Push: Pub/Sub POSTs each message to `POST /pubsub/push` on
    /// `--push-addr`; the answer (after the message's batch committed) is
    /// the ack.
    Push,
}

/// How push requests are authenticated (`--push-auth`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PushAuthMode {
    /// Verify the Google-signed OIDC token Pub/Sub sends with each request:
    /// signature, issuer, audience, service account.
    Google,
    /// Trust Cloud Run's IAM front end, which checked the token before the
    /// request reached the container (deploy with
    /// `--no-allow-unauthenticated` and grant the push service account the
    /// invoker role). Every request is trusted, so it is allowed only on
    /// Cloud Run (`K_SERVICE` set) or on a loopback `--push-addr`.
    CloudRun,
    /// No authentication: allowed only on a loopback `--push-addr`.
    None,
}

/// A secret setting: its `Debug` never shows it (settings are logged);
/// [`Secret::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_string()))
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl Secret {
    /// The secret a pair of flags gives: the `--…-file` form's content, or
    /// the value (clap refuses both at once); `None` when neither is given
    /// or the value is empty.
    pub fn given(value: Option<&Secret>, file: Option<&FromFile<Secret>>) -> Option<Secret> {
        file.map(FromFile::value)
            .or(value)
            .filter(|s| !s.expose().is_empty())
            .cloned()
    }
}

/// A setting read from a file (`--store-file`, `--…-secret-file`,
/// `--user-hash-key-file`): where a secret is mounted (a Kubernetes or
/// Cloud Run secret volume, the Secret Manager CSI driver), so it is never
/// on a command line or in a manifest.
///
/// Invariant: `value` is what the file held when the flags were parsed,
/// trailing line breaks removed, never empty; `Debug` and `Serialize` show
/// the path only (so [`RunArgs::to_flags`] hands a child the path of a
/// webhook secret or hash key, not the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct FromFile<T> {
    path: std::path::PathBuf,
    value: T,
}

impl<T> FromFile<T> {
    /// The file it was read from.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// What the file held.
    pub fn value(&self) -> &T {
        &self.value
    }
}

impl<T> std::fmt::Debug for FromFile<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FromFile({:?})", self.path)
    }
}

impl<T> serde::Serialize for FromFile<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.path.to_string_lossy())
    }
}

/// Reads a secret's file: its text without trailing line breaks (`echo`
/// and most editors add one). A file that is missing, unreadable, not
/// UTF-8 or empty is an error naming the path, never quoting the content.
pub fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    let shown = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    let text = text.trim_end_matches(['\n', '\r']);
    if text.is_empty() {
        return Err(format!("{shown} is empty"));
    }
    Ok(text.to_string())
}

/// Parses a `--…-file` flag for clap: reads the file the value names and
/// parses its content as `T`. Errors name the flag and the path; neither
/// they nor `T`'s own errors quote the content (`T`'s `FromStr` must not
/// quote its input: [`StoreLocation`]'s does not, [`Secret`]'s cannot fail).
pub struct FileParser<T>(std::marker::PhantomData<fn() -> T>);

impl<T> FileParser<T> {
    /// A parser of files holding a `T`.
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> Default for FileParser<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for FileParser<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> clap::builder::TypedValueParser for FileParser<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    type Value = FromFile<T>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<FromFile<T>, clap::Error> {
        let flag = arg
            .and_then(clap::Arg::get_long)
            .map_or_else(|| "a file flag".to_string(), |long| format!("--{long}"));
        let refuse = |reason: String| {
            let message = format!("invalid value for '{flag}': {reason}\n");
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let path = std::path::PathBuf::from(value);
        let text = read_secret_file(&path).map_err(refuse)?;
        let parsed = text.parse::<T>().map_err(|e| {
            refuse(format!(
                "what {} holds (not shown: it may hold a password): {e}",
                path.display()
            ))
        })?;
        Ok(FromFile {
            path,
            value: parsed,
        })
    }
}

/// Settings of `hotcount run`, as given on the command line or in the environment.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
pub struct RunArgs {
    /// Target project, database and collections.
    #[serde(flatten)]
    #[command(flatten)]
    pub target: Target,
    /// Subscription id (or full `projects/*/subscriptions/*` name).
    #[arg(long, env = "HOTCOUNT_SUBSCRIPTION", default_value = "likes-hotcount")]
    pub subscription: String,
    /// Consumer name: namespaces batch markers and quarantine records.
    /// Replicas on one subscription share it; another subscription needs another.
    #[arg(long, env = "HOTCOUNT_CONSUMER", default_value = "hotcount")]
    pub consumer: String,
    /// In-memory aggregator shards, by (post, user) (a shard is in at most one batch in flight).
    #[arg(long, env = "HOTCOUNT_SHARDS", default_value_t = 16)]
    pub shards: usize,
    /// Counter shard documents per post, at most (a quiet post uses one; a
    /// post uses more as its increment rate grows).
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = DEFAULT_COUNTER_SHARDS)]
    pub counter_shards: u32,
    /// Increments per second one counter shard document should take; a post
    /// spreads over rate / this many shards (0 = every post uses all shards).
    #[arg(
        long,
        env = "HOTCOUNT_COUNTER_SHARD_TARGET_WRITES_PER_SEC",
        default_value_t = DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC
    )]
    pub counter_shard_target_writes_per_sec: u32,
    /// Flush when the oldest buffered event is this old, in milliseconds
    /// (the longest an event waits in memory while a commit slot is free).
    #[arg(long, env = "HOTCOUNT_FLUSH_INTERVAL_MS", default_value_t = 100)]
    pub flush_interval_ms: u64,
    /// With no commit in flight, flush once the oldest event is this old,
    /// in milliseconds (group commit: batches grow while commits are in flight).
    #[arg(long, env = "HOTCOUNT_FLUSH_MIN_WAIT_MS", default_value_t = 5)]
    pub flush_min_wait_ms: u64,
    /// Batches committed at once, at most (each a transaction over disjoint memberships).
    #[arg(long, env = "HOTCOUNT_MAX_COMMITS_IN_FLIGHT", default_value_t = 4)]
    pub max_commits_in_flight: usize,
    /// Flush at once when this many messages are buffered; the largest batch.
    #[arg(long, env = "HOTCOUNT_MAX_BATCH_EVENTS", default_value_t = 1000)]
    pub max_batch_events: usize,
    /// Flow control: messages outstanding per stream (server-side).
    #[arg(
        long,
        env = "HOTCOUNT_MAX_OUTSTANDING_MESSAGES",
        default_value_t = 10_000
    )]
    pub max_outstanding_messages: i64,
    /// Flow control: bytes outstanding per stream (server-side).
    #[arg(long, env = "HOTCOUNT_MAX_OUTSTANDING_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_outstanding_bytes: i64,
    /// StreamingPull streams.
    #[arg(long, env = "HOTCOUNT_STREAMS", default_value_t = 2)]
    pub streams: usize,
    /// Lease extension the client asks for while messages wait, in seconds (10..=600).
    #[arg(long, env = "HOTCOUNT_LEASE_EXTENSION_SECS", default_value_t = 60)]
    pub lease_extension_secs: u64,
    /// Commit attempts per batch before it is nacked.
    #[arg(long, env = "HOTCOUNT_COMMIT_MAX_ATTEMPTS", default_value_t = 8)]
    pub commit_max_attempts: u32,
    /// First commit retry backoff, in milliseconds (doubles, with jitter).
    #[arg(long, env = "HOTCOUNT_COMMIT_BACKOFF_INITIAL_MS", default_value_t = 20)]
    pub commit_backoff_initial_ms: u64,
    /// Largest commit retry backoff, in milliseconds.
    #[arg(long, env = "HOTCOUNT_COMMIT_BACKOFF_MAX_MS", default_value_t = 2000)]
    pub commit_backoff_max_ms: u64,
    /// Batch marker lifetime (`expireAt`), in days: longer than the
    /// subscription's retention plus the longest replay window.
    #[arg(long, env = "HOTCOUNT_MARKER_TTL_DAYS", default_value_t = 40)]
    pub marker_ttl_days: u64,
    /// With `--store postgres://...`: how often expired batch markers are
    /// deleted, in seconds (0 = never, e.g. when `pg_cron` runs the same
    /// statement). Replicas may all run it: each skips rows another holds.
    #[arg(
        long,
        env = "HOTCOUNT_MARKER_CLEANUP_INTERVAL_SECS",
        default_value_t = 300
    )]
    pub marker_cleanup_interval_secs: u64,
    /// Expired batch markers one cleanup statement deletes at most (a
    /// cleanup runs at most 10 statements, then waits for the next interval).
    #[arg(
        long,
        env = "HOTCOUNT_MARKER_CLEANUP_BATCH_ROWS",
        default_value_t = 1000
    )]
    pub marker_cleanup_batch_rows: u32,
    /// After SIGTERM, at most this long is spent committing what is
    /// buffered: then retries stop, open transactions are rolled back and
    /// what did not commit is nacked, in seconds (fits Cloud Run's 10 s).
    #[arg(long, env = "HOTCOUNT_SHUTDOWN_DEADLINE_SECS", default_value_t = 8)]
    pub shutdown_deadline_secs: u64,
    /// Log as JSON lines.
    #[arg(long, env = "HOTCOUNT_LOG_JSON", default_value_t = false)]
    pub log_json: bool,
    /// `batched` (the design) or `per-event` (the naive baseline, for benchmarks).
    #[arg(long, env = "HOTCOUNT_STRATEGY", value_enum, default_value_t = Strategy::Batched)]
    pub strategy: Strategy,
    /// Transactions in flight with `--strategy per-event`.
    #[arg(long, env = "HOTCOUNT_PER_EVENT_CONCURRENCY", default_value_t = 64)]
    pub per_event_concurrency: usize,
    /// Address of the `/metrics`, `/healthz` and `/readyz` endpoint
    /// (`host:port`, port 0 picks one; `off` disables it). Loopback only
    /// unless `--metrics-allow-remote`.
    #[arg(long, env = "HOTCOUNT_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: String,
    /// Allow a non-loopback `--metrics-addr` (e.g. `0.0.0.0:8080` for Cloud Run probes).
    #[arg(long, env = "HOTCOUNT_METRICS_ALLOW_REMOTE", default_value_t = false)]
    pub metrics_allow_remote: bool,
    /// Refresh the rollup (`counts/{post}`, `post_counts`) of each post a
    /// commit changed at most once per this many milliseconds, fleet-wide
    /// (0 = no rollups).
    #[arg(long, env = "HOTCOUNT_ROLLUP_INTERVAL_MS", default_value_t = 1000)]
    pub rollup_interval_ms: u64,
    /// At start, check the rollups of posts whose counter shards changed
    /// within this many seconds (a refresh lost with a killed replica);
    /// 0 = no sweep.
    #[arg(
        long,
        env = "HOTCOUNT_ROLLUP_SWEEP_LOOKBACK_SECS",
        default_value_t = 900
    )]
    pub rollup_sweep_lookback_secs: u64,
    /// Longest a store call may take, in milliseconds: a Firestore RPC, or
    /// a PostgreSQL commit attempt's round trips (also its
    /// `statement_timeout`). Past it the call is abandoned as
    /// DEADLINE_EXCEEDED and retried (a commit's outcome, if unknown, is
    /// resolved by its batch marker).
    #[arg(long, env = "HOTCOUNT_STORE_CALL_TIMEOUT_MS", default_value_t = 10_000)]
    pub store_call_timeout_ms: u64,
    /// While batches are being committed and none has committed for this
    /// long, in seconds, the replica reports not ready (`/readyz` 503,
    /// `hotcount_commits_stalled` 1, a WARN line saying why) until one
    /// commits again. At least `--store-call-timeout-ms`.
    #[arg(
        long,
        env = "HOTCOUNT_STUCK_COMMIT_THRESHOLD_SECS",
        default_value_t = 30
    )]
    pub stuck_commit_threshold_secs: u64,
    /// Like counts that are milestones (comma-separated, ascending): the
    /// rollup write that first shows a post at or above one records it,
    /// and a replica with `--milestone-webhook` tells the webhook once.
    /// The list is the fleet's, stored (`setup --milestones`): a list that
    /// differs from the stored one refuses to start; none stored, this one
    /// (or, with a webhook, 100,1000,10000,100000) is stored.
    #[arg(long, env = "HOTCOUNT_MILESTONES")]
    pub milestones: Option<String>,
    /// POST each milestone reached to this http(s) URL (`{postId,
    /// milestone, likes, reachedAt}`, `Idempotency-Key:
    /// {consumer}:{post}:{n}`); unset = milestones off (none recorded).
    #[arg(long, env = "HOTCOUNT_MILESTONE_WEBHOOK")]
    pub milestone_webhook: Option<String>,
    /// Sign each milestone call with this secret: header
    /// `Hotcount-Signature: t={unix seconds},v1={hex HMAC-SHA256 of "{t}.{body}"}`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_SECRET",
        hide_env_values = true
    )]
    pub milestone_webhook_secret: Option<Secret>,
    /// A file holding `--milestone-webhook-secret` (e.g. a mounted
    /// secret); trailing line breaks are ignored.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_SECRET_FILE",
        value_name = "PATH",
        value_parser = FileParser::<Secret>::new(),
        conflicts_with = "milestone_webhook_secret"
    )]
    pub milestone_webhook_secret_file: Option<FromFile<Secret>>,
    /// While rotating the webhook secret, the one being replaced: each call
    /// then carries a `v1=` per secret, the new one first, so a receiver
    /// knowing either verifies it. Needs `--milestone-webhook-secret`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_PREVIOUS_SECRET",
        hide_env_values = true
    )]
    pub milestone_webhook_previous_secret: Option<Secret>,
    /// A file holding `--milestone-webhook-previous-secret`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_PREVIOUS_SECRET_FILE",
        value_name = "PATH",
        value_parser = FileParser::<Secret>::new(),
        conflicts_with = "milestone_webhook_previous_secret"
    )]
    pub milestone_webhook_previous_secret_file: Option<FromFile<Secret>>,
    /// Longest wait for the webhook's answer to one call, in milliseconds.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_WEBHOOK_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    pub milestone_webhook_timeout_ms: u64,
    /// Key of the keyed hash (HMAC-SHA256) that erased users' tombstones
    /// hold instead of their ids (`hotcount users erase`): the same key on
    /// every replica and in the `users` commands. Unset: no event is checked
    /// against tombstones.
    #[arg(long, env = "HOTCOUNT_USER_HASH_KEY", hide_env_values = true)]
    pub user_hash_key: Option<Secret>,
    /// A file holding `--user-hash-key`; trailing line breaks are ignored.
    #[arg(
        long,
        env = "HOTCOUNT_USER_HASH_KEY_FILE",
        value_name = "PATH",
        value_parser = FileParser::<Secret>::new(),
        conflicts_with = "user_hash_key"
    )]
    pub user_hash_key_file: Option<FromFile<Secret>>,
    /// How often each replica re-reads the erased users' tombstones, in
    /// milliseconds: an erasure waits twice this before it removes
    /// memberships.
    #[arg(long, env = "HOTCOUNT_TOMBSTONE_REFRESH_MS", default_value_t = 5_000)]
    pub tombstone_refresh_ms: u64,
    /// How long a replica holds a milestone it calls for before another
    /// may take it over (a replica that died mid-call), in seconds; more
    /// than the webhook timeout.
    #[arg(long, env = "HOTCOUNT_MILESTONE_LEASE_SECS", default_value_t = 60)]
    pub milestone_lease_secs: u64,
    /// The first wait before a failed milestone call is tried again, in
    /// milliseconds (doubling per attempt with jitter, up to 5 minutes);
    /// due milestones are looked for at least this often (and every second).
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_RETRY_INITIAL_MS",
        default_value_t = 1000
    )]
    pub milestone_retry_initial_ms: u64,
    /// The longest wait between two tries of a failed milestone call, in
    /// milliseconds (the doubling stops there); at least
    /// `--milestone-retry-initial-ms`.
    #[arg(
        long,
        env = "HOTCOUNT_MILESTONE_RETRY_MAX_MS",
        default_value_t = 300_000
    )]
    pub milestone_retry_max_ms: u64,
    /// How messages arrive: `pull` (StreamingPull) or `push` (Pub/Sub
    /// POSTs each one to `POST /pubsub/push` on `--push-addr`, answered
    /// 204 once its batch committed).
    #[arg(long, env = "HOTCOUNT_DELIVERY", value_enum, default_value_t = Delivery::Pull)]
    pub delivery: Delivery,
    /// With `--delivery push`: where the push endpoint listens (`host:port`,
    /// port 0 picks one); the same address as `--metrics-addr` serves both
    /// on one listener (Cloud Run routes one port).
    #[arg(long, env = "HOTCOUNT_PUSH_ADDR", default_value = "127.0.0.1:8080")]
    pub push_addr: String,
    /// With `--delivery push`: `google` (verify each request's OIDC token),
    /// `cloud-run` (Cloud Run's IAM front end verified it; on Cloud Run,
    /// where `K_SERVICE` is set, or a loopback `--push-addr` only) or
    /// `none` (loopback `--push-addr` only).
    #[arg(long, env = "HOTCOUNT_PUSH_AUTH", value_enum, default_value_t = PushAuthMode::Google)]
    pub push_auth: PushAuthMode,
    /// With `--push-auth google`: the audience the token must carry (the
    /// subscription's `oidcToken.audience`, or its push endpoint URL when
    /// it sets none).
    #[arg(long, env = "HOTCOUNT_PUSH_AUDIENCE", default_value = "")]
    pub push_audience: String,
    /// With `--push-auth google`: the service account Pub/Sub signs the
    /// tokens as (the token's `email`, which must be verified).
    #[arg(long, env = "HOTCOUNT_PUSH_SERVICE_ACCOUNT", default_value = "")]
    pub push_service_account: String,
    /// With `--push-auth google`: the signing keys' JWKS URL (fetched,
    /// cached as long as it says, refreshed on an unknown key id).
    #[arg(long, env = "HOTCOUNT_PUSH_JWKS_URL", default_value = DEFAULT_PUSH_JWKS_URL)]
    pub push_jwks_url: String,
    /// With `--delivery push`: requests held at once (admitted, not yet
    /// settled); beyond it 429 (1..=100000). Bounds memory: each holds at
    /// most a 1 MiB body while it is read, then its parsed message.
    #[arg(long, env = "HOTCOUNT_PUSH_MAX_IN_FLIGHT", default_value_t = 1000)]
    pub push_max_in_flight: usize,
    /// With `--delivery push` on its own address: connections open at
    /// once, at most (at least `--push-max-in-flight`). A new one beyond it
    /// closes the connection idle longest (or still sending its request's
    /// headers), or, when every one is in a request, is closed itself.
    #[arg(long, env = "HOTCOUNT_PUSH_MAX_CONNECTIONS", default_value_t = 2000)]
    pub push_max_connections: usize,
    /// With `--delivery push` on its own address: a connection that has
    /// not sent a request's whole headers this long after it opened, or
    /// after its last answer (idle), is closed, in milliseconds (100..=600000).
    #[arg(
        long,
        env = "HOTCOUNT_PUSH_HEADER_READ_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub push_header_read_timeout_ms: u64,
}

/// Validated settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The store.
    pub store_location: StoreLocation,
    /// Project id.
    pub project: String,
    /// Database id.
    pub database: String,
    /// Collection prefix.
    pub collection_prefix: String,
    /// Full subscription name.
    pub subscription: String,
    /// Consumer name.
    pub consumer: String,
    /// Aggregator shards.
    pub shards: usize,
    /// Counter shards per post, at most.
    pub counter_shards: u32,
    /// Increments per second per counter shard document (0 = fixed count).
    pub counter_shard_target_writes_per_sec: u32,
    /// Longest wait of a buffered event while a commit slot is free.
    pub flush_interval: Duration,
    /// Wait before an eager flush when no commit is in flight.
    pub flush_min_wait: Duration,
    /// Batches committed at once, at most.
    pub max_commits_in_flight: usize,
    /// Messages per batch at most.
    pub max_batch_events: usize,
    /// Flow control, messages per stream.
    pub max_outstanding_messages: i64,
    /// Flow control, bytes per stream.
    pub max_outstanding_bytes: i64,
    /// StreamingPull streams.
    pub streams: usize,
    /// Lease extension asked for.
    pub lease_extension: Duration,
    /// Commit attempts per batch.
    pub commit_max_attempts: u32,
    /// First retry backoff.
    pub commit_backoff_initial: Duration,
    /// Largest retry backoff.
    pub commit_backoff_max: Duration,
    /// Batch marker lifetime.
    pub marker_ttl: Duration,
    /// How often expired batch markers are deleted (PostgreSQL); `None` = never.
    pub marker_cleanup_interval: Option<Duration>,
    /// Expired batch markers deleted per cleanup statement, at most.
    pub marker_cleanup_batch_rows: i64,
    /// Longest drain after a stop signal.
    pub shutdown_deadline: Duration,
    /// Batched or per-event.
    pub strategy: Strategy,
    /// Transactions in flight with the per-event strategy.
    pub per_event_concurrency: usize,
    /// Where the metrics endpoint listens; `None` = no endpoint.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// At most one rollup refresh per post per this long; `None` = no rollups.
    pub rollup_interval: Option<Duration>,
    /// How far back the start-up sweep looks; `None` = no sweep.
    pub rollup_sweep_lookback: Option<Duration>,
    /// With `--delivery push`, the push endpoint's settings; `None` = pull.
    pub push: Option<PushConfig>,
    /// Longest a store call may take.
    pub store_call_timeout: Duration,
    /// No commit for this long while commits are in flight: not ready.
    pub stuck_commit_threshold: Duration,
    /// Milestone notifications; `None` = no webhook (this replica records
    /// milestones by the stored setting, and sends none).
    pub milestones: Option<MilestoneSettings>,
    /// The `--milestones` list given, if any: it must match the stored one.
    pub milestones_given: Option<Vec<i64>>,
    /// The tombstones' hash key; `None` (or empty) = no tombstone check.
    pub user_hash_key: Option<Secret>,
    /// How often the tombstones are re-read.
    pub tombstone_refresh: Duration,
}

/// The milestones a deployment without a stored setting adopts from its
/// first replica with a webhook and no `--milestones`.
pub const DEFAULT_MILESTONES: [i64; 4] = [100, 1000, 10_000, 100_000];

/// Milestone notifications' settings (`--milestone-*`).
#[derive(Clone, Debug)]
pub struct MilestoneSettings {
    /// The milestones to store when none are (the `--milestones` given, or
    /// [`DEFAULT_MILESTONES`]), ascending, distinct, positive.
    pub thresholds: Vec<i64>,
    /// The webhook.
    pub webhook: reqwest::Url,
    /// The signing secret, if any.
    pub secret: Option<Secret>,
    /// While rotating, the secret being replaced: calls are signed with
    /// both (only with `secret`).
    pub previous_secret: Option<Secret>,
    /// One call's longest wait.
    pub request_timeout: Duration,
    /// A claim's lease.
    pub lease: Duration,
    /// The first retry's wait.
    pub retry_initial: Duration,
    /// The longest wait between two tries.
    pub retry_max: Duration,
}

impl MilestoneSettings {
    /// The dispatcher's settings.
    pub fn dispatch(&self) -> DispatchConfig {
        let defaults = DispatchConfig::default();
        DispatchConfig {
            lease: self.lease,
            backoff_initial: self.retry_initial,
            backoff_max: self.retry_max,
            poll_interval: defaults.poll_interval.min(self.retry_initial),
            ..defaults
        }
    }
}

/// Parses `--milestones`: ascending, distinct, positive like counts.
pub fn parse_milestones(list: &str) -> Result<Vec<i64>, ConfigError> {
    let err = |reason: String| ConfigError {
        flag: "milestones",
        reason,
    };
    let mut out: Vec<i64> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: i64 = part
            .parse()
            .map_err(|_| err(format!("{part:?} is not a whole number")))?;
        if n < 1 {
            return Err(err(format!("{n} is not positive")));
        }
        if out.last().is_some_and(|&last| n <= last) {
            return Err(err(format!("{n} is not above the one before it")));
        }
        out.push(n);
    }
    if out.is_empty() || out.len() > 64 {
        return Err(err("give 1 to 64 like counts, e.g. 100,1000".to_string()));
    }
    Ok(out)
}

/// A setting that is out of range, with what is allowed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid --{flag}: {reason}")]
pub struct ConfigError {
    /// The flag.
    pub flag: &'static str,
    /// What is wrong and what is allowed.
    pub reason: String,
}

fn range<T: PartialOrd + std::fmt::Display>(
    flag: &'static str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError {
            flag,
            reason: format!("{v} is outside {lo}..={hi}"),
        });
    }
    Ok(v)
}

/// A resource id as Pub/Sub accepts it: starts with a letter, 3..=255 of
/// `[A-Za-z0-9-_.~+%]`, never starting with `goog`.
pub fn check_pubsub_id(id: &str) -> Result<(), String> {
    let ok_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.~+%".contains(c));
    if !(3..=255).contains(&id.len())
        || !id.starts_with(|c: char| c.is_ascii_alphabetic())
        || !ok_chars
        || id.starts_with("goog")
    {
        return Err(format!(
            "{id:?} must start with a letter, be 3..=255 of [A-Za-z0-9-_.~+%] and not start with goog"
        ));
    }
    Ok(())
}

/// `projects/{p}/subscriptions/{s}` from an id or a full name.
pub fn subscription_name(project: &str, subscription: &str) -> Result<String, String> {
    let id = match subscription.strip_prefix("projects/") {
        Some(rest) => match rest.split_once("/subscriptions/") {
            Some((p, id)) if !p.is_empty() && !p.contains('/') => {
                check_pubsub_id(id)?;
                return Ok(subscription.to_string());
            }
            _ => {
                return Err(format!(
                    "{subscription:?} is not projects/*/subscriptions/*"
                ))
            }
        },
        None => subscription,
    };
    check_pubsub_id(id)?;
    Ok(format!("projects/{project}/subscriptions/{id}"))
}

/// Parses `--metrics-addr`: `off` (or empty) disables the endpoint; a
/// non-loopback address needs `allow_remote`.
pub fn metrics_addr(
    value: &str,
    allow_remote: bool,
) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    if value.is_empty() || value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let addr: std::net::SocketAddr = value.parse().map_err(|_| ConfigError {
        flag: "metrics-addr",
        reason: format!("{value:?} is not host:port (an IP address and a port) or off"),
    })?;
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(ConfigError {
            flag: "metrics-addr",
            reason: format!(
                "{addr} is not a loopback address; add --metrics-allow-remote to expose it"
            ),
        });
    }
    Ok(Some(addr))
}

impl RunArgs {
    /// The `hotcount run` flags that reproduce these settings: every flag
    /// of [`RunArgs`], found by clap's own description of it (so a new flag
    /// is never forgotten), with its value from these settings.
    pub fn to_flags(&self) -> Vec<String> {
        use clap::Args as _;
        let values = match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(values)) => values,
            _ => serde_json::Map::new(),
        };
        let command = RunArgs::augment_args(clap::Command::new("run"));
        let mut flags = Vec::new();
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            match values.get(arg.get_id().as_str()) {
                Some(serde_json::Value::Bool(true)) => flags.push(format!("--{long}")),
                Some(serde_json::Value::String(v)) => flags.push(format!("--{long}={v}")),
                Some(serde_json::Value::Number(v)) => flags.push(format!("--{long}={v}")),
                _ => {}
            }
        }
        flags
    }
}

/// Validates the push flags of `args` (only read with `--delivery push`);
/// `on_cloud_run`: whether this runs in a Cloud Run container.
fn push_config(
    args: &RunArgs,
    subscription: &str,
    on_cloud_run: bool,
) -> Result<Option<PushConfig>, ConfigError> {
    if args.delivery == Delivery::Pull {
        return Ok(None);
    }
    let addr: std::net::SocketAddr = args.push_addr.parse().map_err(|_| ConfigError {
        flag: "push-addr",
        reason: format!(
            "{:?} is not host:port (an IP address and a port)",
            args.push_addr
        ),
    })?;
    let required = |flag: &'static str, value: &str| {
        if value.trim().is_empty() {
            return Err(ConfigError {
                flag,
                reason: "required with --push-auth google (without it, any Google-signed token would do)".into(),
            });
        }
        Ok(value.to_string())
    };
    let auth = match args.push_auth {
        PushAuthMode::Google => {
            let jwks_url = args.push_jwks_url.clone();
            if !(jwks_url.starts_with("https://") || jwks_url.starts_with("http://")) {
                return Err(ConfigError {
                    flag: "push-jwks-url",
                    reason: format!("{jwks_url:?} is not an http(s) URL"),
                });
            }
            AuthConfig::Google(GoogleAuth {
                audience: required("push-audience", &args.push_audience)?,
                service_account: required("push-service-account", &args.push_service_account)?,
                jwks_url,
            })
        }
        PushAuthMode::CloudRun if on_cloud_run || addr.ip().is_loopback() => AuthConfig::CloudRun,
        PushAuthMode::CloudRun => {
            return Err(ConfigError {
                flag: "push-auth",
                reason: format!(
                    "cloud-run trusts every request (Cloud Run's IAM front end checks them before they reach the container), so it is allowed only on Cloud Run ({CLOUD_RUN_SERVICE_ENV} set) or on a loopback --push-addr; {CLOUD_RUN_SERVICE_ENV} is not set and {addr} is not loopback: use google (verify the tokens)"
                ),
            })
        }
        PushAuthMode::None if addr.ip().is_loopback() => AuthConfig::None,
        PushAuthMode::None => {
            return Err(ConfigError {
                flag: "push-auth",
                reason: format!(
                    "none is allowed only on a loopback --push-addr, not {addr}: use google (verify the tokens) or cloud-run (behind Cloud Run's IAM)"
                ),
            })
        }
    };
    let max_in_flight = range("push-max-in-flight", args.push_max_in_flight, 1, 100_000)?;
    let max_connections = range(
        "push-max-connections",
        args.push_max_connections,
        1,
        1_000_000,
    )?;
    if max_connections < max_in_flight {
        return Err(ConfigError {
            flag: "push-max-connections",
            reason: format!(
                "{max_connections} is below --push-max-in-flight {max_in_flight}: each request held needs a connection of its own"
            ),
        });
    }
    let header_read_timeout_ms = range(
        "push-header-read-timeout-ms",
        args.push_header_read_timeout_ms,
        100,
        600_000,
    )?;
    Ok(Some(PushConfig {
        addr,
        auth,
        max_in_flight,
        max_connections,
        header_read_timeout: Duration::from_millis(header_read_timeout_ms),
        hold_max: PushConfig::hold_max_for(None),
        subscription: subscription.to_string(),
    }))
}

impl RunArgs {
    /// Checks every setting; the first problem is reported with its flag.
    /// Reads whether this runs on Cloud Run ([`CLOUD_RUN_SERVICE_ENV`]).
    pub fn validate(&self) -> Result<Config, ConfigError> {
        let on_cloud_run = std::env::var_os(CLOUD_RUN_SERVICE_ENV).is_some_and(|v| !v.is_empty());
        self.validate_where(on_cloud_run)
    }

    /// [`RunArgs::validate`] on Cloud Run (`on_cloud_run`) or off it.
    fn validate_where(&self, on_cloud_run: bool) -> Result<Config, ConfigError> {
        let t = &self.target;
        if t.project.is_empty() || t.project.contains('/') {
            return Err(ConfigError {
                flag: "project",
                reason: "must be a project id".into(),
            });
        }
        check_id(&self.consumer, MAX_EVENT_ID_BYTES).map_err(|p| ConfigError {
            flag: "consumer",
            reason: format!("not a safe document id: {p}"),
        })?;
        if self.consumer.contains(':') {
            return Err(ConfigError {
                flag: "consumer",
                reason: "must not contain ':'".into(),
            });
        }
        if t.collection_prefix.contains('/') {
            return Err(ConfigError {
                flag: "collection-prefix",
                reason: "must not contain '/'".into(),
            });
        }
        let subscription =
            subscription_name(&t.project, &self.subscription).map_err(|reason| ConfigError {
                flag: "subscription",
                reason,
            })?;
        let metrics_addr = metrics_addr(&self.metrics_addr, self.metrics_allow_remote)?;
        let push = push_config(self, &subscription, on_cloud_run)?;
        Ok(Config {
            store_location: t.store.clone(),
            project: t.project.clone(),
            database: t.database.clone(),
            collection_prefix: t.collection_prefix.clone(),
            subscription,
            consumer: self.consumer.clone(),
            shards: range("shards", self.shards, 1, 4096)?,
            counter_shards: range("counter-shards", self.counter_shards, 1, 1000)?,
            counter_shard_target_writes_per_sec: range(
                "counter-shard-target-writes-per-sec",
                self.counter_shard_target_writes_per_sec,
                0,
                10_000,
            )?,
            flush_interval: Duration::from_millis(range(
                "flush-interval-ms",
                self.flush_interval_ms,
                1,
                60_000,
            )?),
            flush_min_wait: Duration::from_millis(range(
                "flush-min-wait-ms",
                self.flush_min_wait_ms,
                0,
                self.flush_interval_ms,
            )?),
            max_commits_in_flight: range(
                "max-commits-in-flight",
                self.max_commits_in_flight,
                1,
                256,
            )?,
            max_batch_events: range("max-batch-events", self.max_batch_events, 1, 10_000)?,
            max_outstanding_messages: range(
                "max-outstanding-messages",
                self.max_outstanding_messages,
                1,
                10_000_000,
            )?,
            max_outstanding_bytes: range(
                "max-outstanding-bytes",
                self.max_outstanding_bytes,
                1024,
                1 << 40,
            )?,
            streams: range("streams", self.streams, 1, 64)?,
            lease_extension: Duration::from_secs(range(
                "lease-extension-secs",
                self.lease_extension_secs,
                10,
                600,
            )?),
            commit_max_attempts: range("commit-max-attempts", self.commit_max_attempts, 1, 100)?,
            commit_backoff_initial: Duration::from_millis(range(
                "commit-backoff-initial-ms",
                self.commit_backoff_initial_ms,
                1,
                60_000,
            )?),
            // A backoff past a minute would outlast the lease extension
            // and the shutdown deadline it must fit in.
            commit_backoff_max: Duration::from_millis(range(
                "commit-backoff-max-ms",
                self.commit_backoff_max_ms,
                self.commit_backoff_initial_ms.min(60_000),
                60_000,
            )?),
            shutdown_deadline: Duration::from_secs(range(
                "shutdown-deadline-secs",
                self.shutdown_deadline_secs,
                1,
                3600,
            )?),
            marker_ttl: Duration::from_secs(
                86_400 * range("marker-ttl-days", self.marker_ttl_days, 1, 3650)?,
            ),
            marker_cleanup_interval: match range(
                "marker-cleanup-interval-secs",
                self.marker_cleanup_interval_secs,
                0,
                86_400,
            )? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            marker_cleanup_batch_rows: i64::from(range(
                "marker-cleanup-batch-rows",
                self.marker_cleanup_batch_rows,
                1,
                100_000,
            )?),
            strategy: self.strategy,
            per_event_concurrency: range(
                "per-event-concurrency",
                self.per_event_concurrency,
                1,
                4096,
            )?,
            metrics_addr,
            rollup_interval: match range(
                "rollup-interval-ms",
                self.rollup_interval_ms,
                0,
                3_600_000,
            )? {
                0 => None,
                ms => Some(Duration::from_millis(range(
                    "rollup-interval-ms",
                    ms,
                    10,
                    3_600_000,
                )?)),
            },
            rollup_sweep_lookback: match range(
                "rollup-sweep-lookback-secs",
                self.rollup_sweep_lookback_secs,
                0,
                7 * 86_400,
            )? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
            store_call_timeout: Duration::from_millis(range(
                "store-call-timeout-ms",
                self.store_call_timeout_ms,
                100,
                600_000,
            )?),
            stuck_commit_threshold: Duration::from_secs(range(
                "stuck-commit-threshold-secs",
                self.stuck_commit_threshold_secs,
                self.store_call_timeout_ms.div_ceil(1000).clamp(1, 600),
                3600,
            )?),
            milestones: self.milestone_settings()?,
            milestones_given: self
                .milestones
                .as_deref()
                .map(parse_milestones)
                .transpose()?,
            user_hash_key: Secret::given(
                self.user_hash_key.as_ref(),
                self.user_hash_key_file.as_ref(),
            ),
            tombstone_refresh: Duration::from_millis(range(
                "tombstone-refresh-ms",
                self.tombstone_refresh_ms,
                100,
                60_000,
            )?),
            push,
        })
    }
}

impl RunArgs {
    /// The milestone settings: `None` without a webhook; refused without
    /// rollups (they decide them).
    fn milestone_settings(&self) -> Result<Option<MilestoneSettings>, ConfigError> {
        let Some(url) = &self.milestone_webhook else {
            return Ok(None);
        };
        let webhook = reqwest::Url::parse(url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| ConfigError {
                flag: "milestone-webhook",
                reason: format!("{url:?} is not an http(s) URL"),
            })?;
        if self.rollup_interval_ms == 0 {
            return Err(ConfigError {
                flag: "milestone-webhook",
                reason:
                    "milestones are decided by the rollup writes: set --rollup-interval-ms above 0"
                        .to_string(),
            });
        }
        let timeout_ms = range(
            "milestone-webhook-timeout-ms",
            self.milestone_webhook_timeout_ms,
            100,
            300_000,
        )?;
        let lease_secs = range("milestone-lease-secs", self.milestone_lease_secs, 1, 86_400)?;
        if lease_secs * 1000 <= timeout_ms {
            return Err(ConfigError {
                flag: "milestone-lease-secs",
                reason: format!(
                    "{lease_secs} s must be longer than --milestone-webhook-timeout-ms ({timeout_ms} ms)"
                ),
            });
        }
        let secret = Secret::given(
            self.milestone_webhook_secret.as_ref(),
            self.milestone_webhook_secret_file.as_ref(),
        );
        let previous_secret = Secret::given(
            self.milestone_webhook_previous_secret.as_ref(),
            self.milestone_webhook_previous_secret_file.as_ref(),
        );
        if previous_secret.is_some() && secret.is_none() {
            return Err(ConfigError {
                flag: "milestone-webhook-previous-secret",
                reason: "is the secret being replaced: give the new one too (--milestone-webhook-secret or --milestone-webhook-secret-file)".to_string(),
            });
        }
        let retry_initial_ms = range(
            "milestone-retry-initial-ms",
            self.milestone_retry_initial_ms,
            10,
            300_000,
        )?;
        Ok(Some(MilestoneSettings {
            thresholds: match &self.milestones {
                Some(list) => parse_milestones(list)?,
                None => DEFAULT_MILESTONES.to_vec(),
            },
            webhook,
            secret,
            previous_secret,
            request_timeout: Duration::from_millis(timeout_ms),
            lease: Duration::from_secs(lease_secs),
            retry_initial: Duration::from_millis(retry_initial_ms),
            retry_max: Duration::from_millis(range(
                "milestone-retry-max-ms",
                self.milestone_retry_max_ms,
                retry_initial_ms,
                3_600_000,
            )?),
        }))
    }
}

impl Config {
    /// The source's settings, with held caps equal to the server-side
    /// totals (held no more even when a reconnect opens a fresh budget).
    pub fn source(&self) -> SourceConfig {
        let (held_max_messages, held_max_bytes) = SourceConfig::held_caps(
            self.streams,
            self.max_outstanding_messages,
            self.max_outstanding_bytes,
        );
        SourceConfig {
            subscription: self.subscription.clone(),
            streams: self.streams,
            max_outstanding_messages: self.max_outstanding_messages,
            max_outstanding_bytes: self.max_outstanding_bytes,
            lease_extension: self.lease_extension,
            held_max_messages,
            held_max_bytes,
        }
    }

    /// The flusher's settings for this strategy: with `per-event`, one
    /// message per batch flushed at once, `per_event_concurrency` in flight.
    pub fn flush(&self) -> FlushConfig {
        let retry = FlushConfig {
            commit_max_attempts: self.commit_max_attempts,
            backoff_initial: self.commit_backoff_initial,
            backoff_max: self.commit_backoff_max,
            shutdown_deadline: self.shutdown_deadline,
            ..FlushConfig::default()
        };
        match self.strategy {
            Strategy::Batched => FlushConfig {
                flush_interval: self.flush_interval,
                flush_min_wait: self.flush_min_wait,
                max_commits_in_flight: self.max_commits_in_flight,
                ..retry
            },
            Strategy::PerEvent => FlushConfig {
                flush_interval: Duration::ZERO,
                flush_min_wait: Duration::ZERO,
                max_commits_in_flight: self.per_event_concurrency,
                ..retry
            },
        }
    }

    /// The store's settings (the same for Firestore and PostgreSQL).
    pub fn store(&self) -> StoreSettings {
        StoreSettings {
            consumer: self.consumer.clone(),
            counter_shards: self.counter_shards,
            counter_shard_target_writes_per_sec: self.counter_shard_target_writes_per_sec,
            marker_ttl: self.marker_ttl,
            due_records: self.rollup_interval.is_some(),
        }
    }

    /// The rollup refresher's settings; `None` when rollups are off.
    pub fn rollup(&self) -> Option<RollupConfig> {
        let interval = self.rollup_interval?;
        Some(RollupConfig {
            sweep_lookback: self.rollup_sweep_lookback,
            ..RollupConfig::new(interval, self.counter_shards)
        })
    }

    /// The [`Target`] these settings name.
    pub fn target(&self) -> Target {
        Target {
            store: self.store_location.clone(),
            project: self.project.clone(),
            database: self.database.clone(),
            collection_prefix: self.collection_prefix.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
