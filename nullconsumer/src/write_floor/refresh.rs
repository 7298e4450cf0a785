//! The exact floor's rollups (`--rollups`): the least read side a
//! consumer of this design keeps, as cheaply as we know how, so Zipf's
//! goal "with rollups on" can be read against a floor that refreshes
//! rollups too.
//!
//! Every [`INTERVAL`] (hotcount's default `--rollup-interval-ms`) the
//! posts whose count a Commit changed since the last refresh are read, up
//! to [`POSTS_PER_READ`] per BatchGetDocuments (hotcount's
//! `posts_per_read`): each post's counter and its rollup, asking only for
//! the `likes` field, and the rollup of each is written (`likes` as read)
//! in Commits of up to [`WRITES_PER_COMMIT`] (hotcount's `writes_per_call`),
//! each write on the precondition that the rollup is the one read (its
//! update time, or absent), so a refresh that lost a race to another
//! replica's applies nothing. Request bytes are written by hand and the
//! answers read in place ([`super::encode`]), as the floor's Commits are.
//!
//! What it leaves out, and hotcount does: counter shards (the floor's
//! counter is one document per post), milestones, the lag histogram,
//! retries (a failed read or Commit is counted on stderr and its posts
//! dropped). Invariant: a rollup is written only with a count read in the
//! same refresh, on the precondition of the rollup read with it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::encode::{self, Got, Precondition, Value};
use super::{lock, read_whole, ready, send_commit, RawCommit};

/// How often the changed posts are refreshed (hotcount's default
/// `--rollup-interval-ms`).
const INTERVAL: Duration = Duration::from_millis(1000);

/// Posts read per BatchGetDocuments (hotcount's `posts_per_read`).
const POSTS_PER_READ: usize = 2000;

/// Rollups written per Commit (hotcount's `writes_per_call`).
const WRITES_PER_COMMIT: usize = 500;

/// The BatchGetDocuments method's path.
const BATCH_GET_PATH: &str = "/google.firestore.v1.Firestore/BatchGetDocuments";

/// Reads a BatchGetDocuments answer's messages in place: what each found
/// or missed.
#[derive(Clone, Copy)]
struct RawBatchGet;

impl tonic::codec::Codec for RawBatchGet {
    type Encode = Vec<u8>;
    type Decode = Got;
    type Encoder = RawCommit;
    type Decoder = RawBatchGet;

    fn encoder(&mut self) -> RawCommit {
        RawCommit
    }

    fn decoder(&mut self) -> RawBatchGet {
        RawBatchGet
    }
}

impl tonic::codec::Decoder for RawBatchGet {
    type Item = Got;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Got>, tonic::Status> {
        read_whole(src, encode::batch_get_answer)
            .map(Some)
            .ok_or_else(|| {
                tonic::Status::internal("a BatchGetDocuments answer that does not parse")
            })
    }
}

/// The posts whose count changed since the last refresh, and how the
/// refreshes went.
#[derive(Default)]
pub struct Rollups {
    /// Posts changed by a Commit that answered, not refreshed since.
    changed: Mutex<HashSet<Box<str>>>,
    /// Rollups written, and refresh calls (reads and Commits) that failed.
    written: AtomicU64,
    failed: AtomicU64,
}

impl Rollups {
    /// Marks `posts` as changed (their Commit answered).
    pub fn mark<'p>(&self, posts: impl IntoIterator<Item = &'p str>) {
        let mut changed = lock(&self.changed);
        for post in posts {
            if !changed.contains(post) {
                changed.insert(post.into());
            }
        }
    }

    /// Rollups written and failed calls so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.written.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// Where the rollups' documents are, and the connection.
pub struct Refresher {
    /// `projects/{p}/databases/(default)`.
    pub database: String,
    /// `{database}/documents`.
    pub documents: String,
    pub channel: tonic::client::Grpc<tonic::transport::Channel>,
    pub rollups: Arc<Rollups>,
}

impl Refresher {
    /// Refreshes the changed posts every [`INTERVAL`], forever.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.refresh().await;
        }
    }

    /// Reads and writes the rollups of the posts changed since the last
    /// refresh.
    pub async fn refresh(&self) {
        let posts: Vec<Box<str>> = lock(&self.rollups.changed).drain().collect();
        for chunk in posts.chunks(POSTS_PER_READ) {
            match self.read(chunk).await {
                Ok(read) => self.write(chunk, &read).await,
                Err(status) => self.failed(&status),
            }
        }
    }

    /// Each post's counter and rollup as read: by document name, the
    /// `likes` found (0 if absent) and the rollup's update time.
    async fn read(&self, posts: &[Box<str>]) -> Result<HashMap<String, Got>, tonic::Status> {
        let mut request = encode::BatchGet::new(&self.database, posts.len() * 2);
        for post in posts {
            request.document(&[&self.documents, "/nullfloor-counters/", post]);
            request.document(&[&self.documents, "/nullfloor-rollups/", post]);
        }
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(BATCH_GET_PATH);
        let mut answers = ready(&self.channel)
            .await?
            .server_streaming(
                tonic::Request::new(request.finish(&["likes"])),
                path,
                RawBatchGet,
            )
            .await?
            .into_inner();
        let mut read = HashMap::with_capacity(posts.len() * 2);
        while let Some(got) = answers.message().await? {
            if let Some(name) = got.name() {
                read.insert(name.to_string(), got);
            }
        }
        Ok(read)
    }

    /// Writes each post's rollup as `read` gives it, on the precondition
    /// of the rollup read.
    async fn write(&self, posts: &[Box<str>], read: &HashMap<String, Got>) {
        let mut name = String::new();
        for chunk in posts.chunks(WRITES_PER_COMMIT) {
            let mut commit =
                encode::Commit::new(&self.database, chunk.len() * (self.documents.len() + 80));
            for post in chunk {
                self.name_into(&mut name, "/nullfloor-counters/", post);
                let likes = match read.get(&name) {
                    Some(Got::Found { likes, .. }) => *likes,
                    _ => 0,
                };
                self.name_into(&mut name, "/nullfloor-rollups/", post);
                let condition = match read.get(&name) {
                    Some(Got::Found { updated, .. }) => Precondition::UpdatedAt(*updated),
                    _ => Precondition::Absent,
                };
                commit.update(&[&name], &[("likes", Value::Int(likes))], condition);
            }
            let written = commit.writes() as u64;
            match send_commit(&self.channel, commit.finish()).await {
                Ok(_) => {
                    self.rollups.written.fetch_add(written, Ordering::Relaxed);
                }
                Err(status) => self.failed(&status),
            }
        }
    }

    /// `post`'s document in `collection` (`/name/`), its full name written
    /// into `name`.
    fn name_into(&self, name: &mut String, collection: &str, post: &str) {
        name.clear();
        name.push_str(&self.documents);
        name.push_str(collection);
        name.push_str(post);
    }

    /// Counts a failed call, and says the first one on stderr.
    fn failed(&self, status: &tonic::Status) {
        if self.rollups.failed.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!("hotcount-null-consumer: rollup refresh failed: {status}");
        }
    }
}
