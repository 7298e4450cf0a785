//! The data-format record on Firestore (`settings/format`): read, and
//! raised by a write conditioned on what was read (see `store::format`).
//!
//! Invariant: a raise never lowers the stored format: it writes only over
//! the record it read (absent, or at its update time), and only a format
//! above the one read; a raise that lost a race reads again.

use crate::store::Code;

use super::{codec, FirestoreDb};
use crate::store::StoreError;

/// Reads a raise makes at most before giving up on a record that keeps
/// changing under it (each loss means another raise wrote meanwhile).
const RAISE_ATTEMPTS: u32 = 5;

impl FirestoreDb {
    /// The stored data format; `None` when no record exists.
    pub async fn data_format(&self) -> Result<Option<u32>, StoreError> {
        let Some(doc) = self.get(&self.layout().data_format()).await? else {
            return Ok(None);
        };
        codec::data_format_from_document(&doc)
            .map(Some)
            .ok_or_else(|| StoreError::internal("GetDocument", "an unreadable data-format record"))
    }

    /// Stores format `to` unless the stored one is as high; returns the
    /// stored format after.
    pub async fn raise_data_format(&self, to: u32) -> Result<u32, StoreError> {
        let name = self.layout().data_format();
        let mut lost = None;
        for _ in 0..RAISE_ATTEMPTS {
            let doc = self.get(&name).await?;
            let stored = match &doc {
                Some(doc) => codec::data_format_from_document(doc).ok_or_else(|| {
                    StoreError::internal("GetDocument", "an unreadable data-format record")
                })?,
                None => crate::store::format::DATA_FORMAT_UNRECORDED,
            };
            if doc.is_some() && stored >= to {
                return Ok(stored);
            }
            let read = doc.and_then(|d| d.update_time);
            let write = codec::data_format_write(self.layout(), to, read);
            match self.commit(vec![write], None).await {
                Ok(()) => return Ok(to),
                // Another raise wrote first: read what it wrote.
                Err(e) if matches!(e.code, Code::FailedPrecondition | Code::AlreadyExists) => {
                    lost = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(lost.unwrap_or_else(|| {
            StoreError::internal("Commit", "the data-format record kept changing")
        }))
    }
}
