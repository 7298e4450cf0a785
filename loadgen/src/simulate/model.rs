//! The scaling model: a spike of like events against consumer replicas
//! that an autoscaler adds and removes, one second at a time; it yields
//! the backlog, its oldest message's age, the replicas, and the load on
//! each limit of [`super::limits`].
//!
//! Invariants: deterministic: one scenario and one seed give one trace
//! (a single seeded generator drawn in a fixed order; no clock, no hash
//! iteration). Conservation: at every step, everything that arrived was
//! either served or is in the backlog, and only ready replicas serve. The
//! autoscaler sees the subscription only through the metric pipeline
//! (sampled, then visible after a delay), never the live backlog.
//!
//! What it leaves out, on purpose: per-message latency inside a replica
//! (~0.1 s, far below the 1 s step), redelivery of the few messages a
//! replica holds when it is stopped (it drains them within its shutdown
//! deadline), and node provisioning (fold it into the start-up time).
//!
//! Why one file of ~540 lines: the scenario, the replicas, the metric
//! pipeline and the one-second step that updates them read as one model;
//! split, each part would only make sense beside the others.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::hpa::{Hpa, HpaSpec, Observed};
use super::limits;

/// The arrival rate over time: `base` until `start`, a linear ramp to
/// `peak`, a hold, a linear decay back to `base`; each second's arrivals
/// vary by up to `noise_fraction` either way.
#[derive(Clone, Debug, PartialEq)]
pub struct Spike {
    /// Events per second before and after the spike.
    pub base_events_per_sec: f64,
    /// Events per second at the top.
    pub peak_events_per_sec: f64,
    /// When the ramp starts, in seconds from the start of the run.
    pub start_secs: u32,
    /// Ramp from base to peak, in seconds.
    pub ramp_secs: u32,
    /// Time at the peak, in seconds.
    pub hold_secs: u32,
    /// Decay from peak to base, in seconds.
    pub decay_secs: u32,
    /// Random variation of each second's arrivals, as a fraction (0.05 = ±5 %).
    pub noise_fraction: f64,
}

impl Spike {
    /// The mean arrival rate at second `t`, in events per second.
    pub fn rate_at(&self, t: u32) -> f64 {
        let (base, peak) = (self.base_events_per_sec, self.peak_events_per_sec);
        let ramp_end = self.start_secs + self.ramp_secs;
        let hold_end = ramp_end + self.hold_secs;
        let decay_end = hold_end + self.decay_secs;
        let lerp = |from: f64, to: f64, done: u32, of: u32| {
            from + (to - from) * f64::from(done) / f64::from(of.max(1))
        };
        if t < self.start_secs {
            base
        } else if t < ramp_end {
            lerp(base, peak, t - self.start_secs, self.ramp_secs)
        } else if t < hold_end {
            peak
        } else if t < decay_end {
            lerp(peak, base, t - hold_end, self.decay_secs)
        } else {
            base
        }
    }

    /// When the arrival rate is back at base, in seconds from the start of the run.
    pub fn end_secs(&self) -> u32 {
        self.start_secs + self.ramp_secs + self.hold_secs + self.decay_secs
    }
}

/// One consumer replica, as measured (`hotcount-loadgen bench`) and deployed.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaModel {
    /// Events per second one replica acks under a backlog.
    pub events_per_sec: f64,
    /// Spread of that capacity between replicas, as a fraction (drawn per replica).
    pub capacity_jitter_fraction: f64,
    /// From the autoscaler's decision to the replica pulling, in seconds
    /// (scheduling, image pull, start, `/readyz`).
    pub start_secs: u32,
    /// Extra start-up time drawn per replica, up to this many seconds.
    pub start_jitter_secs: u32,
    /// StreamingPull streams per replica (`--streams`).
    pub streams: u32,
    /// Commits per 1,000 events while it keeps up (batches of ~400).
    pub commits_per_1k_events: f64,
    /// Commits per second one replica makes at most (its commit slots
    /// over the commit time; batches grow instead).
    pub max_commits_per_sec: f64,
}

