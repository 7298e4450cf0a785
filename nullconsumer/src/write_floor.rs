//! The write floor (`--commit-writes`): the least store work an
//! exactly-once consumer of this design does, done as cheaply as we know
//! how, so hotcount's CPU per message can be read against a consumer that
//! writes what it must and nothing else.
//!
//! Messages are gathered per stream (up to 1,000, or what 100 ms brought:
//! hotcount's default `--max-batch-events` and `--flush-interval-ms`);
//! each group becomes ONE Firestore Commit, its protobuf bytes written by
//! hand ([`encode`]: no message built) and sent over a plain tonic channel,
//! its answer's status the only part read: the membership document
//! (`liked`, `seq`, `eventId`) of each (post, user) whose event is newer
//! than the version the floor wrote last for it (a map in memory: the
//! least a consumer must know not to write a duplicate or stale state),
//! one counter increment per post whose count changes, and one marker
//! document for the group. The group's messages are acked when the Commit
//! answers. At most 4 Commits are in flight (hotcount's default
//! `--max-commits-in-flight`), and the documents live under collections of
//! their own (`nullfloor-*`), never hotcount's.
//!
//! With `--preconditions` each write also carries what makes it safe
//! beside other replicas and across restarts, as hotcount's one-round-trip
//! path does: a membership the floor never wrote is written on `exists =
//! false`, one it wrote on the `update_time` its Commit answered (read
//! from the answer), and the marker on `exists = false` (the group's
//! dedupe key). A membership whose Commit has not answered yet has no
//! known time, so an event on it waits for a later group (as hotcount
//! keeps a membership in at most one batch in flight). That is the least a
//! consumer of this design that stays exact with many replicas writes and
//! remembers; without it the floor's blind writes would count twice what
//! two replicas both apply. With `--rollups` as well, the posts whose
//! count a Commit changed get their rollups refreshed every second
//! ([`refresh`]), as hotcount's defaults do.
//!
//! What it leaves out, and hotcount does: reads (it trusts its memory, and
//! a refused precondition is not retried), transactions, poison, retries,
//! quarantine, counter shards, rollups, telemetry. So it is a floor, not a
//! consumer: a message it cannot parse or write (an id Firestore refuses
//! in a document name, an unknown type or version) is acked unwritten, and
//! a Commit that fails is reported on stderr (the first one, then a count
//! in the totals line every 100 Commits) and its messages acked anyway, so
//! a bench run always ends.
//!
//! Invariant: every message received is acked exactly once, after the
//! Commit of its group (or of a later group it waited for) has answered;
//! a membership is written only with a version newer than the one the
//! floor wrote before; with `--preconditions`, a membership is in at most
//! one Commit in flight.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use google_cloud_pubsub::subscriber::handler::Handler;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use encode::{Precondition, Stamp, Value};

mod encode;
mod pushed;
mod refresh;

pub use pushed::{gather, Pushed};

/// Messages per Commit at most (hotcount's default `--max-batch-events`).
pub const GROUP_MESSAGES: usize = 1000;

/// The longest a message waits for its group to fill (hotcount's default
/// `--flush-interval-ms`).
const GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Commits in flight at most (hotcount's default `--max-commits-in-flight`).
const COMMITS_IN_FLIGHT: usize = 4;

/// The Commit method's path.
const COMMIT_PATH: &str = "/google.firestore.v1.Firestore/Commit";

/// How a message is acked once its group's Commit has answered: a pulled
/// message by its handler, a pushed one by answering its request.
pub enum Settle {
    /// A pulled message's ack handle.
    Pull(Handler),
    /// A pushed message's request, answered 204 when this is sent.
    Push(tokio::sync::oneshot::Sender<()>),
}

impl Settle {
    /// Acks the message (a push request whose client left is let go).
    fn ack(self) {
        match self {
            Settle::Pull(handler) => handler.ack(),
            Settle::Push(answer) => {
                let _ = answer.send(());
            }
        }
    }
}

/// A group's messages: each one's data and how it is acked.
type Group = Vec<(bytes::Bytes, Settle)>;

/// Sends a Commit's bytes as they are and reads of its answer only the
/// commit time.
#[derive(Clone, Copy)]
struct RawCommit;

impl tonic::codec::Codec for RawCommit {
    type Encode = Vec<u8>;
    type Decode = Option<Stamp>;
    type Encoder = RawCommit;
    type Decoder = RawCommit;

    fn encoder(&mut self) -> RawCommit {
        RawCommit
    }

    fn decoder(&mut self) -> RawCommit {
        RawCommit
    }
}

impl tonic::codec::Encoder for RawCommit {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCommit {
    type Item = Option<Stamp>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Option<Stamp>>, tonic::Status> {
        Ok(Some(read_whole(src, encode::commit_time)))
    }
}

/// A clone of `channel` once it can take a call.
async fn ready(
    channel: &tonic::client::Grpc<tonic::transport::Channel>,
) -> Result<tonic::client::Grpc<tonic::transport::Channel>, tonic::Status> {
    let mut channel = channel.clone();
    channel
        .ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("firestore channel: {e}")))?;
    Ok(channel)
}

