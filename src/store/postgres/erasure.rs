//! PostgreSQL's [`ErasureStore`]: a user's memberships by the index
//! `memberships_user_id`, tombstones as rows, erased memberships deleted by
//! one statement whose condition is the erasure's state.

use super::PgDb;
use crate::model::batch::MembershipKey;
use crate::store::erasure::{ErasureStore, UserMembership, ERASED_SEQ, ERASURE_EVENT_ID};
use crate::store::StoreError;

impl ErasureStore for PgDb {
    async fn memberships_of_user(&self, user_id: &str) -> Result<Vec<UserMembership>, StoreError> {
        let found = self.user_memberships(user_id).await?;
        Ok(found
            .into_iter()
            .map(|(key, membership, updated)| UserMembership {
                key,
                membership,
                updated_at_micros: Some(updated),
            })
            .collect())
    }

    async fn put_tombstone(&self, user_hash: &str) -> Result<(), StoreError> {
        self.write_tombstone(user_hash).await
    }

    async fn tombstone_hashes(&self) -> Result<Vec<String>, StoreError> {
        self.tombstones().await
    }

    async fn lift_tombstone(&self, user_hash: &str) -> Result<bool, StoreError> {
        self.delete_tombstone(user_hash).await
    }

    async fn membership_user_ids(&self) -> Result<Vec<String>, StoreError> {
        self.user_ids().await
    }

    async fn delete_erased(
        &self,
        user_id: &str,
        keys: &[MembershipKey],
    ) -> Result<u64, StoreError> {
        let posts: Vec<&str> = keys.iter().map(|k| k.post_id.as_str()).collect();
        self.delete_erased_memberships(user_id, &posts, ERASED_SEQ, ERASURE_EVENT_ID)
            .await
    }
}
