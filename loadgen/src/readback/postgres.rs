//! Reads back what hotcount wrote to a PostgreSQL database: every
//! membership, the counter shards summed per post, quarantine records and
//! rollups, through hotcount's own pool.
//!
//! Invariant: reads never write, and [`read_snapshot`] reads memberships,
//! counter shards, quarantine records and rollups in one REPEATABLE READ
//! READ ONLY transaction, so its [`Snapshot`] is always consistent.

use std::collections::BTreeMap;

use hotcount::model::poison::PoisonRecord;
use hotcount::store::postgres::errors::query_error;
use hotcount::store::postgres::{PgDb, PgDbConfig};
use hotcount::store::StoreError;

use super::{by_reason, MembershipRow, ReadError, Snapshot};

/// Opens hotcount's pool on `url` for reading back.
pub(super) fn open(url: &str) -> Result<PgDb, ReadError> {
    PgDb::new(&PgDbConfig::new(url)).map_err(|e| ReadError::Connect(e.to_string()))
}

fn read_error(op: &'static str) -> impl Fn(tokio_postgres::Error) -> ReadError {
    move |e| from_store(op)(query_error(op, &e))
}

fn from_store(op: &'static str) -> impl Fn(StoreError) -> ReadError {
    move |e| ReadError::Query {
        collection: op.to_string(),
        code: e.code,
        message: e.message,
    }
}

/// Every membership, counter shard sums per post and quarantine records,
/// read at one snapshot.
pub(super) async fn read_snapshot(db: &PgDb) -> Result<Snapshot, ReadError> {
    let op = "Readback";
    let err = read_error(op);
    let conn = db.checkout(op).await.map_err(from_store(op))?;
    let client = conn.client().map_err(from_store(op))?;
    let (begun, memberships, shards, quarantine, rollups, ended) = tokio::join!(
        biased;
        client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
        client.query(MEMBERSHIPS, &[]),
        client.query(
            "SELECT post_id, sum(likes)::int8, count(*)::int8 FROM counter_shards GROUP BY post_id",
            &[],
        ),
        client.query("SELECT message_id, data, data_bytes FROM quarantine", &[]),
        client.query("SELECT post_id, likes FROM post_counts", &[]),
        client.batch_execute("COMMIT"),
    );
    begun.map_err(&err)?;
    let memberships = memberships_of(memberships.map_err(&err)?)?;
    let (counts, shards_read) = sums_of(shards.map_err(&err)?)?;
    let quarantine = quarantine.map_err(&err)?;
    let rollups = (rollups.map_err(&err)?.iter())
        .map(|row| Ok((row.try_get(0).map_err(&err)?, row.try_get(1).map_err(&err)?)))
        .collect::<Result<BTreeMap<String, i64>, ReadError>>()?;
    ended.map_err(&err)?;
    conn.release();
    let mut quarantined_events = 0;
    let mut records = Vec::with_capacity(quarantine.len());
    for row in &quarantine {
        let message_id: String = row.try_get(0).map_err(&err)?;
        quarantined_events += usize::from(message_id.starts_with("event-"));
        let data: Vec<u8> = row.try_get(1).map_err(&err)?;
        let data_bytes: i64 = row.try_get(2).map_err(&err)?;
        let mut record = PoisonRecord::new(message_id, String::new(), &data, Default::default())
            .of_kind(PoisonRecord::STORED);
        record.data_len = usize::try_from(data_bytes).unwrap_or(0);
        records.push(record);
    }
    Ok(Snapshot {
        counts,
        shards_read,
        memberships,
        quarantined: quarantine.len(),
        quarantined_events,
        quarantined_by_reason: by_reason(records.iter()),
        consistent: true,
        rollups,
    })
}

/// Counter sums per post and how many shard rows were read.
pub(super) async fn read_counts(db: &PgDb) -> Result<(BTreeMap<String, i64>, usize), ReadError> {
    let op = "ReadCounts";
    let rows = query(
        db,
        op,
        "SELECT post_id, sum(likes)::int8, count(*)::int8 FROM counter_shards GROUP BY post_id",
    )
    .await?;
    sums_of(rows)
}

/// Every membership row.
pub(super) async fn read_memberships(db: &PgDb) -> Result<Vec<MembershipRow>, ReadError> {
    let rows = query(db, "ReadMemberships", MEMBERSHIPS).await?;
    memberships_of(rows)
}

/// Every membership: `updated_at` is the time of the transaction that
/// last wrote it (`now()`: its start, a few milliseconds before its commit).
const MEMBERSHIPS: &str = "SELECT post_id, user_id, liked, occurred_at_micros,
        (extract(epoch FROM updated_at) * 1000000)::int8
    FROM memberships";

async fn query(
    db: &PgDb,
    op: &'static str,
    sql: &str,
) -> Result<Vec<tokio_postgres::Row>, ReadError> {
    let conn = db.checkout(op).await.map_err(from_store(op))?;
    let rows = conn
        .client()
        .map_err(from_store(op))?
        .query(sql, &[])
        .await
        .map_err(read_error(op))?;
    conn.release();
    Ok(rows)
}

fn memberships_of(rows: Vec<tokio_postgres::Row>) -> Result<Vec<MembershipRow>, ReadError> {
    let err = read_error("ReadMemberships");
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(MembershipRow {
            post_id: row.try_get(0).map_err(&err)?,
            user_id: row.try_get(1).map_err(&err)?,
            liked: row.try_get(2).map_err(&err)?,
            occurred_at_micros: row.try_get(3).map_err(&err)?,
            updated_at_micros: row.try_get(4).map_err(&err)?,
        });
    }
    Ok(out)
}

fn sums_of(rows: Vec<tokio_postgres::Row>) -> Result<(BTreeMap<String, i64>, usize), ReadError> {
    let err = read_error("ReadCounts");
    let mut counts = BTreeMap::new();
    let mut shards = 0;
    for row in rows {
        let post: String = row.try_get(0).map_err(&err)?;
        counts.insert(post, row.try_get(1).map_err(&err)?);
        let n: i64 = row.try_get(2).map_err(&err)?;
        shards += usize::try_from(n).unwrap_or(0);
    }
    Ok((counts, shards))
}
