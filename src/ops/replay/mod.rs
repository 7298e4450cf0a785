//! `hotcount replay`: re-reads a time window of the topic through an
//! isolated subscription (created, Seeked to the window start, deleted at
//! the end) and puts it through the normal apply rules and store, under the
//! service's consumer name, rate-capped.
//!
//! Invariants: replay writes only through [`CounterStore::commit`] (the same
//! transaction, memberships and batch markers as the service), so replaying
//! processed traffic finds every event a duplicate and changes no count;
//! `--dry-run` never writes (plans are computed against memberships read
//! outside any transaction, overlaid with what earlier chunks would have
//! written); a chunk whose events would push the applied fraction above
//! `--max-divergence` is not committed: the replay pauses and reports. A
//! chunk's commit is retried as the consumer retries a batch (transient
//! failures, with backoff; the batch marker makes a retry after an unknown
//! outcome safe); a replay that stops on a failure still returns what it
//! committed ([`Ending::Failed`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::model::{ExpirationPolicy, Subscription};

use crate::config::{check_pubsub_id, Endpoints, Target};
use crate::connect;
use crate::model::batch::Effects;
use crate::pipeline::rollup;
use crate::store::selected::{SelectedStore, StoreSettings};
use crate::store::StoreError;

mod replayer;

use replayer::Replayer;

/// What to replay, as given on the command line.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("user_hash_key", |a| a.help(
    "The service's `--user-hash-key`: events of erased users (a tombstone holds their keyed hash) are dropped, as the service drops them. Unset: no event is checked"
)))]
pub struct ReplayArgs {
    /// Target project, database and collections.
    #[command(flatten)]
    pub target: Target,
    /// Topic id to replay.
    #[arg(long, env = "HOTCOUNT_TOPIC", default_value = "likes")]
    pub topic: String,
    /// The service's subscription id (names the replay subscription).
    #[arg(long, env = "HOTCOUNT_SUBSCRIPTION", default_value = "likes-hotcount")]
    pub subscription: String,
    /// The service's consumer name: replayed events meet the service's own
    /// memberships and markers, so processed ones are duplicates.
    #[arg(long, env = "HOTCOUNT_CONSUMER", default_value = "hotcount")]
    pub consumer: String,
    /// Window start (RFC 3339), inclusive: the replay subscription is Seeked here.
    #[arg(long)]
    pub from: String,
    /// Window end (RFC 3339), exclusive: later messages are skipped, and the
    /// replay ends `--end-grace-ms` after the first one.
    #[arg(long)]
    pub to: String,
    /// Replay subscription id; default `{subscription}-replay-{unix seconds}`.
    /// An existing one is reused and kept.
    #[arg(long)]
    pub replay_subscription: Option<String>,
    /// Rate cap, in events per second.
    #[arg(long, default_value_t = 500)]
    pub max_events_per_sec: u32,
    /// Messages per chunk (one transaction each).
    #[arg(long, default_value_t = 500)]
    pub chunk_events: usize,
    /// Compute and report what would change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Pause when applied / events would exceed this fraction (0.0..=1.0):
    /// replayed processed traffic should be all duplicates.
    #[arg(long, default_value_t = 0.01)]
    pub max_divergence: f64,
    /// Stop when no message arrives for this long, in milliseconds (backlog drained).
    #[arg(long, default_value_t = 5000)]
    pub idle_ms: u64,
    /// Keep going this long after the first message past the window end, in
    /// milliseconds (stragglers inside the window may still arrive).
    #[arg(long, default_value_t = 2000)]
    pub end_grace_ms: u64,
    /// Counter shards per post (as the service's `--counter-shards`, whose
    /// default it shares).
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = crate::config::DEFAULT_COUNTER_SHARDS)]
    pub counter_shards: u32,
    /// Batch marker lifetime, in days (as the service's `--marker-ttl-days`).
    #[arg(long, env = "HOTCOUNT_MARKER_TTL_DAYS", default_value_t = 40)]
    pub marker_ttl_days: u64,
    /// Keep the replay subscription afterwards.
    #[arg(long)]
    pub keep_subscription: bool,
    /// `--user-hash-key` or its file (the one declaration is
    /// [`crate::config::UserHashKeyFlags`]).
    #[command(flatten)]
    pub user_hash_key: crate::config::UserHashKeyFlags,
}

