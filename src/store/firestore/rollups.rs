//! The rollups on Firestore (`counts/{post}`): the [`RollupStore`] of a
//! [`FirestoreDb`], and the reads of the tools.
//!
//! Invariants: one refresh reads every post's counter shards `0..shards`
//! and its rollup in one BatchGetDocuments at one read time (the latest of
//! the responses' read times, at which every document returned is still
//! valid), asking only for the fields a rollup and a shard are read by and
//! reading the answers in place; writes go in one BatchWrite, each with the precondition that the
//! rollup is the one read (its update time, or absent), so a refresh that
//! lost a race is not applied (a write that records milestones is a
//! Commit of its own with its records, see `milestones.rs`); every
//! document name comes from [`Layout`].

use std::collections::BTreeMap;
use std::time::SystemTime;

use gcloud_sdk::google::firestore::v1 as fs;
use rustc_hash::FxHashMap;

use fs::structured_query::{field_filter, CollectionSelector, FieldReference, Projection};
use fs::value::ValueType;

use super::codec::{self, micros_to_timestamp, timestamp_to_micros};
use super::db::{FirestoreDb, Read};
use super::documents::{ascending, compare, field};
use super::errors::status_error;
use super::layout::collections;
use super::layout::fields::{counter_shard, marker, rollup};
use crate::store::rollup::{
    micros_of, ChangedPost, DueRecord, Micros, PostRead, RollupChange, RollupKey, RollupSnapshot,
    RollupStore, RollupWrite, StoredRollup, TakenRecord, WriteOutcome,
};
use crate::store::{Code, StoreError};

/// Where [`FirestoreDb::listen_rollups`] resumes: the last resume token and
/// the rollup documents the client holds as of it. A resumed stream sends
/// only what changed; an existence filter whose count differs from `held`,
/// or a target the server removes (a token it rejects), starts again from
/// scratch.
#[derive(Debug, Default)]
pub struct ListenResume {
    /// The last resume token; empty: every post's state is sent.
    token: Vec<u8>,
    /// Names of the rollup documents that exist, as last told.
    held: std::collections::BTreeSet<String>,
}

impl ListenResume {
    /// Forgets the token and what is held: the next stream starts fresh.
    fn reset(&mut self) {
        self.token.clear();
        self.held.clear();
    }
}

/// What a document read by [`FirestoreDb::read_rollups`] is to its post.
#[derive(Clone, Copy)]
enum Part {
    /// The rollup of the `i`-th post.
    Rollup(usize),
    /// Counter shard `k` of the `i`-th post.
    Shard(usize, u32),
}

impl RollupStore for FirestoreDb {
    async fn read_rollups(&self, keys: &[RollupKey<'_>]) -> Result<RollupSnapshot, StoreError> {
        let layout = self.layout();
        let mut names = Vec::new();
        let mut parts = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            names.push(layout.rollup(key.post_id));
            parts.push(Part::Rollup(i));
            // Shards 0..shards (none: the rollup alone, a peek).
            for k in 0..key.shards {
                names.push(layout.counter_shard(key.post_id, k));
                parts.push(Part::Shard(i, k));
            }
        }
        let mut snapshot = RollupSnapshot {
            read_time: 0,
            posts: vec![
                PostRead {
                    likes: 0,
                    found_shards: 0,
                    stored: None,
                };
                keys.len()
            ],
        };
        if keys.is_empty() {
            return Ok(snapshot);
        }
        let position: FxHashMap<&str, Part> = names.iter().map(String::as_str).zip(parts).collect();
        let posts = &mut snapshot.posts;
        // A rollup's fields, and a shard's `likes` (the same name).
        let mut fields = codec::ROLLUP_READ_FIELDS.to_vec();
        if !fields.contains(&counter_shard::LIKES) {
            fields.push(counter_shard::LIKES);
        }
        let read_time = self
            .batch_get_latest(
                names.iter().map(String::as_str),
                &fields,
                |doc| match position.get(doc.name) {
                    Some(Part::Rollup(i)) => {
                        posts[*i].stored = codec::rollup_from_fields(&doc, doc.update_time);
                    }
                    Some(Part::Shard(i, k)) => {
                        let likes = codec::shard_likes_from_fields(&doc);
                        let post = &mut posts[*i];
                        post.likes = post.likes.saturating_add(likes);
                        post.found_shards = post.found_shards.max(k.saturating_add(1));
                    }
                    None => {}
                },
            )
            .await?;
        snapshot.read_time = timestamp_to_micros(&read_time);
        Ok(snapshot)
    }

