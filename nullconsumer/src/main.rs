//! `hotcount-null-consumer`: the delivery floor. It receives messages with
//! the official `google-cloud-pubsub` subscriber, on the same stream
//! settings as `hotcount run`, and acks each on receipt: no decoding, no
//! store, nothing else linked. Its CPU per 1,000 messages is the cost no
//! consumer on that client can avoid, the ceiling row `hotcount-loadgen
//! bench --ceiling` compares hotcount with.
//!
//! With `--ack-delay-ms` (or `HOTCOUNT_NULL_ACK_DELAY_MS`) it holds each
//! message that long before acking it, in groups every 10 ms, as hotcount
//! holds messages until their batch commits: the floor of a consumer that
//! acks only after a commit, so the client's lease bookkeeping for held
//! messages is in the floor too.
//!
//! With `--commit-writes` it is the write floor (`write_floor`): it parses
//! each event and commits the documents an exactly-once consumer of
//! hotcount's design must write (the memberships that change, a counter
//! increment per post, a marker per group of up to 1,000 messages) before
//! acking: the least store work, beside which hotcount's CPU per message
//! is what reading, checking and recovering cost. With `--preconditions`
//! as well, each write carries the precondition that keeps it exact beside
//! other replicas (hotcount's one-round-trip path): the floor of a
//! consumer that stays exact with many replicas; with `--rollups`, it
//! also refreshes every second the rollups of the posts it changed.
//!
//! With `--delivery push` it is the push floor instead (`push`): it serves
//! `POST /pubsub/push` on `--push-addr` with hyper's HTTP/1.1 server alone
//! (no router, no authentication), reads each body whole and answers 204
//! (after `--ack-delay-ms`, when set): what one HTTP request per message
//! costs by itself, beside `hotcount run --delivery push`. With
//! `--commit-writes` (and `--preconditions --rollups`) as well, each
//! request is answered once its event's group has committed: the write
//! (or exact) floor of a push consumer, groups taken as Commit slots free
//! up (`--group-wait-ms` after their first request). Any other method or
//! path is answered 404.
//!
//! Invariant: every message received is acked (at once, after the delay,
//! or after its group's Commit) and nothing else is done with it; it runs
//! until SIGTERM/SIGINT (or until killed). It is its own package so that
//! it links only the subscriber, its credentials, the runtime, the flags,
//! the service's allocator (the leanest of the two measured), (for push)
//! hyper's server and (for the write floor) gcloud-sdk's Firestore client
//! and serde_json: none of the service crate's code or start-up work is in
//! the floor.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use google_cloud_pubsub::client::Subscriber;
use google_cloud_pubsub::subscriber::ShutdownBehavior;
use tokio::task::JoinSet;

mod push;
mod write_floor;

