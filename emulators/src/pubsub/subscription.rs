//! One subscription's messages and leases: the delivery state machine.
//!
//! Invariant: every unacked message is in exactly one phase: ready (its seq is
//! in `ready`), blocked behind an earlier message of its ordering key (see
//! `ordering`), leased to one delivery (one valid ack id, one deadline), or
//! waiting out a retry backoff. Only ready messages are handed out, so no
//! message is delivered twice at once; a message leaves only by ack,
//! dead-lettering, retention or Seek. Timers live in a heap keyed by due time
//! and are checked lazily against the entry's current phase, so every
//! operation costs O(log n), never a scan of the backlog.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustc_hash::FxHashMap;
use tokio::sync::Notify;

use super::ordering::Keys;
use super::resources::Policy;
use super::stats::{AckRecord, SubscriptionStats, UnackedMessage};
use crate::faults::{FaultKind, Faults};
use crate::proto::pubsub_v1 as pb;

/// How many recently acked ack ids are remembered, so a retried ack of an
/// already acked message still succeeds under exactly-once delivery.
const RECENT_ACKS: usize = 1 << 20;

/// A published message as stored once and shared by every subscription.
#[derive(Debug)]
pub(super) struct Stored {
    /// Global publish sequence number (also the message id).
    pub seq: u64,
    /// The message, with `message_id` and `publish_time` set.
    pub message: pb::PubsubMessage,
    /// Emulated time of publishing (for retention).
    pub published_at: Duration,
    /// Emulated wall time of publishing (for Seek).
    pub publish_wall: SystemTime,
    /// Size counted by flow control.
    pub size: u64,
}

#[derive(Debug)]
enum Phase {
    Ready,
    /// Behind an earlier unleased message of the same ordering key.
    Blocked,
    Leased {
        gen: u64,
        deadline: Duration,
        stream: Option<u64>,
    },
    Waiting {
        until: Duration,
    },
}

#[derive(Debug)]
struct Entry {
    msg: Arc<Stored>,
    deliveries: u32,
    phase: Phase,
}

/// Flow-control budget of one StreamingPull stream.
#[derive(Debug, Default)]
struct Budget {
    max_messages: u64,
    max_bytes: u64,
    messages: u64,
    bytes: u64,
}

impl Budget {
    fn has_room(&self, size: u64) -> bool {
        let messages_ok = self.max_messages == 0 || self.messages < self.max_messages;
        let bytes_ok =
            self.max_bytes == 0 || self.bytes == 0 || self.bytes + size <= self.max_bytes;
        messages_ok && bytes_ok
    }
}

/// How a batch of messages is leased.
#[derive(Clone, Copy, Debug)]
pub(super) struct Lease {
    /// The stream taking them (flow control applies), or None for Pull.
    pub stream: Option<u64>,
    /// Lease length.
    pub deadline: Duration,
    /// At most this many messages.
    pub max: usize,
}

/// A parsed ack id: `{subscription uid}-{seq}-{gen}`. The uid keeps an ack
/// id from acking the same message on another subscription (or on a later
/// subscription of the same name).
#[derive(Clone, Debug)]
pub(super) struct AckId {
    pub raw: String,
    uid: u64,
    seq: u64,
    gen: u64,
}