/// How the autoscaler sees the subscription: Cloud Monitoring samples the
/// Pub/Sub metrics once a period, and a sample becomes visible after a delay.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricPipeline {
    /// Sampling period, in seconds.
    pub sample_period_secs: u32,
    /// Shortest delay before a sample is visible, in seconds.
    pub visibility_delay_min_secs: u32,
    /// Longest delay before a sample is visible, in seconds.
    pub visibility_delay_max_secs: u32,
}

/// What sets the replica count.
#[derive(Clone, Debug, PartialEq)]
pub enum Autoscaler {
    /// A fixed number of replicas (no autoscaler).
    Fixed {
        /// Replicas.
        replicas: u32,
    },
    /// A HorizontalPodAutoscaler on the Pub/Sub metrics.
    Hpa(HpaSpec),
}

/// What the events cost downstream.
#[derive(Clone, Debug, PartialEq)]
pub struct Load {
    /// Fraction of the events on the hottest post.
    pub hot_post_share: f64,
    /// Bytes per message as a stream carries it (payload and attributes).
    pub message_bytes: f64,
    /// Membership documents written per event (at most one; duplicates write none).
    pub membership_writes_per_event: f64,
    /// `--counter-shards`.
    pub counter_shards: u32,
    /// `--counter-shard-target-writes-per-sec`.
    pub counter_shard_target_writes_per_sec: u32,
}

/// Everything one run of the model needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Label in tables.
    pub name: String,
    /// The arrivals.
    pub spike: Spike,
    /// One replica.
    pub replica: ReplicaModel,
    /// The metrics the autoscaler reads.
    pub metrics: MetricPipeline,
    /// The autoscaler.
    pub autoscaler: Autoscaler,
    /// Downstream costs.
    pub load: Load,
    /// Seconds simulated after the spike has decayed.
    pub tail_secs: u32,
    /// The oldest unacked message's age the run should stay under, in seconds.
    pub age_target_secs: u32,
}

impl Scenario {
    /// Seconds simulated in all.
    pub fn horizon_secs(&self) -> u32 {
        self.spike.end_secs() + self.tail_secs
    }
}

/// The state at the end of one second.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Second of the run.
    pub t_secs: u32,
    /// Events that arrived in it.
    pub arrivals: f64,
    /// Events acked in it.
    pub served: f64,
    /// Unacked events at its end.
    pub backlog: f64,
    /// Age of the oldest unacked event at its end, in seconds (0 = none).
    pub oldest_age_secs: u32,
    /// Replicas the autoscaler asked for (running or starting).
    pub replicas: u32,
    /// Replicas pulling.
    pub ready: u32,
    /// Firestore writes in it (memberships, counter increments, markers).
    pub db_writes: f64,
    /// The write rate Firestore is ready for in it, by the 500/50/5 rule
    /// from the rate it took before the spike ([`limits::WriteRamp`]).
    pub db_write_ramp: f64,
    /// Increments to the hottest post, all replicas together.
    pub hot_post_increments: f64,
    /// Writes to the hottest counter document.
    pub hottest_counter_doc_writes: f64,
    /// Writes to it had `--counter-shards` been hotcount's maximum (1000).
    pub hottest_counter_doc_writes_at_max_shards: f64,
    /// Bytes on the busiest StreamingPull stream.
    pub busiest_stream_bytes: f64,
}