/// Receive and ack, nothing else.
#[derive(Parser, Debug)]
#[command(name = "hotcount-null-consumer", version)]
struct Args {
    /// Pub/Sub emulator address (`host:port`); unset = Google's endpoint
    /// with Application Default Credentials.
    #[arg(long, env = "PUBSUB_EMULATOR_HOST")]
    pubsub_emulator_host: Option<String>,
    /// Google Cloud project id.
    #[arg(long, default_value = "hotcount-local")]
    project: String,
    /// Subscription id (in `--project`), or its full name.
    #[arg(long, default_value = "likes-hotcount")]
    subscription: String,
    /// StreamingPull streams (as `hotcount run --streams`).
    #[arg(long, default_value_t = 2)]
    streams: usize,
    /// Flow control per stream: messages (as `hotcount run`).
    #[arg(long, default_value_t = 10_000)]
    max_outstanding_messages: i64,
    /// Flow control per stream: bytes (as `hotcount run`).
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    max_outstanding_bytes: i64,
    /// Lease extension per modack, in seconds (as `hotcount run`).
    #[arg(long, default_value_t = 60)]
    lease_extension_secs: u64,
    /// Hold each message this long before acking it (0 = ack on receipt).
    #[arg(long, env = "HOTCOUNT_NULL_ACK_DELAY_MS", default_value_t = 0)]
    ack_delay_ms: u64,
    /// The write floor: commit, per group of messages, one membership
    /// write per (post, user), one counter increment per post and a marker
    /// to Firestore (`--firestore-emulator-host`), then ack the group
    /// (`write_floor`); with `--delivery push`, answer each request once
    /// its group committed.
    #[arg(long, env = "HOTCOUNT_NULL_COMMIT_WRITES", value_parser = clap::builder::BoolishValueParser::new())]
    commit_writes: bool,
    /// With `--commit-writes`: each write carries the precondition that
    /// keeps it exact beside other replicas (a membership's update time as
    /// its Commit answered, `exists = false` for one never written and for
    /// the marker), as hotcount's one-round-trip path does.
    #[arg(long, env = "HOTCOUNT_NULL_PRECONDITIONS", value_parser = clap::builder::BoolishValueParser::new())]
    preconditions: bool,
    /// With `--commit-writes`: also refresh, every second, the rollup of
    /// each post whose count a Commit changed (read its counter and
    /// rollup, write the rollup on the precondition of the one read), as
    /// hotcount's rollup refresher does by default.
    #[arg(long, env = "HOTCOUNT_NULL_ROLLUPS", value_parser = clap::builder::BoolishValueParser::new())]
    rollups: bool,
    /// Firestore emulator address (`host:port`), for `--commit-writes`.
    #[arg(long, env = "FIRESTORE_EMULATOR_HOST")]
    firestore_emulator_host: Option<String>,
    /// How messages arrive: pulled (the official subscriber) or pushed to
    /// `POST /pubsub/push` on `--push-addr` (answered 204).
    #[arg(long, value_enum, default_value_t = Delivery::Pull)]
    delivery: Delivery,
    /// Where the push endpoint listens (`--delivery push`).
    #[arg(long, default_value = "127.0.0.1:8089")]
    push_addr: SocketAddr,
    /// With `--delivery push --commit-writes`: how long a group's first
    /// request waits for others before the group takes a free Commit slot
    /// (hotcount's default `--flush-min-wait-ms`).
    #[arg(long, env = "HOTCOUNT_NULL_GROUP_WAIT_MS", default_value_t = 5)]
    group_wait_ms: u64,
}

/// How messages arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Delivery {
    /// StreamingPull with the official subscriber.
    Pull,
    /// Pub/Sub push: one HTTP request per message.
    Push,
}

impl Args {
    /// Refuses flags that do not go together, naming why: the write
    /// floor's options without it would be silently ignored.
    fn check(&self) -> Result<(), String> {
        for (set, flag) in [
            (
                self.preconditions,
                "--preconditions (HOTCOUNT_NULL_PRECONDITIONS)",
            ),
            (self.rollups, "--rollups (HOTCOUNT_NULL_ROLLUPS)"),
        ] {
            if set && !self.commit_writes {
                return Err(format!(
                    "{flag} goes with the write floor; without --commit-writes nothing is \
                     written: add it or drop it"
                ));
            }
        }
        Ok(())
    }

    /// The subscription's full name.
    fn subscription_name(&self) -> String {
        if self.subscription.starts_with("projects/") {
            self.subscription.clone()
        } else {
            format!(
                "projects/{}/subscriptions/{}",
                self.project, self.subscription
            )
        }
    }
}

/// The official subscriber: on the emulator with anonymous credentials
/// over plain HTTP/2, as hotcount connects to it; else Google's endpoint.
async fn subscriber(emulator: Option<&str>) -> Result<Subscriber, String> {
    let mut builder = Subscriber::builder();
    if let Some(host) = emulator {
        let url = if host.contains("://") {
            host.to_string()
        } else {
            format!("http://{host}")
        };
        builder = builder
            .with_endpoint(url)
            .with_credentials(google_cloud_auth::credentials::anonymous::Builder::new().build());
    }
    builder
        .build()
        .await
        .map_err(|e| format!("connecting to pubsub: {e}"))
}

