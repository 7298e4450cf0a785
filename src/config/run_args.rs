//! `hotcount run`'s flags, as given on the command line or in the
//! environment ([`RunArgs`]), and the flags that reproduce them.
//!
//! Invariant: every field is a flag (its name, env var, default and help
//! are declared here once) and [`RunArgs::to_flags`] reproduces every one.

use super::push::{Delivery, PushAuthMode, DEFAULT_PUSH_JWKS_URL};
use super::secret::{FileParser, FromFile, Secret};
use super::store::{Target, DEFAULT_COUNTER_SHARDS, DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC};
use super::Strategy;

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
