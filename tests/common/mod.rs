//! Test harness: in-process emulators, `hotcount setup`, a publisher, and
//! the service run as a task, on either store (Firestore in the emulator,
//! or a throwaway PostgreSQL server: [`Backend`]); plus an independent
//! model of expected counts.
#![allow(dead_code)]

#[path = "../support/postgres.rs"]
pub mod pg;

#[path = "../support/oidc.rs"]
pub mod oidc;

pub mod replica;

/// The push front, the load generator's own (one copy for both).
#[path = "../../loadgen/src/front.rs"]
#[allow(dead_code)]
pub mod push;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;
use hotcount::config::{Endpoints, RunArgs, Target};
use hotcount::ops::setup::{self, SetupArgs};
use hotcount::service;
use hotcount::store::firestore::FirestoreDb;
use hotcount::store::postgres::{PgDb, PgDbConfig};
use hotcount::store::selected::SelectedDb;
use hotcount::telemetry::Stats;
use hotcount_emulators::{Emulators, EmulatorsConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub const PROJECT: &str = "hotcount-test";
pub const TOPIC: &str = "likes";
pub const SUBSCRIPTION: &str = "likes-hotcount";

/// One like event as the tests see it (built without the service's code).
#[derive(Clone, Debug)]
pub struct Ev {
    pub id: String,
    pub added: bool,
    pub post: String,
    pub user: String,
    pub seq: i64,
}

impl Ev {
    pub fn like(id: &str, post: &str, user: &str, seq: i64) -> Self {
        Self {
            id: id.into(),
            added: true,
            post: post.into(),
            user: user.into(),
            seq,
        }
    }

    pub fn unlike(id: &str, post: &str, user: &str, seq: i64) -> Self {
        Self {
            id: id.into(),
            added: false,
            post: post.into(),
            user: user.into(),
            seq,
        }
    }

    pub fn json(&self) -> String {
        serde_json::json!({
            "version": 1,
            "eventId": self.id,
            "type": if self.added { "like.added" } else { "like.removed" },
            "postId": self.post,
            "userId": self.user,
            "occurredAt": "2026-11-30T12:00:00Z",
            "seq": self.seq,
        })
        .to_string()
    }
}

/// Expected counts: per (post, user) the newest event by seq (then id) decides.
pub fn expected(events: &[Ev]) -> BTreeMap<String, i64> {
    let mut newest: BTreeMap<(String, String), (i64, String, bool)> = BTreeMap::new();
    for e in events {
        let key = (e.post.clone(), e.user.clone());
        let candidate = (e.seq, e.id.clone(), e.added);
        match newest.get(&key) {
            Some(current) if (current.0, &current.1) >= (candidate.0, &candidate.1) => {}
            _ => {
                newest.insert(key, candidate);
            }
        }
    }
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for ((post, _), (_, _, liked)) in newest {
        *counts.entry(post).or_default() += i64::from(liked);
    }
    counts
}

#[derive(Parser)]
struct RunCli {
    #[command(flatten)]
    run: RunArgs,
}

/// The store a harness's consumers write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Firestore, in the emulator.
    Firestore,
    /// A throwaway PostgreSQL server ([`pg::PgCluster`]), migrated.
    Postgres,
}

/// How the harness's consumers get their messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// StreamingPull.
    Pull,
    /// Push: `--delivery push` consumers behind a [`push::PushFront`],
    /// verifying tokens signed by the test key ([`oidc`]).
    Push,
}