impl AckId {
    /// Parses an ack id; None when malformed.
    pub fn parse(raw: &str) -> Option<Self> {
        let mut parts = raw.split('-');
        let (Some(uid), Some(seq), Some(gen), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        Some(Self {
            raw: raw.to_string(),
            uid: uid.parse().ok()?,
            seq: seq.parse().ok()?,
            gen: gen.parse().ok()?,
        })
    }
}

/// Which ack ids of a request took effect and which were invalid.
#[derive(Debug, Default)]
pub(super) struct AckOutcome {
    /// Ack ids that were applied (or were harmless no-ops).
    pub ok: Vec<String>,
    /// Ack ids that are unknown, stale, expired or malformed.
    pub invalid: Vec<String>,
    /// Some ack ids were malformed (INVALID_ARGUMENT whatever the delivery mode).
    pub malformed: bool,
    /// The subscription has exactly-once delivery (invalid ids are reported).
    pub exactly_once: bool,
}

/// A message to forward to a dead-letter topic.
#[derive(Debug)]
pub(super) struct Forward {
    pub topic: String,
    pub msg: Arc<Stored>,
    pub deliveries: u32,
}

/// One subscription: its settings and its messages.
#[derive(Debug)]
pub(super) struct Subscription {
    pub config: pb::Subscription,
    pub policy: Policy,
    /// Distinguishes a subscription from a later one with the same name.
    pub uid: u64,
    pub notify: Arc<Notify>,
    /// A push task serves this subscription (see `push`).
    pub pusher: bool,
    entries: FxHashMap<u64, Entry>,
    ready: BTreeSet<u64>,
    timers: BinaryHeap<Reverse<(Duration, u64, u64)>>,
    acked: BTreeMap<u64, Arc<Stored>>,
    recent_acks: FxHashMap<u64, u64>,
    recent_order: VecDeque<u64>,
    streams: FxHashMap<u64, Budget>,
    keys: Keys,
    next_gen: u64,
    stats: SubscriptionStats,
    ack_log: VecDeque<AckRecord>,
    ack_log_capacity: usize,
}

impl Subscription {
    /// A new, empty subscription with a normalized config.
    pub fn new(config: pb::Subscription, uid: u64, ack_log_capacity: usize) -> Self {
        Self {
            policy: Policy::of(&config),
            config,
            uid,
            notify: Arc::new(Notify::new()),
            pusher: false,
            entries: FxHashMap::default(),
            ready: BTreeSet::new(),
            timers: BinaryHeap::new(),
            acked: BTreeMap::new(),
            recent_acks: FxHashMap::default(),
            recent_order: VecDeque::new(),
            streams: FxHashMap::default(),
            keys: Keys::default(),
            next_gen: 1,
            stats: SubscriptionStats::default(),
            ack_log: VecDeque::new(),
            ack_log_capacity,
        }
    }

    /// Replaces the settings (UpdateSubscription, ModifyPushConfig).
    pub fn set_config(&mut self, config: pb::Subscription) {
        self.policy = Policy::of(&config);
        self.config = config;
        if self.policy.push.is_none() {
            // Pull delivers the next message of a key as soon as the one
            // before it is leased; push held it until the ack.
            for head in self.keys.heads() {
                self.unblock(Some(head));
            }
        }
        self.notify.notify_waiters();
    }

    /// Adds a newly published message, ready at once.
    pub fn add(&mut self, msg: Arc<Stored>) {
        self.stats.published_bytes += msg.size;
        self.enqueue(msg, 0);
        self.stats.published += 1;
    }

    /// Makes a message unacked and ready (or blocked behind its ordering key).
    fn enqueue(&mut self, msg: Arc<Stored>, deliveries: u32) {
        let seq = msg.seq;
        let mut phase = Phase::Ready;
        if let Some(key) = self.key_of(&msg) {
            if !self.keys.push(key, seq) {
                phase = Phase::Blocked;
            }
        }
        if matches!(phase, Phase::Ready) {
            self.ready.insert(seq);
        }
        self.entries.insert(
            seq,
            Entry {
                msg,
                deliveries,
                phase,
            },
        );
    }

    /// The ordering key that orders `msg` here, if ordering applies.
    fn key_of(&self, msg: &Stored) -> Option<String> {
        let key = &msg.message.ordering_key;
        (self.policy.ordering && !key.is_empty()).then(|| key.clone())
    }

    /// Makes `seq` ready if it is blocked (it became the head of its key).
    fn unblock(&mut self, seq: Option<u64>) {
        let Some(seq) = seq else { return };
        if let Some(entry) = self.entries.get_mut(&seq) {
            if matches!(entry.phase, Phase::Blocked) {
                entry.phase = Phase::Ready;
                self.ready.insert(seq);
            }
        }
    }

    /// Takes the leases of messages queued behind a failed one of their key.
    fn block(&mut self, seqs: Vec<u64>) {
        for seq in seqs {
            let Some(entry) = self.entries.get_mut(&seq) else {
                continue;
            };
            if let Phase::Leased { stream, .. } = entry.phase {
                let size = entry.msg.size;
                entry.phase = Phase::Blocked;
                self.release(stream, size);
            }
        }
    }

    /// Wakes every stream and Pull waiting on this subscription.
    pub fn wake(&self) {
        self.notify.notify_waiters();
    }

