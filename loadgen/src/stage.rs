//! The world a run stands on: both emulators in this process, an optional
//! round trip added to every Firestore RPC, the topic, the consumer
//! subscription and the dead-letter pair made by `hotcount setup`'s own code,
//! the subscription watched for acks and backlog, and teardown. With a
//! PostgreSQL store: the database migrated and emptied for this run
//! ([`crate::postgres::prepare`]) and a proxy in front of it that the
//! consumers go through ([`Stage::consumer_store`]), which counts round
//! trips and can cut a connection at COMMIT.
//!
//! Invariant: consumers, publisher and verifier reach the emulators only
//! over [`Stage::endpoints`], as they would reach Google; the run reads the
//! emulators' own counters and faults through [`Stage::emulators`], never
//! through the service under test; reading back goes to the database
//! directly, never through the proxy. [`prepare`] is the same setup on any
//! endpoints (emulators started elsewhere, or Google).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotcount::config::{Config, Delivery, Endpoints, PushAuthMode, RunArgs, StoreLocation};
use hotcount::ops::setup::{self, SetupArgs, SetupPush};
use hotcount_emulators::pubsub::SubscriptionStats;
use hotcount_emulators::{Emulators, EmulatorsConfig, FaultSpec};
use hotcount_pgtemp::Proxy;

use crate::run_error::RunError;

/// The topic every in-process run publishes to.
pub const TOPIC_ID: &str = "likes";

/// The audience of the tokens a stage's push subscription sends, which its
/// push consumers require.
pub const PUSH_AUDIENCE: &str = "hotcount-loadgen-push";

/// The service account a stage's push subscription signs its tokens as.
pub fn push_service_account(project: &str) -> String {
    format!("pusher@{project}.iam.gserviceaccount.com")
}

/// `run_args` as a push consumer of a stage in `project`: listening on
/// `addr`, checking each request's token (audience [`PUSH_AUDIENCE`],
/// [`push_service_account`]) against the keys at `jwks_url` (the
/// emulator's: [`Stage::push_jwks_url`]).
pub fn push_run_args(run_args: &RunArgs, addr: SocketAddr, jwks_url: &str) -> RunArgs {
    let mut run_args = run_args.clone();
    run_args.push.delivery = Delivery::Push;
    run_args.push.push_addr = addr.to_string();
    run_args.push.push_auth = PushAuthMode::Google;
    run_args.push.push_audience = PUSH_AUDIENCE.into();
    run_args.push.push_service_account = push_service_account(&run_args.target.project);
    run_args.push.push_jwks_url = jwks_url.into();
    run_args
}

/// What to stand up.
#[derive(Clone, Debug)]
pub struct StageSpec {
    /// Topic, subscriptions and their retry and dead-letter policy.
    pub setup: SetupArgs,
    /// Full name of the subscription the consumers read, watched for acks
    /// and backlog.
    pub subscription: String,
    /// Added latency per Firestore RPC, in milliseconds (0 = none).
    pub store_rtt_ms: u64,
    /// Where the consumers count: Firestore (the emulator) or a PostgreSQL
    /// database, emptied for the run.
    pub store: StoreLocation,
}

impl StageSpec {
    /// The stage of `demo` and `bench`: [`TOPIC_ID`] in `project` with the
    /// subscription of `config` (its last path segment), acks within 60 s,
    /// retries backing off 1-60 s, dead-lettered after 20 deliveries.
    pub fn for_consumer(config: &Config, project: &str, store_rtt_ms: u64) -> Self {
        let subscription_id = config
            .subscription
            .rsplit('/')
            .next()
            .unwrap_or("likes-hotcount")
            .to_string();
        let setup = SetupArgs {
            project: project.to_string(),
            topic: TOPIC_ID.into(),
            subscription: subscription_id,
            dead_letter_topic: "likes-dead-letter".into(),
            dead_letter_subscription: "likes-dead-letter-inspect".into(),
            ack_deadline_secs: 60,
            min_retry_backoff_secs: 1,
            max_retry_backoff_secs: 60,
            max_delivery_attempts: 20,
            exactly_once: false,
            topic_retention_days: 7,
            iam: Default::default(),
            push: Default::default(),
        };
        Self {
            setup,
            subscription: config.subscription.clone(),
            store_rtt_ms,
            store: config.target.store.clone(),
        }
    }
}

