//! The hazards of the chaos run, each made here: the shuffle before
//! publishing, the steady Pub/Sub and Firestore faults, the victim
//! consumer killed (SIGKILL) and restarted again and again (the processes
//! themselves are `consumers`'), and the latency spikes with a clock jump
//! past every lease. With a PostgreSQL store, the commit faults are
//! connections cut at COMMIT by the stage's proxy and the spikes a lock
//! held on the counter table.
//!
//! Invariant: every consumer process is running again when [`Chaos::calm`]
//! returns (but the retired ones) and every fault is cleared; a consumer
//! that exits without being killed here is counted and reported with the
//! tail of its log, never silently restarted.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::Delivery;
use hotcount_emulators::{Emulators, FaultKind, FaultSpec};
use hotcount_pgtemp::{Cut, Proxy};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tonic::Code;

use super::config::{ChaosConfig, LEASE_JUMP};
use super::consumers::{child_spec, push_flags, Consumers};
use super::tally::Tally;
use crate::consumer;
use crate::front::PushFront;
use crate::run_error::RunError;
use crate::stage::Stage;
use crate::workload::{Origin, Truth, Workload};

/// Shuffles `workload`'s messages within windows of `window`, keeping each
/// duplicate pointing at its original, and recomputes the truth (which does
/// not depend on order: per (post, user) the highest `seq` decides).
pub fn reorder(workload: &mut Workload, window: usize, rng: &mut impl Rng) {
    let n = workload.messages.len();
    let mut order: Vec<usize> = (0..n).collect();
    for chunk in order.chunks_mut(window.max(1)) {
        chunk.shuffle(rng);
    }
    let mut new_index = vec![0usize; n];
    for (new, old) in order.iter().enumerate() {
        new_index[*old] = new;
    }
    let mut messages = Vec::with_capacity(n);
    for old in order {
        let mut message = workload.messages[old].clone();
        if let Origin::Duplicate { of } = &mut message.origin {
            *of = new_index[*of];
        }
        messages.push(message);
    }
    workload.messages = messages;
    workload.truth = Truth::compute(workload.config.clone(), &workload.messages);
}

/// The chaos while it runs: the consumers (held by the kill loop), the
/// steady faults, the spikes.
pub(super) struct Chaos {
    tally: Arc<Tally>,
    /// With push: each consumer's endpoint.
    push_addrs: Vec<std::net::SocketAddr>,
    stop: watch::Sender<bool>,
    killer: tokio::task::JoinHandle<Consumers>,
    spiker: tokio::task::JoinHandle<()>,
    store_faults: Option<StoreFaults>,
}

/// PostgreSQL: the task cutting connections at COMMIT, and its proxy.
struct StoreFaults {
    cutter: tokio::task::JoinHandle<()>,
    proxy: Arc<Proxy>,
}

impl Chaos {
    /// Starts `config.consumers` consumer processes (logs in `log_dir`;
    /// with push, each on an endpoint of its own behind `front`),
    /// installs the steady faults, and starts killing the victim (kill
    /// schedule from `seed`) and spiking the store.
    pub(super) fn start(
        stage: &Stage,
        config: &ChaosConfig,
        log_dir: PathBuf,
        seed: u64,
        front: Option<&PushFront>,
        extra: &[String],
    ) -> Result<Self, RunError> {
        let victim_metrics = consumer::free_loopback_port("the victim's metrics")?;
        let store = stage.consumer_store();
        let mut specs = Vec::new();
        let mut push_addrs = Vec::new();
        for index in 0..config.consumers {
            let mut spec = child_spec(
                config,
                (stage.endpoints(), &store),
                &log_dir,
                index,
                victim_metrics,
            );
            spec.args.extend_from_slice(extra);
            if let Some(front) = front {
                let addr = consumer::free_loopback_port("a push endpoint")?;
                spec.args.extend(push_flags(addr, &stage.push_jwks_url()));
                front.add(addr);
                push_addrs.push(addr);
            }
            specs.push(spec);
        }
        let consumers = Consumers::start(specs, victim_metrics)?;
        install_faults(
            stage.emulators(),
            stage.postgres().is_none(),
            config.delivery,
        )
        .map_err(RunError::Start)?;
        let tally = Arc::new(Tally::default());
        let (stop, stop_rx) = watch::channel(false);
        let store_faults = stage.postgres().map(|pg| StoreFaults {
            cutter: tokio::spawn(cut_loop(
                pg.proxy.clone(),
                tally.clone(),
                stop_rx.clone(),
                seed,
            )),
            proxy: pg.proxy.clone(),
        });
        let spike_on = match stage.postgres() {
            Some(pg) => Spike::Postgres(pg.url.clone()),
            None => Spike::Firestore,
        };
        let killer = tokio::spawn(kill_loop(
            consumers,
            tally.clone(),
            config.kill_every,
            stop_rx.clone(),
            seed,
        ));
        let spiker = tokio::spawn(spike_loop(
            stage.emulators().clone(),
            spike_on,
            tally.clone(),
            config.spike_every,
            stop_rx,
        ));
        Ok(Self {
            tally,
            push_addrs,
            stop,
            killer,
            spiker,
            store_faults,
        })
    }

