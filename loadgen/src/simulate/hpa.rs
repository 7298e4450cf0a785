//! The Kubernetes HorizontalPodAutoscaler's decision, as its controller
//! makes it, for `External` metrics with `AverageValue` targets.
//!
//! Invariants: a decision is pure given the spec, the history this struct
//! keeps and the metric values handed in (no clock, no randomness); the
//! replicas it returns are always within `min_replicas..=max_replicas`,
//! never grow faster than the scale-up policies allow per period nor
//! shrink faster than the scale-down policies allow, and a scale-down
//! waits for the stabilization window (the highest recommendation in it
//! wins).
//!
//! What it follows (the controller's documented algorithm, in our words):
//! each metric proposes `ceil(value / target)` replicas unless its usage
//! ratio `value / (target x current)` is within the tolerance of 1; the
//! highest proposal wins; the recommendation is stabilised (scale up: the
//! lowest recommendation within the up window; scale down: the highest
//! within the down window); then rate-limited by the policies of the
//! direction, measured from the replicas at the start of each policy's
//! period; then clamped to min and max.

use std::collections::VecDeque;

/// How the policies of one direction combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Select {
    /// The policy allowing the largest change (Kubernetes' default).
    Max,
    /// The policy allowing the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// One scaling policy: at most `value` pods, or `value` percent of the
/// replicas at the period's start, per `period_secs`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// A number of pods per period.
    Pods {
        /// Pods.
        value: u32,
        /// Period in seconds.
        period_secs: u32,
    },
    /// A percentage of the replicas at the period's start, per period.
    Percent {
        /// Percent.
        value: u32,
        /// Period in seconds.
        period_secs: u32,
    },
}

impl Policy {
    fn period_secs(&self) -> u32 {
        match self {
            Policy::Pods { period_secs, .. } | Policy::Percent { period_secs, .. } => *period_secs,
        }
    }
}

/// The rules of one direction (`behavior.scaleUp` or `behavior.scaleDown`).
#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    /// `stabilizationWindowSeconds`.
    pub stabilization_window_secs: u32,
    /// `policies`.
    pub policies: Vec<Policy>,
    /// `selectPolicy`.
    pub select: Select,
}

impl Rules {
    /// Kubernetes' default scale-up: no window; 100 % or 4 pods per 15 s, whichever is more.
    pub fn default_scale_up() -> Self {
        Self {
            stabilization_window_secs: 0,
            policies: vec![
                Policy::Percent {
                    value: 100,
                    period_secs: 15,
                },
                Policy::Pods {
                    value: 4,
                    period_secs: 15,
                },
            ],
            select: Select::Max,
        }
    }

    /// Kubernetes' default scale-down: a 300 s window; up to 100 % per 15 s.
    pub fn default_scale_down() -> Self {
        Self {
            stabilization_window_secs: 300,
            policies: vec![Policy::Percent {
                value: 100,
                period_secs: 15,
            }],
            select: Select::Max,
        }
    }
}

/// An HPA's settings, as in its manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct HpaSpec {
    /// `minReplicas`.
    pub min_replicas: u32,
    /// `maxReplicas`.
    pub max_replicas: u32,
    /// Target of the subscription's undelivered messages per replica
    /// (`pubsub.googleapis.com|subscription|num_undelivered_messages`,
    /// `AverageValue`); `None` = metric not used.
    pub backlog_messages_per_replica: Option<f64>,
    /// Target of the topic's publish rate per replica, in messages per
    /// second (`pubsub.googleapis.com|topic|send_message_operation_count`,
    /// which the adapter reads as a rate; `AverageValue`); `None` = not used.
    pub publish_rate_per_replica: Option<f64>,
    /// `behavior.scaleUp`.
    pub scale_up: Rules,
    /// `behavior.scaleDown`.
    pub scale_down: Rules,
    /// The controller's sync period (`--horizontal-pod-autoscaler-sync-period`, 15 s).
    pub sync_period_secs: u32,
    /// The controller's tolerance (`--horizontal-pod-autoscaler-tolerance`, 0.1).
    pub tolerance: f64,
}

/// The metric values the HPA sees at one sync (what the adapter returns);
/// `None` when no sample is visible yet.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Observed {
    /// Undelivered messages of the subscription.
    pub backlog_messages: Option<f64>,
    /// Messages published to the topic per second.
    pub publish_rate_per_sec: Option<f64>,
}

/// The HPA controller's state for one target: its recommendations and scale events.
#[derive(Clone, Debug)]
pub struct Hpa {
    spec: HpaSpec,
    /// (time, recommendation), kept for the longer of the two windows.
    recommendations: VecDeque<(u32, u32)>,
    /// (time, +added or -removed replicas), kept for the longest policy period.
    events: VecDeque<(u32, i64)>,
}

