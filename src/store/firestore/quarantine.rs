//! Firestore's [`QuarantineStore`]: quarantine records are the documents
//! `quarantine/{consumer}:{record id}`, whose document id is the record's
//! id as the commands print it.

use super::FirestoreDb;
use crate::store::quarantine::{QuarantineStore, StoredRecord};
use crate::store::StoreError;

/// A record document as the commands show it.
fn shown(stored: super::StoredRecord) -> StoredRecord {
    StoredRecord::new(
        stored.id().to_string(),
        stored.consumer,
        stored.record,
        stored.quarantined_at,
    )
}

impl QuarantineStore for FirestoreDb {
    async fn list_quarantined(
        &self,
        consumer: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredRecord>, StoreError> {
        let records = self.quarantine_records(consumer, Some(limit)).await?;
        Ok(records.into_iter().map(shown).collect())
    }

    async fn quarantined(&self, id: &str) -> Result<Option<StoredRecord>, StoreError> {
        Ok(self.quarantine_record(id).await?.map(shown))
    }

    async fn delete_quarantined(&self, id: &str) -> Result<(), StoreError> {
        self.delete_quarantine_record(id).await
    }
}