    async fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        // A write that records milestones is a Commit of its own (atomic
        // with its records); the rest go in one BatchWrite.
        let (recording, plain): (Vec<usize>, Vec<usize>) =
            (0..writes.len()).partition(|&i| !writes[i].milestones.is_empty());
        let mut outcomes: Vec<Option<WriteOutcome>> = vec![None; writes.len()];
        let recorded =
            futures::future::join_all(recording.iter().map(|&i| self.write_recording(&writes[i])))
                .await;
        for (&i, outcome) in recording.iter().zip(recorded) {
            outcomes[i] = Some(outcome);
        }
        if !plain.is_empty() {
            let request =
                codec::rollup_writes_request(self.layout(), plain.iter().map(|&i| &writes[i]));
            let statuses = self.batch_write_encoded(request).await?;
            for (&i, status) in plain.iter().zip(statuses) {
                outcomes[i] = Some(match status {
                    Ok(()) => WriteOutcome::Written,
                    // The rollup is not the one read: another refresher wrote it.
                    Err(e) if matches!(e.code, Code::FailedPrecondition | Code::AlreadyExists) => {
                        WriteOutcome::Lost
                    }
                    Err(e) => WriteOutcome::Failed(e),
                });
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or(WriteOutcome::Lost))
            .collect())
    }

    async fn changed_since(&self, since: SystemTime) -> Result<Vec<ChangedPost>, StoreError> {
        let since = micros_to_timestamp(micros_of(since));
        let query = fs::StructuredQuery {
            select: Some(Projection {
                fields: vec![field(counter_shard::UPDATED_AT)],
            }),
            from: vec![CollectionSelector {
                collection_id: collections::SHARDS.to_string(),
                all_descendants: true,
            }],
            r#where: Some(compare(
                counter_shard::UPDATED_AT,
                field_filter::Operator::GreaterThanOrEqual,
                codec::value(ValueType::TimestampValue(since)),
            )),
            ..Default::default()
        };
        let layout = self.layout();
        let queried = self.run_query(&layout.root(), query, Read::Latest).await?;
        let mut changed: BTreeMap<&str, ChangedPost> = BTreeMap::new();
        for doc in &queried.documents {
            let (Some(post), Some(k)) = (
                layout.counter_shard_post(&doc.name),
                layout.counter_shard_number(&doc.name),
            ) else {
                continue;
            };
            let at = match codec::get(&doc.fields, counter_shard::UPDATED_AT) {
                Some(ValueType::TimestampValue(t)) => timestamp_to_micros(t),
                _ => continue,
            };
            let entry = changed.entry(post).or_insert_with(|| ChangedPost {
                post_id: post.to_string(),
                changed_at: Some(at),
                shards: 0,
            });
            entry.changed_at = entry.changed_at.max(Some(at));
            entry.shards = entry.shards.max(k.saturating_add(1));
        }
        Ok(changed.into_values().collect())
    }

    async fn take_over_due(
        &self,
        older_than: std::time::Duration,
        store_now: Micros,
        limit: usize,
    ) -> Result<Vec<TakenRecord>, StoreError> {
        let older = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
        let before = micros_to_timestamp(store_now.saturating_sub(older));
        let mut selected: Vec<FieldReference> = codec::DUE_FIELDS.map(field).to_vec();
        selected.extend([marker::CONSUMER, marker::BATCH_ID, marker::COMMITTED_AT].map(field));
        let query = fs::StructuredQuery {
            select: Some(Projection { fields: selected }),
            from: vec![CollectionSelector {
                collection_id: self.layout().collection(collections::BATCHES),
                all_descendants: false,
            }],
            r#where: Some(compare(
                marker::ROLLUP_DUE,
                field_filter::Operator::LessThanOrEqual,
                codec::value(ValueType::TimestampValue(before)),
            )),
            order_by: vec![ascending(marker::ROLLUP_DUE)],
            limit: Some(i32::try_from(limit).unwrap_or(i32::MAX)),
            ..Default::default()
        };
        let root = self.layout().root();
        let found = self.run_query_bounded(&root, query, Read::Latest).await?;
        if found.documents.is_empty() {
            return Ok(Vec::new());
        }
        // The wait restarts at the store's time of the query.
        let now = found
            .read_time
            .unwrap_or_else(|| micros_to_timestamp(store_now));
        let claims = found
            .documents
            .iter()
            .map(|doc| codec::due_claim(doc, now))
            .collect();
        let statuses = self.batch_write(claims).await?;
        Ok(found
            .documents
            .iter()
            .zip(statuses)
            // A claim refused: the record changed since (cleared, or
            // another replica took it).
            .filter(|(_, status)| status.is_ok())
            .filter_map(|(doc, _)| codec::taken_record(doc))
            .collect())
    }

    async fn clear_due(&self, records: &[DueRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let writes = records
            .iter()
            .map(|r| codec::due_clear(self.layout(), r))
            .collect();
        // A marker gone (expired) has nothing to clear.
        for status in self.batch_write(writes).await? {
            match status {
                Err(e) if e.code != Code::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}

impl FirestoreDb {
    /// Every rollup of the layout: post -> (`likes`, `asOf`).
    pub async fn rollups(
        &self,
        read: Read<'_>,
    ) -> Result<BTreeMap<String, (i64, Micros)>, StoreError> {
        let query = fs::StructuredQuery {
            from: vec![CollectionSelector {
                collection_id: self.layout().collection(collections::COUNTS),
                all_descendants: false,
            }],
            ..Default::default()
        };
        let queried = self.run_query(&self.layout().root(), query, read).await?;
        let mut out = BTreeMap::new();
        for doc in &queried.documents {
            let post = match codec::get(&doc.fields, rollup::POST_ID) {
                Some(ValueType::StringValue(p)) => p.clone(),
                _ => continue,
            };
            if let Some(stored) = codec::stored_rollup(doc) {
                out.insert(post, (stored.likes, stored.as_of));
            }
        }
        Ok(out)
    }

    /// Listens to the rollups of `posts` on one Listen stream (a documents
    /// target): on a fresh stream sends each post's current state (`None`
    /// without a rollup), then each change as it is committed, to
    /// `changes`. Resumes from `resume` when it holds a token (then only
    /// what changed since is sent) and keeps the latest token there; a
    /// removed target or an existence filter that disagrees with what is
    /// held clears it, so the next call starts fresh. Returns when the
    /// stream ends or fails, or `changes` closes.
    pub async fn listen_rollups(
        &self,
        posts: &[String],
        resume: &mut ListenResume,
        changes: &tokio::sync::mpsc::UnboundedSender<RollupChange>,
    ) -> Result<(), StoreError> {
        use fs::listen_response::ResponseType;
        use fs::target_change::TargetChangeType;
        use futures::StreamExt;
        let op = "Listen";
        let by_name: FxHashMap<String, &str> = posts
            .iter()
            .map(|p| (self.layout().rollup(p), p.as_str()))
            .collect();
        let target = fs::Target {
            target_id: 1,
            target_type: Some(fs::target::TargetType::Documents(
                fs::target::DocumentsTarget {
                    documents: by_name.keys().cloned().collect(),
                },
            )),
            resume_type: (!resume.token.is_empty())
                .then(|| fs::target::ResumeType::ResumeToken(resume.token.clone())),
            ..Default::default()
        };
        let request = fs::ListenRequest {
            database: self.layout().database.clone(),
            target_change: Some(fs::listen_request::TargetChange::AddTarget(target)),
            ..Default::default()
        };
        // One request, then the stream stays open for the answers.
        let requests =
            futures::stream::once(async move { request }).chain(futures::stream::pending());
        let mut stream = self
            .client()
            .listen(requests)
            .await
            .map_err(|s| status_error(op, &s))?
            .into_inner();
        // A resumed stream sends only what changed: the others are as told.
        let fresh = resume.token.is_empty();
        if fresh {
            resume.held.clear();
        }
        let mut seen: rustc_hash::FxHashSet<&str> = Default::default();
        let send = |post: &str, rollup: Option<(i64, Micros)>| {
            changes.send(RollupChange {
                post_id: post.to_string(),
                rollup,
            })
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return Ok(()),
                Err(status) => return Err(status_error(op, &status)),
            };
            let sent = match response.response_type {
                Some(ResponseType::DocumentChange(change)) => {
                    let Some(doc) = change.document else { continue };
                    let Some(&post) = by_name.get(&doc.name) else {
                        continue;
                    };
                    seen.insert(post);
                    let rollup = codec::stored_rollup(&doc).map(|r| (r.likes, r.as_of));
                    resume.held.insert(doc.name);
                    send(post, rollup)
                }
                Some(ResponseType::DocumentDelete(fs::DocumentDelete { document, .. }))
                | Some(ResponseType::DocumentRemove(fs::DocumentRemove { document, .. })) => {
                    let Some(&post) = by_name.get(&document) else {
                        continue;
                    };
                    seen.insert(post);
                    resume.held.remove(&document);
                    send(post, None)
                }
                Some(ResponseType::TargetChange(change)) => {
                    if let Some(cause) = change.cause.filter(|c| c.code != 0) {
                        // The target is gone (a token the server rejects
                        // among the causes): listen again from scratch.
                        resume.reset();
                        let code = gcloud_sdk::tonic::Code::from(cause.code);
                        let status = gcloud_sdk::tonic::Status::new(code, cause.message);
                        return Err(status_error(op, &status));
                    }
                    if !change.resume_token.is_empty() {
                        resume.token.clone_from(&change.resume_token);
                    }
                    let current = change.target_change_type == TargetChangeType::Current as i32;
                    let mut result = Ok(());
                    if current && fresh {
                        // Posts with no rollup: nothing was sent for them.
                        for post in posts.iter().map(String::as_str) {
                            if seen.insert(post) {
                                result = result.and(send(post, None));
                            }
                        }
                    }
                    result
                }
                Some(ResponseType::Filter(filter)) => {
                    let held = resume.held.len();
                    if usize::try_from(filter.count).ok() != Some(held) {
                        // Some document held is gone, and which one the
                        // server cannot say: listen again from scratch.
                        tracing::info!(
                            count = filter.count,
                            held,
                            "existence filter mismatch: listening to the rollups again from scratch"
                        );
                        resume.reset();
                        return Ok(());
                    }
                    Ok(())
                }
                _ => Ok(()),
            };
            if sent.is_err() {
                return Ok(());
            }
        }
    }

    /// The rollup of `post_id`, if any (latest state).
    pub async fn rollup(&self, post_id: &str) -> Result<Option<StoredRollup>, StoreError> {
        let doc = self.get(&self.layout().rollup(post_id)).await?;
        Ok(doc.as_ref().and_then(codec::stored_rollup))
    }
}
