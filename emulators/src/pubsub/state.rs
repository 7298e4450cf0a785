//! Topics and subscriptions, and the operations both transports (gRPC and
//! REST) share: one state machine behind one lock.
//!
//! Invariant: every stored name is valid, every subscription's config is
//! normalized, and a topic's `subs` set names exactly the subscriptions
//! attached to it. Operations tick a subscription's timers before acting, so
//! they always see leases and backoffs as of the emulated `now`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tonic::Status;

use super::names::{self, Kind};
use super::resources::{self, Push};
use super::stats::{AckRecord, SubscriptionStats, UnackedMessage};
use super::subscription::{AckId, AckOutcome, Forward, Lease, Stored, Subscription};
use crate::faults::Faults;
use crate::proto::pubsub_v1 as pb;

/// Largest publish request the real service accepts: 10 MB (10,000,000
/// bytes) of encoded `PublishRequest`, its `request_size`
/// (<https://cloud.google.com/pubsub/quotas#resource_limits>).
const MAX_PUBLISH_BYTES: usize = 10_000_000;
/// Most messages in one publish request.
const MAX_PUBLISH_MESSAGES: usize = 1000;
/// Most attributes on one message.
const MAX_ATTRIBUTES: usize = 100;
/// Longest attribute key, in bytes.
const MAX_ATTRIBUTE_KEY_BYTES: usize = 256;
/// Longest attribute value, in bytes.
const MAX_ATTRIBUTE_VALUE_BYTES: usize = 1024;
/// Longest ordering key, in bytes.
const MAX_ORDERING_KEY_BYTES: usize = 1024;
/// Default and largest page of a List call.
const MAX_PAGE: usize = 1000;

#[derive(Debug)]
struct Topic {
    config: pb::Topic,
    subs: BTreeSet<String>,
    snapshots: BTreeSet<String>,
}

/// A snapshot: the unacked messages of a subscription when it was taken, plus
/// every message published to its topic since.
#[derive(Debug)]
struct Snapshot {
    config: pb::Snapshot,
    messages: BTreeMap<u64, Arc<Stored>>,
}

/// How long a snapshot lives (the real service: 7 days from its oldest message).
const SNAPSHOT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The whole emulated Pub/Sub.
#[derive(Debug, Default)]
pub(super) struct State {
    topics: BTreeMap<String, Topic>,
    subs: BTreeMap<String, Subscription>,
    snapshots: BTreeMap<String, Snapshot>,
    next_seq: u64,
    next_uid: u64,
    ack_log_capacity: usize,
    /// Push subscriptions that need a push task started: (name, uid).
    pub pushers_to_start: Vec<(String, u64)>,
}

/// NOT_FOUND as the real service words it.
fn not_found(name: &str) -> Status {
    let short = name.rsplit('/').next().unwrap_or(name);
    Status::not_found(format!("Resource not found (resource={short})."))
}