/// Migrates and empties the database of `url`, and starts the proxy in front of it.
async fn pg_stage(url: &str) -> Result<PgStage, RunError> {
    crate::postgres::prepare(url).await?;
    let proxy = Proxy::try_start(crate::postgres::server_addr(url)?)
        .await
        .map_err(|e| RunError::Start(format!("postgres proxy: {e}")))?;
    let consumer_url = crate::postgres::via(url, proxy.addr())?;
    Ok(PgStage {
        url: url.to_string(),
        proxy: Arc::new(proxy),
        consumer_url,
    })
}

/// Makes the topic, subscription and dead-letter pair of `setup` on
/// `endpoints` (in-process emulators or not).
pub async fn prepare(endpoints: &Endpoints, setup: &SetupArgs) -> Result<(), RunError> {
    setup::setup(endpoints, setup)
        .await
        .map_err(|e| RunError::Start(format!("setup: {e}")))?;
    Ok(())
}

/// A PostgreSQL store's part of the stage.
pub struct PgStage {
    /// The database, as given (for reading back).
    pub url: String,
    /// The proxy the consumers go through (shared with the chaos tasks
    /// that cut connections).
    pub proxy: Arc<Proxy>,
    /// The database through the proxy (for the consumers).
    pub consumer_url: String,
}

/// Emulators started, RTT injected, setup done (and a PostgreSQL store
/// migrated, emptied and proxied).
pub struct Stage {
    emulators: Arc<Emulators>,
    endpoints: Endpoints,
    project: String,
    topic: String,
    subscription: String,
    postgres: Option<PgStage>,
}

impl Stage {
    /// Starts both emulators in-process, adds the store RTT to every
    /// Firestore RPC and runs the setup; the error says which step failed.
    pub async fn start(spec: &StageSpec) -> Result<Self, RunError> {
        let emulators = Emulators::start(EmulatorsConfig::default())
            .await
            .map_err(|e| RunError::Start(format!("emulators: {e}")))?;
        if spec.store_rtt_ms > 0 {
            let rtt = FaultSpec::latency("*", Duration::from_millis(spec.store_rtt_ms));
            emulators
                .firestore_faults()
                .add(rtt)
                .map_err(RunError::Start)?;
        }
        let endpoints = Endpoints {
            pubsub_emulator_host: Some(emulators.pubsub_addr().to_string()),
            firestore_emulator_host: Some(emulators.firestore_addr().to_string()),
        };
        prepare(&endpoints, &spec.setup).await?;
        let postgres = match &spec.store {
            StoreLocation::Firestore => None,
            StoreLocation::Postgres { url } => Some(pg_stage(url).await?),
        };
        Ok(Self {
            emulators: Arc::new(emulators),
            endpoints,
            project: spec.setup.project.clone(),
            topic: format!(
                "projects/{}/topics/{}",
                spec.setup.project, spec.setup.topic
            ),
            subscription: spec.subscription.clone(),
            postgres,
        })
    }

    /// The PostgreSQL part, when the store is PostgreSQL.
    pub fn postgres(&self) -> Option<&PgStage> {
        self.postgres.as_ref()
    }

    /// The store as the consumers must reach it: Firestore, or the
    /// database through the stage's proxy.
    pub fn consumer_store(&self) -> StoreLocation {
        match &self.postgres {
            None => StoreLocation::Firestore,
            Some(pg) => StoreLocation::Postgres {
                url: pg.consumer_url.clone(),
            },
        }
    }