impl Hpa {
    /// A controller with no history.
    pub fn new(spec: HpaSpec) -> Self {
        Self {
            spec,
            recommendations: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The spec it follows.
    pub fn spec(&self) -> &HpaSpec {
        &self.spec
    }

    /// The replicas to run, decided at `now_secs` with `current` replicas
    /// (the scale target's count) and the metrics `seen`; records the
    /// decision in the history. No visible metric keeps `current`.
    pub fn decide(&mut self, now_secs: u32, current: u32, seen: Observed) -> u32 {
        self.forget_before(now_secs);
        let Some(proposed) = self.propose(current, seen) else {
            return current.clamp(self.spec.min_replicas, self.spec.max_replicas);
        };
        let stabilized = self.stabilize(now_secs, current, proposed);
        let limited = self.rate_limit(now_secs, current, stabilized);
        let desired = limited.clamp(self.spec.min_replicas, self.spec.max_replicas);
        if desired != current {
            self.events
                .push_back((now_secs, i64::from(desired) - i64::from(current)));
        }
        desired
    }

    /// Each metric's proposal (`ceil(value / target)`, or `current` within
    /// the tolerance); the highest wins.
    fn propose(&self, current: u32, seen: Observed) -> Option<u32> {
        let pairs = [
            (
                seen.backlog_messages,
                self.spec.backlog_messages_per_replica,
            ),
            (
                seen.publish_rate_per_sec,
                self.spec.publish_rate_per_replica,
            ),
        ];
        let mut best: Option<u32> = None;
        for (value, target) in pairs {
            let (Some(value), Some(target)) = (value, target) else {
                continue;
            };
            if target <= 0.0 || !value.is_finite() {
                continue;
            }
            let ratio = value / (target * f64::from(current.max(1)));
            let proposal = if (ratio - 1.0).abs() <= self.spec.tolerance {
                current
            } else {
                (value / target).ceil().clamp(0.0, f64::from(u32::MAX)) as u32
            };
            best = Some(best.map_or(proposal, |b| b.max(proposal)));
        }
        best
    }

    fn stabilize(&mut self, now_secs: u32, current: u32, proposed: u32) -> u32 {
        let up_window = self.spec.scale_up.stabilization_window_secs;
        let down_window = self.spec.scale_down.stabilization_window_secs;
        let mut up = proposed;
        let mut down = proposed;
        for &(at, rec) in &self.recommendations {
            if now_secs.saturating_sub(at) < up_window {
                up = up.min(rec);
            }
            if now_secs.saturating_sub(at) < down_window {
                down = down.max(rec);
            }
        }
        self.recommendations.push_back((now_secs, proposed));
        if up > current {
            up
        } else if down < current {
            down
        } else {
            current
        }
    }

    fn rate_limit(&self, now_secs: u32, current: u32, desired: u32) -> u32 {
        if desired > current {
            desired.min(self.scale_up_limit(now_secs, current))
        } else if desired < current {
            desired.max(self.scale_down_limit(now_secs, current))
        } else {
            desired
        }
    }

    /// Replicas added and removed within the last `period_secs`.
    fn changes_within(&self, now_secs: u32, period_secs: u32) -> (i64, i64) {
        let mut added = 0;
        let mut removed = 0;
        for &(at, change) in &self.events {
            if now_secs.saturating_sub(at) < period_secs {
                if change > 0 {
                    added += change;
                } else {
                    removed -= change;
                }
            }
        }
        (added, removed)
    }

    fn scale_up_limit(&self, now_secs: u32, current: u32) -> u32 {
        let rules = &self.spec.scale_up;
        if rules.select == Select::Disabled {
            return current;
        }
        let mut limit: Option<i64> = None;
        for policy in &rules.policies {
            let (added, removed) = self.changes_within(now_secs, policy.period_secs());
            let start = i64::from(current) - added + removed;
            let proposed = match *policy {
                Policy::Pods { value, .. } => start + i64::from(value),
                Policy::Percent { value, .. } => {
                    (start as f64 * (1.0 + f64::from(value) / 100.0)).ceil() as i64
                }
            };
            limit = Some(match (limit, rules.select) {
                (None, _) => proposed,
                (Some(l), Select::Min) => l.min(proposed),
                (Some(l), _) => l.max(proposed),
            });
        }
        let limit = limit.unwrap_or(i64::from(current)).max(i64::from(current));
        u32::try_from(limit).unwrap_or(u32::MAX)
    }

    fn scale_down_limit(&self, now_secs: u32, current: u32) -> u32 {
        let rules = &self.spec.scale_down;
        if rules.select == Select::Disabled {
            return current;
        }
        let mut limit: Option<i64> = None;
        for policy in &rules.policies {
            let (added, removed) = self.changes_within(now_secs, policy.period_secs());
            let start = i64::from(current) + removed - added;
            let proposed = match *policy {
                Policy::Pods { value, .. } => start - i64::from(value),
                Policy::Percent { value, .. } => {
                    (start as f64 * (1.0 - f64::from(value) / 100.0)) as i64
                }
            };
            limit = Some(match (limit, rules.select) {
                (None, _) => proposed,
                (Some(l), Select::Min) => l.max(proposed),
                (Some(l), _) => l.min(proposed),
            });
        }
        let limit = limit.unwrap_or(i64::from(current)).min(i64::from(current));
        u32::try_from(limit.max(0)).unwrap_or(0)
    }

    fn forget_before(&mut self, now_secs: u32) {
        let keep_recs = self
            .spec
            .scale_up
            .stabilization_window_secs
            .max(self.spec.scale_down.stabilization_window_secs);
        while let Some(&(at, _)) = self.recommendations.front() {
            if now_secs.saturating_sub(at) >= keep_recs {
                self.recommendations.pop_front();
            } else {
                break;
            }
        }
        let keep_events = self
            .spec
            .scale_up
            .policies
            .iter()
            .chain(&self.spec.scale_down.policies)
            .map(Policy::period_secs)
            .max()
            .unwrap_or(0);
        while let Some(&(at, _)) = self.events.front() {
            if now_secs.saturating_sub(at) >= keep_events {
                self.events.pop_front();
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> HpaSpec {
        HpaSpec {
            min_replicas: 2,
            max_replicas: 100,
            backlog_messages_per_replica: Some(1000.0),
            publish_rate_per_replica: None,
            scale_up: Rules::default_scale_up(),
            scale_down: Rules::default_scale_down(),
            sync_period_secs: 15,
            tolerance: 0.1,
        }
    }

    fn backlog(messages: f64) -> Observed {
        Observed {
            backlog_messages: Some(messages),
            publish_rate_per_sec: None,
        }
    }

    #[test]
    fn scale_up_is_limited_to_the_larger_of_doubling_and_four_pods_per_period() {
        let mut hpa = Hpa::new(spec());
        let wants_60 = backlog(60_000.0);
        // From 2 the policies allow max(2 x 2, 2 + 4) = 6.
        assert_eq!(hpa.decide(0, 2, wants_60), 6);
        // Same period: the 4 added count, the start is still 2.
        assert_eq!(hpa.decide(10, 6, wants_60), 6);
        // Next period: start 6, so max(12, 10) = 12.
        assert_eq!(hpa.decide(15, 6, wants_60), 12);
        assert_eq!(hpa.decide(30, 12, wants_60), 24);
        assert_eq!(hpa.decide(45, 24, wants_60), 48);
        assert_eq!(hpa.decide(60, 48, wants_60), 60);
        // 52,000 at 50 replicas: within the tolerance, no change.
        assert_eq!(hpa.decide(75, 50, backlog(52_000.0)), 50);
    }

    #[test]
    fn scale_down_waits_for_the_stabilization_window() {
        let mut hpa = Hpa::new(spec());
        assert_eq!(hpa.decide(0, 2, backlog(20_000.0)), 6);
        let mut current = 6;
        let mut t = 15;
        while t < 120 {
            current = hpa.decide(t, current, backlog(20_000.0));
            t += 15;
        }
        assert_eq!(current, 20);
        // The backlog is gone: the highest recommendation of the last 300 s
        // (20) holds until it leaves the window.
        let last_high = t - 15;
        while t < last_high + 300 {
            assert_eq!(hpa.decide(t, current, backlog(0.0)), 20, "at {t}");
            t += 15;
        }
        assert_eq!(hpa.decide(t, current, backlog(0.0)), 2);
    }

    #[test]
    fn a_usage_ratio_within_the_tolerance_keeps_the_replicas() {
        let mut hpa = Hpa::new(spec());
        // 10 replicas, 10,500 messages: ratio 1.05, inside 0.1.
        assert_eq!(hpa.decide(0, 10, backlog(10_500.0)), 10);
        // 11,500: ratio 1.15, outside: ceil(11.5) = 12.
        assert_eq!(hpa.decide(15, 10, backlog(11_500.0)), 12);
    }

    #[test]
    fn the_highest_metric_proposal_wins_and_min_max_clamp() {
        let mut s = spec();
        s.publish_rate_per_replica = Some(100.0);
        s.max_replicas = 8;
        let mut hpa = Hpa::new(s);
        let seen = Observed {
            backlog_messages: Some(0.0),
            publish_rate_per_sec: Some(550.0),
        };
        assert_eq!(hpa.decide(0, 2, seen), 6);
        assert_eq!(hpa.decide(15, 6, seen), 6);
        let busy = Observed {
            backlog_messages: Some(1e9),
            publish_rate_per_sec: Some(550.0),
        };
        assert_eq!(hpa.decide(30, 6, busy), 8);
    }

    #[test]
    fn no_visible_metric_keeps_the_current_replicas() {
        let mut hpa = Hpa::new(spec());
        assert_eq!(hpa.decide(0, 5, Observed::default()), 5);
        assert_eq!(hpa.decide(0, 1, Observed::default()), 2);
    }
}
