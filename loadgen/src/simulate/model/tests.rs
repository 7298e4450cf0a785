//! Unit tests of the parent module.

use super::*;
use crate::simulate::hpa::Rules;

fn scenario(autoscaler: Autoscaler) -> Scenario {
    Scenario {
        name: "test".into(),
        spike: Spike {
            base_events_per_sec: 1_000.0,
            peak_events_per_sec: 100_000.0,
            start_secs: 30,
            ramp_secs: 60,
            hold_secs: 300,
            decay_secs: 120,
            noise_fraction: 0.05,
        },
        replica: ReplicaModel {
            events_per_sec: 20_000.0,
            capacity_jitter_fraction: 0.1,
            start_secs: 20,
            start_jitter_secs: 10,
            streams: 2,
            commits_per_1k_events: 2.5,
            max_commits_per_sec: 50.0,
        },
        metrics: MetricPipeline {
            sample_period_secs: 60,
            visibility_delay_min_secs: 30,
            visibility_delay_max_secs: 90,
        },
        autoscaler,
        load: Load {
            hot_post_share: 0.5,
            message_bytes: 200.0,
            membership_writes_per_event: 1.0,
            counter_shards: 16,
            counter_shard_target_writes_per_sec: 1,
        },
        tail_secs: 600,
        age_target_secs: 60,
    }
}

fn hpa() -> Autoscaler {
    Autoscaler::Hpa(HpaSpec {
        min_replicas: 1,
        max_replicas: 20,
        backlog_messages_per_replica: Some(600_000.0),
        publish_rate_per_replica: Some(14_000.0),
        scale_up: Rules::default_scale_up(),
        scale_down: Rules::default_scale_down(),
        sync_period_secs: 15,
        tolerance: 0.1,
    })
}

#[test]
fn every_event_is_served_once_or_still_in_the_backlog() {
    let trace = simulate(&scenario(hpa()), 3);
    let mut arrived = 0.0;
    let mut served = 0.0;
    for step in &trace.steps {
        arrived += step.arrivals;
        served += step.served;
        assert!(served <= arrived * (1.0 + 1e-9));
        assert!(
            (arrived - served - step.backlog).abs() <= 1e-6 * arrived.max(1.0),
            "t {}: arrived {arrived} served {served} backlog {}",
            step.t_secs,
            step.backlog
        );
    }
}

#[test]
fn only_ready_replicas_serve_and_the_autoscaler_sees_metrics_late() {
    let trace = simulate(&scenario(hpa()), 5);
    for step in &trace.steps {
        assert!(step.ready <= step.replicas);
        assert!(step.served <= f64::from(step.ready) * 20_000.0 * 1.1 + 1e-6);
    }
    // The ramp starts at 30 s; no sample taken after it can be seen
    // before 30 s + the shortest delay, so nothing scales before then.
    let first_scale = trace
        .steps
        .iter()
        .find(|s| s.replicas > 1)
        .map(|s| s.t_secs)
        .unwrap();
    assert!(first_scale >= 30 + 30, "scaled at {first_scale}");
}

#[test]
fn the_spike_rate_follows_its_shape() {
    let s = scenario(hpa()).spike;
    assert_eq!(s.rate_at(0), 1_000.0);
    assert_eq!(s.rate_at(60), 1_000.0 + 99_000.0 / 2.0);
    assert_eq!(s.rate_at(90), 100_000.0);
    assert_eq!(s.rate_at(389), 100_000.0);
    assert_eq!(s.rate_at(450), 1_000.0 + 99_000.0 / 2.0);
    assert_eq!(s.rate_at(s.end_secs()), 1_000.0);
}