/// Sends one Commit's bytes on `channel`; of the answer only its commit
/// time is read.
async fn send_commit(
    channel: &tonic::client::Grpc<tonic::transport::Channel>,
    request: Vec<u8>,
) -> Result<Option<Stamp>, tonic::Status> {
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(COMMIT_PATH);
    ready(channel)
        .await?
        .unary(tonic::Request::new(request), path, RawCommit)
        .await
        .map(tonic::Response::into_inner)
}

/// `read` of a whole answer message's bytes, in place when they are in one
/// piece (as tonic hands them over); the message is consumed.
fn read_whole<T>(src: &mut tonic::codec::DecodeBuf<'_>, read: impl Fn(&[u8]) -> T) -> T {
    use bytes::Buf;
    let len = src.remaining();
    let value = if src.chunk().len() == len {
        read(src.chunk())
    } else {
        read(&src.copy_to_bytes(len))
    };
    src.advance(src.remaining());
    value
}

/// A like event's fields the write needs, borrowed where unescaped.
#[derive(serde::Deserialize)]
struct Like<'a> {
    version: u64,
    #[serde(rename = "postId", borrow)]
    post_id: Cow<'a, str>,
    #[serde(rename = "userId", borrow)]
    user_id: Cow<'a, str>,
    #[serde(rename = "eventId", borrow)]
    event_id: Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    seq: i64,
}

/// The longest post or user id written, in bytes (as hotcount's).
const MAX_ID_BYTES: usize = 512;

/// The longest event id written, in bytes (as hotcount's).
const MAX_EVENT_ID_BYTES: usize = 256;

impl Like<'_> {
    /// Whether the event leaves the post liked by the user.
    fn liked(&self) -> bool {
        self.kind == "like.added"
    }

    /// Whether the event can be written at all: a like event of version 1
    /// whose ids Firestore takes in a document's name. One it cannot is
    /// left out (hotcount quarantines it), not sent to fail the whole
    /// Commit.
    fn writable(&self) -> bool {
        self.version == 1
            && matches!(&*self.kind, "like.added" | "like.removed")
            && document_id(&self.post_id, MAX_ID_BYTES)
            && document_id(&self.user_id, MAX_ID_BYTES)
            && !self.event_id.is_empty()
            && self.event_id.len() <= MAX_EVENT_ID_BYTES
    }

    /// The key of its membership in the floor's memory (`post\nuser`),
    /// written into `key`.
    fn key_into(&self, key: &mut String) {
        key.clear();
        key.push_str(&self.post_id);
        key.push('\n');
        key.push_str(&self.user_id);
    }
}

/// The writable like events of a group's messages, each with its
/// message's index (the rest are left out, as hotcount quarantines them).
fn parse<'d>(group: impl IntoIterator<Item = &'d [u8]>) -> Vec<(usize, Like<'d>)> {
    group
        .into_iter()
        .enumerate()
        .filter_map(|(index, data)| {
            let like: Like<'_> = serde_json::from_slice(data).ok()?;
            like.writable().then_some((index, like))
        })
        .collect()
}

/// Whether `id` is a valid Firestore document id of at most `max_bytes`:
/// not empty, no `/`, not `.` or `..`, not `__.*__`, no control character.
fn document_id(id: &str, max_bytes: usize) -> bool {
    !id.is_empty()
        && id.len() <= max_bytes
        && id != "."
        && id != ".."
        && !(id.len() >= 4 && id.starts_with("__") && id.ends_with("__"))
        && !id.chars().any(|c| c == '/' || c.is_control())
}

/// What the floor remembers of one membership it wrote.
#[derive(Clone, Copy, Debug)]
struct Known {
    /// The newest version (seq) written.
    seq: i64,
    /// The state written.
    liked: bool,
    /// With preconditions: the update time its Commit answered; `None`
    /// while that Commit is in flight. Without: always `None`.
    at: Option<Stamp>,
}

/// The writes of one group and what they change in the floor's memory.
struct Planned {
    /// The Commit's bytes being written.
    commit: encode::Commit,
    /// The likes (indices into the parsed group) whose memberships this
    /// Commit writes, one per membership.
    written: Vec<usize>,
    /// Messages (indices into the group) whose membership is in another
    /// Commit in flight: they wait for a later group.
    deferred: Vec<usize>,
    /// A like (index into the parsed group) of each post whose count
    /// this Commit changes.
    posts: Vec<usize>,
}

/// What the floor writes and what it remembers to write it: where its
/// documents go and each membership's newest version written.
struct Writes {
    /// `projects/{p}/databases/(default)`.
    database: String,
    /// `{database}/documents`.
    documents: String,
    /// Whether writes carry preconditions (`--preconditions`).
    preconditions: bool,
    /// What was written per `post\nuser`: it grows with the memberships
    /// seen (a bench's few hundred thousand).
    versions: Mutex<HashMap<String, Known>>,
    /// What each of its markers' names starts with: the process and this
    /// floor's number in it (unique among floors on one store).
    marker_prefix: String,
    /// Markers written so far (each marker's name ends with its number).
    markers: AtomicU64,
}

/// Floors made in this process so far (each names its markers apart).
static FLOORS: AtomicU64 = AtomicU64::new(0);

