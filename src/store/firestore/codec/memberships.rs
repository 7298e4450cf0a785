//! Firestore values <-> membership documents (`likes/{id}`): a changed
//! membership's write, encoded straight to bytes, and the membership read
//! back (by a batch's read, replay and the tools).
//!
//! Invariant: a membership's write is exactly the bytes prost gives the
//! message it stands for (tests compare), conditioned on what was read (its
//! update time, or absent); what is written here is read back unchanged
//! (round-trip tests); a membership's fields are parsed here only.

use gcloud_sdk::google::firestore::v1 as fs;
use gcloud_sdk::prost_types::Timestamp;

use fs::value::ValueType;

use super::super::frame::Scalar as FieldValue;
use super::super::layout::fields::membership;
use super::super::wire;
use super::{get, micros_to_timestamp, text, timestamp_to_micros, Scalar, ScalarFields};
use crate::event::Version;
use crate::model::batch::{Membership, MembershipKey, Planned};

/// A membership's new state as [`put_membership_write`] writes it, borrowed
/// from where it is (a planned event; a stored membership in tests).
#[derive(Clone, Copy, Debug)]
pub(super) struct NewState<'a> {
    liked: bool,
    seq: i64,
    occurred_at_micros: i64,
    event_id: &'a str,
}

impl<'a> From<&Planned<'a>> for NewState<'a> {
    fn from(p: &Planned<'a>) -> Self {
        Self {
            liked: p.liked,
            seq: p.event.seq,
            occurred_at_micros: p.event.occurred_at_micros,
            event_id: p.event.event_id(),
        }
    }
}

#[cfg(test)]
impl<'a> From<&'a Membership> for NewState<'a> {
    fn from(m: &'a Membership) -> Self {
        Self {
            liked: m.liked,
            seq: m.version.seq,
            occurred_at_micros: m.version.occurred_at_micros,
            event_id: &m.version.event_id,
        }
    }
}

/// Appends the write of membership `m` of `key`, named `name`, to
/// `commit`: exactly the bytes prost gives the [`wire::Write`] with
/// [`membership_fields`] (in that order), the transform of `updatedAt` to
/// the server time, and the precondition `read` (the update time read; none:
/// the document must not exist). Without building that message: no field
/// list, no copies of the ids, each length computed once.
pub(super) fn put_membership_write(
    commit: &mut wire::EncodedCommit,
    name: &str,
    key: &MembershipKey,
    m: &NewState,
    batch_id: &str,
    read: Option<&Timestamp>,
) {
    let fields = [
        (membership::POST_ID, Scalar::String(&key.post_id)),
        (membership::USER_ID, Scalar::String(&key.user_id)),
        (membership::LIKED, Scalar::Boolean(m.liked)),
        (membership::SEQ, Scalar::Integer(m.seq)),
        (
            membership::OCCURRED_AT,
            Scalar::Timestamp(micros_to_timestamp(m.occurred_at_micros)),
        ),
        (membership::EVENT_ID, Scalar::String(m.event_id)),
        (membership::BATCH_ID, Scalar::String(batch_id)),
    ];
    super::put_update(
        commit,
        &super::Update {
            name: [name, ""],
            fields: &fields,
            mask: None,
            read,
            server_time: membership::UPDATED_AT,
        },
    );
}

/// Reads a membership document's state; `None` if it is not one of ours.
pub fn membership_from_fields(fields: &(impl ScalarFields + ?Sized)) -> Option<Membership> {
    let [liked, seq, occurred_at, event_id] = fields.scalars([
        membership::LIKED,
        membership::SEQ,
        membership::OCCURRED_AT,
        membership::EVENT_ID,
    ]);
    let liked = match liked? {
        FieldValue::Boolean(b) => b,
        _ => return None,
    };
    let seq = match seq {
        Some(FieldValue::Integer(n)) => n,
        _ => 0,
    };
    let occurred_at_micros = match occurred_at {
        Some(FieldValue::Timestamp(t)) => timestamp_to_micros(&t),
        _ => 0,
    };
    let event_id = match event_id {
        Some(FieldValue::String(s)) => s.to_string(),
        _ => String::new(),
    };
    Some(Membership {
        liked,
        version: Version {
            seq,
            occurred_at_micros,
            event_id,
        },
    })
}

/// A membership document as the tools read it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMembership {
    /// Its (post, user).
    pub key: MembershipKey,
    /// Its state.
    pub membership: Membership,
    /// `updatedAt` (the commit's server time), microseconds since the
    /// epoch; `None` if absent.
    pub updated_at_micros: Option<i64>,
}

/// Reads a membership document whole; `None` unless it names its post and
/// user and holds a state.
pub fn stored_membership(doc: &fs::Document) -> Option<StoredMembership> {
    let membership = membership_from_fields(&doc.fields)?;
    let key = MembershipKey {
        post_id: text(&doc.fields, membership::POST_ID)?,
        user_id: text(&doc.fields, membership::USER_ID)?,
    };
    let updated_at_micros = match get(&doc.fields, membership::UPDATED_AT) {
        Some(ValueType::TimestampValue(t)) => Some(timestamp_to_micros(t)),
        _ => None,
    };
    Some(StoredMembership {
        key,
        membership,
        updated_at_micros,
    })
}