/// A run's outcome in a few figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Highest replica count asked for.
    pub peak_replicas: u32,
    /// Replicas x minutes (running or starting), the run's cost.
    pub replica_minutes: f64,
    /// Largest backlog, in events.
    pub max_backlog: f64,
    /// Largest oldest-unacked age, in seconds.
    pub max_age_secs: u32,
    /// From the spike's start to the moment the age fell under the target
    /// for good, in seconds (0 = never over it); `None` = still over it at the end.
    pub settled_after_secs: Option<u32>,
    /// Backlog at the end of the run.
    pub final_backlog: f64,
    /// Replicas at the end of the run.
    pub final_replicas: u32,
    /// Highest Firestore writes per second.
    pub peak_db_writes: f64,
    /// Highest Firestore writes per second before the spike (the rate the
    /// database is warm at).
    pub base_db_writes: f64,
    /// Highest ratio of the writes to what the 500/50/5 ramp is ready for.
    pub peak_db_writes_over_ramp: f64,
    /// Seconds in which the writes were above the ramp.
    pub secs_over_ramp: u32,
    /// Highest increments per second to the hottest post.
    pub peak_hot_post_increments: f64,
    /// Highest writes per second to the hottest counter document.
    pub peak_hottest_counter_doc_writes: f64,
    /// The same had `--counter-shards` been hotcount's maximum (1000).
    pub peak_hottest_counter_doc_writes_at_max_shards: f64,
    /// Highest bytes per second on one stream.
    pub peak_stream_bytes: f64,
}

/// The model's output: every second, and the summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The scenario that produced it.
    pub scenario: Scenario,
    /// The seed.
    pub seed: u64,
    /// One step per second.
    pub steps: Vec<Step>,
    /// The summary.
    pub summary: Summary,
}

#[derive(Clone, Copy, Debug)]
struct Pod {
    ready_at: u32,
    capacity: f64,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    taken_at: u32,
    visible_at: u32,
    backlog: f64,
    publish_rate: f64,
}

/// Runs `scenario` with `seed`.
pub fn simulate(scenario: &Scenario, seed: u64) -> Trace {
    let mut run = Run::new(scenario, seed);
    let horizon = scenario.horizon_secs();
    let mut steps = Vec::with_capacity(horizon as usize);
    for t in 0..horizon {
        steps.push(run.step(t));
    }
    let base = steps
        .iter()
        .take_while(|s| s.t_secs < scenario.spike.start_secs)
        .map(|s| s.db_writes)
        .fold(0.0, f64::max);
    let mut ramp = limits::WriteRamp::warm_at(base);
    for step in &mut steps {
        step.db_write_ramp = ramp.take(step.t_secs, step.db_writes);
    }
    let summary = summarize(scenario, &steps);
    Trace {
        scenario: scenario.clone(),
        seed,
        steps,
        summary,
    }
}

struct Run<'a> {
    s: &'a Scenario,
    rng: StdRng,
    pods: Vec<Pod>,
    hpa: Option<Hpa>,
    /// (second of arrival, events still unacked), oldest first.
    queue: VecDeque<(u32, f64)>,
    backlog: f64,
    samples: VecDeque<Sample>,
    next_sample_at: u32,
    /// Arrivals since the last sample.
    arrived_since_sample: f64,
}