    /// The earliest pending timer (lease deadline or backoff end), if any.
    pub fn next_due(&self) -> Option<Duration> {
        self.timers.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Expires leases and ends backoffs that are due at `now`. Returns the
    /// messages to dead-letter.
    pub fn tick(&mut self, now: Duration, dead_letter_ok: bool) -> Vec<Forward> {
        let mut forwards = Vec::new();
        let mut woke = false;
        while let Some(Reverse((due, seq, gen))) = self.timers.peek().copied() {
            if due > now {
                break;
            }
            self.timers.pop();
            let Some(entry) = self.entries.get_mut(&seq) else {
                continue;
            };
            match entry.phase {
                Phase::Leased {
                    gen: current,
                    deadline,
                    stream,
                } if current == gen && deadline <= now => {
                    let size = entry.msg.size;
                    self.release(stream, size);
                    self.stats.expiries += 1;
                    forwards.extend(self.requeue(seq, now, dead_letter_ok));
                    woke = true;
                }
                Phase::Waiting { until } if until <= now => {
                    entry.phase = Phase::Ready;
                    self.ready.insert(seq);
                    woke = true;
                }
                _ => {}
            }
        }
        if woke {
            self.wake();
        }
        forwards
    }

    /// Leases up to `lease.max` ready messages, within the stream's flow control.
    pub fn take(&mut self, now: Duration, lease: Lease) -> Vec<pb::ReceivedMessage> {
        let mut out = Vec::new();
        while out.len() < lease.max {
            let Some(&seq) = self.ready.first() else {
                break;
            };
            let Some(entry) = self.entries.get(&seq) else {
                self.ready.remove(&seq);
                continue;
            };
            if entry.msg.published_at + self.policy.retention < now {
                self.ready.remove(&seq);
                if let Some(entry) = self.entries.remove(&seq) {
                    if let Some(key) = self.key_of(&entry.msg) {
                        let head = self.keys.removed(&key, seq);
                        self.unblock(head);
                    }
                }
                self.stats.retention_dropped += 1;
                continue;
            }
            let size = entry.msg.size;
            if let Some(budget) = lease.stream.and_then(|id| self.streams.get_mut(&id)) {
                if !budget.has_room(size) {
                    break;
                }
                budget.messages += 1;
                budget.bytes += size;
                self.stats.max_stream_outstanding_messages = self
                    .stats
                    .max_stream_outstanding_messages
                    .max(budget.messages);
            }
            self.ready.remove(&seq);
            let gen = self.next_gen;
            self.next_gen += 1;
            let deadline = now + lease.deadline;
            let Some(entry) = self.entries.get_mut(&seq) else {
                continue;
            };
            entry.deliveries += 1;
            entry.phase = Phase::Leased {
                gen,
                deadline,
                stream: lease.stream,
            };
            self.timers.push(Reverse((deadline, seq, gen)));
            self.stats.delivered += 1;
            self.stats.delivered_bytes += entry.msg.size;
            if entry.deliveries > 1 {
                self.stats.redeliveries += 1;
            }
            let delivery_attempt = if self.policy.dead_letter.is_some() {
                i32::try_from(entry.deliveries).unwrap_or(i32::MAX)
            } else {
                0
            };
            let msg = entry.msg.clone();
            if let Some(key) = self.key_of(&msg) {
                let head = self.keys.leased(&key);
                // Push sends one message of a key at a time: the next
                // waits for this one's ack.
                if self.policy.push.is_none() {
                    self.unblock(head);
                }
            }
            let message = msg.message.clone();
            out.push(pb::ReceivedMessage {
                ack_id: format!("{}-{seq}-{gen}", self.uid),
                message: Some(message),
                delivery_attempt,
            });
        }
        out
    }

    /// Counts one Acknowledge call naming `ids` ack ids.
    pub fn count_acknowledge(&mut self, ids: usize) {
        self.stats.acknowledge_calls += 1;
        self.stats.acknowledge_ids += ids as u64;
    }

    /// Counts `ids` ack ids of a ModifyAckDeadline call, and the call
    /// itself when `new_call` (a stream request's deadlines are applied
    /// one deadline at a time, as parts of one call).
    pub fn count_modify_ack_deadline(&mut self, ids: usize, new_call: bool) {
        self.stats.modify_ack_deadline_calls += u64::from(new_call);
        self.stats.modify_ack_deadline_ids += ids as u64;
    }

    /// Applies acknowledgements. Under exactly-once delivery only the newest,
    /// unexpired ack id of a message is valid.
    pub fn ack(&mut self, ids: &[AckId], now: Duration, faults: &Faults) -> AckOutcome {
        let mut outcome = AckOutcome {
            exactly_once: self.policy.exactly_once,
            ..AckOutcome::default()
        };
        let mut freed = false;
        for id in ids {
            if id.uid != self.uid {
                if self.policy.exactly_once {
                    outcome.invalid.push(id.raw.clone());
                } else {
                    outcome.ok.push(id.raw.clone());
                }
                continue;
            }
            let leased_by_id = self.entries.get(&id.seq).is_some_and(|e| {
                matches!(e.phase, Phase::Leased { gen, deadline, .. } if gen == id.gen && deadline > now)
            });
            let exists = self.entries.contains_key(&id.seq);
            let valid = if self.policy.exactly_once {
                leased_by_id
            } else {
                exists
            };
            if valid {
                freed |= self.apply_ack(id, now, faults, "Acknowledge");
                outcome.ok.push(id.raw.clone());
            } else if !self.policy.exactly_once || self.recent_acks.get(&id.seq) == Some(&id.gen) {
                outcome.ok.push(id.raw.clone());
            } else {
                outcome.invalid.push(id.raw.clone());
            }
        }
        if freed {
            self.wake();
        }
        outcome
    }

    /// Acks one message (subject to the `ack_lost` and `spurious_redelivery`
    /// faults of `method`). Returns whether a stream's flow-control room was freed.
    fn apply_ack(&mut self, id: &AckId, now: Duration, faults: &Faults, method: &str) -> bool {
        if faults.fire(FaultKind::AckLost, method).is_some() {
            tracing::info!(subscription = %self.config.name, ack_id = %id.raw, "fault: ack lost");
            self.stats.acks_lost += 1;
            return false;
        }
        let Some(entry) = self.entries.remove(&id.seq) else {
            return false;
        };
        let mut freed = false;
        match entry.phase {
            Phase::Ready => {
                self.ready.remove(&id.seq);
            }
            Phase::Leased { stream, .. } => freed = self.release(stream, entry.msg.size),
            Phase::Waiting { .. } | Phase::Blocked => {}
        }
        if let Some(key) = self.key_of(&entry.msg) {
            let head = self.keys.removed(&key, id.seq);
            self.unblock(head);
            if self.policy.push.is_some() {
                let head = self.keys.head(&key);
                self.unblock(head);
            }
        }
        self.stats.acks += 1;
        if self.ack_log.len() >= self.ack_log_capacity {
            self.ack_log.pop_front();
            self.stats.ack_log_dropped += 1;
        }
        if self.ack_log_capacity > 0 {
            self.ack_log.push_back(AckRecord {
                message_id: entry.msg.message.message_id.clone(),
                ack_time_secs: now.as_secs_f64(),
                delivery_attempt: entry.deliveries,
            });
        }
        self.remember_ack(id);
        if self.policy.retain_acked {
            self.acked.insert(id.seq, entry.msg.clone());
        }
        if faults.fire(FaultKind::SpuriousRedelivery, method).is_some() {
            tracing::info!(subscription = %self.config.name, ack_id = %id.raw, "fault: spurious redelivery");
            self.stats.spurious_redeliveries += 1;
            self.enqueue(entry.msg, entry.deliveries);
            freed = true;
        }
        freed
    }

    fn remember_ack(&mut self, id: &AckId) {
        if !self.policy.exactly_once {
            return;
        }
        self.recent_acks.insert(id.seq, id.gen);
        self.recent_order.push_back(id.seq);
        if self.recent_order.len() > RECENT_ACKS {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent_acks.remove(&old);
            }
        }
    }

