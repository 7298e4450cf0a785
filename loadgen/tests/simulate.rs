//! `hotcount-loadgen simulate`: the scaling model's promises (a spike one
//! replica absorbs never scales; a bigger one scales and drains; the
//! backlog age is under the target after the stated time; same seed, same
//! output) and the shipped manifests carrying the settings it picks.

use clap::Parser;
use hotcount_loadgen::simulate::model::{self, Autoscaler};
use hotcount_loadgen::simulate::{self, Candidate, Profile, SimulateConfig};

/// The settings `hotcount-loadgen simulate` runs with by default.
fn defaults() -> SimulateConfig {
    SimulateConfig::DEFAULT
}

fn shipped_run(a: &SimulateConfig, profile: Profile, seed: u64) -> model::Trace {
    let scenario = a.scenario(
        "shipped".into(),
        a.autoscaler(Candidate::SHIPPED, a.max_replicas),
        1,
        profile,
    );
    model::simulate(&scenario, seed)
}

#[test]
fn a_spike_below_one_replicas_capacity_never_scales() {
    // One replica takes 40,000 events/s; the spike peaks at 36,000.
    let a = SimulateConfig {
        peak_events_per_sec: 36_000.0,
        ..defaults()
    };
    for seed in 0..5 {
        let trace = shipped_run(&a, Profile::Spike, seed);
        for step in &trace.steps {
            assert_eq!(
                step.replicas, a.min_replicas,
                "seed {seed} t {}",
                step.t_secs
            );
            assert!(step.oldest_age_secs <= 1, "seed {seed} t {}", step.t_secs);
        }
        assert_eq!(trace.summary.final_backlog, 0.0);
    }
}

#[test]
fn a_spike_above_one_replicas_capacity_scales_then_drains_and_scales_back() {
    let a = defaults();
    let trace = shipped_run(&a, Profile::Spike, a.seed);
    let s = &trace.summary;
    let needed = (a.peak_events_per_sec / a.replica_events_per_sec).ceil() as u32;
    assert!(s.peak_replicas >= needed, "{s:?}");
    assert!(s.max_backlog > 0.0);
    assert_eq!(s.final_backlog, 0.0, "{s:?}");
    assert_eq!(s.final_replicas, a.min_replicas, "{s:?}");
    // While the spike is held, the replicas pulling carry it.
    let held = a.spike_start_secs + a.ramp_secs + 400;
    let step = &trace.steps[held as usize];
    assert_eq!(step.backlog, 0.0, "{step:?}");
    assert!(f64::from(step.ready) * a.replica_events_per_sec > a.peak_events_per_sec);
}

#[test]
fn backlog_age_stays_under_the_target_after_the_stated_time() {
    let a = defaults();
    for profile in Profile::ALL {
        for seed in a.seed..a.seed + u64::from(a.seeds) {
            let trace = shipped_run(&a, profile, seed);
            let from = a.spike_start_secs + a.settle_within_secs;
            for step in trace.steps.iter().filter(|s| s.t_secs >= from) {
                assert!(
                    step.oldest_age_secs <= a.age_target_secs,
                    "{profile:?} seed {seed}: {step:?}"
                );
            }
            assert!(
                trace.summary.max_age_secs < a.alert_age_secs,
                "{profile:?} seed {seed}: {:?}",
                trace.summary
            );
            assert!(a.meets_target(&trace), "{profile:?} seed {seed}");
        }
    }
}

#[test]
fn without_an_autoscaler_the_backlog_of_a_big_spike_never_drains() {
    let a = defaults();
    let scenario = a.scenario(
        "fixed".into(),
        a.autoscaler(Candidate::Fixed, a.max_replicas),
        1,
        Profile::Spike,
    );
    assert!(matches!(scenario.autoscaler, Autoscaler::Fixed { .. }));
    let trace = model::simulate(&scenario, a.seed);
    assert!(trace.summary.final_backlog > 1e6, "{:?}", trace.summary);
    assert!(!a.meets_target(&trace));
}

