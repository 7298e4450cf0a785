//! The replay of one window, chunk by chunk: reads the replay
//! subscription, skips messages outside the window, plans each chunk
//! against the stored memberships and commits it through the store (or,
//! dry, only reports it), paced to the rate cap.
//!
//! Invariants: a chunk's messages are acked only after its commit (dry run:
//! its plan), and nacked when the replay pauses or stops on it; a message
//! outside the window is acked unread; a dry run never writes; a commit is
//! retried as the consumer retries a batch; whatever ends the replay, the
//! report says what was committed before.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::ShutdownBehavior;
use tokio::time::Instant;

use super::{divergence, pubsub_error, Ending, ReplayArgs, ReplayError, ReplayReport, Window};
use crate::model::batch::{Batch, Effects, Membership, MembershipKey};
use crate::model::item::Item;
use crate::pipeline::flusher::{backoff, FlushConfig, Tombstones};
use crate::pipeline::source::to_item;
use crate::store::selected::SelectedStore;
use crate::store::{Attempt, CommitReport, CounterStore};

/// One replay's state: the store, the window, what was done so far.
pub(super) struct Replayer<'a> {
    store: SelectedStore,
    args: &'a ReplayArgs,
    window: Window,
    subscription: String,
    /// Dry run: what earlier chunks would have written.
    overlay: HashMap<MembershipKey, Membership>,
    report: ReplayReport,
    started: Instant,
    /// The erased users' tombstones as last read, and the generation
    /// every chunk is labelled with (the store refuses a chunk whose label
    /// an erasure has moved past).
    tombstones: Tombstones,
    /// Whether `tombstones` was given the service's key: without it no
    /// event can be checked, so the replay stops at the first tombstone.
    keyed: bool,
}

impl<'a> Replayer<'a> {
    pub(super) fn new(
        store: SelectedStore,
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
                erased: 0,
                effects: Effects::default(),
                deltas: BTreeMap::new(),
                ending: Ending::Drained,
                dry_run: args.dry_run,
                failure: None,
            },
            started: Instant::now(),
            tombstones: Tombstones::new(&[]),
            keyed: false,
        }
    }

    /// This replay, checking each chunk against `tombstones` (the store's,
    /// read at the start) and labelling it with their generation; `keyed`:
    /// they hash with the service's key, so the events of the users they
    /// hold are dropped (without it, a tombstone stops the replay).
    pub(super) fn with_tombstones(self, tombstones: Tombstones, keyed: bool) -> Self {
        Self {
            tombstones,
            keyed,
            ..self
        }
    }

    pub(super) async fn run(
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
        match outcome {
            Ok(ending) => self.report.ending = ending,
            Err(error) => {
                tracing::error!(%error, messages = self.report.messages, "replay stopped; the report says what it committed");
                self.report.ending = Ending::Failed;
                self.report.failure = Some(error.to_string());
            }
        }
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
        // Without the key the set is empty: a tombstone stopped the replay
        // where it was read (at the start, or by a commit's recheck).
        let checked = self.tombstones.snapshot();
        if let Some(set) = &checked.hashes {
            let before = events.len();
            events.retain(|e| !self.tombstones.holds(set, e.user_id()));
            self.report.erased += (before - events.len()) as u64;
        }
        let mut batch = Batch::new(events, poison);
        batch.tombstone_generation = Some(checked.generation);
        // Read outside any transaction: locks nothing.
        let keys: Vec<MembershipKey> = batch.keys().cloned().collect();
        let mut stored = self.store.memberships(&keys).await?;
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
        let divergence = divergence(&would);
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
            for planned in &plan.memberships {
                self.overlay
                    .insert(planned.key.clone(), planned.membership());
            }
            (plan.effects, plan.deltas)
        } else {
            let planned = plan.deltas;
            let (report, dropped) = match self.commit(&mut batch).await {
                Ok(done) => done,
                Err(error) => {
                    for (_, handler) in chunk {
                        handler.nack();
                    }
                    return Err(error);
                }
            };
            // The committed plan is recomputed inside the transaction; with
            // the same reads it equals `plan`, unless users erased while the
            // chunk was on its way had their events dropped from it.
            let deltas = if dropped > 0 {
                self.report.erased += dropped;
                batch.plan(&stored).deltas
            } else {
                planned
            };
            (report.effects, deltas)
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

    /// Commits `batch` as the consumer does: a failure that proves nothing
    /// about the content is retried with backoff (the next attempt names the
    /// transaction it retries; the batch marker settles an unknown
    /// outcome), up to the consumer's default attempts; a commit that finds
    /// the tombstones changed since the chunk was checked reads them again,
    /// drops the events of the users erased meanwhile and goes again with
    /// the new generation. Returns the report and how many events that
    /// dropped.
    async fn commit(&self, batch: &mut Batch) -> Result<(CommitReport, u64), ReplayError> {
        let retry = FlushConfig::default();
        let mut attempt = 1;
        let mut this = Attempt::first();
        let mut dropped = 0;
        loop {
            match self.store.commit(batch, &this).await {
                Ok(report) => return Ok((report, dropped)),
                Err(error)
                    if error.is_tombstones_changed() && attempt < retry.commit_max_attempts =>
                {
                    tracing::info!(%error, attempt, "replay chunk: tombstones changed; checking it again");
                    let state = self.store.tombstones().await?;
                    if !self.keyed && !state.hashes.is_empty() {
                        return Err(ReplayError::Unkeyed);
                    }
                    dropped += self.tombstones.recheck(state, batch) as u64;
                    this = Attempt::after(&error);
                    attempt += 1;
                }
                Err(error) if error.is_retryable() && attempt < retry.commit_max_attempts => {
                    tracing::warn!(%error, attempt, "replay chunk commit failed; retrying");
                    tokio::time::sleep(backoff(&retry, attempt)).await;
                    this = Attempt::after(&error);
                    attempt += 1;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Sleeps so that the messages so far took at least `messages / rate`.
    async fn pace(&self) {
        let rate = f64::from(self.args.max_events_per_sec.max(1));
        let due = self.started + Duration::from_secs_f64(self.report.messages as f64 / rate);
        tokio::time::sleep_until(due).await;
    }
}
