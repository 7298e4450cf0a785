//! The writes of one batch's commit, in order: its changed memberships, one
//! increment per post, its batch marker (`batches/{consumer}:{batchId}`)
//! and its quarantine records; and the effects a marker recorded, read
//! back.
//!
//! Invariant: a plan's membership writes and increments go in one Commit
//! with the batch's marker, which is created only if absent (a batch applies
//! once); the marker records the effects it is read back with (round-trip
//! test) and, with due records on, the posts and counter shards its rollup
//! waits for.

use std::borrow::Cow;

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use super::super::frame::Scalar as FieldValue;
use super::super::layout::fields::marker;
use super::super::wire;
use super::super::{FirestoreStoreConfig, Layout};
use super::counters::put_counter_increment;
use super::memberships::{put_membership_write, NewState};
use super::{array, field, int, quarantine_write, server_time, string, timestamp, ScalarFields};
use crate::model::batch::{Batch, Effects, Plan};

/// Appends the writes of one batch's commit to `commit`: changed
/// memberships (each named `names[i]` and with the precondition
/// `update_times[i]`, what was read, for the batch's `i`-th key), one increment
/// per post on the counter shard `counter_shard_of(i)` picks for the `i`-th
/// post of `plan.deltas`, the marker (create-if-absent) and quarantine
/// records. Memberships, most of the writes, are encoded straight to
/// protobuf bytes ([`put_membership_write`]), the rest through [`wire`].
#[allow(clippy::too_many_arguments)]
pub fn encode_writes(
    commit: &mut wire::EncodedCommit,
    layout: &Layout,
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    names: &[String],
    update_times: &[Option<Timestamp>],
    marker: &str,
    counter_shard_of: impl Fn(usize) -> u32,
) {
    for planned in &plan.memberships {
        let read = update_times.get(planned.index).and_then(Option::as_ref);
        // The name the read built; built again only if `names` is short.
        let name = match names.get(planned.index) {
            Some(name) => Cow::Borrowed(name.as_str()),
            None => Cow::Owned(layout.membership(planned.key)),
        };
        let state = NewState::from(planned);
        put_membership_write(commit, &name, planned.key, &state, &batch.id, read);
    }
    for (i, (post, delta)) in plan.deltas.iter().enumerate() {
        put_counter_increment(commit, layout, post, counter_shard_of(i), *delta);
    }
    commit.push(&marker_write(config, batch, plan, marker, counter_shard_of));
    for poison in &batch.poison {
        commit.push(&quarantine_write(layout, &config.consumer, &poison.item));
    }
}

/// The marker of `batch`, named `name`, created only if absent: the
/// effects of `plan` and, with due records on, its rollup due record (the
/// posts incremented and, pairwise, their counter shards:
/// `counter_shard_of(i)` for the `i`-th).
fn marker_write(
    config: &FirestoreStoreConfig,
    batch: &Batch,
    plan: &Plan,
    name: &str,
    counter_shard_of: impl Fn(usize) -> u32,
) -> wire::Write {
    let expire = std::time::SystemTime::now() + config.marker_ttl;
    let e = plan.effects;
    let mut fields = vec![
        field(marker::CONSUMER, string(&config.consumer)),
        field(marker::BATCH_ID, string(&batch.id)),
        field(marker::MESSAGES, int(batch.message_count as i64)),
        field(marker::APPLIED, int(e.applied as i64)),
        field(marker::DUPLICATES, int(e.duplicates as i64)),
        field(marker::STALE, int(e.stale as i64)),
        field(marker::POISON, int(e.poison as i64)),
        field(marker::POSTS, int(plan.deltas.len() as i64)),
        field(marker::EXPIRE_AT, timestamp(expire.into())),
    ];
    let mut update_transforms = vec![server_time(marker::COMMITTED_AT)];
    // The rollup due record, in the same commit as the increments.
    if config.due_records && !plan.deltas.is_empty() {
        let posts = plan.deltas.keys().map(|p| string(p)).collect();
        let shards = (0..plan.deltas.len())
            .map(|i| int(i64::from(counter_shard_of(i))))
            .collect();
        fields.push(field(marker::ROLLUP_POSTS, array(posts)));
        fields.push(field(marker::ROLLUP_SHARDS, array(shards)));
        update_transforms.push(server_time(marker::ROLLUP_DUE));
    }
    wire::Write {
        update: Some(wire::Document {
            name: name.to_string(),
            fields,
            update_time: None,
        }),
        update_transforms,
        current_document: Some(fs::Precondition {
            condition_type: Some(fs::precondition::ConditionType::Exists(false)),
        }),
        ..Default::default()
    }
}

/// The effects a batch marker recorded.
pub fn effects_from_fields(fields: &(impl ScalarFields + ?Sized)) -> Effects {
    let count = |name: &str| match fields.scalar(name) {
        Some(FieldValue::Integer(n)) => u64::try_from(n).unwrap_or(0),
        _ => 0,
    };
    Effects {
        applied: count(marker::APPLIED),
        duplicates: count(marker::DUPLICATES),
        stale: count(marker::STALE),
        poison: count(marker::POISON),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::super::through_the_read_mask;
    use super::*;
    use crate::model::batch::{Membership, MembershipKey};

    #[test]
    fn markers_record_the_effects_they_are_read_back_with() {
        let config = FirestoreStoreConfig {
            consumer: "c1".into(),
            counter_shards: 1,
            counter_shard_target_writes_per_sec: 0,
            marker_ttl: Duration::ZERO,
            due_records: false,
            known_memberships: 0,
        };
        let batch = Batch::new(Vec::new(), Vec::new());
        let mut plan = batch.plan(&HashMap::<MembershipKey, Membership>::new());
        plan.effects = Effects {
            applied: 1,
            duplicates: 2,
            stale: 3,
            poison: 4,
        };
        let write = marker_write(&config, &batch, &plan, "m", |_| 0);
        let Some(doc) = write.update else {
            panic!("an update");
        };
        assert_eq!(effects_from_fields(&doc.fields), plan.effects);
        let masked = through_the_read_mask(&doc.fields);
        assert!(masked.len() < doc.fields.len());
        assert_eq!(effects_from_fields(&masked), plan.effects);
    }
}
