//! What a received message turned out to be: a valid event or a poison
//! record, parsed once by whichever source received it (pull, push, replay).
//!
//! Invariant: every message becomes exactly one [`Item`], and a message the
//! event decoder refuses becomes a [`PoisonRecord`] carrying the decoder's
//! reason and kind, never an error that stops the source.

use std::collections::BTreeMap;

use crate::event::LikeEvent;
use crate::model::poison::PoisonRecord;

/// What a received message turned out to be.
#[derive(Clone, Debug)]
pub enum Item {
    /// A valid event.
    Event(LikeEvent),
    /// A message to quarantine (boxed: rare, and twice an event's size, so
    /// events move through the buffers at their own size).
    Poison(Box<PoisonRecord>),
}

impl Item {
    /// Parses a message's payload: the event, or its poison record (with
    /// the reason, and the attributes `attributes` gives, read only then).
    /// Every source (pull, push, replay) turns a message into an item here.
    pub fn parse(
        message_id: &str,
        data: &[u8],
        attributes: impl FnOnce() -> BTreeMap<String, String>,
    ) -> Self {
        match crate::event::parse(data) {
            Ok(event) => Item::Event(event),
            Err(poison) => Item::Poison(Box::new(
                PoisonRecord::new(
                    message_id.to_string(),
                    poison.to_string(),
                    data,
                    attributes(),
                )
                .of_kind(poison.kind()),
            )),
        }
    }
}