impl<'a> Run<'a> {
    fn new(s: &'a Scenario, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let (initial, hpa) = match &s.autoscaler {
            Autoscaler::Fixed { replicas } => (*replicas, None),
            Autoscaler::Hpa(spec) => (spec.min_replicas, Some(Hpa::new(spec.clone()))),
        };
        let period = s.metrics.sample_period_secs.max(1);
        let next_sample_at = rng.random_range(0..period);
        let mut run = Self {
            s,
            rng,
            pods: Vec::new(),
            hpa,
            queue: VecDeque::new(),
            backlog: 0.0,
            samples: VecDeque::new(),
            next_sample_at,
            arrived_since_sample: 0.0,
        };
        for _ in 0..initial {
            let pod = run.new_pod(0);
            run.pods.push(Pod { ready_at: 0, ..pod });
        }
        run
    }

    fn new_pod(&mut self, now: u32) -> Pod {
        let r = &self.s.replica;
        let jitter = if r.start_jitter_secs > 0 {
            self.rng.random_range(0..=r.start_jitter_secs)
        } else {
            0
        };
        let spread = r.capacity_jitter_fraction * self.rng.random_range(-1.0..=1.0);
        let stream_cap = limits::PUBSUB_STREAM_BYTES_PER_SEC * f64::from(r.streams.max(1))
            / self.s.load.message_bytes.max(1.0);
        Pod {
            ready_at: now + r.start_secs + jitter,
            capacity: (r.events_per_sec * (1.0 + spread)).min(stream_cap).max(0.0),
        }
    }

    fn step(&mut self, t: u32) -> Step {
        let noise = self.s.spike.noise_fraction * self.rng.random_range(-1.0..=1.0);
        let arrivals = (self.s.spike.rate_at(t) * (1.0 + noise)).max(0.0);
        self.autoscale(t);
        self.queue.push_back((t, arrivals));
        self.backlog += arrivals;
        self.arrived_since_sample += arrivals;

        let ready: Vec<Pod> = self
            .pods
            .iter()
            .copied()
            .filter(|p| p.ready_at <= t)
            .collect();
        let capacity: f64 = ready.iter().map(|p| p.capacity).sum();
        let served = self.serve(capacity);
        let oldest_age_secs = self.queue.front().map_or(0, |(at, _)| t + 1 - at);
        self.sample(t);
        self.step_record(t, arrivals, served, oldest_age_secs, &ready, capacity)
    }

    /// Acks up to `capacity` events, oldest first; returns how many.
    fn serve(&mut self, capacity: f64) -> f64 {
        let mut left = capacity;
        while left > 0.0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            if front.1 <= left {
                left -= front.1;
                self.queue.pop_front();
            } else {
                front.1 -= left;
                left = 0.0;
            }
        }
        let served = capacity - left;
        self.backlog = (self.backlog - served).max(0.0);
        if self.queue.is_empty() {
            self.backlog = 0.0;
        }
        served
    }

    fn autoscale(&mut self, t: u32) {
        let Some(hpa) = self.hpa.as_mut() else {
            return;
        };
        if !t.is_multiple_of(hpa.spec().sync_period_secs.max(1)) {
            return;
        }
        let seen = observe(&self.samples, t);
        let current = u32::try_from(self.pods.len()).unwrap_or(u32::MAX);
        let desired = hpa.decide(t, current, seen);
        if desired > current {
            for _ in current..desired {
                let pod = self.new_pod(t);
                self.pods.push(pod);
            }
        } else if desired < current {
            // A ReplicaSet removes pods that are not ready first, then the
            // youngest.
            self.pods
                .sort_by_key(|p| (p.ready_at <= t, std::cmp::Reverse(p.ready_at)));
            self.pods.drain(..(current - desired) as usize);
        }
    }

    fn sample(&mut self, t: u32) {
        if t != self.next_sample_at {
            return;
        }
        let m = &self.s.metrics;
        let period = m.sample_period_secs.max(1);
        let delay = self.rng.random_range(
            m.visibility_delay_min_secs
                ..=m.visibility_delay_max_secs.max(m.visibility_delay_min_secs),
        );
        self.samples.push_back(Sample {
            taken_at: t,
            visible_at: t + delay,
            backlog: self.backlog,
            publish_rate: self.arrived_since_sample / f64::from(period),
        });
        while self.samples.len() > 16 {
            self.samples.pop_front();
        }
        self.arrived_since_sample = 0.0;
        self.next_sample_at = t + period;
    }

    fn step_record(
        &self,
        t: u32,
        arrivals: f64,
        served: f64,
        oldest_age_secs: u32,
        ready: &[Pod],
        capacity: f64,
    ) -> Step {
        let load = &self.s.load;
        let r = &self.s.replica;
        let ready_count = u32::try_from(ready.len()).unwrap_or(u32::MAX);
        let per_replica = if ready.is_empty() {
            0.0
        } else {
            served / ready.len() as f64
        };
        let per_replica_commits =
            (per_replica * r.commits_per_1k_events / 1000.0).min(r.max_commits_per_sec);
        // A post is in at most one increment per commit.
        let per_replica_hot = per_replica_commits.min(per_replica * load.hot_post_share);
        let busiest = ready
            .iter()
            .map(|p| {
                if capacity > 0.0 {
                    served * p.capacity / capacity
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max);
        Step {
            t_secs: t,
            arrivals,
            served,
            backlog: self.backlog,
            oldest_age_secs,
            replicas: u32::try_from(self.pods.len()).unwrap_or(u32::MAX),
            ready: ready_count,
            // A marker and at least the hot post's increment per commit.
            db_writes: served * load.membership_writes_per_event
                + 2.0 * per_replica_commits * f64::from(ready_count),
            // Filled in once every second is known (`simulate`).
            db_write_ramp: 0.0,
            hot_post_increments: per_replica_hot * f64::from(ready_count),
            hottest_counter_doc_writes: limits::hottest_counter_doc_writes_per_sec(
                ready_count,
                per_replica_hot,
                load.counter_shards,
                load.counter_shard_target_writes_per_sec,
            ),
            hottest_counter_doc_writes_at_max_shards: limits::hottest_counter_doc_writes_per_sec(
                ready_count,
                per_replica_hot,
                limits::HOTCOUNT_MAX_COUNTER_SHARDS,
                load.counter_shard_target_writes_per_sec,
            ),
            busiest_stream_bytes: limits::stream_bytes_per_sec(
                busiest,
                load.message_bytes,
                r.streams,
            ),
        }
    }
}

/// The latest sample visible at `t` (by sampling time), as the adapter returns it.
fn observe(samples: &VecDeque<Sample>, t: u32) -> Observed {
    samples
        .iter()
        .filter(|s| s.visible_at <= t)
        .max_by_key(|s| s.taken_at)
        .map_or(Observed::default(), |s| Observed {
            backlog_messages: Some(s.backlog),
            publish_rate_per_sec: Some(s.publish_rate),
        })
}

fn summarize(s: &Scenario, steps: &[Step]) -> Summary {
    let mut summary = Summary {
        peak_replicas: 0,
        replica_minutes: 0.0,
        max_backlog: 0.0,
        max_age_secs: 0,
        settled_after_secs: Some(0),
        final_backlog: 0.0,
        final_replicas: 0,
        peak_db_writes: 0.0,
        base_db_writes: 0.0,
        peak_db_writes_over_ramp: 0.0,
        secs_over_ramp: 0,
        peak_hot_post_increments: 0.0,
        peak_hottest_counter_doc_writes: 0.0,
        peak_hottest_counter_doc_writes_at_max_shards: 0.0,
        peak_stream_bytes: 0.0,
    };
    let mut last_over: Option<u32> = None;
    for step in steps {
        summary.peak_replicas = summary.peak_replicas.max(step.replicas);
        summary.replica_minutes += f64::from(step.replicas) / 60.0;
        summary.max_backlog = summary.max_backlog.max(step.backlog);
        summary.max_age_secs = summary.max_age_secs.max(step.oldest_age_secs);
        summary.peak_db_writes = summary.peak_db_writes.max(step.db_writes);
        if step.t_secs < s.spike.start_secs {
            summary.base_db_writes = summary.base_db_writes.max(step.db_writes);
        }
        if step.db_write_ramp > 0.0 {
            let over = step.db_writes / step.db_write_ramp;
            summary.peak_db_writes_over_ramp = summary.peak_db_writes_over_ramp.max(over);
            summary.secs_over_ramp += u32::from(over > 1.0);
        }
        summary.peak_hot_post_increments = summary
            .peak_hot_post_increments
            .max(step.hot_post_increments);
        summary.peak_hottest_counter_doc_writes = summary
            .peak_hottest_counter_doc_writes
            .max(step.hottest_counter_doc_writes);
        summary.peak_hottest_counter_doc_writes_at_max_shards = summary
            .peak_hottest_counter_doc_writes_at_max_shards
            .max(step.hottest_counter_doc_writes_at_max_shards);
        summary.peak_stream_bytes = summary.peak_stream_bytes.max(step.busiest_stream_bytes);
        if step.oldest_age_secs > s.age_target_secs {
            last_over = Some(step.t_secs);
        }
    }
    if let Some(last) = steps.last() {
        summary.final_backlog = last.backlog;
        summary.final_replicas = last.replicas;
        summary.settled_after_secs = match last_over {
            None => Some(0),
            Some(t) if t == last.t_secs => None,
            Some(t) => Some((t + 1).saturating_sub(s.spike.start_secs)),
        };
    }
    summary
}

#[cfg(test)]
mod tests;