    /// Extends (or with 0 s, nacks) leases. Ids that are not the current,
    /// unexpired lease of their message are reported invalid and ignored.
    pub fn modack(
        &mut self,
        ids: &[AckId],
        seconds: u32,
        now: Duration,
        dead_letter_ok: bool,
    ) -> (AckOutcome, Vec<Forward>) {
        let mut outcome = AckOutcome {
            exactly_once: self.policy.exactly_once,
            ..AckOutcome::default()
        };
        let mut forwards = Vec::new();
        for id in ids {
            let entry = self.entries.get_mut(&id.seq).filter(|_| id.uid == self.uid);
            let Some(entry) = entry else {
                outcome.invalid.push(id.raw.clone());
                continue;
            };
            let Phase::Leased {
                gen,
                deadline,
                stream,
            } = &mut entry.phase
            else {
                outcome.invalid.push(id.raw.clone());
                continue;
            };
            if *gen != id.gen || *deadline <= now {
                outcome.invalid.push(id.raw.clone());
                continue;
            }
            outcome.ok.push(id.raw.clone());
            if seconds > 0 {
                *deadline = now + Duration::from_secs(seconds.into());
                self.timers.push(Reverse((*deadline, id.seq, id.gen)));
                continue;
            }
            let (stream, size) = (*stream, entry.msg.size);
            self.release(stream, size);
            self.stats.nacks += 1;
            forwards.extend(self.requeue(id.seq, now, dead_letter_ok));
        }
        self.wake();
        (outcome, forwards)
    }

