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
//! `--max-divergence` is not committed: the replay pauses and reports.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_pubsub::model::{ExpirationPolicy, Message, Subscription};
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::ShutdownBehavior;
use tokio::time::Instant;

use crate::config::{check_pubsub_id, Endpoints, Target};
use crate::connect;
use crate::pipeline::aggregator::Item;
use crate::pipeline::batch::{Batch, Effects, Membership, MembershipKey};
use crate::pipeline::source::to_item;
use crate::store::firestore::{FirestoreDb, FirestoreStore, FirestoreStoreConfig, Read};
use crate::store::{Attempt, CounterStore, StoreError};

/// What to replay, as given on the command line.
#[derive(clap::Args, Clone, Debug)]
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
    /// Counter shards per post (as the service's `--counter-shards`).
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = 8)]
    pub counter_shards: u32,
    /// Batch marker lifetime, in days (as the service's `--marker-ttl-days`).
    #[arg(long, env = "HOTCOUNT_MARKER_TTL_DAYS", default_value_t = 40)]
    pub marker_ttl_days: u64,
    /// Keep the replay subscription afterwards.
    #[arg(long)]
    pub keep_subscription: bool,
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
}

impl ReplayError {
    /// Whether running the replay again may succeed (it is idempotent).
    pub fn is_retryable(&self) -> bool {
        match self {
            ReplayError::Store(e) => e.is_retryable(),
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
    /// Effects committed (dry run: that would be committed).
    pub effects: Effects,
    /// Net count change per post (dry run: that would be made).
    pub deltas: BTreeMap<String, i64>,
    /// Why it ended.
    pub ending: Ending,
    /// Whether nothing was written.
    pub dry_run: bool,
}

impl ReplayReport {
    /// Applied events over events considered.
    pub fn divergence(&self) -> f64 {
        let events = self.effects.applied + self.effects.duplicates + self.effects.stale;
        if events == 0 {
            0.0
        } else {
            self.effects.applied as f64 / events as f64
        }
    }
}

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
            Replayer::new(store, args, window, &subscription)
                .run(subscriber)
                .await
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

async fn open_store(
    endpoints: &Endpoints,
    args: &ReplayArgs,
) -> Result<FirestoreStore, ReplayError> {
    let db = FirestoreDb::open(endpoints, &args.target).await?;
    Ok(FirestoreStore::new(
        db,
        FirestoreStoreConfig {
            consumer: args.consumer.clone(),
            counter_shards: args.counter_shards.max(1),
            counter_shard_target_writes_per_sec:
                crate::store::counter_shards::DEFAULT_TARGET_WRITES_PER_SEC,
            marker_ttl: Duration::from_secs(86_400 * args.marker_ttl_days.clamp(1, 3650)),
        },
    ))
}

struct Replayer<'a> {
    store: FirestoreStore,
    args: &'a ReplayArgs,
    window: Window,
    subscription: String,
    /// Dry run: what earlier chunks would have written.
    overlay: HashMap<MembershipKey, Membership>,
    report: ReplayReport,
    started: Instant,
}

impl<'a> Replayer<'a> {
    fn new(
        store: FirestoreStore,
        args: &'a ReplayArgs,
        window: Window,
        subscription: &str,
    ) -> Self {
        Self {
            store,
            args,
            window,
            subscription: subscription.to_string(),
            overlay: HashMap::new(),
            report: ReplayReport {
                subscription: subscription.to_string(),
                deleted: false,
                messages: 0,
                skipped: 0,
                effects: Effects::default(),
                deltas: BTreeMap::new(),
                ending: Ending::Drained,
                dry_run: args.dry_run,
            },
            started: Instant::now(),
        }
    }

    async fn run(
        mut self,
        subscriber: google_cloud_pubsub::client::Subscriber,
    ) -> Result<ReplayReport, ReplayError> {
        let chunk = self.args.chunk_events.max(1);
        let mut stream = subscriber
            .subscribe(self.subscription.clone())
            .set_max_outstanding_messages(i64::try_from(chunk * 2).unwrap_or(i64::MAX))
            .set_shutdown_behavior(ShutdownBehavior::NackImmediately)
            .build();
        let token = stream.shutdown_token();
        let idle = Duration::from_millis(self.args.idle_ms.max(1));
        let gather = Duration::from_millis(100).min(idle);
        let mut end_deadline: Option<Instant> = None;
        let mut pending: Vec<(Message, Handler)> = Vec::new();
        let outcome = loop {
            if end_deadline.is_some_and(|d| Instant::now() >= d) {
                break self.finish(&mut pending, Ending::WindowEnd).await;
            }
            let mut wait = if pending.is_empty() { idle } else { gather };
            if let Some(d) = end_deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            let mut ending = None;
            match tokio::time::timeout(wait, stream.next()).await {
                Ok(Some(Ok((message, handler)))) => {
                    if !self.in_window(&message, &mut end_deadline) {
                        handler.ack();
                        continue;
                    }
                    pending.push((message, handler));
                    if pending.len() < chunk {
                        continue;
                    }
                }
                Ok(Some(Err(e))) => break Err(pubsub_error("pulling", &self.subscription, e)),
                Ok(None) => ending = Some(Ending::Drained),
                Err(_) if pending.is_empty() && end_deadline.is_none() => {
                    ending = Some(Ending::Drained)
                }
                Err(_) => {}
            }
            if let Some(ending) = ending {
                break self.finish(&mut pending, ending).await;
            }
            match self.process(std::mem::take(&mut pending)).await {
                Ok(true) => {}
                Ok(false) => break Ok(Ending::Paused),
                Err(e) => break Err(e),
            }
        };
        for (_, handler) in pending {
            handler.nack();
        }
        token.shutdown().await;
        self.report.ending = outcome?;
        Ok(self.report)
    }

