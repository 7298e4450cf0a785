//! The store's and Pub/Sub's own operation counts of a bench run, the
//! figures a bill is made of: Firestore document reads, writes, deletes
//! and (estimated) index entries by collection group and RPCs by kind,
//! what the collections store at the end; PostgreSQL's statistics views
//! (rows inserted, updated and deleted per table, transactions, buffer
//! reads, WAL bytes); Pub/Sub bytes published and delivered.
//!
//! Invariant: every count is read from the emulators or the server, never
//! from the service under test; a run's counts start at its baseline
//! ([`OpsBaseline::take`], before publishing) and end once its consumers
//! stopped (they drained: the rollups of the last changes are written),
//! so they hold all the work the run's events caused.

use std::collections::BTreeMap;
use std::time::Duration;

use hotcount_emulators::firestore::{CollectionStorage, CollectionUsage};
use hotcount_emulators::pubsub::SubscriptionStats;

use crate::run_error::RunError;
use crate::stage::Stage;

/// How long the statistics views may lag a backend that ended: a backend
/// reports at most once a second, and at its exit.
const PG_STATS_SETTLE: Duration = Duration::from_millis(1_500);

/// Counts of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreOps {
    /// Firestore (emulator): by collection group, and RPCs by method.
    pub firestore: Option<FirestoreOps>,
    /// PostgreSQL: the server's statistics views over the run.
    pub postgres: Option<PgOps>,
    /// Pub/Sub (emulator), the run's subscription.
    pub pubsub: PubSubOps,
}

/// Firestore's counts of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FirestoreOps {
    /// Reads, writes, deletes, estimated index entries by collection group.
    pub by_collection: BTreeMap<String, CollectionUsage>,
    /// RPCs by method.
    pub rpcs: BTreeMap<String, u64>,
    /// What each collection group stores at the end.
    pub storage: BTreeMap<String, CollectionStorage>,
}

impl FirestoreOps {
    /// All groups' usage summed.
    pub fn total(&self) -> CollectionUsage {
        let mut total = CollectionUsage::default();
        for u in self.by_collection.values() {
            total.reads += u.reads;
            total.writes += u.writes;
            total.deletes += u.deletes;
            total.index_entries += u.index_entries;
        }
        total
    }
}

/// Rows written to one PostgreSQL table (`pg_stat_user_tables`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOps {
    /// Rows inserted.
    pub inserted: u64,
    /// Rows updated (HOT updates included).
    pub updated: u64,
    /// Rows deleted.
    pub deleted: u64,
    /// Of the updates, HOT ones (no index entry written).
    pub hot_updated: u64,
    /// Index scans.
    pub index_scans: u64,
    /// Rows fetched by index scans.
    pub index_rows_fetched: u64,
    /// Live rows at the end (an estimate the server keeps; not a difference).
    pub live_rows: u64,
    /// The table's size at the end, its indexes and TOAST included
    /// (`pg_total_relation_size`; not a difference).
    pub total_bytes: u64,
}

/// PostgreSQL's counts of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PgOps {
    /// By table.
    pub tables: BTreeMap<String, TableOps>,
    /// Transactions committed in the database (`pg_stat_database`; the
    /// bench's own few statistics queries included).
    pub commits: u64,
    /// Transactions rolled back.
    pub rollbacks: u64,
    /// Buffer reads found in shared buffers.
    pub blocks_hit: u64,
    /// Buffer reads that went to the file system.
    pub blocks_read: u64,
    /// WAL written, bytes.
    pub wal_bytes: u64,
}

/// Pub/Sub's counts of a run, on its subscription.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PubSubOps {
    /// Publish requests (each up to 1,000 messages).
    pub publish_requests: u64,
    /// Messages published.
    pub published: u64,
    /// Their bytes (data + attributes + ordering key).
    pub published_bytes: u64,
    /// Deliveries (redeliveries included).
    pub delivered: u64,
    /// Their bytes.
    pub delivered_bytes: u64,
}

impl PubSubOps {
    fn of(stats: &SubscriptionStats, publish_requests: u64) -> Self {
        Self {
            publish_requests,
            published: stats.published,
            published_bytes: stats.published_bytes,
            delivered: stats.delivered,
            delivered_bytes: stats.delivered_bytes,
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            publish_requests: self
                .publish_requests
                .saturating_sub(before.publish_requests),
            published: self.published.saturating_sub(before.published),
            published_bytes: self.published_bytes.saturating_sub(before.published_bytes),
            delivered: self.delivered.saturating_sub(before.delivered),
            delivered_bytes: self.delivered_bytes.saturating_sub(before.delivered_bytes),
        }
    }
}

/// The counts at a run's start (the emulator's Firestore usage is reset
/// instead, by the bench's baseline).
pub struct OpsBaseline {
    firestore_rpcs: BTreeMap<String, u64>,
    pubsub: PubSubOps,
    postgres: Option<PgOps>,
}

