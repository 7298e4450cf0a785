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
//! What it leaves out, and hotcount does: reads (it trusts its memory),
//! transactions and preconditions (a Commit of blind writes is one round
//! trip, as hotcount's known-membership path), poison, retries,
//! quarantine, counter shards, rollups, telemetry. So it is a floor, not a
//! consumer: a message it cannot parse or write (an id Firestore refuses
//! in a document name, an unknown type or version) is acked unwritten, and
//! a Commit that fails is reported on stderr (the first one, then a count
//! in the totals line every 100 Commits) and its messages acked anyway, so
//! a bench run always ends.
//!
//! Invariant: every message received is acked exactly once, after the
//! Commit of its group has answered; a membership is written only with a
//! version newer than the one the floor wrote before.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use google_cloud_pubsub::subscriber::handler::Handler;
use tokio::sync::Semaphore;

use encode::Value;

mod encode;

/// Messages per Commit at most (hotcount's default `--max-batch-events`).
pub const GROUP_MESSAGES: usize = 1000;

/// The longest a message waits for its group to fill (hotcount's default
/// `--flush-interval-ms`).
const GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Commits in flight at most (hotcount's default `--max-commits-in-flight`).
const COMMITS_IN_FLIGHT: usize = 4;

/// The Commit method's path.
const COMMIT_PATH: &str = "/google.firestore.v1.Firestore/Commit";

/// Sends a Commit's bytes as they are and skips its answer's (the floor
/// reads no more of it than its status).
#[derive(Clone, Copy)]
struct RawCommit;

impl tonic::codec::Codec for RawCommit {
    type Encode = Vec<u8>;
    type Decode = ();
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
    type Item = ();
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        bytes::Buf::advance(src, bytes::Buf::remaining(src));
        Ok(Some(()))
    }
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

/// What the floor writes and what it remembers to write it: where its
/// documents go and each membership's newest version written.
struct Writes {
    /// `projects/{p}/databases/(default)`.
    database: String,
    /// `{database}/documents`.
    documents: String,
    /// The newest version (seq) and state written per `post\nuser`: it
    /// grows with the memberships seen (a bench's few hundred thousand).
    versions: Mutex<HashMap<String, (i64, bool)>>,
    /// Markers written so far (each marker's name ends with its number).
    markers: AtomicU64,
}

/// The Firestore connection, the Commit slots and the writes.
#[derive(Clone)]
pub struct WriteFloor {
    channel: tonic::client::Grpc<tonic::transport::Channel>,
    writes: Arc<Writes>,
    slots: Arc<Semaphore>,
    failed: Arc<AtomicU64>,
    /// Commits, messages and writes so far.
    totals: Arc<Mutex<(u64, u64, u64)>>,
}

impl WriteFloor {
    /// Connects to the Firestore emulator at `host` (`host:port`) for
    /// `project`'s default database.
    pub async fn connect(host: &str, project: &str) -> Result<Self, String> {
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
        Ok(Self {
            channel: tonic::client::Grpc::new(channel),
            writes: Arc::new(Writes::new(project)),
            slots: Arc::new(Semaphore::new(COMMITS_IN_FLIGHT)),
            failed: Arc::new(AtomicU64::new(0)),
            totals: Arc::default(),
        })
    }

    /// Commits `group`'s writes in a task of its own (once one of the
    /// Commit slots is free), then acks every message of it.
    pub fn commit(&self, group: Vec<(bytes::Bytes, Handler)>) {
        let floor = self.clone();
        tokio::spawn(async move {
            let Ok(_slot) = floor.slots.clone().acquire_owned().await else {
                return;
            };
            let request = floor
                .writes
                .request(group.iter().map(|(data, _)| &data[..]));
            floor.tally(group.len(), request.writes());
            if let Err(status) = floor.send(request.finish()).await {
                if floor.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("hotcount-null-consumer: commit failed: {status}");
                }
            }
            for (_, handler) in group {
                handler.ack();
            }
        });
    }

    /// Sends one Commit's bytes; only the answer's status is read.
    async fn send(&self, request: Vec<u8>) -> Result<(), tonic::Status> {
        let mut channel = self.channel.clone();
        channel
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("firestore channel: {e}")))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(COMMIT_PATH);
        channel
            .unary(tonic::Request::new(request), path, RawCommit)
            .await
            .map(drop)
    }

    /// Adds a group to the running totals, printed every 100 Commits (to
    /// compare its writes per message with hotcount's).
    fn tally(&self, messages: usize, writes: usize) {
        let mut totals = self
            .totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        totals.0 += 1;
        totals.1 += messages as u64;
        totals.2 += writes as u64;
        if totals.0.is_multiple_of(100) {
            eprintln!(
                "hotcount-null-consumer: write floor: {} commits ({} failed), {} messages, {} writes ({:.1} per 1,000 messages)",
                totals.0,
                self.failed.load(Ordering::Relaxed),
                totals.1,
                totals.2,
                1000.0 * totals.2 as f64 / totals.1.max(1) as f64
            );
        }
    }
}