    /// Processes what is pending, then ends with `ending` (or paused).
    async fn finish(
        &mut self,
        pending: &mut Vec<(Message, Handler)>,
        ending: Ending,
    ) -> Result<Ending, ReplayError> {
        if pending.is_empty() {
            return Ok(ending);
        }
        if self.process(std::mem::take(pending)).await? {
            Ok(ending)
        } else {
            Ok(Ending::Paused)
        }
    }

    /// Whether `message` was published inside the window; a later one starts
    /// the end grace period.
    fn in_window(&mut self, message: &Message, end_deadline: &mut Option<Instant>) -> bool {
        let published = message.publish_time.and_then(|t| {
            let d = Duration::new(
                u64::try_from(t.seconds()).ok()?,
                u32::try_from(t.nanos()).ok()?,
            );
            Some(SystemTime::UNIX_EPOCH + d)
        });
        let Some(published) = published else {
            return true;
        };
        if published < self.window.from {
            self.report.skipped += 1;
            return false;
        }
        if published >= self.window.to {
            self.report.skipped += 1;
            if end_deadline.is_none() {
                *end_deadline =
                    Some(Instant::now() + Duration::from_millis(self.args.end_grace_ms));
            }
            return false;
        }
        true
    }

    /// Plans (and unless dry, commits) one chunk; `Ok(false)` = paused, chunk nacked.
    async fn process(&mut self, chunk: Vec<(Message, Handler)>) -> Result<bool, ReplayError> {
        if chunk.is_empty() {
            return Ok(true);
        }
        let mut events = Vec::new();
        let mut poison = Vec::new();
        for (message, _) in &chunk {
            match to_item(message) {
                Item::Event(e) => events.push(e),
                Item::Poison(p) => poison.push(*p),
            }
        }
        let batch = Batch::new(events, poison);
        // Read outside any transaction: locks nothing.
        let read = self
            .store
            .db()
            .read_memberships(batch.keys(), None, Read::Latest);
        let mut stored = read.await?.found;
        if self.args.dry_run {
            for (key, m) in &self.overlay {
                if stored.contains_key(key) || batch.events.contains_key(key) {
                    stored.insert(key.clone(), m.clone());
                }
            }
        }
        let plan = batch.plan(&stored);
        let mut would = self.report.effects;
        would.add(plan.effects);
        let considered = would.applied + would.duplicates + would.stale;
        let divergence = if considered == 0 {
            0.0
        } else {
            would.applied as f64 / considered as f64
        };
        if !self.args.dry_run && divergence > self.args.max_divergence {
            tracing::warn!(
                divergence,
                max = self.args.max_divergence,
                applied = would.applied,
                "replay paused: it would change more than --max-divergence allows"
            );
            for (_, handler) in chunk {
                handler.nack();
            }
            return Ok(false);
        }
        let (effects, deltas) = if self.args.dry_run {
            for (key, m) in &plan.memberships {
                self.overlay.insert(key.clone(), m.clone());
            }
            (plan.effects, plan.deltas)
        } else {
            let report = self.store.commit(&batch, &Attempt::first()).await?;
            // The committed plan is recomputed inside the transaction; with
            // the same reads it equals `plan`.
            (report.effects, plan.deltas)
        };
        self.report.messages += chunk.len() as u64;
        self.report.effects.add(effects);
        for (post, delta) in deltas {
            *self.report.deltas.entry(post).or_default() += delta;
        }
        self.report.deltas.retain(|_, d| *d != 0);
        for (_, handler) in chunk {
            handler.ack();
        }
        self.pace().await;
        Ok(true)
    }

    /// Sleeps so that the messages so far took at least `messages / rate`.
    async fn pace(&self) {
        let rate = f64::from(self.args.max_events_per_sec.max(1));
        let due = self.started + Duration::from_secs_f64(self.report.messages as f64 / rate);
        tokio::time::sleep_until(due).await;
    }
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
            effects: Effects {
                applied: 1,
                duplicates: 8,
                stale: 1,
                poison: 0,
            },
            deltas: BTreeMap::new(),
            ending: Ending::Drained,
            dry_run: false,
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
