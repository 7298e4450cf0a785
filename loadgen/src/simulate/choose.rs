//! Which autoscaler the simulation picks: every candidate tried under every
//! [`Profile`] and seed, the worst outcome of each kept, and the cheapest
//! that meets the age target everywhere chosen.
//!
//! Invariant: the choice depends only on the settings and the seeds (the
//! model is deterministic), so the same settings pick the same HPA.

use super::model::{self, Trace};
use super::{shipped, SimulateConfig, SimulateError};

/// An autoscaler tried on the spike.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Candidate {
    /// `--min-replicas` replicas, no autoscaler (what a pull consumer gets
    /// from request- or CPU-driven scaling that never fires).
    Fixed,
    /// An HPA on the Pub/Sub metrics.
    Hpa {
        /// Backlog target in seconds of one replica's capacity (`None`: not used).
        backlog_secs: Option<u32>,
        /// Whether the publish-rate metric is used.
        publish_rate: bool,
    },
}

impl Candidate {
    /// The shipped HPA (`deploy/gke/hpa.yaml`).
    pub const SHIPPED: Candidate = Candidate::Hpa {
        backlog_secs: Some(shipped::BACKLOG_SECS),
        publish_rate: true,
    };
}

/// The conditions every candidate is tried under; it must meet the target under all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// The spike as given.
    Spike,
    /// The peak held `--long-hold-secs`: an autoscaler that lets go while
    /// arrivals stay high shows here.
    LongHold,
    /// Replicas `--slow-replica-fraction` slower than the HPA's targets
    /// assume: a capacity figure that turned out wrong.
    SlowReplicas,
}

impl Profile {
    /// Every profile, in table order.
    pub const ALL: [Profile; 3] = [Profile::Spike, Profile::LongHold, Profile::SlowReplicas];
}

/// How one candidate did: under each profile, the worst over the seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateResult {
    /// The candidate.
    pub candidate: Candidate,
    /// Its label.
    pub name: String,
    /// Worst outcome over the seeds, per profile in [`Profile::ALL`] order
    /// (highest peak, age and final backlog; latest settling; mean replica-minutes).
    pub worst: Vec<model::Summary>,
    /// Whether every run met the target.
    pub meets: bool,
}

/// Everything `simulate` computes.
pub struct Outcome {
    /// Each candidate, in table order.
    pub candidates: Vec<CandidateResult>,
    /// Index of the picked candidate.
    pub picked: Option<usize>,
    /// The picked HPA on the spike grown 1x, 10x, 100x (first seed).
    pub growth: Vec<(u32, Trace)>,
}

/// The candidates tried, in table order.
pub fn candidates() -> Vec<Candidate> {
    let mut list = vec![Candidate::Fixed];
    for secs in [10, 30, 60] {
        list.push(Candidate::Hpa {
            backlog_secs: Some(secs),
            publish_rate: false,
        });
    }
    list.push(Candidate::Hpa {
        backlog_secs: None,
        publish_rate: true,
    });
    for secs in [10, 30, 60] {
        list.push(Candidate::Hpa {
            backlog_secs: Some(secs),
            publish_rate: true,
        });
    }
    list
}

/// Runs every candidate under every profile and `--seeds` seeds, picks
/// the one with the fewest replica-minutes on the spike among those
/// meeting the target in every run, and runs it on the spike grown 1x,
/// 10x and 100x (its `maxReplicas` grown alike, so the limits outside the
/// HPA show).
pub fn evaluate(config: &SimulateConfig) -> Result<Outcome, SimulateError> {
    config.validate()?;
    let seeds: Vec<u64> = (0..u64::from(config.seeds))
        .map(|i| config.seed.wrapping_add(i))
        .collect();
    let mut results = Vec::new();
    for candidate in candidates() {
        let name = config.candidate_name(candidate);
        let autoscaler = config.autoscaler(candidate, config.max_replicas);
        let mut meets = true;
        let mut worst = Vec::new();
        for profile in Profile::ALL {
            let scenario = config.scenario(name.clone(), autoscaler.clone(), 1, profile);
            let mut summaries = Vec::new();
            for seed in &seeds {
                let trace = model::simulate(&scenario, *seed);
                meets &= config.meets_target(&trace);
                summaries.push(trace.summary);
            }
            worst.extend(worst_of(&summaries));
        }
        results.push(CandidateResult {
            candidate,
            name,
            worst,
            meets,
        });
    }
    let picked = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.meets)
        .min_by(|a, b| {
            let cost = |r: &CandidateResult| r.worst[0].replica_minutes;
            cost(a.1).total_cmp(&cost(b.1))
        })
        .map(|(i, _)| i);
    let mut growth = Vec::new();
    if let Some(i) = picked {
        let candidate = results[i].candidate;
        for factor in [1, 10, 100] {
            let max = config.max_replicas.saturating_mul(factor);
            let scenario = config.scenario(
                format!("{factor}x"),
                config.autoscaler(candidate, max),
                factor,
                Profile::Spike,
            );
            growth.push((factor, model::simulate(&scenario, config.seed)));
        }
    }
    Ok(Outcome {
        candidates: results,
        picked,
        growth,
    })
}

/// The worst of several runs' summaries (replica-minutes: the mean).
fn worst_of(summaries: &[model::Summary]) -> Option<model::Summary> {
    let (first, rest) = summaries.split_first()?;
    let mut worst = first.clone();
    for s in rest {
        worst.peak_replicas = worst.peak_replicas.max(s.peak_replicas);
        worst.replica_minutes += s.replica_minutes;
        worst.max_backlog = worst.max_backlog.max(s.max_backlog);
        worst.max_age_secs = worst.max_age_secs.max(s.max_age_secs);
        worst.settled_after_secs = match (worst.settled_after_secs, s.settled_after_secs) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        worst.final_backlog = worst.final_backlog.max(s.final_backlog);
        worst.final_replicas = worst.final_replicas.max(s.final_replicas);
        worst.peak_db_writes = worst.peak_db_writes.max(s.peak_db_writes);
        worst.base_db_writes = worst.base_db_writes.max(s.base_db_writes);
        worst.peak_db_writes_over_ramp = worst
            .peak_db_writes_over_ramp
            .max(s.peak_db_writes_over_ramp);
        worst.secs_over_ramp = worst.secs_over_ramp.max(s.secs_over_ramp);
        worst.peak_hot_post_increments = worst
            .peak_hot_post_increments
            .max(s.peak_hot_post_increments);
        worst.peak_hottest_counter_doc_writes = worst
            .peak_hottest_counter_doc_writes
            .max(s.peak_hottest_counter_doc_writes);
        worst.peak_hottest_counter_doc_writes_at_max_shards = worst
            .peak_hottest_counter_doc_writes_at_max_shards
            .max(s.peak_hottest_counter_doc_writes_at_max_shards);
        worst.peak_stream_bytes = worst.peak_stream_bytes.max(s.peak_stream_bytes);
    }
    worst.replica_minutes /= summaries.len() as f64;
    Some(worst)
}