/// Runs a scenario `async fn name(backend: Backend, delivery: Delivery)`
/// once per store and delivery, as the tests `name::firestore`,
/// `name::postgres`, `name::firestore_push` and `name::postgres_push`.
#[macro_export]
macro_rules! on_each_store_and_delivery {
    ($($scenario:ident),+ $(,)?) => {$(
        mod $scenario {
            use $crate::common::{Backend, Delivery};

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn firestore() {
                super::$scenario(Backend::Firestore, Delivery::Pull).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$scenario(Backend::Postgres, Delivery::Pull).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn firestore_push() {
                super::$scenario(Backend::Firestore, Delivery::Push).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres_push() {
                super::$scenario(Backend::Postgres, Delivery::Push).await;
            }
        }
    )+};
}

/// Runs a scenario `async fn name(backend: Backend)` once per store, as
/// the tests `name::firestore` and `name::postgres`.
#[macro_export]
macro_rules! on_each_store {
    ($($scenario:ident),+ $(,)?) => {$(
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn firestore() {
                super::$scenario($crate::common::Backend::Firestore).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$scenario($crate::common::Backend::Postgres).await;
            }
        }
    )+};
}

/// Emulators with the topic and subscription set up, and a publisher.
pub struct Harness {
    pub emulators: Emulators,
    pub endpoints: Endpoints,
    pub publisher: Publisher,
    /// The Firestore database (the service writes it unless the backend
    /// is PostgreSQL), for the tests' reads.
    pub db: FirestoreDb,
    /// The database the service writes, whichever the backend.
    pub store: SelectedDb,
    /// With [`Backend::Postgres`]: the server (stopped on drop) and the
    /// database's URL, which `run_args` passes as `--store`.
    pub postgres: Option<(pg::PgCluster, String)>,
    /// With [`Delivery::Push`]: the front the consumers stand behind, the
    /// keys their tokens are checked against, and the pusher.
    pub push: Option<PushRig>,
}

/// What push consumers of a harness need around them.
pub struct PushRig {
    /// The one address the emulator pushes to, spread over the consumers.
    pub front: push::PushFront,
    /// The signing keys' JWKS (`--push-jwks-url`): the emulator's key, with
    /// which it signs each push request's token, and the tests' own.
    pub jwks: oidc::JwksServer,
    /// Signs tokens with claims of the test's choosing (a key the
    /// consumers trust, for tokens that are wrong in one claim only).
    pub signer: oidc::Signer,
}

/// Subscription settings of a harness.
pub struct SubscriptionOptions {
    pub exactly_once: bool,
    pub ack_deadline_secs: i32,
    pub max_delivery_attempts: i32,
    /// A push subscription (`hotcount setup --push-endpoint ...`), or pull.
    pub push: setup::SetupPush,
}

impl Default for SubscriptionOptions {
    fn default() -> Self {
        Self {
            exactly_once: false,
            ack_deadline_secs: 10,
            max_delivery_attempts: 100,
            push: setup::SetupPush::default(),
        }
    }
}

impl Harness {
    pub async fn start() -> Self {
        Self::start_with(SubscriptionOptions::default()).await
    }

    pub async fn start_with(options: SubscriptionOptions) -> Self {
        Self::start_with_emulators(options, EmulatorsConfig::default()).await
    }

    pub async fn start_with_emulators(
        options: SubscriptionOptions,
        config: EmulatorsConfig,
    ) -> Self {
        Self::start_on_with(Backend::Firestore, options, config).await
    }

    /// A harness whose consumers write `backend` and get their messages
    /// by `delivery`: with push, the subscription (made by `hotcount
    /// setup --push-endpoint ...`) pushes to a [`push::PushFront`] the
    /// consumers stand behind, with OIDC tokens signed by the emulator.
    pub async fn start_for(backend: Backend, delivery: Delivery) -> Self {
        Self::start_for_with(backend, delivery, false).await
    }

    /// [`Harness::start_for`], the push subscription unwrapped
    /// (`--push-no-wrapper`) when `no_wrapper`.
    pub async fn start_for_with(backend: Backend, delivery: Delivery, no_wrapper: bool) -> Self {
        if delivery == Delivery::Pull {
            return Self::start_on(backend).await;
        }
        let front = push::PushFront::start().await;
        let options = SubscriptionOptions {
            push: setup::SetupPush {
                push_endpoint: Some(front.url()),
                push_service_account: Some(oidc::SERVICE_ACCOUNT.into()),
                push_audience: Some(oidc::AUDIENCE.into()),
                push_no_wrapper: no_wrapper,
            },
            ..SubscriptionOptions::default()
        };
        let mut h = Self::start_on_with(backend, options, EmulatorsConfig::default()).await;
        // The consumers trust the emulator's key and the tests' own.
        let signer = oidc::Signer::google("test-key-1");
        let emulator_keys: serde_json::Value = reqwest::get(h.emulators.push_jwks_url())
            .await
            .expect("the emulator serves its JWKS")
            .json()
            .await
            .expect("a JWKS");
        let mut keys = emulator_keys["keys"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        keys.push(signer.jwk());
        let jwks = oidc::JwksServer::start(serde_json::json!({ "keys": keys })).await;
        h.push = Some(PushRig {
            front,
            jwks,
            signer,
        });
        h
    }

    /// A harness whose consumers write `backend`.
    pub async fn start_on(backend: Backend) -> Self {
        Self::start_on_with(
            backend,
            SubscriptionOptions::default(),
            EmulatorsConfig::default(),
        )
        .await
    }

    pub async fn start_on_with(
        backend: Backend,
        options: SubscriptionOptions,
        config: EmulatorsConfig,
    ) -> Self {
        Self::start_on_schema(backend, options, config, true).await
    }

    /// A harness whose consumers write `backend`, with PostgreSQL's
    /// database left empty: an older build's `setup` makes its schema.
    pub async fn start_on_unmigrated(backend: Backend) -> Self {
        Self::start_on_schema(
            backend,
            SubscriptionOptions::default(),
            EmulatorsConfig::default(),
            false,
        )
        .await
    }

    async fn start_on_schema(
        backend: Backend,
        options: SubscriptionOptions,
        config: EmulatorsConfig,
        migrate: bool,
    ) -> Self {
        let emulators = Emulators::start(config).await.expect("emulators start");
        let endpoints = Endpoints {
            pubsub_emulator_host: Some(emulators.pubsub_addr().to_string()),
            firestore_emulator_host: Some(emulators.firestore_addr().to_string()),
        };
        let args = SetupArgs {
            project: PROJECT.into(),
            topic: TOPIC.into(),
            subscription: SUBSCRIPTION.into(),
            dead_letter_topic: "likes-dead-letter".into(),
            dead_letter_subscription: "likes-dead-letter-inspect".into(),
            ack_deadline_secs: options.ack_deadline_secs,
            min_retry_backoff_secs: 0,
            max_retry_backoff_secs: 1,
            max_delivery_attempts: options.max_delivery_attempts,
            exactly_once: options.exactly_once,
            topic_retention_days: 7,
            iam: Default::default(),
            push: options.push,
        };
        setup::setup(&endpoints, &args).await.expect("setup");
        let topic = format!("projects/{PROJECT}/topics/{TOPIC}");
        let publisher = hotcount::connect::publisher(&endpoints, &topic)
            .await
            .expect("publisher");
        let target = Target {
            store: Default::default(),
            project: PROJECT.into(),
            database: "(default)".into(),
            collection_prefix: String::new(),
        };
        let db = hotcount::connect::firestore_db(&endpoints, &target)
            .await
            .expect("firestore");
        let (store, postgres) = match backend {
            Backend::Firestore => (SelectedDb::Firestore(db.clone()), None),
            Backend::Postgres if migrate => {
                let (cluster, url, pg) = migrated_postgres().await;
                (SelectedDb::Postgres(pg), Some((cluster, url)))
            }
            Backend::Postgres => {
                let (cluster, url) = unmigrated_postgres().await;
                let pg = PgDb::new(&PgDbConfig::new(url.clone())).expect("valid settings");
                (SelectedDb::Postgres(pg), Some((cluster, url)))
            }
        };
        Self {
            emulators,
            endpoints,
            publisher,
            db,
            store,
            postgres,
            push: None,
        }
    }

    /// The `hotcount` binary pointed at the emulators and the project,
    /// its metrics endpoint on a free port, logging warnings only.
    pub fn command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hotcount"));
        command
            .env(
                "PUBSUB_EMULATOR_HOST",
                self.emulators.pubsub_addr().to_string(),
            )
            .env(
                "FIRESTORE_EMULATOR_HOST",
                self.emulators.firestore_addr().to_string(),
            )
            .env("HOTCOUNT_PROJECT", PROJECT)
            .env("HOTCOUNT_METRICS_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn");
        command
    }

    /// Raises the store's data format to the one erasure tombstones need,
    /// as `hotcount setup --data-format 2` does, for the tests that erase
    /// with `--user-hash-key`.
    pub async fn allow_tombstones(&self) {
        let format = hotcount::store::format::DATA_FORMAT_TOMBSTONES;
        let after = self.store.raise_data_format(format).await;
        assert_eq!(after.expect("raise the data format"), format);
    }

    /// The `--store` URL with [`Backend::Postgres`].
    pub fn postgres_url(&self) -> Option<&str> {
        self.postgres.as_ref().map(|(_, url)| url.as_str())
    }

    /// Default run settings for tests, with `extra` flags appended.
    pub fn run_args(&self, consumer: &str, extra: &[&str]) -> RunArgs {
        let mut flags: Vec<(&str, &str)> = vec![
            ("--store", self.postgres_url().unwrap_or("firestore")),
            ("--project", PROJECT),
            ("--subscription", SUBSCRIPTION),
            ("--consumer", consumer),
            ("--shards", "4"),
            ("--flush-interval-ms", "20"),
            ("--streams", "2"),
            ("--lease-extension-secs", "10"),
            ("--commit-backoff-initial-ms", "5"),
            ("--commit-backoff-max-ms", "50"),
            ("--metrics-addr", "127.0.0.1:0"),
        ];
        let jwks_url;
        if let Some(push) = &self.push {
            jwks_url = push.jwks.url();
            flags.extend([
                ("--delivery", "push"),
                ("--push-addr", "127.0.0.1:0"),
                ("--push-audience", oidc::AUDIENCE),
                ("--push-service-account", oidc::SERVICE_ACCOUNT),
                ("--push-jwks-url", jwks_url.as_str()),
            ]);
        }
        for pair in extra.chunks(2) {
            let (flag, value) = (pair[0], pair.get(1).copied().unwrap_or(""));
            match flags.iter_mut().find(|(f, _)| *f == flag) {
                Some(slot) => slot.1 = value,
                None => flags.push((flag, value)),
            }
        }
        let mut argv = vec!["hotcount"];
        for (flag, value) in flags {
            argv.push(flag);
            argv.push(value);
        }
        RunCli::parse_from(argv).run
    }

    /// Starts a consumer as a task.
    pub fn spawn(&self, args: RunArgs) -> Running {
        let config = args.validate().expect("valid test config");
        let (stop, rx) = watch::channel(false);
        let stats = Arc::new(Stats::default());
        let endpoints = self.endpoints.clone();
        let task_stats = stats.clone();
        let task = tokio::spawn(async move {
            service::run(&endpoints, &config, rx, task_stats)
                .await
                .expect("service runs");
        });
        let front = self.push.as_ref().map(|p| p.front.clone());
        if let Some(front) = &front {
            // Behind the front once its endpoint is bound.
            let (front, stats) = (front.clone(), stats.clone());
            tokio::spawn(async move {
                loop {
                    if let Some(addr) = stats.push_addr.get() {
                        front.add(*addr);
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
        Running {
            stop,
            task,
            stats,
            front,
        }
    }

    pub async fn publish_raw(&self, payloads: &[Vec<u8>]) -> Vec<String> {
        let futures: Vec<_> = payloads
            .iter()
            .map(|p| self.publisher.publish(Message::new().set_data(p.clone())))
            .collect();
        let mut ids = Vec::new();
        for f in futures {
            ids.push(f.await.expect("publish"));
        }
        ids
    }

    pub async fn publish(&self, events: &[Ev]) -> Vec<String> {
        let payloads: Vec<Vec<u8>> = events.iter().map(|e| e.json().into_bytes()).collect();
        self.publish_raw(&payloads).await
    }

    /// The emulator's counters for the consumer subscription.
    pub fn subscription_stats(&self) -> hotcount_emulators::pubsub::SubscriptionStats {
        let name = format!("projects/{PROJECT}/subscriptions/{SUBSCRIPTION}");
        self.emulators.pubsub().stats(&name).unwrap_or_default()
    }

    /// Waits (bounded) until the subscription has nothing unacked, as the
    /// emulator counts it (redeliveries included); true if it came to that.
    pub async fn wait_until_all_acked(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.subscription_stats().unacked > 0 {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    pub async fn count(&self, post: &str) -> i64 {
        self.store.count(post).await.expect("count")
    }

    pub async fn counts(&self, posts: impl IntoIterator<Item = &String>) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for p in posts {
            out.insert(p.clone(), self.count(p).await);
        }
        out
    }

    /// Waits (bounded) until every post in `expected` has its count.
    pub async fn wait_for_counts(
        &self,
        expected: &BTreeMap<String, i64>,
        timeout: Duration,
    ) -> BTreeMap<String, i64> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let actual = self.counts(expected.keys()).await;
            if &actual == expected || tokio::time::Instant::now() > deadline {
                return actual;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A consumer running as a task.
pub struct Running {
    pub stop: watch::Sender<bool>,
    pub task: JoinHandle<()>,
    pub stats: Arc<Stats>,
    /// The push front it stands behind (push delivery).
    pub front: Option<push::PushFront>,
}

impl Running {
    /// Waits (bounded) until `acked` messages were acked by this consumer.
    pub async fn wait_for_acks(&self, acked: u64, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.stats.acks.get() < acked {
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Takes it out of the push front: no new request reaches it.
    fn leave_front(&self) {
        if let (Some(front), Some(addr)) = (&self.front, self.stats.push_addr.get()) {
            front.remove(*addr);
        }
    }

    /// Graceful stop: drains and returns.
    pub async fn stop(self) -> Arc<Stats> {
        self.leave_front();
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("service stops within 30 s")
            .expect("service task");
        self.stats
    }

    /// Simulates a crash: the task is aborted, nothing is drained.
    pub async fn kill(self) {
        self.leave_front();
        self.task.abort();
        let _ = self.task.await;
    }
}

/// A fresh PostgreSQL server with a database `hotcount` migrated as
/// `hotcount setup` does: the server, the database's URL and a pool on it.
pub async fn migrated_postgres() -> (pg::PgCluster, String, PgDb) {
    let (cluster, url) = unmigrated_postgres().await;
    let db = PgDb::new(&PgDbConfig::new(url.clone())).expect("valid settings");
    db.migrate().await.expect("migrate");
    (cluster, url, db)
}

/// A fresh PostgreSQL server with an empty database `hotcount`: the server
/// and the database's URL.
pub async fn unmigrated_postgres() -> (pg::PgCluster, String) {
    let cluster = tokio::task::spawn_blocking(pg::PgCluster::start)
        .await
        .expect("start the test cluster");
    let url = cluster.create_database("hotcount").await;
    (cluster, url)
}

/// Waits (bounded) for `child` to exit; kills it and fails the test if it
/// runs past `timeout`.
pub fn wait_with_timeout(
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("hotcount did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `users` first likes of `post`, event ids `{prefix}-{n}`, users `user-{n}`.
pub fn likes(post: &str, users: usize, prefix: &str) -> Vec<Ev> {
    (0..users)
        .map(|u| Ev::like(&format!("{prefix}-{u}"), post, &format!("user-{u}"), 1))
        .collect()
}

/// A subscription that keeps acked messages, created before the traffic:
/// stands in for topic message retention, which the emulator does not keep
/// for subscriptions created later (Google does, with `--message-retention-duration`).
pub async fn archive(h: &Harness, id: &str) {
    use google_cloud_pubsub::model::Subscription;
    let admin = hotcount::connect::subscription_admin(&h.endpoints)
        .await
        .unwrap();
    admin
        .create_subscription()
        .with_request(
            Subscription::new()
                .set_name(format!("projects/{}/subscriptions/{id}", PROJECT))
                .set_topic(format!("projects/{}/topics/{}", PROJECT, TOPIC))
                .set_retain_acked_messages(true),
        )
        .send()
        .await
        .expect("archive subscription");
}

pub fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339()
}