    /// Settles a push delivery by its answer: `acked` acks the message,
    /// otherwise it is nacked (redelivered after the retry policy's backoff,
    /// or dead-lettered). Only the delivery's own, unexpired lease is
    /// settled: an answer after the ack deadline changes nothing (the
    /// expiry already counted as a nack). Returns whether it was settled,
    /// and the messages to dead-letter.
    pub fn settle_push(
        &mut self,
        id: &AckId,
        acked: bool,
        now: Duration,
        faults: &Faults,
        dead_letter_ok: bool,
    ) -> (bool, Option<Forward>) {
        let current = id.uid == self.uid
            && self.entries.get(&id.seq).is_some_and(|e| {
                matches!(e.phase, Phase::Leased { gen, deadline, .. } if gen == id.gen && deadline > now)
            });
        if !current {
            return (false, None);
        }
        if acked {
            self.apply_ack(id, now, faults, "Push");
            self.wake();
            return (true, None);
        }
        if let Some(entry) = self.entries.get(&id.seq) {
            if let Phase::Leased { stream, .. } = entry.phase {
                let size = entry.msg.size;
                self.release(stream, size);
            }
        }
        let forward = self.requeue(id.seq, now, dead_letter_ok);
        self.wake();
        (true, forward)
    }

    /// Records a push request's answer in the counters.
    pub fn count_push(&mut self, answer: &str) {
        self.stats.push_requests += 1;
        *self
            .stats
            .push_answers
            .entry(answer.to_string())
            .or_default() += 1;
    }

    /// Records the push window in the counters.
    pub fn set_push_window(&mut self, window: u64) {
        self.stats.push_window = window;
    }

    /// After a nack or an expiry: dead-letter, back off, or make ready.
    fn requeue(&mut self, seq: u64, now: Duration, dead_letter_ok: bool) -> Option<Forward> {
        let key = self.entries.get(&seq).and_then(|e| self.key_of(&e.msg));
        if let Some(key) = &key {
            let later = self.keys.failed(key, seq);
            self.block(later);
        }
        let entry = self.entries.get_mut(&seq)?;
        if let Some((topic, max)) = &self.policy.dead_letter {
            if entry.deliveries >= *max && dead_letter_ok {
                let topic = topic.clone();
                let entry = self.entries.remove(&seq)?;
                if let Some(key) = &key {
                    let head = self.keys.removed(key, seq);
                    self.unblock(head);
                }
                self.stats.dead_lettered += 1;
                return Some(Forward {
                    topic,
                    msg: entry.msg,
                    deliveries: entry.deliveries,
                });
            }
        }
        let backoff = self.policy.backoff_after(entry.deliveries);
        if backoff.is_zero() {
            entry.phase = Phase::Ready;
            self.ready.insert(seq);
        } else {
            let until = now + backoff;
            entry.phase = Phase::Waiting { until };
            self.timers.push(Reverse((until, seq, 0)));
        }
        None
    }

    /// Frees a stream's flow-control room for one message. Returns whether it did.
    fn release(&mut self, stream: Option<u64>, size: u64) -> bool {
        let Some(budget) = stream.and_then(|id| self.streams.get_mut(&id)) else {
            return false;
        };
        budget.messages = budget.messages.saturating_sub(1);
        budget.bytes = budget.bytes.saturating_sub(size);
        true
    }