/// The Firestore connection, the Commit slots and the writes.
#[derive(Clone)]
pub struct WriteFloor {
    channel: tonic::client::Grpc<tonic::transport::Channel>,
    writes: Arc<Writes>,
    slots: Arc<Semaphore>,
    failed: Arc<AtomicU64>,
    /// Messages whose membership was in a Commit in flight when their
    /// group was planned, for the next group any stream sends.
    carried: Arc<Mutex<Group>>,
    /// How many messages `carried` holds (read without its lock).
    carried_len: Arc<AtomicUsize>,
    /// Wakes a stream's loop when messages are carried (its next tick
    /// sends them, even if its stream brings nothing more).
    carried_ready: Arc<tokio::sync::Notify>,
    /// Commits, messages and writes so far.
    totals: Arc<Mutex<(u64, u64, u64)>>,
    /// With `--rollups`: the posts changed since the last refresh.
    rollups: Option<Arc<refresh::Rollups>>,
}

/// `mutex` locked, whether or not a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WriteFloor {
    /// Connects to the Firestore emulator at `host` (`host:port`) for
    /// `project`'s default database; writes carry preconditions when
    /// `preconditions` is set, and with `rollups` a task refreshes the
    /// rollups of the posts the Commits change ([`refresh`]).
    pub async fn connect(
        host: &str,
        project: &str,
        (preconditions, rollups): (bool, bool),
    ) -> Result<Self, String> {
        let url = if host.contains("://") {
            host.to_string()
        } else {
            format!("http://{host}")
        };
        let channel = tonic::transport::Endpoint::from_shared(url)
            .map_err(|e| format!("firestore endpoint {host}: {e}"))?
            .connect()
            .await
            .map_err(|e| format!("connecting to firestore at {host}: {e}"))?;
        let channel = tonic::client::Grpc::new(channel);
        let writes = Arc::new(Writes::new(project, preconditions));
        let rollups = rollups.then(|| {
            let rollups = Arc::new(refresh::Rollups::default());
            let refresher = refresh::Refresher {
                database: writes.database.clone(),
                documents: writes.documents.clone(),
                channel: channel.clone(),
                rollups: rollups.clone(),
            };
            tokio::spawn(refresher.run());
            rollups
        });
        Ok(Self {
            channel,
            writes,
            slots: Arc::new(Semaphore::new(COMMITS_IN_FLIGHT)),
            failed: Arc::new(AtomicU64::new(0)),
            carried: Arc::default(),
            carried_len: Arc::default(),
            carried_ready: Arc::default(),
            totals: Arc::default(),
            rollups,
        })
    }

    /// Commits `group`'s writes in a task of its own (once one of the
    /// Commit slots is free), then acks every message of it but those
    /// carried to a later group.
    pub fn commit(&self, group: Group) {
        let floor = self.clone();
        tokio::spawn(async move {
            let Ok(slot) = floor.slots.clone().acquire_owned().await else {
                return;
            };
            floor.commit_on(slot, group).await;
        });
    }

    /// Commits `group`'s writes on the Commit slot `_slot` (held until the
    /// Commit answered), then acks every message of it but those carried
    /// to a later group.
    async fn commit_on(&self, _slot: OwnedSemaphorePermit, mut group: Group) {
        let likes = parse(group.iter().map(|(data, _)| &data[..]));
        let planned = self.writes.plan(&likes, group.len() as i64);
        self.tally(
            group.len() - planned.deferred.len(),
            planned.commit.writes(),
        );
        let time = match self.send(planned.commit.finish()).await {
            Ok(time) => time,
            Err(status) => {
                if self.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("hotcount-null-consumer: commit failed: {status}");
                }
                None
            }
        };
        self.writes.learn(&likes, &planned.written, time);
        if let (Some(rollups), Some(_)) = (&self.rollups, time) {
            rollups.mark(planned.posts.iter().map(|&i| &*likes[i].1.post_id));
        }
        drop(likes);
        self.carry(&mut group, &planned.deferred);
        for (_, settle) in group {
            settle.ack();
        }
    }

    /// Moves the messages at `deferred` (ascending indices) out of
    /// `group` into the carried messages.
    fn carry(&self, group: &mut Group, deferred: &[usize]) {
        if deferred.is_empty() {
            return;
        }
        let mut carried = lock(&self.carried);
        for &index in deferred.iter().rev() {
            carried.push(group.swap_remove(index));
        }
        self.carried_len.store(carried.len(), Ordering::Release);
        self.carried_ready.notify_one();
    }

    /// Whether messages wait for a later group.
    fn has_carried(&self) -> bool {
        self.carried_len.load(Ordering::Acquire) > 0
    }

    /// Moves the carried messages, if any, into `group`.
    fn take_carried(&self, group: &mut Group) {
        if !self.has_carried() {
            return;
        }
        let mut carried = lock(&self.carried);
        group.append(&mut carried);
        self.carried_len.store(0, Ordering::Release);
    }

    /// Sends one Commit's bytes; of the answer only its commit time is
    /// read.
    async fn send(&self, request: Vec<u8>) -> Result<Option<Stamp>, tonic::Status> {
        send_commit(&self.channel, request).await
    }

    /// Adds a group to the running totals, printed every 100 Commits (to
    /// compare its writes per message with hotcount's).
    fn tally(&self, messages: usize, writes: usize) {
        let mut totals = lock(&self.totals);
        totals.0 += 1;
        totals.1 += messages as u64;
        totals.2 += writes as u64;
        if totals.0.is_multiple_of(100) {
            let (rollups, rollups_failed) = self.rollups.as_ref().map_or((0, 0), |r| r.totals());
            eprintln!(
                "hotcount-null-consumer: write floor: {} commits ({} failed), {} messages, {} writes ({:.1} per 1,000 messages), {} carried, {} rollups written ({} refresh calls failed)",
                totals.0,
                self.failed.load(Ordering::Relaxed),
                totals.1,
                totals.2,
                1000.0 * totals.2 as f64 / totals.1.max(1) as f64,
                self.carried_len.load(Ordering::Relaxed),
                rollups,
                rollups_failed,
            );
        }
    }
}

