//! The write floor (`--commit-writes`): the least store work an
//! exactly-once consumer of this design does, done the standard way, so
//! hotcount's CPU per message can be read against a consumer that writes
//! what it must and nothing else.
//!
//! Messages are gathered per stream (up to 1,000, or what 100 ms brought:
//! hotcount's default `--max-batch-events` and `--flush-interval-ms`);
//! each group becomes ONE Firestore Commit, sent with gcloud-sdk's
//! generated client over a plain tonic channel: the membership document
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
//! consumer: a message it cannot parse is acked unwritten, and a Commit
//! that fails is reported on stderr (the first one, then a count in the
//! totals line every 100 Commits) and its messages acked anyway, so a
//! bench run always ends.
//!
//! Invariant: every message received is acked exactly once, after the
//! Commit of its group has answered; a membership is written only with a
//! version newer than the one the floor wrote before.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gcloud_sdk::google::firestore::v1 as fs;
use google_cloud_pubsub::subscriber::handler::Handler;
use tokio::sync::Semaphore;

/// Messages per Commit at most (hotcount's default `--max-batch-events`).
pub const GROUP_MESSAGES: usize = 1000;

/// The longest a message waits for its group to fill (hotcount's default
/// `--flush-interval-ms`).
const GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Commits in flight at most (hotcount's default `--max-commits-in-flight`).
const COMMITS_IN_FLIGHT: usize = 4;

/// A like event's fields the write needs, borrowed where unescaped.
#[derive(serde::Deserialize)]
struct Like<'a> {
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

/// A membership's new state, for its write.
struct Change {
    name: String,
    liked: bool,
    seq: i64,
    event_id: String,
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
    client: fs::firestore_client::FirestoreClient<tonic::transport::Channel>,
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
            client: fs::firestore_client::FirestoreClient::new(channel),
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
            floor.tally(group.len(), &request);
            if let Err(status) = floor.client.clone().commit(request).await {
                if floor.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("hotcount-null-consumer: commit failed: {status}");
                }
            }
            for (_, handler) in group {
                handler.ack();
            }
        });
    }

    /// Adds a group to the running totals, printed every 100 Commits (to
    /// compare its writes per message with hotcount's).
    fn tally(&self, messages: usize, request: &fs::CommitRequest) {
        let mut totals = self
            .totals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        totals.0 += 1;
        totals.1 += messages as u64;
        totals.2 += request.writes.len() as u64;
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
    /// per post, the marker.
    fn request<'d>(&self, group: impl IntoIterator<Item = &'d [u8]>) -> fs::CommitRequest {
        let mut changed: HashMap<String, Change> = HashMap::with_capacity(GROUP_MESSAGES);
        let mut deltas: HashMap<String, i64> = HashMap::new();
        let mut messages = 0_i64;
        {
            let mut versions = self
                .versions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut key = String::new();
            for data in group {
                messages += 1;
                let Ok(like) = serde_json::from_slice::<Like>(data) else {
                    continue;
                };
                key.clear();
                key.push_str(&like.post_id);
                key.push('\n');
                key.push_str(&like.user_id);
                let liked = like.kind == "like.added";
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
                    *deltas.entry(like.post_id.to_string()).or_default() += delta;
                }
                changed.insert(
                    key.clone(),
                    Change {
                        name: format!(
                            "{}/nullfloor-posts/{}/likes/{}",
                            self.documents, like.post_id, like.user_id
                        ),
                        liked,
                        seq: like.seq,
                        event_id: like.event_id.into_owned(),
                    },
                );
            }
        }
        let mut writes = Vec::with_capacity(changed.len() + deltas.len() + 1);
        for (_, change) in changed {
            let fields = HashMap::from([
                (
                    "liked".to_string(),
                    value(fs::value::ValueType::BooleanValue(change.liked)),
                ),
                (
                    "seq".to_string(),
                    value(fs::value::ValueType::IntegerValue(change.seq)),
                ),
                (
                    "eventId".to_string(),
                    value(fs::value::ValueType::StringValue(change.event_id)),
                ),
            ]);
            writes.push(update(fs::Document {
                name: change.name,
                fields,
                ..Default::default()
            }));
        }
        for (post, delta) in deltas {
            writes.push(fs::Write {
                operation: Some(fs::write::Operation::Transform(fs::DocumentTransform {
                    document: format!("{}/nullfloor-counters/{post}", self.documents),
                    field_transforms: vec![fs::document_transform::FieldTransform {
                        field_path: "likes".into(),
                        transform_type: Some(
                            fs::document_transform::field_transform::TransformType::Increment(
                                value(fs::value::ValueType::IntegerValue(delta)),
                            ),
                        ),
                    }],
                })),
                ..Default::default()
            });
        }
        let marker = self.markers.fetch_add(1, Ordering::Relaxed);
        writes.push(update(fs::Document {
            name: format!(
                "{}/nullfloor-markers/{}-{marker}",
                self.documents,
                std::process::id()
            ),
            fields: HashMap::from([(
                "messages".to_string(),
                value(fs::value::ValueType::IntegerValue(messages)),
            )]),
            ..Default::default()
        }));
        fs::CommitRequest {
            database: self.database.clone(),
            writes,
            transaction: Vec::new(),
            ..Default::default()
        }
    }
}

fn value(v: fs::value::ValueType) -> fs::Value {
    fs::Value {
        value_type: Some(v),
    }
}

fn update(document: fs::Document) -> fs::Write {
    fs::Write {
        operation: Some(fs::write::Operation::Update(document)),
        ..Default::default()
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
        let request = writes.request(group.iter().map(Vec::as_slice));
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
    fn an_event_not_newer_than_the_version_written_before_is_not_written_again() {
        let writes = Writes::new("p");
        let first = [event("like.added", "p1", "u1", 2)];
        writes.request(first.iter().map(Vec::as_slice));
        let second = [
            event("like.added", "p1", "u1", 2),
            event("like.removed", "p1", "u1", 1),
            event("like.added", "p2", "u9", 1),
        ];
        let (memberships, increments, markers) =
            read(&writes.request(second.iter().map(Vec::as_slice)));
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p2/likes/u9".into(), (true, 1))])
        );
        assert_eq!(increments, BTreeMap::from([("p2".into(), 1)]));
        assert_eq!(markers, [3]);
        let third = [event("like.removed", "p1", "u1", 3)];
        let (memberships, increments, _) = read(&writes.request(third.iter().map(Vec::as_slice)));
        assert_eq!(
            memberships,
            BTreeMap::from([("nullfloor-posts/p1/likes/u1".into(), (false, 3))])
        );
        assert_eq!(increments, BTreeMap::from([("p1".into(), -1)]));
    }
}