/// A replay failure.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A setting is invalid.
    #[error("invalid --{flag}: {reason}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Pub/Sub refused or failed.
    #[error("{op} {resource}: {message}")]
    PubSub {
        /// The operation.
        op: &'static str,
        /// The resource.
        resource: String,
        /// The error.
        message: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No client.
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
    /// The store could not be opened (a PostgreSQL schema `setup` has not
    /// migrated, say).
    #[error(transparent)]
    Open(#[from] connect::OpenError),
    /// The store holds erased users' tombstones (or one was written during
    /// the replay) but no `--user-hash-key` was given, so their events
    /// cannot be told apart and would count again.
    #[error("the store holds erased users' tombstones: give the service's --user-hash-key (or --user-hash-key-file) so their events are dropped")]
    Unkeyed,
}

impl ReplayError {
    /// Whether running the replay again may succeed (it is idempotent).
    pub fn is_retryable(&self) -> bool {
        match self {
            ReplayError::Store(e) => e.is_retryable(),
            ReplayError::Open(e) => e.is_retryable(),
            ReplayError::PubSub { .. } => true,
            _ => false,
        }
    }
}

/// Why the replay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A message past the window end was seen (and the grace period passed).
    WindowEnd,
    /// No message for `--idle-ms`: the backlog is drained.
    Drained,
    /// The applied fraction would have exceeded `--max-divergence`.
    Paused,
    /// A failure stopped it (a chunk that did not commit after its
    /// retries, or Pub/Sub); what it did before is in the report, and the
    /// failure in [`ReplayReport::failure`]. Running it again is safe.
    Failed,
}

/// What a replay did (or, dry, would do).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayReport {
    /// The replay subscription used.
    pub subscription: String,
    /// Whether it was deleted at the end.
    pub deleted: bool,
    /// Messages inside the window.
    pub messages: u64,
    /// Messages outside the window, skipped.
    pub skipped: u64,
    /// Events of erased users, dropped.
    pub erased: u64,
    /// Effects committed (dry run: that would be committed).
    pub effects: Effects,
    /// Net count change per post (dry run: that would be made).
    pub deltas: BTreeMap<String, i64>,
    /// Why it ended.
    pub ending: Ending,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// What stopped it, with [`Ending::Failed`].
    pub failure: Option<String>,
}

impl ReplayReport {
    /// Applied events over events considered.
    pub fn divergence(&self) -> f64 {
        divergence(&self.effects)
    }
}

/// Applied events over events considered (0 when none were).
fn divergence(effects: &Effects) -> f64 {
    let events = effects.applied + effects.duplicates + effects.stale;
    if events == 0 {
        0.0
    } else {
        effects.applied as f64 / events as f64
    }
}

/// The replay window: `from` inclusive, `to` exclusive.
struct Window {
    from: SystemTime,
    to: SystemTime,
}

fn parse_time(flag: &'static str, value: &str) -> Result<SystemTime, ReplayError> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| SystemTime::from(t.with_timezone(&chrono::Utc)))
        .map_err(|e| ReplayError::Invalid {
            flag,
            reason: format!("{value:?} is not RFC 3339: {e}"),
        })
}

fn pubsub_error(op: &'static str, resource: &str, e: impl std::fmt::Display) -> ReplayError {
    ReplayError::PubSub {
        op,
        resource: resource.to_string(),
        message: e.to_string(),
    }
}

/// Runs a replay; see the module doc.
pub async fn run(endpoints: &Endpoints, args: &ReplayArgs) -> Result<ReplayReport, ReplayError> {
    let window = Window {
        from: parse_time("from", &args.from)?,
        to: parse_time("to", &args.to)?,
    };
    if window.to <= window.from {
        return Err(ReplayError::Invalid {
            flag: "to",
            reason: "must be after --from".into(),
        });
    }
    if !(0.0..=1.0).contains(&args.max_divergence) {
        return Err(ReplayError::Invalid {
            flag: "max-divergence",
            reason: "must be within 0.0..=1.0".into(),
        });
    }
    let invalid = |flag| move |reason| ReplayError::Invalid { flag, reason };
    let topic_id = args.topic.rsplit('/').next().unwrap_or_default();
    check_pubsub_id(topic_id).map_err(invalid("topic"))?;
    let project = &args.target.project;
    let id = match &args.replay_subscription {
        Some(id) => id.clone(),
        None => {
            let secs = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            // A full `projects/*/subscriptions/*` name contributes its id.
            let base = args.subscription.rsplit('/').next().unwrap_or_default();
            format!("{base}-replay-{secs}")
        }
    };
    check_pubsub_id(&id).map_err(invalid("replay-subscription"))?;
    let subscription = format!("projects/{project}/subscriptions/{id}");
    let topic = format!("projects/{project}/topics/{topic_id}");

    let admin = connect::subscription_admin(endpoints).await?;
    let created = create(&admin, &subscription, &topic).await?;
    let seek_to = google_cloud_wkt::Timestamp::try_from(window.from)
        .map_err(|e| pubsub_error("seeking", &subscription, e))?;
    let result = match admin
        .seek()
        .set_subscription(subscription.clone())
        .set_time(seek_to)
        .send()
        .await
    {
        Ok(_) => {
            let store = open_store(endpoints, args).await?;
            let subscriber = connect::subscriber(endpoints).await?;
            let key = args.user_hash_key.key();
            let keyed = key.is_some();
            let replayer = Replayer::new(store.clone(), args, window, &subscription)
                .with_tombstones(
                    tombstones(&store, key.map(|k| k.expose().to_string())).await?,
                    keyed,
                );
            let replayed = replayer.run(subscriber).await;
            if let Ok(report) = &replayed {
                refresh_rollups(&store, args, report).await;
            }
            replayed
        }
        Err(e) => Err(pubsub_error("seeking", &subscription, e)),
    };
    let deleted = created && !args.keep_subscription;
    if deleted {
        if let Err(e) = admin
            .delete_subscription()
            .set_subscription(subscription.clone())
            .send()
            .await
        {
            tracing::warn!(%subscription, error = %e, "could not delete the replay subscription");
        }
    }
    let mut report = result?;
    report.deleted = deleted;
    Ok(report)
}