/// The service's allocator: the floor is the leanest consumer on the
/// official client, and the system allocator costs it ~15 % more CPU per
/// message (docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let delay = Duration::from_millis(args.ack_delay_ms);
    if let Err(error) = args.check() {
        eprintln!("hotcount-null-consumer: {error}");
        return std::process::ExitCode::FAILURE;
    }
    let floor = match (args.commit_writes, args.firestore_emulator_host.as_deref()) {
        (false, _) => None,
        (true, Some(host)) => {
            match write_floor::WriteFloor::connect(
                host,
                &args.project,
                (args.preconditions, args.rollups),
            )
            .await
            {
                Ok(floor) => Some(floor),
                Err(error) => {
                    eprintln!("hotcount-null-consumer: {error}");
                    return std::process::ExitCode::FAILURE;
                }
            }
        }
        (true, None) => {
            eprintln!("hotcount-null-consumer: --commit-writes needs --firestore-emulator-host");
            return std::process::ExitCode::FAILURE;
        }
    };
    if args.delivery == Delivery::Push {
        let answer = match floor {
            None => push::Answer::After(delay),
            Some(floor) => {
                let pushed = write_floor::Pushed::new(Duration::from_millis(args.group_wait_ms));
                tokio::spawn(write_floor::gather(floor, pushed.clone()));
                push::Answer::Committed(pushed)
            }
        };
        return push::serve(args.push_addr, answer).await;
    }
    let subscriber = match subscriber(args.pubsub_emulator_host.as_deref()).await {
        Ok(subscriber) => subscriber,
        Err(error) => {
            eprintln!("hotcount-null-consumer: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let subscription = args.subscription_name();
    let mut streams = JoinSet::new();
    for index in 0..args.streams.max(1) {
        let mut stream = subscriber
            .subscribe(subscription.clone())
            .set_max_outstanding_messages(args.max_outstanding_messages)
            .set_max_outstanding_bytes(args.max_outstanding_bytes)
            .set_max_lease_extension(Duration::from_secs(args.lease_extension_secs))
            .set_shutdown_behavior(ShutdownBehavior::WaitForProcessing)
            .build();
        if let Some(floor) = floor.clone() {
            streams.spawn(write_floor::run(stream, floor, index));
            continue;
        }
        streams.spawn(async move {
            let mut held = VecDeque::new();
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            loop {
                tokio::select! {
                    next = stream.next() => match next {
                        Some(Ok((_message, handler))) if delay.is_zero() => handler.ack(),
                        Some(Ok((_message, handler))) => {
                            held.push_back((tokio::time::Instant::now() + delay, handler));
                        }
                        Some(Err(error)) => {
                            eprintln!("hotcount-null-consumer: stream {index}: StreamingPull failed: {error}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        None => break,
                    },
                    now = tick.tick(), if !held.is_empty() => {
                        while held.front().is_some_and(|(due, _)| *due <= now) {
                            if let Some((_, handler)) = held.pop_front() {
                                handler.ack();
                            }
                        }
                    }
                }
            }
            for (_, handler) in held {
                handler.ack();
            }
        });
    }
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { while streams.join_next().await.is_some() {} } => {}
    }
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("hotcount-null-consumer").chain(args.iter().copied()))
            .expect("parses")
    }

    #[test]
    fn preconditions_or_rollups_without_the_write_floor_are_refused_naming_both_flags() {
        for flag in ["--preconditions", "--rollups"] {
            let error = parse(&[flag]).check().expect_err("nothing written");
            assert!(
                error.contains(flag) && error.contains("--commit-writes"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_write_floors_go_with_either_delivery() {
        assert!(parse(&["--commit-writes", "--delivery", "push"])
            .check()
            .is_ok());
        assert!(parse(&[
            "--commit-writes",
            "--preconditions",
            "--rollups",
            "--delivery",
            "push"
        ])
        .check()
        .is_ok());
        assert!(parse(&["--commit-writes"]).check().is_ok());
        assert!(parse(&["--commit-writes", "--preconditions", "--rollups"])
            .check()
            .is_ok());
        assert!(parse(&["--commit-writes", "--delivery", "pull"])
            .check()
            .is_ok());
        assert!(parse(&["--delivery", "push"]).check().is_ok());
    }
}