    /// Registers a stream with its flow-control limits (<= 0 = unlimited).
    pub fn open_stream(&mut self, id: u64, max_messages: i64, max_bytes: i64) {
        let limit = |v: i64| u64::try_from(v).unwrap_or(0);
        self.streams.insert(
            id,
            Budget {
                max_messages: limit(max_messages),
                max_bytes: limit(max_bytes),
                ..Budget::default()
            },
        );
    }

    /// Forgets a closed stream; its leases stay until acked or expired.
    pub fn close_stream(&mut self, id: u64) {
        self.streams.remove(&id);
    }

    /// Seeks to a time: retained messages published before it become acked,
    /// the others unacked and ready (acked ones only if retained).
    pub fn seek(&mut self, time: SystemTime, now: Duration) {
        let all = self.drain_all();
        let mut unacked = Vec::new();
        for (seq, (msg, deliveries)) in all {
            if msg.published_at + self.policy.retention < now {
                continue;
            }
            if msg.publish_wall < time {
                if self.policy.retain_acked {
                    self.acked.insert(seq, msg);
                }
            } else {
                unacked.push((msg, deliveries));
            }
        }
        for (msg, deliveries) in unacked {
            self.enqueue(msg, deliveries);
        }
        self.wake();
    }

    /// Seeks to a snapshot: exactly `snapshot`'s messages become unacked and
    /// ready; every other retained message becomes acked.
    pub fn seek_to(&mut self, snapshot: &BTreeMap<u64, Arc<Stored>>, now: Duration) {
        let all = self.drain_all();
        for (seq, (msg, _)) in &all {
            if self.policy.retain_acked && !snapshot.contains_key(seq) {
                self.acked.insert(*seq, msg.clone());
            }
        }
        for (seq, msg) in snapshot {
            if msg.published_at + self.policy.retention < now {
                continue;
            }
            let deliveries = all.get(seq).map_or(0, |(_, d)| *d);
            self.enqueue(msg.clone(), deliveries);
        }
        self.wake();
    }

    /// Empties every message structure (for Seek); returns the unacked and
    /// retained acked messages with their delivery counts.
    fn drain_all(&mut self) -> BTreeMap<u64, (Arc<Stored>, u32)> {
        let mut all: BTreeMap<u64, (Arc<Stored>, u32)> = BTreeMap::new();
        for (seq, msg) in std::mem::take(&mut self.acked) {
            all.insert(seq, (msg, 0));
        }
        for (seq, entry) in self.entries.drain() {
            all.insert(seq, (entry.msg, entry.deliveries));
        }
        self.ready.clear();
        self.timers.clear();
        self.keys.clear();
        for budget in self.streams.values_mut() {
            budget.messages = 0;
            budget.bytes = 0;
        }
        all
    }

    /// The unacked messages right now (for a snapshot).
    pub fn unacked_messages(&self) -> BTreeMap<u64, Arc<Stored>> {
        self.entries
            .iter()
            .map(|(seq, e)| (*seq, e.msg.clone()))
            .collect()
    }

    /// The counters, with the current backlog figures filled in.
    /// Acknowledgements that took effect.
    pub fn acks(&self) -> u64 {
        self.stats.acks
    }

    pub fn stats(&self) -> SubscriptionStats {
        let mut stats = self.stats.clone();
        stats.unacked = self.entries.len() as u64;
        stats.outstanding = self
            .entries
            .values()
            .filter(|e| matches!(e.phase, Phase::Leased { .. }))
            .count() as u64;
        stats.open_streams = self.streams.len() as u64;
        stats
    }

    /// The acks that took effect, oldest first.
    pub fn ack_log(&self) -> Vec<AckRecord> {
        self.ack_log.iter().cloned().collect()
    }