impl OpsBaseline {
    /// Reads the counts before the run publishes anything.
    pub async fn take(stage: &Stage) -> Result<Self, RunError> {
        let emulators = stage.emulators();
        let postgres = match stage.postgres() {
            Some(pg) => Some(read_pg(&pg.url).await?),
            None => None,
        };
        Ok(Self {
            firestore_rpcs: emulators.firestore_counters().snapshot(),
            pubsub: PubSubOps::of(
                &stage.subscription_stats(),
                emulators.pubsub_counters().get("Publish"),
            ),
            postgres,
        })
    }

    /// The run's counts: now less the baseline (call it once the consumers
    /// stopped).
    pub async fn finish(self, stage: &Stage) -> Result<StoreOps, RunError> {
        let emulators = stage.emulators();
        let pubsub = PubSubOps::of(
            &stage.subscription_stats(),
            emulators.pubsub_counters().get("Publish"),
        )
        .since(self.pubsub);
        let postgres = match (stage.postgres(), self.postgres) {
            (Some(pg), Some(before)) => {
                tokio::time::sleep(PG_STATS_SETTLE).await;
                Some(read_pg(&pg.url).await?.since(&before))
            }
            _ => None,
        };
        let firestore = match postgres {
            Some(_) => None,
            None => {
                let firestore = emulators.firestore();
                let mut rpcs = emulators.firestore_counters().snapshot();
                for (method, n) in rpcs.iter_mut() {
                    *n = n.saturating_sub(self.firestore_rpcs.get(method).copied().unwrap_or(0));
                }
                rpcs.retain(|_, n| *n > 0);
                Some(FirestoreOps {
                    by_collection: firestore.stats().by_collection,
                    rpcs,
                    storage: firestore.storage(),
                })
            }
        };
        Ok(StoreOps {
            firestore,
            postgres,
            pubsub,
        })
    }
}

impl PgOps {
    fn since(self, before: &Self) -> Self {
        let mut tables = self.tables;
        for (name, now) in tables.iter_mut() {
            let was = before.tables.get(name).copied().unwrap_or_default();
            *now = TableOps {
                inserted: now.inserted.saturating_sub(was.inserted),
                updated: now.updated.saturating_sub(was.updated),
                deleted: now.deleted.saturating_sub(was.deleted),
                hot_updated: now.hot_updated.saturating_sub(was.hot_updated),
                index_scans: now.index_scans.saturating_sub(was.index_scans),
                index_rows_fetched: now
                    .index_rows_fetched
                    .saturating_sub(was.index_rows_fetched),
                live_rows: now.live_rows,
                total_bytes: now.total_bytes,
            };
        }
        Self {
            tables,
            commits: self.commits.saturating_sub(before.commits),
            rollbacks: self.rollbacks.saturating_sub(before.rollbacks),
            blocks_hit: self.blocks_hit.saturating_sub(before.blocks_hit),
            blocks_read: self.blocks_read.saturating_sub(before.blocks_read),
            wal_bytes: self.wal_bytes.saturating_sub(before.wal_bytes),
        }
    }
}

const PG_TABLES: &str = "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd, \
     coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0), n_live_tup, \
     pg_total_relation_size(relid) FROM pg_stat_user_tables";
const PG_DATABASE: &str = "SELECT xact_commit, xact_rollback, blks_hit, blks_read, \
     pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint \
     FROM pg_stat_database WHERE datname = current_database()";

/// The server's cumulative counts now.
async fn read_pg(url: &str) -> Result<PgOps, RunError> {
    let client = crate::postgres::client(url).await?;
    let error = |e: tokio_postgres::Error| RunError::Start(format!("postgres: statistics: {e}"));
    let count = |row: &tokio_postgres::Row, i: usize| -> Result<u64, RunError> {
        let n: i64 = row.try_get(i).map_err(error)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let mut tables = BTreeMap::new();
    for row in client.query(PG_TABLES, &[]).await.map_err(error)? {
        let name: String = row.try_get(0).map_err(error)?;
        let ops = TableOps {
            inserted: count(&row, 1)?,
            updated: count(&row, 2)?,
            deleted: count(&row, 3)?,
            hot_updated: count(&row, 4)?,
            index_scans: count(&row, 5)?,
            index_rows_fetched: count(&row, 6)?,
            live_rows: count(&row, 7)?,
            total_bytes: count(&row, 8)?,
        };
        tables.insert(name, ops);
    }
    let row = client.query_one(PG_DATABASE, &[]).await.map_err(error)?;
    Ok(PgOps {
        tables,
        commits: count(&row, 0)?,
        rollbacks: count(&row, 1)?,
        blocks_hit: count(&row, 2)?,
        blocks_read: count(&row, 3)?,
        wal_bytes: count(&row, 4)?,
    })
}
