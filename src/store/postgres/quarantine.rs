//! PostgreSQL's [`QuarantineStore`]: quarantine records are rows keyed by
//! (consumer, record id), shown with the id `{consumer}:{record id}`.

use super::PgDb;
use crate::store::quarantine::{split_id, QuarantineStore, StoredRecord};
use crate::store::StoreError;

/// A record row as the commands show it.
fn shown(stored: super::StoredRecord) -> StoredRecord {
    StoredRecord::new(
        format!("{}:{}", stored.consumer, stored.record_id),
        stored.consumer,
        stored.record,
        Some(stored.quarantined_at),
    )
}

impl QuarantineStore for PgDb {
    async fn list_quarantined(
        &self,
        consumer: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let records = self.quarantine_records(consumer, Some(limit)).await?;
        Ok(records.into_iter().map(shown).collect())
    }

    async fn quarantined(&self, id: &str) -> Result<Option<StoredRecord>, StoreError> {
        let Some((consumer, record_id)) = split_id(id) else {
            return Ok(None);
        };
        Ok(self
            .quarantine_record(consumer, record_id)
            .await?
            .map(shown))
    }

    async fn delete_quarantined(&self, id: &str) -> Result<(), StoreError> {
        if let Some((consumer, record_id)) = split_id(id) {
            self.delete_quarantine_record(consumer, record_id).await?;
        }
        Ok(())
    }
}
