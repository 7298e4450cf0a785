//! Firestore's [`ErasureStore`]: a user's memberships by the query
//! `likes where userId == U`, tombstones as `erased_users/{hash}` documents,
//! erased memberships deleted on the precondition that they are as read.

use super::{FirestoreDb, Read};
use crate::model::batch::MembershipKey;
use crate::store::erasure::{is_erased, ErasureStore, UserMembership};
use crate::store::StoreError;

impl ErasureStore for FirestoreDb {
    async fn memberships_of_user(&self, user_id: &str) -> Result<Vec<UserMembership>, StoreError> {
        let found = self.user_memberships(user_id, Read::Latest).await?;
        Ok(found
            .into_iter()
            .map(|m| UserMembership {
                key: m.key,
                membership: m.membership,
                updated_at_micros: m.updated_at_micros,
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
        let (all, _) = self.memberships(None, Read::Latest).await?;
        let mut ids: Vec<String> = all.into_iter().map(|m| m.key.user_id).collect();
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    async fn delete_erased(
        &self,
        _user_id: &str,
        keys: &[MembershipKey],
    ) -> Result<u64, StoreError> {
        self.delete_erased_memberships(keys, is_erased).await
    }
}
