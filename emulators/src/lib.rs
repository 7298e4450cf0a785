//! Wire-compatible local emulators of Google Cloud Pub/Sub and Firestore,
//! with fault injection, RPC counters and a controllable clock.
//!
//! The real client crates (`google-cloud-pubsub`, `firestore`, Google's
//! Python clients) talk to these servers exactly as to Google's: same gRPC
//! services, same REST admin routes, same error codes. They behave as the
//! real services do (see `ARCHITECTURE.md` and `emulators/README.md`), never
//! as a consumer would like.
//!
//! # Layout
//! - [`clock`]: emulated time (real, sped up, or advanced by hand).
//! - [`faults`]: fault rules (errors, latency, lost acks, dropped streams...).
//! - [`counters`]: RPCs served, by method.
//! - [`server`]: one listener for gRPC + HTTP/1.1, counting and faults in front.
//! - [`pubsub`]: `google.pubsub.v1` Publisher and Subscriber, REST admin.
//! - [`firestore`]: `google.firestore.v1.Firestore` with pessimistic transactions.
//! - [`webhook`]: a webhook receiver that keys on `Idempotency-Key` as
//!   payment APIs do, verifies signatures, and fails at a rate.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let emulators = hotcount_emulators::Emulators::start(Default::default()).await?;
//! println!("PUBSUB_EMULATOR_HOST={}", emulators.pubsub_addr());
//! println!("FIRESTORE_EMULATOR_HOST={}", emulators.firestore_addr());
//! emulators.shutdown().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod counters;
pub mod faults;
pub mod firestore;
pub mod proto;
pub mod pubsub;
pub mod server;
pub mod webhook;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use clock::Clock;
pub use counters::Counters;
pub use faults::{FaultKind, FaultSpec, Faults};
pub use server::Context;

/// How to start the emulators.
#[derive(Clone, Debug)]
pub struct EmulatorsConfig {
    /// Pub/Sub listen address; port 0 picks a free port.
    pub pubsub_addr: SocketAddr,
    /// Firestore listen address; port 0 picks a free port.
    pub firestore_addr: SocketAddr,
    /// Emulated seconds per real second (1.0 = real time).
    pub time_scale: f64,
    /// Pub/Sub behaviour settings.
    pub pubsub: pubsub::PubSubConfig,
    /// Firestore behaviour settings.
    pub firestore: firestore::FirestoreConfig,
}

impl Default for EmulatorsConfig {
    fn default() -> Self {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        Self {
            pubsub_addr: loopback,
            firestore_addr: loopback,
            time_scale: 1.0,
            pubsub: pubsub::PubSubConfig::default(),
            firestore: firestore::FirestoreConfig::default(),
        }
    }
}

/// Both emulators, running in this process until [`Emulators::shutdown`].
pub struct Emulators {
    clock: Clock,
    pubsub: pubsub::PubSub,
    pubsub_ctx: Arc<Context>,
    pubsub_addr: SocketAddr,
    firestore: firestore::Firestore,
    firestore_ctx: Arc<Context>,
    firestore_addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

/// How long open streams get to finish after shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

impl Emulators {
    /// Binds both listeners and starts serving. Returns once both accept connections.
    pub async fn start(config: EmulatorsConfig) -> std::io::Result<Self> {
        let clock = Clock::new(config.time_scale);
        let (stop, _) = watch::channel(false);

        let pubsub_ctx = Arc::new(Context::new(clock.clone()));
        let pubsub = pubsub::PubSub::new(pubsub_ctx.clone(), config.pubsub);
        let listener = server::bind(config.pubsub_addr).await?;
        let pubsub_addr = listener.local_addr()?;
        let pubsub_task = spawn_server(listener, pubsub.router(), &stop);

        let firestore_ctx = Arc::new(Context::new(clock.clone()));
        let firestore = firestore::Firestore::new(firestore_ctx.clone(), config.firestore);
        let listener = server::bind(config.firestore_addr).await?;
        let firestore_addr = listener.local_addr()?;
        let firestore_task = spawn_server(listener, firestore.router(), &stop);

        Ok(Self {
            clock,
            pubsub,
            pubsub_ctx,
            pubsub_addr,
            firestore,
            firestore_ctx,
            firestore_addr,
            stop,
            tasks: vec![pubsub_task, firestore_task],
        })
    }

    /// The Pub/Sub emulator's address (`host:port`, for `PUBSUB_EMULATOR_HOST`).
    pub fn pubsub_addr(&self) -> SocketAddr {
        self.pubsub_addr
    }

    /// The Firestore emulator's address (`host:port`, for `FIRESTORE_EMULATOR_HOST`).
    pub fn firestore_addr(&self) -> SocketAddr {
        self.firestore_addr
    }

    /// `http://host:port` of the Pub/Sub emulator, for `with_endpoint`.
    pub fn pubsub_endpoint(&self) -> String {
        format!("http://{}", self.pubsub_addr)
    }

    /// Where push endpoints fetch the keys that verify the emulator's push
    /// OIDC tokens (`http://host:port/emulator/v1/push/jwks`).
    pub fn push_jwks_url(&self) -> String {
        format!("http://{}/emulator/v1/push/jwks", self.pubsub_addr)
    }

    /// `http://host:port` of the Firestore emulator.
    pub fn firestore_endpoint(&self) -> String {
        format!("http://{}", self.firestore_addr)
    }

    /// The clock both emulators share.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The Pub/Sub emulator's state and controls.
    pub fn pubsub(&self) -> &pubsub::PubSub {
        &self.pubsub
    }

    /// The Firestore emulator's state and controls.
    pub fn firestore(&self) -> &firestore::Firestore {
        &self.firestore
    }

    /// Pub/Sub fault rules.
    pub fn pubsub_faults(&self) -> &Faults {
        &self.pubsub_ctx.faults
    }

    /// Firestore fault rules.
    pub fn firestore_faults(&self) -> &Faults {
        &self.firestore_ctx.faults
    }

    /// Pub/Sub RPC counters.
    pub fn pubsub_counters(&self) -> &Counters {
        &self.pubsub_ctx.counters
    }

    /// Firestore RPC counters.
    pub fn firestore_counters(&self) -> &Counters {
        &self.firestore_ctx.counters
    }

    /// Stops accepting, closes open streams and waits (bounded) for the servers to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        self.pubsub.shutdown();
        self.firestore.shutdown();
        for task in self.tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

fn spawn_server(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    stop: &watch::Sender<bool>,
) -> JoinHandle<std::io::Result<()>> {
    let mut rx = stop.subscribe();
    tokio::spawn(server::serve(listener, router, async move {
        let _ = rx.wait_for(|stopped| *stopped).await;
    }))
}
