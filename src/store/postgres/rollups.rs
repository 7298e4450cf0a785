//! The rollups on PostgreSQL (`post_counts`): the [`RollupStore`] of a
//! [`PgDb`], and the reads of the tools (every rollup, for verification).
//!
//! Invariants: a read is one REPEATABLE READ READ ONLY snapshot (shard sums
//! and rollups together) whose time is the statement's, no later than the
//! snapshot, so any rollup stamped with a later time includes every commit
//! acknowledged before that read began; a write is one statement that
//! changes only rows with an older `as_of`, inserts (if absent) the
//! milestone rows of the posts it wrote, and notifies `hotcount_counts`
//! of each post it wrote, delivered when the statement commits.

use std::collections::BTreeMap;
use std::time::SystemTime;

use tokio_postgres::types::ToSql;

use super::errors::query_error;
use super::{schema, PgDb};
use crate::store::rollup::{
    micros_of, ChangedPost, DueRecord, Micros, PostRead, RollupChange, RollupKey, RollupSnapshot,
    RollupStore, RollupWrite, StoredRollup, TakenRecord, WriteOutcome,
};
use crate::store::{ChangedCounter, StoreError};

impl RollupStore for PgDb {
    fn numbers_shards(&self) -> bool {
        false
    }

    async fn read_rollups(&self, keys: &[RollupKey<'_>]) -> Result<RollupSnapshot, StoreError> {
        let op = "ReadRollups";
        let posts: Vec<&str> = keys.iter().map(|k| k.post_id).collect();
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        // Within the call timeout: a server that stops answering must not
        // stop the refresher (its connection is closed when abandoned).
        let rows = self
            .bounded(op, self.call_timeout(), async {
                let conn = self.checkout(op).await?;
                let [read] = conn.statements(op, [schema::READ_ROLLUPS]).await?;
                let client = conn.client()?;
                let params: [&(dyn ToSql + Sync); 1] = [&posts];
                let (begun, rows, ended) = tokio::join!(
                    biased;
                    client.batch_execute(schema::BEGIN_SNAPSHOT),
                    client.query(&read, &params),
                    client.batch_execute(schema::COMMIT),
                );
                begun.map_err(err)?;
                let rows = rows.map_err(err)?;
                ended.map_err(err)?;
                conn.release();
                Ok(rows)
            })
            .await?;
        let mut snapshot = RollupSnapshot {
            read_time: 0,
            posts: Vec::with_capacity(rows.len()),
        };
        for row in &rows {
            let likes: Option<i64> = row.try_get(2).map_err(err)?;
            let as_of: Option<i64> = row.try_get(3).map_err(err)?;
            snapshot.read_time = row.try_get(4).map_err(err)?;
            snapshot.posts.push(PostRead {
                likes: row.try_get(1).map_err(err)?,
                found_shards: 0,
                stored: likes.zip(as_of).map(|(likes, as_of)| StoredRollup {
                    likes,
                    as_of,
                    shards: None,
                    update_time: None,
                    milestone: None,
                }),
            });
        }
        Ok(snapshot)
    }

    async fn write_rollups(
        &self,
        writes: &[RollupWrite<'_>],
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        let op = "WriteRollups";
        // One snapshot per call: every write of it has the same `as_of`.
        let Some(as_of) = writes.iter().map(|w| w.as_of).max() else {
            return Ok(Vec::new());
        };
        let posts: Vec<&str> = writes.iter().map(|w| w.post_id).collect();
        let likes: Vec<i64> = writes.iter().map(|w| w.likes).collect();
        // The milestones each write reaches first, as three parallel arrays.
        let (mut m_posts, mut m_values, mut m_likes) = (Vec::new(), Vec::new(), Vec::new());
        for w in writes {
            for &n in w.milestones {
                m_posts.push(w.post_id);
                m_values.push(n);
                m_likes.push(w.likes);
            }
        }
        let params: [&(dyn ToSql + Sync); 6] =
            [&posts, &likes, &as_of, &m_posts, &m_values, &m_likes];
        let rows = self.query_rows(op, schema::WRITE_ROLLUPS, &params).await?;
        let written: std::collections::HashSet<String> = rows
            .iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<Result<_, _>>()
            .map_err(|e| query_error(op, &e))?;
        Ok(writes
            .iter()
            .map(|w| {
                if written.contains(w.post_id) {
                    WriteOutcome::Written
                } else {
                    WriteOutcome::Lost
                }
            })
            .collect())
    }

    async fn changed_since(&self, since: SystemTime) -> Result<Vec<ChangedPost>, StoreError> {
        let op = "ChangedRollups";
        let rows = self
            .query_rows(op, schema::CHANGED_ROLLUPS, &[&micros_of(since)])
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ChangedPost {
                    post_id: row.try_get(0).map_err(|e| query_error(op, &e))?,
                    changed_at: None,
                    shards: 0,
                })
            })
            .collect()
    }

    async fn take_over_due(
        &self,
        older_than: std::time::Duration,
        _store_now: Micros,
        limit: usize,
    ) -> Result<Vec<TakenRecord>, StoreError> {
        let op = "TakeOverDue";
        let older_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .query_rows(op, schema::TAKE_OVER_DUE, &[&older_ms, &limit])
            .await?;
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let mut taken = Vec::with_capacity(rows.len());
        for row in &rows {
            let posts: Option<Vec<String>> = row.try_get(2).map_err(err)?;
            taken.push(TakenRecord {
                record: DueRecord {
                    consumer: row.try_get(0).map_err(err)?,
                    batch_id: row.try_get(1).map_err(err)?,
                },
                posts: (posts.unwrap_or_default().into_iter())
                    .map(|post_id| ChangedCounter {
                        post_id,
                        shard: None,
                    })
                    .collect(),
                committed_at: None,
            });
        }
        Ok(taken)
    }

    async fn clear_due(&self, records: &[DueRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let consumers: Vec<&str> = records.iter().map(|r| r.consumer.as_str()).collect();
        let batches: Vec<&str> = records.iter().map(|r| r.batch_id.as_str()).collect();
        self.query_rows("ClearDue", schema::CLEAR_DUE, &[&consumers, &batches])
            .await?;
        Ok(())
    }
}

