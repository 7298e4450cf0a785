//! The chaos run's consumer processes: one [`ChildSpec`] per slot
//! (`hotcount run` on the one subscription, its log, its store, its push
//! endpoint), and the slots started, the victim killed and restarted,
//! the exited restarted, the last ones retired.
//!
//! Invariant: a slot's process is always started from its one spec; a
//! process that exits without being killed here is counted in the
//! [`Tally`] with the tail of its log, then started again.

use hotcount::config::{Endpoints, StoreLocation};

use super::config::{ChaosConfig, CONSUMER, PREFIX, PROJECT, SUBSCRIPTION};
use super::tally::Tally;
use crate::consumer::{self, Child, ChildSpec};
use crate::run_error::RunError;
use crate::stage::{push_service_account, PUSH_AUDIENCE};

/// Consumer `index`: `hotcount run` on the one subscription, counting in
/// `store` (a PostgreSQL consumer reaches the database through the stage's
/// proxy), its stderr appended to `consumer-{index}.log`, its metrics
/// endpoint on only for the victim (consumer 0), so a kill can wait for
/// its commit counter.
pub(super) fn child_spec(
    config: &ChaosConfig,
    (endpoints, store): (&Endpoints, &StoreLocation),
    log_dir: &std::path::Path,
    index: usize,
    victim_metrics: std::net::SocketAddr,
) -> ChildSpec {
    let metrics = (index == 0).then_some(victim_metrics);
    let metrics_flag = metrics.map_or("off".to_string(), |m| m.to_string());
    let args = [
        "run",
        "--project",
        PROJECT,
        "--collection-prefix",
        PREFIX,
        "--subscription",
        SUBSCRIPTION,
        "--consumer",
        CONSUMER,
        "--metrics-addr",
        &metrics_flag,
    ];
    ChildSpec {
        bin: config.hotcount_bin.clone(),
        args: (args.iter().map(|f| f.to_string()))
            .chain(consumer::store_flag(store))
            .collect(),
        endpoints: endpoints.clone(),
        log: Some(log_dir.join(format!("consumer-{index}.log"))),
        metrics,
    }
}

/// The flags of a push consumer on `addr` checking the stage's tokens
/// against the keys at `jwks_url`.
pub(super) fn push_flags(addr: std::net::SocketAddr, jwks_url: &str) -> Vec<String> {
    [
        ("--delivery", "push".to_string()),
        ("--push-addr", addr.to_string()),
        ("--push-audience", PUSH_AUDIENCE.to_string()),
        ("--push-service-account", push_service_account(PROJECT)),
        ("--push-jwks-url", jwks_url.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect()
}

/// One consumer process slot.
struct Slot {
    index: usize,
    spec: ChildSpec,
    child: Option<Child>,
}

/// The consumer processes on the subscription; slot 0 is the victim.
pub(super) struct Consumers {
    slots: Vec<Slot>,
    /// The victim's metrics endpoint (its committed-batch counter).
    pub(super) victim_metrics: std::net::SocketAddr,
}

impl Consumers {
    /// Spawns one process per spec.
    pub(super) fn start(
        specs: Vec<ChildSpec>,
        victim_metrics: std::net::SocketAddr,
    ) -> Result<Self, RunError> {
        let mut slots = Vec::new();
        for (index, spec) in specs.into_iter().enumerate() {
            let child = Some(Child::spawn(&spec)?);
            slots.push(Slot { index, spec, child });
        }
        Ok(Self {
            slots,
            victim_metrics,
        })
    }

    /// Restarts every consumer that is not running; one that exited by
    /// itself (not killed here) is counted and reported with the tail of
    /// its log.
    pub(super) fn restart_exited(&mut self, tally: &Tally) {
        for slot in &mut self.slots {
            let status = match &mut slot.child {
                Some(child) => match child.exit_status() {
                    Some(status) => Some(status),
                    None => continue,
                },
                None => None,
            };
            if let Some(status) = status {
                let log = slot.spec.log.as_deref().unwrap_or(std::path::Path::new(""));
                let report = format!(
                    "consumer {} exited by itself ({status}); its log ends:\n{}",
                    slot.index,
                    consumer::log_tail(log, 20)
                );
                tracing::error!("{report}");
                tally.exited_unexpectedly(report);
            }
            slot.child = Child::spawn(&slot.spec).ok();
        }
    }

    /// Kills the victim with SIGKILL; true if it was running and is killed.
    pub(super) async fn kill_victim(&mut self) -> bool {
        match self.slots[0].child.take() {
            Some(child) => child.kill().await.is_ok(),
            None => false,
        }
    }

    /// Starts the victim again (a failure is logged; the next round retries).
    pub(super) fn restart_victim(&mut self) {
        let victim = &mut self.slots[0];
        match Child::spawn(&victim.spec) {
            Ok(child) => victim.child = Some(child),
            Err(e) => tracing::warn!(error = %e, "restarting the victim failed; retrying"),
        }
    }

    /// Starts every consumer that has no process.
    pub(super) fn restart_missing(&mut self) -> Result<(), RunError> {
        for slot in &mut self.slots {
            if slot.child.is_none() {
                slot.child = Some(Child::spawn(&slot.spec)?);
            }
        }
        Ok(())
    }

    /// SIGKILLs the last `n` consumers (never the victim) and forgets them:
    /// they are not started again.
    pub(super) async fn retire(&mut self, n: usize) {
        let keep = self.slots.len().saturating_sub(n).max(1);
        for mut slot in self.slots.split_off(keep) {
            if let Some(child) = slot.child.take() {
                let _ = child.kill().await;
            }
            tracing::info!(consumer = slot.index, "scaled down: killed, not restarted");
        }
    }

    /// Kills every consumer (SIGKILL).
    pub(super) async fn kill_all(&mut self) {
        for slot in &mut self.slots {
            if let Some(child) = slot.child.take() {
                let _ = child.kill().await;
            }
        }
    }
}