impl Writes {
    /// Writes for `project`'s default database, remembering nothing yet.
    fn new(project: &str) -> Self {
        let database = format!("projects/{project}/databases/(default)");
        Self {
            documents: format!("{database}/documents"),
            database,
            versions: Mutex::default(),
            markers: AtomicU64::new(0),
        }
    }

    /// The Commit of one group: the memberships it changes (an event
    /// newer than the version remembered for its (post, user): the least a
    /// consumer that writes no stale state must know), a counter increment
    /// per post, the marker; encoded by hand ([`encode`]).
    fn request<'d>(&self, group: impl IntoIterator<Item = &'d [u8]>) -> encode::Commit {
        let mut messages = 0_i64;
        let likes: Vec<Like<'d>> = group
            .into_iter()
            .filter_map(|data| {
                messages += 1;
                serde_json::from_slice(data).ok().filter(Like::writable)
            })
            .collect();
        // The newest change per membership in the group (an index into
        // `likes`), and each post's net delta, all borrowed from `likes`.
        let mut changed: HashMap<(&str, &str), usize> = HashMap::with_capacity(likes.len());
        let mut deltas: HashMap<&str, i64> = HashMap::new();
        {
            let mut versions = self
                .versions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut key = String::new();
            for (index, like) in likes.iter().enumerate() {
                key.clear();
                key.push_str(&like.post_id);
                key.push('\n');
                key.push_str(&like.user_id);
                let liked = like.liked();
                let was = match versions.get_mut(key.as_str()) {
                    Some(known) if known.0 >= like.seq => continue,
                    Some(known) => std::mem::replace(known, (like.seq, liked)).1,
                    None => {
                        versions.insert(key.clone(), (like.seq, liked));
                        false
                    }
                };
                let delta = i64::from(liked) - i64::from(was);
                if delta != 0 {
                    *deltas.entry(&like.post_id).or_default() += delta;
                }
                changed.insert((&like.post_id, &like.user_id), index);
            }
        }
        // A membership's write is ~150 bytes beside the documents' prefix.
        let per_write = self.documents.len() + 160;
        let mut commit = encode::Commit::new(
            &self.database,
            per_write * (changed.len() + deltas.len() + 1),
        );
        for (&(post, user), &index) in &changed {
            let like = &likes[index];
            commit.update(
                &[&self.documents, "/nullfloor-posts/", post, "/likes/", user],
                &[
                    ("liked", Value::Bool(like.liked())),
                    ("seq", Value::Int(like.seq)),
                    ("eventId", Value::Str(&like.event_id)),
                ],
            );
        }
        for (post, delta) in deltas {
            let name = [&self.documents, "/nullfloor-counters/", post];
            commit.increment(&name, "likes", delta);
        }
        let marker = self.markers.fetch_add(1, Ordering::Relaxed);
        let marker = format!("{}-{marker}", std::process::id());
        commit.update(
            &[&self.documents, "/nullfloor-markers/", &marker],
            &[("messages", Value::Int(messages))],
        );
        commit
    }
}

/// Receives from `stream` until it ends, committing its messages in
/// groups of [`GROUP_MESSAGES`] or what [`GROUP_WAIT`] brought.
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
                    group.push((message.data, handler));
                    if group.len() >= GROUP_MESSAGES {
                        floor.commit(std::mem::replace(&mut group, Vec::with_capacity(GROUP_MESSAGES)));
                    }
                }
                Some(Err(error)) => {
                    eprintln!("hotcount-null-consumer: stream {index}: StreamingPull failed: {error}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                None => break,
            },
            _ = tick.tick(), if !group.is_empty() => {
                floor.commit(std::mem::take(&mut group));
            }
        }
    }
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

    /// What `writes` commits for `group`, read back.
    fn committed(writes: &Writes, group: &[Vec<u8>]) -> Read {
        read(&decode(writes.request(group.iter().map(Vec::as_slice))))
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
        let writes = Writes::new("p");
        let group = [
            event("like.added", "p1", "u1", 1),
            event("like.added", "p1", "u1", 1),
            event("like.added", "p1", "u2", 1),
            event("like.removed", "p1", "u1", 2),
            event("like.added", "p1", "u1", 1),
            b"not json".to_vec(),
        ];
        let request = decode(writes.request(group.iter().map(Vec::as_slice)));
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
        let writes = Writes::new("p");
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
        let writes = Writes::new("p");
        let first = [event("like.added", "p1", "u1", 2)];
        writes.request(first.iter().map(Vec::as_slice));
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
}