impl Writes {
    /// Writes for `project`'s default database, remembering nothing yet.
    fn new(project: &str, preconditions: bool) -> Self {
        let database = format!("projects/{project}/databases/(default)");
        Self {
            documents: format!("{database}/documents"),
            database,
            preconditions,
            versions: Mutex::default(),
            marker_prefix: format!(
                "{}-{}",
                std::process::id(),
                FLOORS.fetch_add(1, Ordering::Relaxed)
            ),
            markers: AtomicU64::new(0),
        }
    }

    /// The Commit of one group of `messages` messages whose writable
    /// events are `likes` (each with its message's index): the memberships
    /// it changes (an event newer than the version remembered for its
    /// (post, user): the least a consumer that writes no stale state must
    /// know), a counter increment per post, the marker; encoded by hand
    /// ([`encode`]). With preconditions, an event whose membership is in
    /// another Commit in flight is deferred, and the memberships written
    /// are marked in flight until [`Writes::learn`].
    fn plan(&self, likes: &[(usize, Like<'_>)], messages: i64) -> Planned {
        // The newest change per membership in the group (an index into
        // `likes`) and its precondition, and each post's net delta, all
        // borrowed from `likes`.
        let mut changed: HashMap<(&str, &str), (usize, Precondition)> =
            HashMap::with_capacity(likes.len());
        // Per post: its net delta and a like of it.
        let mut deltas: HashMap<&str, (i64, usize)> = HashMap::new();
        let mut deferred = Vec::new();
        {
            let mut versions = lock(&self.versions);
            let mut key = String::new();
            for (index, (message, like)) in likes.iter().enumerate() {
                like.key_into(&mut key);
                let liked = like.liked();
                let ids = (&*like.post_id, &*like.user_id);
                // Written now, its update time unknown until its Commit answers.
                let newest = Known {
                    seq: like.seq,
                    liked,
                    at: None,
                };
                let (was, condition) = match versions.get_mut(key.as_str()) {
                    Some(known) if known.at.is_none() && self.preconditions => {
                        match changed.get(&ids) {
                            // In flight in this group's own Commit.
                            Some(&(_, condition)) if known.seq < like.seq => {
                                (std::mem::replace(known, newest).liked, condition)
                            }
                            Some(_) => continue,
                            None => {
                                deferred.push(*message);
                                continue;
                            }
                        }
                    }
                    Some(known) if known.seq >= like.seq => continue,
                    Some(known) => {
                        // Without preconditions `at` is never set: blind.
                        let condition = known
                            .at
                            .map_or(Precondition::Blind, Precondition::UpdatedAt);
                        (std::mem::replace(known, newest).liked, condition)
                    }
                    None => {
                        versions.insert(key.clone(), newest);
                        (false, self.if_conditioned(Precondition::Absent))
                    }
                };
                let delta = i64::from(liked) - i64::from(was);
                if delta != 0 {
                    deltas.entry(&like.post_id).or_insert((0, index)).0 += delta;
                }
                changed.insert(ids, (index, condition));
            }
        }
        // A membership's write is ~150 bytes beside the documents' prefix.
        let per_write = self.documents.len() + 180;
        let mut commit = encode::Commit::new(
            &self.database,
            per_write * (changed.len() + deltas.len() + 1),
        );
        let mut written = Vec::with_capacity(changed.len());
        for (&(post, user), &(index, condition)) in &changed {
            let like = &likes[index].1;
            commit.update(
                &[&self.documents, "/nullfloor-posts/", post, "/likes/", user],
                &[
                    ("liked", Value::Bool(like.liked())),
                    ("seq", Value::Int(like.seq)),
                    ("eventId", Value::Str(&like.event_id)),
                ],
                condition,
            );
            written.push(index);
        }
        let mut posts = Vec::with_capacity(deltas.len());
        for (post, (delta, like)) in deltas {
            let name = [&self.documents, "/nullfloor-counters/", post];
            commit.increment(&name, "likes", delta);
            if delta != 0 {
                posts.push(like);
            }
        }
        let marker = self.markers.fetch_add(1, Ordering::Relaxed);
        let marker = format!("{}-{marker}", self.marker_prefix);
        commit.update(
            &[&self.documents, "/nullfloor-markers/", &marker],
            &[("messages", Value::Int(messages - deferred.len() as i64))],
            self.if_conditioned(Precondition::Absent),
        );
        // `likes` come in message order, so the deferred ones do too.
        debug_assert!(deferred.is_sorted());
        Planned {
            commit,
            written,
            deferred,
            posts,
        }
    }

    /// `condition` with preconditions, a blind write without.
    fn if_conditioned(&self, condition: Precondition) -> Precondition {
        if self.preconditions {
            condition
        } else {
            Precondition::Blind
        }
    }

    /// Records the answer of the Commit that wrote the memberships of
    /// `written` (indices into `likes`): with preconditions, each one's
    /// update time is `time` (every write of a Commit is stamped with its
    /// commit time); a Commit that failed (`None`) leaves them unknown, so
    /// they are forgotten (the next write assumes them absent).
    fn learn(&self, likes: &[(usize, Like<'_>)], written: &[usize], time: Option<Stamp>) {
        if !self.preconditions {
            return;
        }
        let mut versions = lock(&self.versions);
        let mut key = String::new();
        for &index in written {
            likes[index].1.key_into(&mut key);
            match time {
                Some(at) => {
                    if let Some(known) = versions.get_mut(key.as_str()) {
                        known.at = Some(at);
                    }
                }
                None => {
                    versions.remove(key.as_str());
                }
            }
        }
    }
}

/// Receives from `stream` until it ends, committing its messages in
/// groups of [`GROUP_MESSAGES`] or what [`GROUP_WAIT`] brought (with the
/// messages carried from groups before, when there are).
pub async fn run(
    mut stream: google_cloud_pubsub::subscriber::MessageStream,
    floor: WriteFloor,
    index: usize,
) {
    let mut group = Vec::with_capacity(GROUP_MESSAGES);
    let mut tick = tokio::time::interval(GROUP_WAIT);
    loop {
        tokio::select! {
            next = stream.next() => match next {
                Some(Ok((message, handler))) => {
                    group.push((message.data, Settle::Pull(handler)));
                    if group.len() >= GROUP_MESSAGES {
                        floor.take_carried(&mut group);
                        floor.commit(std::mem::replace(&mut group, Vec::with_capacity(GROUP_MESSAGES)));
                    }
                }
                Some(Err(error)) => {
                    eprintln!("hotcount-null-consumer: stream {index}: StreamingPull failed: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                None => break,
            },
            // Messages carried: the loop goes round, so the tick below is
            // taken for them.
            () = floor.carried_ready.notified() => {}
            // Only with something to send: a tick taken while the stream
            // is idle would drop a `next()` that may be opening the stream,
            // and the messages the server sent on that stream would wait
            // out their lease.
            _ = tick.tick(), if !group.is_empty() || floor.has_carried() => {
                floor.take_carried(&mut group);
                if !group.is_empty() {
                    floor.commit(std::mem::take(&mut group));
                }
            }
        }
    }
    floor.take_carried(&mut group);
    if !group.is_empty() {
        floor.commit(group);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gcloud_sdk::google::firestore::v1 as fs;
    use gcloud_sdk::prost::Message;

    use super::*;

    fn event(kind: &str, post: &str, user: &str, seq: i64) -> Vec<u8> {
        serde_json::json!({
            "version": 1,
            "eventId": format!("{post}-{user}-{seq}"),
            "type": kind,
            "postId": post,
            "userId": user,
            "occurredAt": "2026-12-06T00:00:00.000000Z",
            "seq": seq,
        })
        .to_string()
        .into_bytes()
    }

    /// A Commit read back: memberships (name's tail -> liked, seq),
    /// increments (post -> delta) and the markers' message counts.
    type Read = (
        BTreeMap<String, (bool, i64)>,
        BTreeMap<String, i64>,
        Vec<i64>,
    );

    fn decode(commit: encode::Commit) -> fs::CommitRequest {
        fs::CommitRequest::decode(&commit.finish()[..]).expect("the hand-encoded Commit decodes")
    }

    /// What `writes` plans for `group`, and the group's likes.
    fn planned<'g>(writes: &Writes, group: &'g [Vec<u8>]) -> (Planned, Vec<(usize, Like<'g>)>) {
        let likes = parse(group.iter().map(Vec::as_slice));
        (writes.plan(&likes, group.len() as i64), likes)
    }

    /// What `writes` commits for `group`, read back; its Commit answered
    /// at `time`.
    fn committed(writes: &Writes, group: &[Vec<u8>]) -> Read {
        let (planned, likes) = planned(writes, group);
        writes.learn(&likes, &planned.written, Some(stamp(1)));
        read(&decode(planned.commit))
    }

    fn stamp(seconds: i64) -> Stamp {
        Stamp { seconds, nanos: 7 }
    }

    fn read(request: &fs::CommitRequest) -> Read {
        use fs::value::ValueType;
        let mut read = Read::default();
        for write in &request.writes {
            match &write.operation {
                Some(fs::write::Operation::Update(doc)) => {
                    let field =
                        |name: &str| doc.fields.get(name).and_then(|v| v.value_type.clone());
                    let tail = doc.name.rsplit("/documents/").next().unwrap_or_default();
                    if tail.starts_with("nullfloor-markers/") {
                        let Some(ValueType::IntegerValue(n)) = field("messages") else {
                            panic!("a marker counts its messages: {doc:?}");
                        };
                        read.2.push(n);
                        continue;
                    }
                    let (Some(ValueType::BooleanValue(liked)), Some(ValueType::IntegerValue(seq))) =
                        (field("liked"), field("seq"))
                    else {
                        panic!("a membership holds liked and seq: {doc:?}");
                    };
                    let earlier = read.0.insert(tail.to_string(), (liked, seq));
                    assert!(earlier.is_none(), "one write per document: {tail}");
                }
                Some(fs::write::Operation::Transform(t)) => {
                    let post = t.document.rsplit('/').next().unwrap_or_default();
                    let [fs::document_transform::FieldTransform {
                        transform_type:
                            Some(fs::document_transform::field_transform::TransformType::Increment(
                                fs::Value {
                                    value_type: Some(ValueType::IntegerValue(delta)),
                                },
                            )),
                        ..
                    }] = &t.field_transforms[..]
                    else {
                        panic!("a counter write is one increment: {t:?}");
                    };
                    read.1.insert(post.to_string(), *delta);
                }
                other => panic!("unexpected write {other:?}"),
            }
        }
        read
    }

    #[test]
    fn a_group_writes_each_changed_memberships_newest_state_once_and_its_posts_net_delta() {
        let writes = Writes::new("p", false);
        let group = [
            event("like.added", "p1", "u1", 1),
            event("like.added", "p1", "u1", 1),
            event("like.added", "p1", "u2", 1),
            event("like.removed", "p1", "u1", 2),
            event("like.added", "p1", "u1", 1),
            b"not json".to_vec(),
        ];
        let request = decode(planned(&writes, &group).0.commit);
        assert_eq!(request.database, "projects/p/databases/(default)");
        let (memberships, increments, markers) = read(&request);
        assert_eq!(
            memberships,
            BTreeMap::from([
                ("nullfloor-posts/p1/likes/u1".into(), (false, 2)),
                ("nullfloor-posts/p1/likes/u2".into(), (true, 1)),
            ])
        );
        assert_eq!(increments, BTreeMap::from([("p1".into(), 1)]));
        assert_eq!(
            markers,
            [6],
            "the marker counts every message, unparsed too"
        );
    }

    #[test]
    fn an_event_firestore_would_refuse_is_left_out_and_the_rest_of_its_group_written() {
        let writes = Writes::new("p", false);
        let mut group = vec![
            event("like.added", "..", "u1", 1),
            event("like.added", ".", "u1", 1),
            event("like.added", "p1", "__x__", 1),
            event("like.added", "p1/../x", "u1", 1),
            event("like.added", "p1", "u1\u{7}\n", 1),
            event("like.added", "p1", "u\u{85}", 1),
            event("like.added", "p1", &"u".repeat(2048), 1),
            event("like.added", "", "u1", 1),
            event("like.toggled", "p1", "u1", 1),
            event("like.added", "p1", "u1", 1),
        ];
        let mut wrong_version: serde_json::Value =
            serde_json::from_slice(&event("like.added", "p2", "u2", 1)).expect("json");
        wrong_version["version"] = 2.into();
        group.push(wrong_version.to_string().into_bytes());
        let (memberships, increments, markers) = committed(&writes, &group);
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p1/likes/u1".into(), (true, 1))])
        );
        assert_eq!(increments, BTreeMap::from([("p1".into(), 1)]));
        assert_eq!(markers, [11]);
    }

    #[test]
    fn an_event_not_newer_than_the_version_written_before_is_not_written_again() {
        let writes = Writes::new("p", false);
        let first = [event("like.added", "p1", "u1", 2)];
        committed(&writes, &first);
        let second = [
            event("like.added", "p1", "u1", 2),
            event("like.removed", "p1", "u1", 1),
            event("like.added", "p2", "u9", 1),
        ];
        let (memberships, increments, markers) = committed(&writes, &second);
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p2/likes/u9".into(), (true, 1))])
        );
        assert_eq!(increments, BTreeMap::from([("p2".into(), 1)]));
        assert_eq!(markers, [3]);
        let third = [event("like.removed", "p1", "u1", 3)];
        let (memberships, increments, _) = committed(&writes, &third);
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p1/likes/u1".into(), (false, 3))])
        );
        assert_eq!(increments, BTreeMap::from([("p1".into(), -1)]));
    }

    /// Each membership write's precondition in `request` (name's tail ->
    /// condition), and the marker's.
    fn conditions(
        request: &fs::CommitRequest,
    ) -> (
        BTreeMap<String, Option<fs::precondition::ConditionType>>,
        Vec<Option<fs::precondition::ConditionType>>,
    ) {
        let mut memberships = BTreeMap::new();
        let mut markers = Vec::new();
        for write in &request.writes {
            let Some(fs::write::Operation::Update(doc)) = &write.operation else {
                assert!(write.current_document.is_none(), "an increment is blind");
                continue;
            };
            let tail = doc.name.rsplit("/documents/").next().unwrap_or_default();
            let condition = write.current_document.and_then(|p| p.condition_type);
            if tail.starts_with("nullfloor-markers/") {
                markers.push(condition);
            } else {
                memberships.insert(tail.to_string(), condition);
            }
        }
        (memberships, markers)
    }

    /// The conditions of a Commit that writes p1/u1 alone, on `condition`.
    fn p1_u1(
        condition: fs::precondition::ConditionType,
    ) -> BTreeMap<String, Option<fs::precondition::ConditionType>> {
        BTreeMap::from([("nullfloor-posts/p1/likes/u1".into(), Some(condition))])
    }

    #[test]
    fn with_preconditions_a_new_membership_is_written_absent_then_at_the_time_its_commit_answered()
    {
        use fs::precondition::ConditionType;
        let writes = Writes::new("p", true);
        let first = [
            event("like.added", "p1", "u1", 1),
            event("like.removed", "p1", "u1", 2),
            event("like.added", "p1", "u2", 1),
        ];
        let (planned_first, likes) = planned(&writes, &first);
        assert!(planned_first.deferred.is_empty());
        let request = decode(planned_first.commit);
        assert_eq!(
            conditions(&request),
            (
                BTreeMap::from([
                    (
                        "nullfloor-posts/p1/likes/u1".into(),
                        Some(ConditionType::Exists(false))
                    ),
                    (
                        "nullfloor-posts/p1/likes/u2".into(),
                        Some(ConditionType::Exists(false))
                    ),
                ]),
                vec![Some(ConditionType::Exists(false))]
            ),
            "never written: absent, once each; the marker is the group's dedupe key"
        );
        writes.learn(&likes, &planned_first.written, Some(stamp(42)));
        let second = [event("like.added", "p1", "u1", 3)];
        let (planned_second, _) = planned(&writes, &second);
        let (memberships, _) = conditions(&decode(planned_second.commit));
        let at = gcloud_sdk::prost_types::Timestamp {
            seconds: 42,
            nanos: 7,
        };
        assert_eq!(memberships, p1_u1(ConditionType::UpdateTime(at)));
    }

    #[test]
    fn with_preconditions_an_event_on_a_membership_in_a_commit_in_flight_waits_for_a_later_group() {
        let writes = Writes::new("p", true);
        let first = [event("like.added", "p1", "u1", 1)];
        let (in_flight, first_likes) = planned(&writes, &first);
        let second = [
            event("like.added", "p2", "u1", 1),
            event("like.removed", "p1", "u1", 2),
            event("like.added", "p3", "u1", 1),
            event("like.added", "p1", "u1", 1),
        ];
        let (planned_second, _) = planned(&writes, &second);
        assert_eq!(planned_second.deferred, [1, 3], "both events on p1/u1 wait");
        let (memberships, increments, markers) = read(&decode(planned_second.commit));
        assert_eq!(markers, [2], "the marker counts the messages it covers");
        assert_eq!(
            memberships.keys().collect::<Vec<_>>(),
            ["nullfloor-posts/p2/likes/u1", "nullfloor-posts/p3/likes/u1"]
        );
        assert_eq!(
            increments,
            BTreeMap::from([("p2".into(), 1), ("p3".into(), 1)])
        );
        writes.learn(&first_likes, &in_flight.written, Some(stamp(5)));
        let later = [event("like.removed", "p1", "u1", 2)];
        let (planned_later, _) = planned(&writes, &later);
        assert!(planned_later.deferred.is_empty(), "its Commit answered");
        let (memberships, increments, _) = read(&decode(planned_later.commit));
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p1/likes/u1".into(), (false, 2))])
        );
        assert_eq!(increments, BTreeMap::from([("p1".into(), -1)]));
    }

    #[test]
    fn with_preconditions_a_membership_whose_commit_failed_is_forgotten_and_written_absent_again() {
        use fs::precondition::ConditionType;
        let writes = Writes::new("p", true);
        let first = [event("like.added", "p1", "u1", 1)];
        let (failed, likes) = planned(&writes, &first);
        writes.learn(&likes, &failed.written, None);
        let (again, _) = planned(&writes, &first);
        assert!(again.deferred.is_empty());
        let (memberships, _) = conditions(&decode(again.commit));
        assert_eq!(memberships, p1_u1(ConditionType::Exists(false)));
    }

    #[test]
    fn without_preconditions_every_write_is_blind_and_nothing_waits() {
        let writes = Writes::new("p", false);
        let first = [event("like.added", "p1", "u1", 1)];
        let (_in_flight, _) = planned(&writes, &first);
        let second = [event("like.removed", "p1", "u1", 2)];
        let (planned_second, _) = planned(&writes, &second);
        assert!(planned_second.deferred.is_empty());
        let (memberships, markers) = conditions(&decode(planned_second.commit));
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p1/likes/u1".into(), None)])
        );
        assert_eq!(markers, [None]);
    }

    /// The emulator's update time of the document `tail` (under `p`'s
    /// documents), as a [`Stamp`].
    fn stored_at(emulators: &hotcount_emulators::Emulators, tail: &str) -> Option<Stamp> {
        let name = format!("projects/p/databases/(default)/documents/{tail}");
        let at = emulators.firestore().document(&name)?.update_time?;
        Some(Stamp {
            seconds: at.seconds,
            nanos: at.nanos,
        })
    }

    /// In-process emulators and an exact floor (no rollup task) on them.
    async fn exact_floor_on_emulators() -> (hotcount_emulators::Emulators, WriteFloor) {
        let emulators = hotcount_emulators::Emulators::start(Default::default())
            .await
            .expect("emulators");
        let host = emulators.firestore_addr().to_string();
        let floor = WriteFloor::connect(&host, "p", (true, false))
            .await
            .expect("connects");
        (emulators, floor)
    }

    #[tokio::test]
    async fn the_exact_floors_commits_apply_on_firestore_and_one_on_a_stale_belief_is_refused() {
        let (emulators, floor) = exact_floor_on_emulators().await;
        let host = emulators.firestore_addr().to_string();
        let u1 = "nullfloor-posts/p1/likes/u1";
        for (seq, kind) in [(1, "like.added"), (2, "like.removed")] {
            let group = [event(kind, "p1", "u1", seq)];
            let (planned, likes) = planned(&floor.writes, &group);
            let time = floor
                .send(planned.commit.finish())
                .await
                .expect("the Commit applies")
                .expect("its answer has a commit time");
            assert_eq!(
                stored_at(&emulators, u1),
                Some(time),
                "the membership is stamped with the commit time read from the answer"
            );
            floor.writes.learn(&likes, &planned.written, Some(time));
        }
        // Another replica that never saw p1/u1 assumes it absent: refused,
        // and nothing of its Commit applied.
        let other = WriteFloor::connect(&host, "p", (true, false))
            .await
            .expect("connects");
        let group = [
            event("like.added", "p1", "u1", 3),
            event("like.added", "p9", "u9", 1),
        ];
        let before = stored_at(&emulators, u1);
        let (stale, _) = planned(&other.writes, &group);
        let refused = other
            .send(stale.commit.finish())
            .await
            .expect_err("a write on a stale belief is refused");
        assert!(
            matches!(
                refused.code(),
                tonic::Code::FailedPrecondition | tonic::Code::AlreadyExists
            ),
            "{refused:?}"
        );
        assert_eq!(stored_at(&emulators, u1), before);
        assert_eq!(stored_at(&emulators, "nullfloor-posts/p9/likes/u9"), None);
        emulators.shutdown().await;
    }

    #[tokio::test]
    async fn a_pushed_event_is_answered_only_after_its_commit_and_one_on_a_membership_in_flight_after_a_later_commit(
    ) {
        let (emulators, floor) = exact_floor_on_emulators().await;
        let pushed = Pushed::new(std::time::Duration::from_millis(5));
        tokio::spawn(gather(floor.clone(), pushed.clone()));
        emulators
            .firestore_faults()
            .add(hotcount_emulators::faults::FaultSpec::latency(
                "Commit",
                std::time::Duration::from_millis(300),
            ))
            .expect("a latency rule");
        let u1 = "nullfloor-posts/p1/likes/u1";
        let mut first = pushed.offer(event("like.added", "p1", "u1", 1).into());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(first.try_recv().is_err(), "not answered before its Commit");
        assert_eq!(stored_at(&emulators, u1), None);
        // The first's Commit is in flight: the unlike waits for a later one.
        let mut second = pushed.offer(event("like.removed", "p1", "u1", 2).into());
        first.await.expect("answered");
        let after_first = stored_at(&emulators, u1).expect("written before the answer");
        assert!(
            second.try_recv().is_err(),
            "carried, not answered with the first"
        );
        second.await.expect("answered");
        let after_second = stored_at(&emulators, u1).expect("written before the answer");
        assert!(
            (after_second.seconds, after_second.nanos) > (after_first.seconds, after_first.nanos),
            "the unlike was written by a later Commit of its own"
        );
        let liked = emulators
            .firestore()
            .document(&format!("projects/p/databases/(default)/documents/{u1}"))
            .and_then(|doc| doc.fields.get("liked")?.value_type.clone());
        assert_eq!(liked, Some(fs::value::ValueType::BooleanValue(false)));
        emulators.shutdown().await;
    }

    #[tokio::test]
    async fn the_rollup_refresh_writes_each_changed_posts_count_as_its_counter_holds_it() {
        let (emulators, floor) = exact_floor_on_emulators().await;
        let rollups = Arc::new(refresh::Rollups::default());
        let refresher = refresh::Refresher {
            database: floor.writes.database.clone(),
            documents: floor.writes.documents.clone(),
            channel: floor.channel.clone(),
            rollups: rollups.clone(),
        };
        let rollup = |post: &str| {
            let name = format!("projects/p/databases/(default)/documents/nullfloor-rollups/{post}");
            let doc = emulators.firestore().document(&name)?;
            match doc.fields.get("likes")?.value_type {
                Some(gcloud_sdk::google::firestore::v1::value::ValueType::IntegerValue(n)) => {
                    Some(n)
                }
                _ => None,
            }
        };
        let groups = [
            vec![
                event("like.added", "p1", "u1", 1),
                event("like.added", "p1", "u2", 1),
                event("like.added", "p2", "u1", 1),
            ],
            vec![
                event("like.removed", "p1", "u1", 2),
                event("like.added", "p3", "u3", 1),
                event("like.removed", "p3", "u3", 2),
            ],
        ];
        // p3 is liked and unliked in one group: its count does not change.
        let expected = [[Some(2), Some(1), None], [Some(1), Some(1), None]];
        for (group, expected) in groups.iter().zip(expected) {
            let (planned, likes) = planned(&floor.writes, group);
            let time = floor.send(planned.commit.finish()).await.expect("applies");
            floor.writes.learn(&likes, &planned.written, time);
            rollups.mark(planned.posts.iter().map(|&i| &*likes[i].1.post_id));
            refresher.refresh().await;
            assert_eq!(
                ["p1", "p2", "p3"].map(rollup),
                expected,
                "each changed post's rollup written as its counter holds it; \
                 a post whose count did not change is not refreshed"
            );
        }
        assert_eq!(rollups.totals(), (3, 0), "3 rollups written, none failed");
        emulators.shutdown().await;
    }
}