/// Pages through `items` (sorted by name) after `token`.
fn page<T>(
    items: impl Iterator<Item = (String, T)>,
    page_size: i32,
    token: &str,
) -> (Vec<T>, String) {
    let size = usize::try_from(page_size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(MAX_PAGE)
        .min(MAX_PAGE);
    let mut out = Vec::new();
    let mut last = String::new();
    let mut more = false;
    for (name, item) in items {
        if !token.is_empty() && name.as_str() <= token {
            continue;
        }
        if out.len() == size {
            more = true;
            break;
        }
        last = name;
        out.push(item);
    }
    (out, if more { last } else { String::new() })
}

impl State {
    /// An empty emulator whose subscriptions keep at most `ack_log_capacity` ack records.
    pub fn new(ack_log_capacity: usize) -> Self {
        Self {
            ack_log_capacity,
            ..Self::default()
        }
    }

    // ---- topics ----

    pub fn create_topic(&mut self, mut topic: pb::Topic) -> Result<pb::Topic, Status> {
        resources::normalize_topic(&mut topic)?;
        if self.topics.contains_key(&topic.name) {
            return Err(Status::already_exists("Topic already exists"));
        }
        self.topics.insert(
            topic.name.clone(),
            Topic {
                config: topic.clone(),
                subs: BTreeSet::new(),
                snapshots: BTreeSet::new(),
            },
        );
        Ok(topic)
    }

    pub fn get_topic(&self, name: &str) -> Result<pb::Topic, Status> {
        names::parse(name, Kind::Topic)?;
        self.topics
            .get(name)
            .map(|t| t.config.clone())
            .ok_or_else(|| not_found(name))
    }

    pub fn update_topic(&mut self, topic: pb::Topic, mask: &[String]) -> Result<pb::Topic, Status> {
        names::parse(&topic.name, Kind::Topic)?;
        let entry = self
            .topics
            .get_mut(&topic.name)
            .ok_or_else(|| not_found(&topic.name))?;
        let next = resources::update_topic(&entry.config, topic, mask)?;
        entry.config = next.clone();
        Ok(next)
    }

    pub fn list_topics(
        &self,
        project: &str,
        page_size: i32,
        token: &str,
    ) -> Result<(Vec<pb::Topic>, String), Status> {
        let project = names::parse_project(project)?;
        let prefix = format!("projects/{project}/topics/");
        let items = self
            .topics
            .range(prefix.clone()..)
            .take_while(|(n, _)| n.starts_with(&prefix))
            .map(|(n, t)| (n.clone(), t.config.clone()));
        Ok(page(items, page_size, token))
    }

    pub fn topic_subscriptions(
        &self,
        topic: &str,
        page_size: i32,
        token: &str,
    ) -> Result<(Vec<String>, String), Status> {
        names::parse(topic, Kind::Topic)?;
        let entry = self.topics.get(topic).ok_or_else(|| not_found(topic))?;
        let items = entry.subs.iter().map(|s| (s.clone(), s.clone()));
        Ok(page(items, page_size, token))
    }

    pub fn delete_topic(&mut self, name: &str) -> Result<(), Status> {
        names::parse(name, Kind::Topic)?;
        let topic = self.topics.remove(name).ok_or_else(|| not_found(name))?;
        for sub in topic.subs {
            if let Some(s) = self.subs.get_mut(&sub) {
                let mut config = s.config.clone();
                config.topic = names::DELETED_TOPIC.to_string();
                s.set_config(config);
            }
        }
        Ok(())
    }

    /// Publishes `messages` to `topic`; returns their ids in order.
    pub fn publish(
        &mut self,
        topic: &str,
        messages: Vec<pb::PubsubMessage>,
        now: Duration,
        wall: SystemTime,
    ) -> Result<Vec<String>, Status> {
        names::parse(topic, Kind::Topic)?;
        if !self.topics.contains_key(topic) {
            return Err(not_found(topic));
        }
        check_publish(topic, &messages)?;
        Ok(self.append(topic, messages, now, wall))
    }

    /// Appends checked messages to an existing topic and its subscriptions.
    fn append(
        &mut self,
        topic: &str,
        messages: Vec<pb::PubsubMessage>,
        now: Duration,
        wall: SystemTime,
    ) -> Vec<String> {
        let Some(entry) = self.topics.get(topic) else {
            return Vec::new();
        };
        let mut ids = Vec::with_capacity(messages.len());
        let mut stored = Vec::with_capacity(messages.len());
        for mut message in messages {
            self.next_seq += 1;
            let seq = self.next_seq;
            message.message_id = seq.to_string();
            message.publish_time = Some(prost_types::Timestamp::from(wall));
            let size = message_size(&message);
            ids.push(message.message_id.clone());
            stored.push(Arc::new(Stored {
                seq,
                message,
                published_at: now,
                publish_wall: wall,
                size,
            }));
        }
        for name in &entry.subs {
            if let Some(sub) = self.subs.get_mut(name) {
                for msg in &stored {
                    sub.add(msg.clone());
                }
                sub.wake();
            }
        }
        for name in &entry.snapshots {
            if let Some(snapshot) = self.snapshots.get_mut(name) {
                for msg in &stored {
                    snapshot.messages.insert(msg.seq, msg.clone());
                }
            }
        }
        ids
    }

    /// Forwards dead-lettered messages of `source` to their dead-letter topics.
    fn forward(&mut self, source: &str, forwards: Vec<Forward>, now: Duration, wall: SystemTime) {
        let (project, id) = match names::parse(source, Kind::Subscription) {
            Ok(n) => (n.project.to_string(), n.id.to_string()),
            Err(_) => return,
        };
        for f in forwards {
            let mut message = f.msg.message.clone();
            message.message_id.clear();
            message.publish_time = None;
            let attrs = &mut message.attributes;
            attrs.insert(
                "CloudPubSubDeadLetterSourceDeliveryCount".into(),
                f.deliveries.to_string(),
            );
            attrs.insert("CloudPubSubDeadLetterSourceSubscription".into(), id.clone());
            attrs.insert(
                "CloudPubSubDeadLetterSourceSubscriptionProject".into(),
                project.clone(),
            );
            let published = chrono::DateTime::<chrono::Utc>::from(f.msg.publish_wall);
            attrs.insert(
                "CloudPubSubDeadLetterSourceTopicPublishTime".into(),
                published.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            );
            self.append(&f.topic, vec![message], now, wall);
        }
    }

    // ---- subscriptions ----

    pub fn create_subscription(
        &mut self,
        mut config: pb::Subscription,
    ) -> Result<pb::Subscription, Status> {
        resources::normalize_subscription(&mut config)?;
        if self.subs.contains_key(&config.name) {
            return Err(Status::already_exists("Subscription already exists"));
        }
        if !self.topics.contains_key(&config.topic) {
            return Err(not_found(&config.topic));
        }
        self.check_dead_letter_topic(&config)?;
        self.next_uid += 1;
        if let Some(topic) = self.topics.get_mut(&config.topic) {
            topic.subs.insert(config.name.clone());
        }
        self.subs.insert(
            config.name.clone(),
            Subscription::new(config.clone(), self.next_uid, self.ack_log_capacity),
        );
        self.serve_push(&config.name);
        Ok(config)
    }

    /// Asks for a push task for `name` if it pushes and has none.
    fn serve_push(&mut self, name: &str) {
        if let Some(sub) = self.subs.get_mut(name) {
            if sub.policy.push.is_some() && !sub.pusher {
                sub.pusher = true;
                self.pushers_to_start.push((name.to_string(), sub.uid));
            }
        }
    }

    /// The push settings of `name` for its push task (which must stop when
    /// this is `None`: the subscription is gone, recreated, or pulls now,
    /// and is marked as served by no task).
    pub fn push_settings(&mut self, name: &str, uid: u64) -> Option<(Push, Duration)> {
        let sub = self.subs.get_mut(name).filter(|s| s.uid == uid)?;
        match &sub.policy.push {
            Some(push) => Some((push.clone(), sub.policy.ack_deadline)),
            None => {
                sub.pusher = false;
                None
            }
        }
    }

    /// Settles a push delivery of `name` by its answer (see
    /// [`Subscription::settle_push`]); dead-letters as needed.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_push(
        &mut self,
        name: &str,
        uid: u64,
        id: &AckId,
        acked: bool,
        now: Duration,
        wall: SystemTime,
        faults: &Faults,
    ) -> bool {
        let dl_ok = self.dead_letter_ok(name);
        let Ok(sub) = self.sub_mut(name, Some(uid)) else {
            return false;
        };
        let (settled, forward) = sub.settle_push(id, acked, now, faults, dl_ok);
        if let Some(forward) = forward {
            self.forward(name, vec![forward], now, wall);
        }
        settled
    }

    /// Records a push answer in `name`'s counters.
    pub fn count_push(&mut self, name: &str, uid: u64, answer: &str) {
        if let Ok(sub) = self.sub_mut(name, Some(uid)) {
            sub.count_push(answer);
        }
    }

    /// Records `name`'s push window in its counters.
    pub fn set_push_window(&mut self, name: &str, uid: u64, window: u64) {
        if let Ok(sub) = self.sub_mut(name, Some(uid)) {
            sub.set_push_window(window);
        }
    }

    /// ModifyPushConfig: switches `name` to push (or back to pull with an
    /// empty config), keeping the current `x-goog-version` unless given.
    pub fn modify_push_config(
        &mut self,
        name: &str,
        config: Option<pb::PushConfig>,
    ) -> Result<(), Status> {
        names::parse(name, Kind::Subscription)?;
        let current = self.get_subscription(name)?;
        let mut next = current.clone();
        next.push_config = Some(resources::modified_push_config(
            &current.push_config,
            config.unwrap_or_default(),
        ));
        resources::normalize_subscription(&mut next)?;
        if let Some(sub) = self.subs.get_mut(name) {
            sub.set_config(next);
        }
        self.serve_push(name);
        Ok(())
    }

    fn check_dead_letter_topic(&self, config: &pb::Subscription) -> Result<(), Status> {
        match &config.dead_letter_policy {
            Some(p) if !self.topics.contains_key(&p.dead_letter_topic) => {
                Err(not_found(&p.dead_letter_topic))
            }
            _ => Ok(()),
        }
    }

    pub fn get_subscription(&self, name: &str) -> Result<pb::Subscription, Status> {
        names::parse(name, Kind::Subscription)?;
        self.subs
            .get(name)
            .map(|s| s.config.clone())
            .ok_or_else(|| not_found(name))
    }

    pub fn update_subscription(
        &mut self,
        update: pb::Subscription,
        mask: &[String],
    ) -> Result<pb::Subscription, Status> {
        names::parse(&update.name, Kind::Subscription)?;
        let current = self.get_subscription(&update.name)?;
        let next = resources::update_subscription(&current, update, mask)?;
        self.check_dead_letter_topic(&next)?;
        if let Some(sub) = self.subs.get_mut(&next.name) {
            sub.set_config(next.clone());
        }
        self.serve_push(&next.name);
        Ok(next)
    }

    pub fn list_subscriptions(
        &self,
        project: &str,
        page_size: i32,
        token: &str,
    ) -> Result<(Vec<pb::Subscription>, String), Status> {
        let project = names::parse_project(project)?;
        let prefix = format!("projects/{project}/subscriptions/");
        let items = self
            .subs
            .range(prefix.clone()..)
            .take_while(|(n, _)| n.starts_with(&prefix))
            .map(|(n, s)| (n.clone(), s.config.clone()));
        Ok(page(items, page_size, token))
    }

    pub fn delete_subscription(&mut self, name: &str) -> Result<(), Status> {
        names::parse(name, Kind::Subscription)?;
        let sub = self.subs.remove(name).ok_or_else(|| not_found(name))?;
        if let Some(topic) = self.topics.get_mut(&sub.config.topic) {
            topic.subs.remove(name);
        }
        sub.wake();
        Ok(())
    }

    /// The subscription `name`, NOT_FOUND if it is gone (or was recreated
    /// since `uid` was taken).
    pub fn sub(&self, name: &str, uid: Option<u64>) -> Result<&Subscription, Status> {
        match self.subs.get(name) {
            Some(s) if uid.is_none_or(|u| u == s.uid) => Ok(s),
            _ => Err(not_found(name)),
        }
    }

    fn sub_mut(&mut self, name: &str, uid: Option<u64>) -> Result<&mut Subscription, Status> {
        match self.subs.get_mut(name) {
            Some(s) if uid.is_none_or(|u| u == s.uid) => Ok(s),
            _ => Err(not_found(name)),
        }
    }

    fn dead_letter_ok(&self, name: &str) -> bool {
        let topic = self
            .subs
            .get(name)
            .and_then(|s| s.policy.dead_letter.as_ref())
            .map(|(t, _)| t.as_str());
        topic.is_some_and(|t| self.topics.contains_key(t))
    }

    /// Runs `name`'s due timers (lease expiry, backoff end, dead-lettering).
    pub fn tick(
        &mut self,
        name: &str,
        uid: Option<u64>,
        now: Duration,
        wall: SystemTime,
    ) -> Result<(), Status> {
        let dl_ok = self.dead_letter_ok(name);
        let forwards = self.sub_mut(name, uid)?.tick(now, dl_ok);
        if !forwards.is_empty() {
            self.forward(name, forwards, now, wall);
        }
        Ok(())
    }

    /// Leases ready messages of `name` (after running its timers).
    pub fn take(
        &mut self,
        name: &str,
        uid: Option<u64>,
        lease: Lease,
        now: Duration,
        wall: SystemTime,
    ) -> Result<Vec<pb::ReceivedMessage>, Status> {
        self.tick(name, uid, now, wall)?;
        Ok(self.sub_mut(name, uid)?.take(now, lease))
    }

    /// Acknowledges `ids` on `name` (one Acknowledge call, counted).
    pub fn ack(
        &mut self,
        name: &str,
        ids: &[AckId],
        now: Duration,
        wall: SystemTime,
        faults: &Faults,
    ) -> Result<AckOutcome, Status> {
        self.tick(name, None, now, wall)?;
        let sub = self.sub_mut(name, None)?;
        sub.count_acknowledge(ids.len());
        Ok(sub.ack(ids, now, faults))
    }

    /// Modifies the ack deadline of `ids` on `name` (0 = nack); counted as
    /// a ModifyAckDeadline call when `new_call`, else as part of the last.
    pub fn modack(
        &mut self,
        name: &str,
        ids: &[AckId],
        (seconds, new_call): (u32, bool),
        now: Duration,
        wall: SystemTime,
    ) -> Result<AckOutcome, Status> {
        self.tick(name, None, now, wall)?;
        let dl_ok = self.dead_letter_ok(name);
        let sub = self.sub_mut(name, None)?;
        sub.count_modify_ack_deadline(ids.len(), new_call);
        let (outcome, forwards) = sub.modack(ids, seconds, now, dl_ok);
        if !forwards.is_empty() {
            self.forward(name, forwards, now, wall);
        }
        Ok(outcome)
    }

    /// Seeks `name` to `time`.
    pub fn seek(&mut self, name: &str, time: SystemTime, now: Duration) -> Result<(), Status> {
        names::parse(name, Kind::Subscription)?;
        self.sub_mut(name, None)?.seek(time, now);
        Ok(())
    }

    /// Registers stream `id` on `name`; returns the subscription's uid.
    pub fn open_stream(
        &mut self,
        name: &str,
        id: u64,
        max_messages: i64,
        max_bytes: i64,
    ) -> Result<u64, Status> {
        let sub = self.sub_mut(name, None)?;
        sub.open_stream(id, max_messages, max_bytes);
        Ok(sub.uid)
    }

    /// Unregisters stream `id` (no-op if the subscription is gone).
    pub fn close_stream(&mut self, name: &str, uid: u64, id: u64) {
        if let Ok(sub) = self.sub_mut(name, Some(uid)) {
            sub.close_stream(id);
        }
    }

    // ---- snapshots ----

    pub fn create_snapshot(
        &mut self,
        req: pb::CreateSnapshotRequest,
        wall: SystemTime,
    ) -> Result<pb::Snapshot, Status> {
        names::parse(&req.name, Kind::Snapshot)?;
        names::parse(&req.subscription, Kind::Subscription)?;
        if self.snapshots.contains_key(&req.name) {
            return Err(Status::already_exists("Snapshot already exists"));
        }
        let sub = self.sub(&req.subscription, None)?;
        let topic = sub.config.topic.clone();
        let messages = sub.unacked_messages();
        let oldest = messages
            .values()
            .map(|m| m.publish_wall)
            .min()
            .unwrap_or(wall);
        let config = pb::Snapshot {
            name: req.name.clone(),
            topic: topic.clone(),
            expire_time: Some(prost_types::Timestamp::from(oldest + SNAPSHOT_TTL)),
            labels: req.labels,
        };
        let topic_entry = self
            .topics
            .get_mut(&topic)
            .ok_or_else(|| Status::failed_precondition("the subscription's topic was deleted"))?;
        topic_entry.snapshots.insert(req.name.clone());
        self.snapshots.insert(
            req.name,
            Snapshot {
                config: config.clone(),
                messages,
            },
        );
        Ok(config)
    }

    pub fn get_snapshot(&self, name: &str) -> Result<pb::Snapshot, Status> {
        names::parse(name, Kind::Snapshot)?;
        self.snapshots
            .get(name)
            .map(|s| s.config.clone())
            .ok_or_else(|| not_found(name))
    }

    pub fn list_snapshots(
        &self,
        project: &str,
        page_size: i32,
        token: &str,
    ) -> Result<(Vec<pb::Snapshot>, String), Status> {
        let project = names::parse_project(project)?;
        let prefix = format!("projects/{project}/snapshots/");
        let items = self
            .snapshots
            .range(prefix.clone()..)
            .take_while(|(n, _)| n.starts_with(&prefix))
            .map(|(n, s)| (n.clone(), s.config.clone()));
        Ok(page(items, page_size, token))
    }

    pub fn delete_snapshot(&mut self, name: &str) -> Result<(), Status> {
        names::parse(name, Kind::Snapshot)?;
        let snapshot = self.snapshots.remove(name).ok_or_else(|| not_found(name))?;
        if let Some(topic) = self.topics.get_mut(&snapshot.config.topic) {
            topic.snapshots.remove(name);
        }
        Ok(())
    }

    /// Seeks `name` to snapshot `snapshot` (which must be of the same topic).
    pub fn seek_snapshot(
        &mut self,
        name: &str,
        snapshot: &str,
        now: Duration,
    ) -> Result<(), Status> {
        names::parse(name, Kind::Subscription)?;
        names::parse(snapshot, Kind::Snapshot)?;
        let snap = self
            .snapshots
            .get(snapshot)
            .ok_or_else(|| not_found(snapshot))?;
        let sub = self.subs.get_mut(name).ok_or_else(|| not_found(name))?;
        if snap.config.topic != sub.config.topic {
            return Err(Status::invalid_argument(
                "The snapshot and the subscription must be of the same topic",
            ));
        }
        sub.seek_to(&snap.messages, now);
        Ok(())
    }

    // ---- records ----

    pub fn stats(
        &mut self,
        name: &str,
        now: Duration,
        wall: SystemTime,
    ) -> Option<SubscriptionStats> {
        self.tick(name, None, now, wall).ok()?;
        self.subs.get(name).map(Subscription::stats)
    }

    pub fn acks(&self, name: &str) -> Option<u64> {
        self.subs.get(name).map(Subscription::acks)
    }

    pub fn subscription_names(&self) -> Vec<String> {
        self.subs.keys().cloned().collect()
    }

    pub fn ack_log(&self, name: &str) -> Option<Vec<AckRecord>> {
        self.subs.get(name).map(Subscription::ack_log)
    }

    pub fn unacked(
        &mut self,
        name: &str,
        now: Duration,
        wall: SystemTime,
    ) -> Option<Vec<UnackedMessage>> {
        self.tick(name, None, now, wall).ok()?;
        self.subs.get(name).map(|s| s.unacked(now))
    }
}

