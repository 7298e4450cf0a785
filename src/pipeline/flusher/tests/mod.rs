//! The flusher against the in-memory store. Here the rig every test
//! shares (an aggregator, a flusher and the fate of each message's
//! handle); one file per behaviour: `commit.rs` (acks only after commit,
//! retries, giving up, a shutdown deadline, stalled progress),
//! `isolation.rs` (what the store refuses is isolated, what proves nothing
//! is nacked), `timing.rs` (when a flush is due: group commit timing),
//! `in_flight.rs` (batches in flight: split over the free commit slots,
//! disjoint memberships).

mod commit;
mod in_flight;
mod isolation;
mod timing;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Acker, FlushConfig, Flusher};
use crate::event::{LikeEvent, LikeKind, Version};
use crate::model::item::Item;
use crate::model::poison::PoisonRecord;
use crate::pipeline::acker::{AckHandle, Confirmation};
use crate::pipeline::aggregator::{Aggregator, FreeView, Pending};
use crate::store::memory::MemoryStore;
use crate::telemetry::Stats;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Acked,
    Nacked,
}

#[derive(Debug)]
struct TestHandle(u32, Arc<Mutex<Vec<(u32, Fate)>>>);

impl AckHandle for TestHandle {
    fn ack(self) -> Option<Confirmation> {
        self.1.lock().push((self.0, Fate::Acked));
        None
    }
    fn nack(self) {
        self.1.lock().push((self.0, Fate::Nacked));
    }
}

struct Rig {
    agg: Arc<Aggregator<TestHandle>>,
    store: Arc<MemoryStore>,
    flusher: Flusher<MemoryStore, TestHandle>,
    fates: Arc<Mutex<Vec<(u32, Fate)>>>,
    next: u32,
}

impl Rig {
    fn new() -> Self {
        Self::with(1, 100, FlushConfig::default())
    }

    fn with(shards: usize, max_batch_events: usize, config: FlushConfig) -> Self {
        let config = FlushConfig {
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(2),
            commit_max_attempts: 3,
            ..config
        };
        Self::exact(shards, max_batch_events, config)
    }

    /// A rig with `config` as given (retries and backoff included).
    fn exact(shards: usize, max_batch_events: usize, config: FlushConfig) -> Self {
        let agg = Arc::new(Aggregator::new(shards, max_batch_events));
        let store = Arc::new(MemoryStore::default());
        let stats = Arc::new(Stats::default());
        let flusher = Flusher::new(
            agg.clone(),
            store.clone(),
            Arc::new(Acker::new(stats.clone())),
            stats,
            config,
        );
        Self {
            agg,
            store,
            flusher,
            fates: Default::default(),
            next: 0,
        }
    }

    fn like(&mut self, post: &str, user: &str, seq: i64) -> u32 {
        self.event(LikeKind::Added, post, user, seq)
    }

    /// Buffers an unlike; returns its handle id.
    fn unlike(&mut self, post: &str, user: &str, seq: i64) -> u32 {
        self.event(LikeKind::Removed, post, user, seq)
    }

    fn event(&mut self, kind: LikeKind, post: &str, user: &str, seq: i64) -> u32 {
        let event = LikeEvent::new(
            kind,
            post,
            user,
            &Version {
                seq,
                occurred_at_micros: 0,
                event_id: format!("{user}-{seq}"),
            },
            None,
        )
        .expect("valid test event");
        self.next += 1;
        let handle = TestHandle(self.next, self.fates.clone());
        self.agg.add(Pending {
            handle,
            item: Item::Event(event),
            bytes: 10,
            published: None,
        });
        self.next
    }

    /// Buffers a poison message with id `m{n}`; returns its handle id.
    fn poison(&mut self) -> u32 {
        self.next += 1;
        let record = PoisonRecord::new(
            format!("m{}", self.next),
            "bad".into(),
            b"x",
            Default::default(),
        );
        let handle = TestHandle(self.next, self.fates.clone());
        self.agg.add(Pending {
            handle,
            item: Item::Poison(Box::new(record)),
            bytes: 1,
            published: None,
        });
        self.next
    }

    fn fate(&self, handle: u32) -> Vec<Fate> {
        let fates = self.fates.lock();
        fates
            .iter()
            .filter(|(h, _)| *h == handle)
            .map(|(_, f)| *f)
            .collect()
    }

    /// Runs the flusher in a task until [`Running::stop`].
    fn start(&self) -> Running {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(self.flusher.clone().run(stopped));
        Running { stop, task }
    }

    /// Runs the flusher over a store that takes a second a commit, with
    /// one batch of three likes of `p` (users `first0..3`) in flight.
    async fn start_with_one_commit_in_flight(&mut self) -> Running {
        self.store.set_delay(Duration::from_secs(1));
        let running = self.start();
        for user in 0..3 {
            self.like("p", &format!("first{user}"), 1);
        }
        tokio::time::sleep(Duration::from_millis(6)).await;
        assert_eq!(self.store.concurrency().max_commits_in_flight, 1);
        running
    }
}

/// A rig's flusher, running in a task.
struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Running {
    /// Tells the flusher to stop, and waits until it has drained.
    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap();
    }
}

/// What free shards holding `messages` look like to an aggregator
/// whose batches hold at most 1000.
fn view(messages: usize, oldest: Instant) -> FreeView {
    FreeView {
        messages,
        oldest: Some(oldest),
        full: messages >= 1000,
        batch_events: 1000,
        shards: 16,
        ..FreeView::default()
    }
}
