//! An ack handle that records what became of each message (acked or
//! nacked, in order), for tests that check every message is settled
//! exactly once.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use hotcount::pipeline::acker::{AckHandle, Confirmation};
use parking_lot::Mutex;

/// What became of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Acked,
    Nacked,
}

/// Every message's fates, by message number.
pub type Fates = Arc<Mutex<BTreeMap<usize, Vec<Fate>>>>;

/// The handle of message `.0`, recording into `.1`.
#[derive(Debug)]
pub struct Handle(pub usize, pub Fates);

impl AckHandle for Handle {
    fn ack(self) -> Option<Confirmation> {
        self.1.lock().entry(self.0).or_default().push(Fate::Acked);
        None
    }
    fn nack(self) {
        self.1.lock().entry(self.0).or_default().push(Fate::Nacked);
    }
}
