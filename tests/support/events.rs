//! Valid like events for property tests, from the few fields a test
//! generates (small numbers for the post and the user).
#![allow(dead_code)]

use hotcount::event::{LikeEvent, LikeKind, Version};

/// Event `event_id`: user `u{user}` likes post `p{post}` (`added`) or takes
/// the like back, at `seq` and `occurred_at_micros`. Panics only if the
/// generated fields were invalid, which they never are.
pub fn like(
    post: u8,
    user: u8,
    added: bool,
    seq: i64,
    occurred_at_micros: i64,
    event_id: &str,
) -> LikeEvent {
    event_of(
        added,
        &format!("p{post}"),
        &format!("u{user}"),
        seq,
        occurred_at_micros,
        event_id,
    )
}

/// Event `event_id`: `user` likes `post` (`added`) or takes the like back,
/// at `seq` and `occurred_at_micros`. Panics on invalid ids (a test bug).
pub fn event_of(
    added: bool,
    post: &str,
    user: &str,
    seq: i64,
    occurred_at_micros: i64,
    event_id: &str,
) -> LikeEvent {
    let kind = if added {
        LikeKind::Added
    } else {
        LikeKind::Removed
    };
    let version = Version {
        seq,
        occurred_at_micros,
        event_id: event_id.into(),
    };
    LikeEvent::new(kind, post, user, &version, None).expect("valid test event")
}