async fn create(
    admin: &google_cloud_pubsub::client::SubscriptionAdmin,
    subscription: &str,
    topic: &str,
) -> Result<bool, ReplayError> {
    // If this process dies before cleaning up, Pub/Sub deletes the
    // subscription after a day without subscribers (the shortest TTL allowed).
    let config = Subscription::new()
        .set_name(subscription.to_string())
        .set_topic(topic.to_string())
        .set_ack_deadline_seconds(60)
        .set_expiration_policy(
            ExpirationPolicy::new().set_ttl(google_cloud_wkt::Duration::clamp(86_400, 0)),
        );
    match admin
        .create_subscription()
        .with_request(config)
        .send()
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if e.status().map(|s| s.code) == Some(Code::AlreadyExists) => {
            tracing::info!(%subscription, "replay subscription exists; reusing and keeping it");
            Ok(false)
        }
        Err(e) => Err(pubsub_error("creating", subscription, e)),
    }
}

/// The erased users' tombstones as the store holds them at the start,
/// hashing with `key` (without one, a tombstone already there stops the
/// replay before it pulls anything). Each chunk is labelled with their
/// generation, so one written later is met by the chunk's commit.
async fn tombstones(
    store: &SelectedStore,
    key: Option<String>,
) -> Result<crate::pipeline::flusher::Tombstones, ReplayError> {
    let state = store.db().tombstone_state().await?;
    if key.is_none() && !state.hashes.is_empty() {
        return Err(ReplayError::Unkeyed);
    }
    let tombstones = crate::pipeline::flusher::Tombstones::new(key.unwrap_or_default().as_bytes());
    tombstones.replace(state);
    Ok(tombstones)
}

/// The store the service writes, under the service's consumer name
/// ([`connect::store_db_to_write`]: a PostgreSQL schema must be this
/// build's, the data format one it knows).
async fn open_store(
    endpoints: &Endpoints,
    args: &ReplayArgs,
) -> Result<SelectedStore, ReplayError> {
    let db = connect::store_db_to_write(endpoints, &args.target, 2).await?;
    let store = SelectedStore::new(
        db,
        StoreSettings {
            consumer: args.consumer.clone(),
            counter_shards: args.counter_shards.max(1),
            counter_shard_target_writes_per_sec:
                crate::config::DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC,
            marker_ttl: Duration::from_secs(86_400 * args.marker_ttl_days.clamp(1, 3650)),
            due_records: false,
            // Replays meet memberships already written: read them all.
            known_memberships: 0,
        },
    );
    // Only the counter shards each post's rollup registers (Firestore): a
    // replay has no refresher to register more, so it never makes a shard
    // a rollup does not cover.
    let _ = store.shard_registry();
    Ok(store)
}

/// After a replay that changed counts: refreshes the rollups of the posts
/// it changed (those that have one).
async fn refresh_rollups(store: &SelectedStore, args: &ReplayArgs, report: &ReplayReport) {
    let posts: Vec<String> = report.deltas.keys().cloned().collect();
    if posts.is_empty() || report.dry_run {
        return;
    }
    // The fleet's milestones: a write that crosses one records it (left
    // out, it would be skipped for good).
    let db = store.db();
    let milestones = match crate::ops::milestones::recorded(&db).await {
        Ok(milestones) => milestones,
        Err(error) => {
            tracing::warn!(%error, posts = posts.len(), "reading the milestone setting failed; the replayed posts' rollups are left to the running service's refresher");
            return;
        }
    };
    let written =
        rollup::refresh_existing(Arc::new(db), &posts, args.counter_shards, &milestones).await;
    tracing::info!(
        posts = posts.len(),
        written,
        "rollups of the replayed posts refreshed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divergence_is_applied_over_considered_events() {
        let mut report = ReplayReport {
            subscription: String::new(),
            deleted: false,
            messages: 10,
            skipped: 0,
            erased: 0,
            effects: Effects {
                applied: 1,
                duplicates: 8,
                stale: 1,
                poison: 0,
            },
            deltas: BTreeMap::new(),
            ending: Ending::Drained,
            dry_run: false,
            failure: None,
        };
        assert!((report.divergence() - 0.1).abs() < 1e-9);
        report.effects = Effects::default();
        assert_eq!(report.divergence(), 0.0);
    }

    #[test]
    fn window_times_are_rfc3339() {
        assert!(parse_time("from", "2026-11-30T08:00:00Z").is_ok());
        assert!(parse_time("from", "yesterday").is_err());
    }
}