    /// `run_args` and `config` with the store as the consumers must reach it.
    pub fn consumer_settings(&self, run_args: &RunArgs, config: &Config) -> (RunArgs, Config) {
        let (mut run_args, mut config) = (run_args.clone(), config.clone());
        run_args.target.store = self.consumer_store();
        config.target.store = self.consumer_store();
        (run_args, config)
    }

    /// Raises the data format of the store `target` names (reached as the
    /// consumers reach it) to `format`, as `hotcount setup --data-format`
    /// does after an upgrade; never lowers it.
    pub async fn raise_data_format(
        &self,
        target: &hotcount::config::Target,
        format: u32,
    ) -> Result<(), RunError> {
        let target = hotcount::config::Target {
            store: self.consumer_store(),
            ..target.clone()
        };
        let db = hotcount::connect::store_db(&self.endpoints, &target, 1)
            .await
            .map_err(|e| RunError::Start(format!("the data format: {e}")))?;
        db.raise_data_format(format)
            .await
            .map_err(|e| RunError::Start(format!("the data format: {e}")))?;
        Ok(())
    }

    /// The JWKS of the keys the emulator signs push tokens with.
    pub fn push_jwks_url(&self) -> String {
        self.emulators.push_jwks_url()
    }

    /// Makes the watched subscription push to `endpoint` from now on
    /// (ModifyPushConfig; pull until then), each request with a token
    /// signed as [`push_service_account`] for [`PUSH_AUDIENCE`], the
    /// wrapped body.
    pub async fn push_to(&self, endpoint: &str) -> Result<(), RunError> {
        let push = SetupPush {
            push_endpoint: Some(endpoint.to_string()),
            push_service_account: Some(push_service_account(&self.project)),
            push_audience: Some(PUSH_AUDIENCE.into()),
            push_no_wrapper: false,
        };
        let config = push
            .config(false)
            .map_err(|e| RunError::Start(format!("push config: {e}")))?;
        let admin = hotcount::connect::subscription_admin(&self.endpoints)
            .await
            .map_err(|e| RunError::Start(e.to_string()))?;
        admin
            .modify_push_config()
            .set_subscription(self.subscription.clone())
            .set_or_clear_push_config(config)
            .send()
            .await
            .map_err(|e| RunError::Start(format!("switching the subscription to push: {e}")))?;
        Ok(())
    }

    /// The emulators: their counters, faults and clock.
    pub fn emulators(&self) -> &Arc<Emulators> {
        &self.emulators
    }

    /// Where clients reach the emulators.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// Full name of the topic the run publishes to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Full name of the watched subscription.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// The watched subscription's counters (zeros when it is unknown).
    pub fn subscription_stats(&self) -> SubscriptionStats {
        self.emulators
            .pubsub()
            .stats(&self.subscription)
            .unwrap_or_default()
    }

    /// Messages acked on the watched subscription (0 when it is unknown).
    pub fn acked(&self) -> u64 {
        self.emulators
            .pubsub()
            .acks(&self.subscription)
            .unwrap_or(0)
    }

    /// Messages not yet acked on the watched subscription (`u64::MAX`
    /// when it is unknown).
    pub fn unacked(&self) -> u64 {
        self.emulators
            .pubsub()
            .stats(&self.subscription)
            .map_or(u64::MAX, |s| s.unacked)
    }

    /// Waits until `total` messages are acked, or `deadline`; true if all were.
    pub async fn wait_for_acks(&self, total: u64, deadline: Instant) -> bool {
        loop {
            if self.acked() >= total {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until nothing is unacked, at most `timeout`; true if so.
    pub async fn wait_for_drain(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.unacked() == 0 {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the emulators (when no task holds them any more; otherwise
    /// they stop when the last holder lets go).
    pub async fn shutdown(self) {
        if let Ok(emulators) = Arc::try_unwrap(self.emulators) {
            emulators.shutdown().await;
        }
    }
}
