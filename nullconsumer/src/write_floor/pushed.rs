//! The write floor fed by push requests (`--delivery push
//! --commit-writes`): each request's event waits in one shared group, and
//! a group is committed when a Commit slot is free and its first message
//! has waited [`Pushed::wait`] (hotcount's default `--flush-min-wait-ms`,
//! 5 ms), so a held window of requests is committed in overlapping
//! Commits, as hotcount's flusher does, not one at a time. Each request is
//! answered 204 once its group's Commit has answered (or its message is
//! carried on to a later group's).
//!
//! Invariant: a group is taken only with a Commit slot held for it, so it
//! keeps gathering while every slot is busy; no message waits without a
//! wake-up pending for it (each first arrival and each carried message
//! wakes the gatherer).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::{lock, Group, Settle, WriteFloor, GROUP_MESSAGES};

/// The pushed messages waiting for a group.
pub struct Pushed {
    /// The messages not yet in a Commit, and when the first of them came.
    pending: Mutex<(Group, Option<Instant>)>,
    /// Wakes the gatherer when a message arrives with none pending.
    arrived: Notify,
    /// How long a group's first message waits before its group is taken.
    wait: Duration,
}

impl Pushed {
    /// Nothing pending; groups are taken `wait` after their first message.
    pub fn new(wait: Duration) -> Arc<Self> {
        Arc::new(Self {
            pending: Mutex::new((Vec::with_capacity(GROUP_MESSAGES), None)),
            arrived: Notify::new(),
            wait,
        })
    }

    /// Adds a pushed event's data to the next group; the answer comes when
    /// its Commit has answered.
    pub fn offer(&self, data: bytes::Bytes) -> oneshot::Receiver<()> {
        let (answer, answered) = oneshot::channel();
        let mut pending = lock(&self.pending);
        pending.0.push((data, Settle::Push(answer)));
        if pending.1.is_none() {
            pending.1 = Some(Instant::now());
            drop(pending);
            self.arrived.notify_one();
        }
        answered
    }

    /// The next group: up to [`GROUP_MESSAGES`] of the pending messages,
    /// oldest first; what is left starts a group of its own now.
    fn take(&self) -> Group {
        let mut pending = lock(&self.pending);
        let group = if pending.0.len() <= GROUP_MESSAGES {
            std::mem::replace(&mut pending.0, Vec::with_capacity(GROUP_MESSAGES))
        } else {
            pending.0.drain(..GROUP_MESSAGES).collect()
        };
        pending.1 = (!pending.0.is_empty()).then(Instant::now);
        group
    }

    /// When the pending group's first message came (`None`: none pending).
    fn first(&self) -> Option<Instant> {
        lock(&self.pending).1
    }
}

/// Commits what `pushed` gathers through `floor`, forever: waits for a
/// first message (or carried ones), lets the group gather for
/// [`Pushed::wait`], takes a Commit slot, then takes the group.
pub async fn gather(floor: WriteFloor, pushed: Arc<Pushed>) {
    loop {
        let first = loop {
            if let Some(first) = pushed.first() {
                break first;
            }
            if floor.has_carried() {
                break Instant::now();
            }
            tokio::select! {
                () = pushed.arrived.notified() => {}
                () = floor.carried_ready.notified() => {}
            }
        };
        tokio::time::sleep_until(first + pushed.wait).await;
        let Ok(slot) = floor.slots.clone().acquire_owned().await else {
            return;
        };
        let mut group = pushed.take();
        floor.take_carried(&mut group);
        if group.is_empty() {
            continue;
        }
        let floor = floor.clone();
        tokio::spawn(async move { floor.commit_on(slot, group).await });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_group_is_taken_oldest_first_and_what_is_left_starts_a_group_of_its_own() {
        let pushed = Pushed::new(Duration::from_millis(5));
        assert_eq!(pushed.first(), None);
        let mut answers = Vec::new();
        for n in 0..GROUP_MESSAGES + 3 {
            answers.push(pushed.offer(bytes::Bytes::from(n.to_string())));
        }
        let started = pushed.first().expect("pending");
        tokio::time::advance(Duration::from_millis(7)).await;
        let group = pushed.take();
        assert_eq!(group.len(), GROUP_MESSAGES);
        assert_eq!(&group[0].0[..], b"0");
        let left = pushed.first().expect("the rest pending");
        assert!(left > started, "the rest's group starts when it is left");
        let rest = pushed.take();
        assert_eq!(
            rest.iter().map(|(d, _)| &d[..]).collect::<Vec<_>>(),
            [&b"1000"[..], b"1001", b"1002"]
        );
        assert_eq!(pushed.first(), None);
        for (_, settle) in group.into_iter().chain(rest) {
            settle.ack();
        }
        for answered in answers {
            assert!(answered.await.is_ok(), "every request answered");
        }
    }
}