#[test]
fn the_same_seed_gives_the_same_files_and_another_seed_other_noise() {
    let dir = std::env::temp_dir().join(format!("hotcount-simulate-{}", std::process::id()));
    let run = |seed: u64, sub: &str| {
        let out = dir.join(sub);
        let a = SimulateConfig {
            seed,
            seeds: 2,
            ..defaults()
        };
        simulate::write_report(&a, &out).unwrap();
        let read = |name: &str| std::fs::read(out.join(name)).unwrap();
        (
            read("simulation.md"),
            read("scaling.png"),
            read("scaling-10x.png"),
        )
    };
    let first = run(7, "a");
    let again = run(7, "b");
    let other = run(8, "c");
    assert!(first == again, "same seed, different files");
    assert_ne!(first.0, other.0);
    assert_ne!(first.1, other.1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_simulation_picks_the_shipped_hpa() {
    let a = defaults();
    let outcome = simulate::evaluate(&a).unwrap();
    let picked = outcome.picked.expect("a candidate meets the target");
    assert_eq!(outcome.candidates[picked].candidate, Candidate::SHIPPED);
    // Neither metric alone meets it.
    for result in &outcome.candidates {
        if let Candidate::Hpa {
            backlog_secs,
            publish_rate,
        } = result.candidate
        {
            if backlog_secs.is_none() || !publish_rate {
                assert!(!result.meets, "{}", result.name);
            }
        }
    }
}

fn deploy_file(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

#[test]
fn the_manifests_ship_the_picked_settings() {
    let a = defaults();
    let backlog = a.replica_events_per_sec * f64::from(simulate::shipped::BACKLOG_SECS);
    let rate = a.replica_events_per_sec * simulate::shipped::PUBLISH_RATE_UTILIZATION;
    let hpa = deploy_file("deploy/gke/hpa.yaml");
    for needle in [
        format!("minReplicas: {}", simulate::shipped::MIN_REPLICAS),
        format!("maxReplicas: {}", simulate::shipped::MAX_REPLICAS),
        format!("averageValue: \"{backlog:.0}\""),
        format!("averageValue: \"{rate:.0}\""),
        format!(
            "stabilizationWindowSeconds: {}",
            simulate::shipped::SCALE_DOWN_WINDOW_SECS
        ),
    ] {
        assert!(
            hpa.contains(&needle),
            "deploy/gke/hpa.yaml lacks `{needle}`"
        );
    }
    let keda = deploy_file("deploy/gke/keda/scaledobject.yaml");
    for needle in [
        format!("minReplicaCount: {}", simulate::shipped::MIN_REPLICAS),
        format!("maxReplicaCount: {}", simulate::shipped::MAX_REPLICAS),
        format!("value: \"{backlog:.0}\""),
        // The KEDA trigger reads the publish count per 60 s alignment period.
        format!("targetValue: \"{:.0}\"", rate * 60.0),
    ] {
        assert!(
            keda.contains(&needle),
            "deploy/gke/keda/scaledobject.yaml lacks `{needle}`"
        );
    }
}

#[test]
fn the_replica_defaults_are_hotcount_runs() {
    #[derive(Parser)]
    struct RunCli {
        #[command(flatten)]
        run: hotcount::config::RunArgs,
    }
    let run = RunCli::parse_from(["run"]).run;
    let a = defaults();
    assert_eq!(a.streams as usize, run.source.streams);
    assert_eq!(a.counter_shards, run.store_writes.counter_shards);
    assert_eq!(
        a.counter_shard_target_writes_per_sec,
        run.store_writes.counter_shard_target_writes_per_sec
    );
    // The largest --counter-shards hotcount accepts is the model's.
    let max = simulate::limits::HOTCOUNT_MAX_COUNTER_SHARDS.to_string();
    let over = (simulate::limits::HOTCOUNT_MAX_COUNTER_SHARDS + 1).to_string();
    assert!(RunCli::parse_from(["run", "--counter-shards", &max])
        .run
        .validate()
        .is_ok());
    assert!(RunCli::parse_from(["run", "--counter-shards", &over])
        .run
        .validate()
        .is_err());
}