    /// The messages not acknowledged yet, in publish order.
    pub fn unacked(&self, now: Duration) -> Vec<UnackedMessage> {
        let mut seqs: Vec<&u64> = self.entries.keys().collect();
        seqs.sort();
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let Some(entry) = self.entries.get(seq) else {
                continue;
            };
            let (state, deadline_in_secs) = match entry.phase {
                Phase::Ready => ("ready", None),
                Phase::Blocked => ("blocked", None),
                Phase::Leased { deadline, .. } => {
                    ("leased", Some(deadline.saturating_sub(now).as_secs_f64()))
                }
                Phase::Waiting { .. } => ("backoff", None),
            };
            out.push(UnackedMessage {
                message_id: entry.msg.message.message_id.clone(),
                state,
                deliveries: entry.deliveries,
                deadline_in_secs,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn sub(edit: impl FnOnce(&mut pb::Subscription)) -> Subscription {
        let mut config = pb::Subscription {
            name: "projects/p/subscriptions/sub".into(),
            topic: "projects/p/topics/top".into(),
            ..Default::default()
        };
        edit(&mut config);
        super::super::resources::normalize_subscription(&mut config).unwrap();
        Subscription::new(config, 1, 100)
    }

    fn stored(seq: u64) -> Arc<Stored> {
        Arc::new(Stored {
            seq,
            message: pb::PubsubMessage {
                data: b"0123456789".to_vec(),
                message_id: seq.to_string(),
                ..Default::default()
            },
            published_at: Duration::ZERO,
            publish_wall: SystemTime::UNIX_EPOCH,
            size: 10,
        })
    }

    fn lease(stream: Option<u64>) -> Lease {
        Lease {
            stream,
            deadline: 10 * SEC,
            max: 100,
        }
    }

    fn ids(got: &[pb::ReceivedMessage]) -> Vec<AckId> {
        got.iter()
            .map(|m| AckId::parse(&m.ack_id).unwrap())
            .collect()
    }

    #[test]
    fn leased_message_is_not_handed_out_again_until_it_expires() {
        let mut s = sub(|_| {});
        s.add(stored(1));
        assert_eq!(s.take(SEC, lease(None)).len(), 1);
        assert!(s.take(2 * SEC, lease(None)).is_empty());
        assert!(s.tick(12 * SEC, false).is_empty());
        let again = s.take(12 * SEC, lease(None));
        assert_eq!(again.len(), 1);
        assert_eq!(s.stats().expiries, 1);
    }

    #[test]
    fn exactly_once_accepts_only_the_newest_unexpired_ack_id() {
        let mut s = sub(|c| c.enable_exactly_once_delivery = true);
        let faults = Faults::default();
        s.add(stored(1));
        let old = ids(&s.take(SEC, lease(None)));
        s.tick(12 * SEC, false);
        let new = ids(&s.take(12 * SEC, lease(None)));
        assert_eq!(s.ack(&old, 13 * SEC, &faults).invalid.len(), 1);
        assert_eq!(s.ack(&new, 13 * SEC, &faults).ok.len(), 1);
        assert_eq!(
            s.ack(&new, 14 * SEC, &faults).ok.len(),
            1,
            "retried ack is fine"
        );
        assert_eq!(s.stats().acks, 1);
    }

    #[test]
    fn stream_budget_caps_outstanding_messages() {
        let mut s = sub(|_| {});
        let faults = Faults::default();
        for seq in 1..=5 {
            s.add(stored(seq));
        }
        s.open_stream(7, 2, 0);
        let got = s.take(SEC, lease(Some(7)));
        assert_eq!(got.len(), 2);
        assert!(s.take(SEC, lease(Some(7))).is_empty());
        s.ack(&ids(&got[..1]), SEC, &faults);
        assert_eq!(s.take(SEC, lease(Some(7))).len(), 1);
        assert_eq!(s.stats().max_stream_outstanding_messages, 2);
    }

    #[test]
    fn nack_past_max_attempts_dead_letters() {
        let mut s = sub(|c| {
            c.dead_letter_policy = Some(pb::DeadLetterPolicy {
                dead_letter_topic: "projects/p/topics/dlq".into(),
                max_delivery_attempts: 5,
            })
        });
        s.add(stored(1));
        for attempt in 1..=5 {
            let got = s.take(SEC, lease(None));
            assert_eq!(got[0].delivery_attempt, attempt);
            let (_, forwards) = s.modack(&ids(&got), 0, SEC, true);
            assert_eq!(forwards.len(), usize::from(attempt == 5));
        }
        assert_eq!(s.stats().dead_lettered, 1);
        assert_eq!(s.stats().unacked, 0);
    }
}