/// Bytes a message counts for size limits and flow control.
fn message_size(m: &pb::PubsubMessage) -> u64 {
    let attrs: usize = m.attributes.iter().map(|(k, v)| k.len() + v.len()).sum();
    (m.data.len() + attrs + m.ordering_key.len()) as u64
}

/// The checks the real service makes on a publish request, worded as it
/// words them where known.
fn check_publish(topic: &str, messages: &[pb::PubsubMessage]) -> Result<(), Status> {
    if messages.is_empty() {
        return Err(Status::invalid_argument(
            "The request must contain at least one message.",
        ));
    }
    if messages.len() > MAX_PUBLISH_MESSAGES {
        return Err(too_large(
            "message_count",
            messages.len(),
            MAX_PUBLISH_MESSAGES,
        ));
    }
    for m in messages {
        if m.data.is_empty() && m.attributes.is_empty() {
            return Err(Status::invalid_argument(
                "Some messages are empty: a message needs data or at least one attribute.",
            ));
        }
        if m.attributes.len() > MAX_ATTRIBUTES {
            return Err(Status::invalid_argument(
                "A message may have at most 100 attributes.",
            ));
        }
        for (k, v) in &m.attributes {
            if k.is_empty()
                || k.len() > MAX_ATTRIBUTE_KEY_BYTES
                || v.len() > MAX_ATTRIBUTE_VALUE_BYTES
                || k.starts_with("goog")
            {
                return Err(Status::invalid_argument(format!(
                    "Invalid attribute {:?}: keys must be 1..=256 bytes and not start with \"goog\", values at most 1024 bytes.",
                    k.chars().take(64).collect::<String>()
                )));
            }
        }
        if m.ordering_key.len() > MAX_ORDERING_KEY_BYTES {
            return Err(Status::invalid_argument(
                "An ordering key may be at most 1024 bytes.",
            ));
        }
    }
    // The encoded PublishRequest { topic = 1, messages = 2 }: a message is
    // at most 10 MB because the request holding it is.
    let size = prost::encoding::key_len(1)
        + prost::encoding::encoded_len_varint(topic.len() as u64)
        + topic.len()
        + prost::encoding::message::encoded_len_repeated(2, messages);
    if size > MAX_PUBLISH_BYTES {
        return Err(too_large("request_size", size, MAX_PUBLISH_BYTES));
    }
    Ok(())
}

/// INVALID_ARGUMENT for a value over its limit, as the real service says it.
fn too_large(what: &str, value: usize, max: usize) -> Status {
    Status::invalid_argument(format!(
        "The value for {what} is too large. You passed {value} in the request, but the maximum value is {max}."
    ))
}
