//! What `hotcount users export|erase|restore|reapply` asks of a store
//! ([`ErasureStore`], implemented by each backend in its folder), and the
//! state an erasure leaves on a membership ([`is_erased`]).
//!
//! Invariants: reading a user's memberships locks nothing; a tombstone
//! holds the keyed hash of a user id, never the id; [`ErasureStore::delete_erased`]
//! deletes a membership only while it is still in an erasure's state, so a
//! retry after an unknown outcome, or an event committed meanwhile, never
//! loses a like.

use std::future::Future;

use crate::model::batch::{Membership, MembershipKey};
use crate::store::StoreError;

/// The `seq` of an erasure event: the highest there is, so no event of the
/// user, earlier or later, is newer than the erasure on an erased membership.
pub const ERASED_SEQ: i64 = i64::MAX;

/// The event id an erasure event carries (no user id in it).
pub const ERASURE_EVENT_ID: &str = "hotcount-erasure";

/// Whether `m` is an erasure's state (left by an earlier `erase`).
pub fn is_erased(m: &Membership) -> bool {
    !m.liked && m.version.seq == ERASED_SEQ && m.version.event_id == ERASURE_EVENT_ID
}

/// One membership of the user, whichever store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserMembership {
    /// Its (post, user).
    pub key: MembershipKey,
    /// Its state and the version of the event that set it.
    pub membership: Membership,
    /// When the store last wrote it (microseconds since the epoch), if known.
    pub updated_at_micros: Option<i64>,
}

/// What the user-data commands ask of a store.
pub trait ErasureStore: Sync {
    /// Every membership of `user_id` (liked or not), by post, read without
    /// locking anything.
    fn memberships_of_user(
        &self,
        user_id: &str,
    ) -> impl Future<Output = Result<Vec<UserMembership>, StoreError>> + Send;

    /// Writes the tombstone of the user whose keyed hash is `user_hash`.
    fn put_tombstone(&self, user_hash: &str)
        -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every tombstone's keyed hash (in no order).
    fn tombstone_hashes(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Deletes the tombstone of `user_hash`; whether there was one.
    fn lift_tombstone(
        &self,
        user_hash: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The user ids of every membership, sorted, each once.
    fn membership_user_ids(&self) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Deletes the memberships of `keys` (all of `user_id`) that are still
    /// in an erasure's state ([`is_erased`]); how many.
    fn delete_erased(
        &self,
        user_id: &str,
        keys: &[MembershipKey],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Version;

    #[test]
    fn only_an_erasures_own_state_counts_as_erased() {
        let state = |liked, seq, id: &str| Membership {
            liked,
            version: Version {
                seq,
                occurred_at_micros: 1,
                event_id: id.into(),
            },
        };
        assert!(is_erased(&state(false, ERASED_SEQ, ERASURE_EVENT_ID)));
        assert!(!is_erased(&state(true, ERASED_SEQ, ERASURE_EVENT_ID)));
        assert!(!is_erased(&state(false, 3, ERASURE_EVENT_ID)));
        assert!(!is_erased(&state(false, ERASED_SEQ, "e1")));
    }
}
