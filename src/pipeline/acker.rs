//! Acks exactly the messages of a committed batch; nacks a batch given up on.
//!
//! Invariant: [`Acker::ack`] is called only by the flusher with the handles
//! of a batch whose commit succeeded (or was found already committed); no
//! other code path acks. Exactly-once subscriptions confirm each ack; a
//! failed confirmation is counted (the message will come back, and its
//! redelivery is a no-op in the store).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinSet;

use crate::telemetry::Stats;

/// A pending ack confirmation (exactly-once subscriptions).
pub type Confirmation = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// What the acker needs of a message handle.
pub trait AckHandle: Send + 'static {
    /// Acknowledges; returns a confirmation to await when the subscription confirms acks.
    fn ack(self) -> Option<Confirmation>;
    /// Negatively acknowledges: the message is redelivered (after the retry policy's backoff).
    fn nack(self);
}

/// Sends acks and nacks, and tracks confirmations.
pub struct Acker {
    stats: Arc<Stats>,
    confirmations: parking_lot::Mutex<JoinSet<()>>,
}

impl Acker {
    /// An acker reporting into `stats`.
    pub fn new(stats: Arc<Stats>) -> Self {
        Self {
            stats,
            confirmations: parking_lot::Mutex::new(JoinSet::new()),
        }
    }

    /// Acks every handle of a committed batch.
    pub fn ack<H: AckHandle>(&self, handles: Vec<H>) {
        let mut pending = FuturesUnordered::new();
        let count = handles.len() as u64;
        for handle in handles {
            if let Some(confirmation) = handle.ack() {
                pending.push(confirmation);
            }
        }
        self.stats.acks.add(count);
        if pending.is_empty() {
            return;
        }
        let stats = self.stats.clone();
        let mut set = self.confirmations.lock();
        while set.try_join_next().is_some() {}
        set.spawn(async move {
            while let Some(result) = pending.next().await {
                if let Err(error) = result {
                    stats.ack_failures.add(1);
                    tracing::debug!(%error, "ack not confirmed; the message will be redelivered");
                }
            }
        });
    }

    /// Nacks every handle of a batch that could not be committed.
    pub fn nack<H: AckHandle>(&self, handles: Vec<H>) {
        self.stats.nacks.add(handles.len() as u64);
        for handle in handles {
            handle.nack();
        }
    }

    /// Waits for every outstanding ack confirmation.
    pub async fn drain(&self) {
        let mut set = std::mem::take(&mut *self.confirmations.lock());
        while set.join_next().await.is_some() {}
    }
}