    /// With push: waits (at most `timeout`) until every consumer's push
    /// endpoint accepts connections.
    pub(super) async fn wait_listening(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for addr in &self.push_addrs {
            while tokio::net::TcpStream::connect(addr).await.is_err() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// The counters the chaos tasks keep.
    pub(super) fn tally(&self) -> Arc<Tally> {
        self.tally.clone()
    }

    /// Stops the kills and the spikes, clears every fault and brings every
    /// consumer back; the consumers, running.
    pub(super) async fn calm(
        self,
        stage: &Stage,
        scale_down: usize,
    ) -> Result<Consumers, RunError> {
        let _ = self.stop.send(true);
        let _ = self.spiker.await;
        let mut consumers = self
            .killer
            .await
            .map_err(|e| RunError::Start(format!("kill loop: {e}")))?;
        stage.emulators().pubsub_faults().clear();
        stage.emulators().firestore_faults().clear();
        if let Some(faults) = self.store_faults {
            let _ = faults.cutter.await;
            faults.proxy.disarm();
        }
        // A scale-down: the last consumers SIGKILLed and never brought
        // back (a node lost, an autoscaler's drain cut short).
        consumers.retire(scale_down).await;
        consumers.restart_missing()?;
        Ok(consumers)
    }
}

/// The steady faults: each commit fault once for certain, then all of them
/// at random (cleared before the final drain); the Firestore ones only
/// when the consumers commit to Firestore. With push, the Pub/Sub faults
/// act on the pushes: an acked push recorded as lost, an acked push
/// delivered again, and a push whose 2xx answer (after the consumer's
/// commit) is ignored and nacked.
fn install_faults(
    emulators: &Emulators,
    firestore: bool,
    delivery: Delivery,
) -> Result<(), String> {
    let pubsub = emulators.pubsub_faults();
    match delivery {
        Delivery::Pull => {
            pubsub.add(FaultSpec::new(FaultKind::AckLost).probability(0.02))?;
            pubsub.add(FaultSpec::new(FaultKind::SpuriousRedelivery).probability(0.02))?;
            // Each open stream checks about every 50 ms: about one drop per stream per 5 s.
            pubsub.add(FaultSpec::new(FaultKind::DropStream).probability(0.01))?;
        }
        Delivery::Push => {
            let push = |kind| FaultSpec::new(kind).method("Push");
            pubsub.add(push(FaultKind::AckLost).probability(0.02))?;
            pubsub.add(push(FaultKind::SpuriousRedelivery).probability(0.02))?;
            pubsub.add(FaultSpec::error_after_apply("Push", Code::Unavailable).times(1))?;
            pubsub
                .add(FaultSpec::error_after_apply("Push", Code::Unavailable).probability(0.01))?;
        }
    }
    if !firestore {
        return Ok(());
    }
    let firestore = emulators.firestore_faults();
    // Once each for certain (the first eligible commits), then at random: a
    // small run with large batches makes few commits, and every kind must
    // be exercised in every run, not in most.
    firestore.add(FaultSpec::error("Commit", Code::Aborted).times(1))?;
    firestore.add(FaultSpec::error_after_apply("Commit", Code::Unavailable).times(1))?;
    firestore.add(FaultSpec::error("Commit", Code::Aborted).probability(0.05))?;
    firestore.add(FaultSpec::error_after_apply("Commit", Code::Unavailable).probability(0.03))?;
    Ok(())
}

/// Kills the first consumer again and again (SIGKILL) after a pause drawn
/// from `kill_every`, restarting it after a short pause; restarts any other
/// consumer that exits by itself.
async fn kill_loop(
    mut consumers: Consumers,
    tally: Arc<Tally>,
    kill_every: (Duration, Duration),
    stop: watch::Receiver<bool>,
    seed: u64,
) -> Consumers {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut n: u64 = 0;
    while !*stop.borrow() {
        let pause = rng.random_range(kill_every.0..=kill_every.1);
        if sleep_or_stop(pause, &stop).await {
            break;
        }
        consumers.restart_exited(&tally);
        let mut after_commit = n % 2 == 1;
        n += 1;
        if after_commit {
            // Counted as "after a commit" only when the victim's own
            // committed-batch counter was seen to move just before the kill:
            // the victim committed a batch whose acks (flushed by the client
            // library every 100 ms) had most likely not left.
            after_commit =
                consumer::victim_committed(consumers.victim_metrics, Duration::from_secs(5)).await;
        }
        if consumers.kill_victim().await {
            tally.kills.fetch_add(1, Ordering::Relaxed);
            if after_commit {
                tally.kills_after_commit.fetch_add(1, Ordering::Relaxed);
            }
        }
        let down = Duration::from_millis(rng.random_range(50..=400));
        tokio::time::sleep(down).await;
        consumers.restart_victim();
    }
    consumers.restart_exited(&tally);
    consumers
}

/// PostgreSQL: cuts a consumer connection at its next COMMIT every
/// 0.2-0.8 s, before it reaches the server and after the server committed
/// in turn (each waits until made, or until the next turn).
async fn cut_loop(proxy: Arc<Proxy>, tally: Arc<Tally>, stop: watch::Receiver<bool>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xC0FF_EE00);
    let mut turn = 0u64;
    while !*stop.borrow() {
        let cut = if turn.is_multiple_of(2) {
            Cut::BeforeCommit
        } else {
            Cut::AfterCommit
        };
        turn += 1;
        let before = proxy.cuts();
        proxy.arm(cut);
        let pause = Duration::from_millis(rng.random_range(200..=800));
        let stopped = sleep_or_stop(pause, &stop).await;
        proxy.disarm();
        if proxy.cuts() > before {
            let counter = match cut {
                Cut::BeforeCommit => &tally.cuts_before_commit,
                Cut::AfterCommit => &tally.cuts_after_commit,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if stopped {
            return;
        }
    }
}

/// Where the spikes stall commits.
enum Spike {
    /// Commit calls to the Firestore emulator.
    Firestore,
    /// Writes to the counter table of this PostgreSQL database.
    Postgres(String),
}

/// Every `every`: commits stall 1.5 s (on Firestore, three Commit calls;
/// on PostgreSQL, every commit, behind a SHARE lock on the counter table)
/// while the emulated clock jumps past every lease, so messages in flight
/// are redelivered to other consumers while their first commit is still
/// pending.
async fn spike_loop(
    emulators: Arc<Emulators>,
    on: Spike,
    tally: Arc<Tally>,
    every: Duration,
    stop: watch::Receiver<bool>,
) {
    loop {
        if sleep_or_stop(every, &stop).await {
            return;
        }
        let locked = match &on {
            Spike::Firestore => {
                let spike = FaultSpec::latency("Commit", Duration::from_millis(1500)).times(3);
                if emulators.firestore_faults().add(spike).is_err() {
                    return;
                }
                None
            }
            Spike::Postgres(url) => Some(tokio::spawn(lock_counters(url.clone()))),
        };
        if sleep_or_stop(Duration::from_millis(200), &stop).await {
            return;
        }
        emulators.clock().advance(LEASE_JUMP);
        if let Some(locked) = locked {
            if matches!(locked.await, Ok(true)) {
                tally.spikes.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            tally.spikes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Holds a SHARE lock on `counter_shards` for 1.5 s (every commit's
/// counter upsert waits for it; reads go on); true if it was held.
async fn lock_counters(url: String) -> bool {
    let Ok((client, connection)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
    else {
        return false;
    };
    tokio::spawn(connection);
    let held = client
        .batch_execute("BEGIN; LOCK TABLE counter_shards IN SHARE MODE")
        .await
        .is_ok();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _ = client.batch_execute("COMMIT").await;
    held
}

/// Prints the subscription's state and the kill count every 10 s.
pub(super) async fn progress_loop(
    emulators: Arc<Emulators>,
    subscription: String,
    tally: Arc<Tally>,
    started: Instant,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let s = emulators.pubsub().stats(&subscription).unwrap_or_default();
        eprintln!(
            "[{:>5.0}s] published {} acked {} unacked {} redeliveries {} kills {}",
            started.elapsed().as_secs_f64(),
            s.published,
            s.acks,
            s.unacked,
            s.redeliveries,
            tally.kills()
        );
    }
}

/// Sleeps `d`; true when `stop` turned true first.
async fn sleep_or_stop(d: Duration, stop: &watch::Receiver<bool>) -> bool {
    let mut stop = stop.clone();
    if *stop.borrow() {
        return true;
    }
    let stopped = tokio::select! {
        () = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| *s) => true,
    };
    stopped || *stop.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{generate, WorkloadConfig};

    #[test]
    fn reorder_keeps_duplicates_on_their_originals_and_the_truth() {
        let config = WorkloadConfig {
            events: 2_000,
            ..WorkloadConfig::default()
        };
        let mut w = generate(&config);
        let truth = w.truth.clone();
        reorder(&mut w, 32, &mut StdRng::seed_from_u64(1));
        assert_eq!(w.truth.counts, truth.counts);
        for m in &w.messages {
            if let Origin::Duplicate { of } = m.origin {
                assert_eq!(w.messages[of].data, m.data);
            }
        }
    }
}