impl PgDb {
    /// Listens to the rollups of `posts` (`LISTEN hotcount_counts` on a
    /// connection of its own, then the current rows): sends each post's
    /// current state (`None` without a rollup), then its state again after
    /// each notification of it, to `changes`. Returns when the connection
    /// ends (an error) or `changes` closes.
    pub async fn listen_rollups(
        &self,
        posts: &[String],
        changes: &tokio::sync::mpsc::UnboundedSender<RollupChange>,
    ) -> Result<(), StoreError> {
        // LISTEN first: a write after the reads below is notified.
        let mut listening = self.listen(schema::ROLLUP_CHANNEL).await?;
        let send = |post: &str, read: &PostRead| {
            let rollup = read.stored.as_ref().map(|r| (r.likes, r.as_of));
            changes.send(RollupChange {
                post_id: post.to_string(),
                rollup,
            })
        };
        let keys: Vec<RollupKey<'_>> = posts
            .iter()
            .map(|p| RollupKey {
                post_id: p,
                shards: 0,
            })
            .collect();
        let current = self.read_rollups(&keys).await?;
        for (post, read) in posts.iter().zip(&current.posts) {
            if send(post, read).is_err() {
                return Ok(());
            }
        }
        while let Some(post) = listening.notifications.recv().await {
            if !posts.contains(&post) {
                continue;
            }
            let key = [RollupKey {
                post_id: &post,
                shards: 0,
            }];
            let read = self.read_rollups(&key).await?;
            let Some(read) = read.posts.first() else {
                continue;
            };
            if send(&post, read).is_err() {
                return Ok(());
            }
        }
        Err(super::errors::unavailable_because(
            "Listen",
            "the LISTEN connection ended",
        ))
    }

    /// Every rollup: post -> (`likes`, `as_of`).
    pub async fn rollups(&self) -> Result<BTreeMap<String, (i64, Micros)>, StoreError> {
        let op = "ReadRollups";
        let rows = self.query_rows(op, schema::ALL_ROLLUPS, &[]).await?;
        let err = |e: tokio_postgres::Error| query_error(op, &e);
        let mut out = BTreeMap::new();
        for row in &rows {
            out.insert(
                row.try_get(0).map_err(err)?,
                (row.try_get(1).map_err(err)?, row.try_get(2).map_err(err)?),
            );
        }
        Ok(out)
    }
}
