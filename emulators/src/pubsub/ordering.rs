//! Ordering keys: which message of each key may be delivered next.
//!
//! Invariant: per key, the unacked messages are queued in publish order and
//! the leased ones form a prefix of that queue; only the first unleased
//! message (the head) may be ready, the later ones are blocked. A failed
//! (nacked or expired) leased message cuts the prefix at its position, so it
//! and every later message of its key go out again, in order.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// The unacked messages of one key, in publish order; the first `leased` are leased.
#[derive(Debug, Default)]
struct Queue {
    seqs: VecDeque<u64>,
    leased: usize,
}

impl Queue {
    fn head(&self) -> Option<u64> {
        self.seqs.get(self.leased).copied()
    }
}

/// The queues of every ordering key of one subscription.
#[derive(Debug, Default)]
pub(super) struct Keys {
    queues: FxHashMap<String, Queue>,
}

impl Keys {
    /// Appends `seq` to `key`; returns whether it is the head (may be ready now).
    pub fn push(&mut self, key: String, seq: u64) -> bool {
        let queue = self.queues.entry(key).or_default();
        queue.seqs.push_back(seq);
        queue.head() == Some(seq)
    }

    /// The head of `key` was leased; returns the new head to unblock.
    pub fn leased(&mut self, key: &str) -> Option<u64> {
        let queue = self.queues.get_mut(key)?;
        queue.leased = (queue.leased + 1).min(queue.seqs.len());
        queue.head()
    }

    /// `seq` left the subscription; returns the head to unblock, if it changed.
    pub fn removed(&mut self, key: &str, seq: u64) -> Option<u64> {
        let queue = self.queues.get_mut(key)?;
        let pos = queue.seqs.iter().position(|s| *s == seq)?;
        queue.seqs.remove(pos);
        if queue.seqs.is_empty() {
            self.queues.remove(key);
            return None;
        }
        if pos < queue.leased {
            queue.leased -= 1;
            return None;
        }
        (pos == queue.leased).then(|| queue.head()).flatten()
    }

    /// Leased `seq` failed: it becomes the head again. Returns the later
    /// leased messages of its key, which lose their leases and are blocked.
    pub fn failed(&mut self, key: &str, seq: u64) -> Vec<u64> {
        let Some(queue) = self.queues.get_mut(key) else {
            return Vec::new();
        };
        let Some(pos) = queue.seqs.iter().position(|s| *s == seq) else {
            return Vec::new();
        };
        if pos >= queue.leased {
            return Vec::new();
        }
        let later = queue.seqs.range(pos + 1..queue.leased).copied().collect();
        queue.leased = pos;
        later
    }

    /// The first unleased message of `key`, if any.
    pub fn head(&self, key: &str) -> Option<u64> {
        self.queues.get(key)?.head()
    }

    /// The first unleased message of every key.
    pub fn heads(&self) -> Vec<u64> {
        self.queues.values().filter_map(Queue::head).collect()
    }

    /// Forgets every key (Seek rebuilds them).
    pub fn clear(&mut self) {
        self.queues.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_head_of_a_key_is_ready() {
        let mut keys = Keys::default();
        assert!(keys.push("k".into(), 1));
        assert!(!keys.push("k".into(), 2));
        assert!(keys.push("other".into(), 3));
        assert_eq!(keys.leased("k"), Some(2));
        assert_eq!(keys.leased("k"), None);
    }

    #[test]
    fn a_failed_message_takes_later_leased_ones_back() {
        let mut keys = Keys::default();
        for seq in 1..=3 {
            keys.push("k".into(), seq);
            keys.leased("k");
        }
        assert_eq!(keys.failed("k", 2), vec![3]);
        assert_eq!(
            keys.removed("k", 1),
            None,
            "acking a leased one changes no head"
        );
        assert_eq!(keys.leased("k"), Some(3));
    }

    #[test]
    fn removing_the_head_unblocks_the_next() {
        let mut keys = Keys::default();
        keys.push("k".into(), 1);
        keys.push("k".into(), 2);
        assert_eq!(keys.removed("k", 1), Some(2));
        assert_eq!(keys.removed("k", 2), None);
        assert!(keys.push("k".into(), 3), "an empty key starts over");
        keys.leased("k");
        assert_eq!(keys.removed("k", 3), None);
        assert!(keys.queues.is_empty(), "acked keys are forgotten");
    }
}