/// The post a membership document names (read by a query projecting it).
pub fn membership_post(doc: &fs::Document) -> Option<String> {
    text(&doc.fields, membership::POST_ID)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::super::wire::Field;
    use super::super::{
        boolean, field, int, server_time, string, through_the_read_mask, timestamp,
    };
    use super::*;

    /// A membership's fields as a list (the reference
    /// [`put_membership_write`] encodes without building it; tests compare
    /// the two).
    fn membership_fields(key: &MembershipKey, m: &Membership, batch_id: &str) -> Vec<Field> {
        let occurred_at = micros_to_timestamp(m.version.occurred_at_micros);
        vec![
            field(membership::POST_ID, string(&key.post_id)),
            field(membership::USER_ID, string(&key.user_id)),
            field(membership::LIKED, boolean(m.liked)),
            field(membership::SEQ, int(m.version.seq)),
            field(membership::OCCURRED_AT, timestamp(occurred_at)),
            field(membership::EVENT_ID, string(&m.version.event_id)),
            field(membership::BATCH_ID, string(batch_id)),
        ]
    }

    #[test]
    fn membership_fields_round_trip() {
        let key = MembershipKey {
            post_id: "p".into(),
            user_id: "u".into(),
        };
        let m = Membership {
            liked: true,
            version: Version {
                seq: 3,
                occurred_at_micros: -1_500_001,
                event_id: "e".into(),
            },
        };
        let fields = membership_fields(&key, &m, "b");
        assert_eq!(membership_from_fields(&fields), Some(m.clone()));
        let masked = through_the_read_mask(&fields);
        assert!(masked.len() < fields.len(), "the ids are not read back");
        assert_eq!(membership_from_fields(&masked), Some(m.clone()));
        let doc = fs::Document {
            fields: fields
                .into_iter()
                .map(|f| (f.key, f.value.unwrap_or_default()))
                .collect(),
            ..Default::default()
        };
        assert_eq!(membership_from_fields(&doc.fields), Some(m.clone()));
        let stored = stored_membership(&doc).expect("a membership");
        assert_eq!((stored.key, stored.membership), (key, m));
        assert_eq!(membership_post(&doc).as_deref(), Some("p"));
    }

    /// The [`wire::Write`] that [`put_membership_write`] encodes directly.
    fn membership_write(
        name: &str,
        key: &MembershipKey,
        m: &Membership,
        read: Option<&Timestamp>,
    ) -> wire::Write {
        let precondition = match read {
            Some(time) => fs::precondition::ConditionType::UpdateTime(*time),
            None => fs::precondition::ConditionType::Exists(false),
        };
        wire::Write {
            update: Some(wire::Document {
                name: name.into(),
                fields: membership_fields(key, m, "batch-1"),
                update_time: None,
            }),
            update_transforms: vec![server_time(membership::UPDATED_AT)],
            current_document: Some(fs::Precondition {
                condition_type: Some(precondition),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn membership_writes_encode_as_the_message_they_stand_for() {
        let key = MembershipKey {
            post_id: "post-1".into(),
            user_id: "u".repeat(200),
        };
        let times = [
            None,
            Some(Timestamp::default()),
            Some(Timestamp {
                seconds: 1_700_000_000,
                nanos: 123_456_000,
            }),
        ];
        for (liked, seq, micros) in [(true, 0, 0), (false, -7, -1_500_001), (true, i64::MAX, 1)] {
            let m = Membership {
                liked,
                version: Version {
                    seq,
                    occurred_at_micros: micros,
                    event_id: "01J9Z8Q7ABCDEF".into(),
                },
            };
            for read in &times {
                let name = "projects/p/databases/d/documents/likes/x";
                let mut direct = wire::EncodedCommit::new("d", 0);
                put_membership_write(
                    &mut direct,
                    name,
                    &key,
                    &NewState::from(&m),
                    "batch-1",
                    read.as_ref(),
                );
                let mut built = wire::EncodedCommit::new("d", 0);
                built.push(&membership_write(name, &key, &m, read.as_ref()));
                assert_eq!(direct.finish(b"t"), built.finish(b"t"), "{m:?} {read:?}");
            }
        }
    }

    #[test]
    fn stored_memberships_need_post_user_and_liked() {
        let mut doc = fs::Document {
            fields: HashMap::from([
                (membership::POST_ID.into(), string("p")),
                (membership::USER_ID.into(), string("u")),
                (membership::LIKED.into(), boolean(true)),
                (
                    membership::UPDATED_AT.into(),
                    timestamp(Timestamp {
                        seconds: 2,
                        nanos: 5_000,
                    }),
                ),
            ]),
            ..Default::default()
        };
        let row = stored_membership(&doc).expect("a membership");
        assert_eq!(row.updated_at_micros, Some(2_000_005));
        assert!(row.membership.liked);
        doc.fields.remove(membership::POST_ID);
        assert_eq!(stored_membership(&doc), None);
    }
}
