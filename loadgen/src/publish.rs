//! Publishes a workload in order with the official batching Publisher, paced
//! to a rate, with a bounded number of publishes in flight, until done or cancelled.
//!
//! Invariant: every message handed to the client is awaited and counted as
//! published or failed (a failure after the client's retries is reported with
//! its index, never dropped); messages are handed over in workload order, so
//! a cancelled run has published exactly a prefix of the workload.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io::IsTerminal as _;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures::stream::{FuturesUnordered, StreamExt as _};
use google_cloud_pubsub::client::Publisher;
use google_cloud_pubsub::model::Message;
use hotcount::config::Endpoints;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::workload::{Origin, Workload};

/// How to publish.
#[derive(Clone, Debug)]
pub struct PublishOptions {
    /// Target rate in messages per second; 0 = as fast as the bound allows.
    pub rate_per_sec: u64,
    /// Most publishes awaiting their result at once.
    pub max_in_flight: usize,
    /// Rewrite `occurredAt` of each valid event to the moment it is handed
    /// to the client (its duplicates reuse that payload verbatim), so latency
    /// is measured from publish, not from generation. Order within a (post,
    /// user) is by `seq`, so the truth does not change.
    pub stamp_at_publish: bool,
    /// Show a progress bar (only drawn when stderr is a terminal).
    pub progress: bool,
}

impl Default for PublishOptions {
    fn default() -> Self {
        Self {
            rate_per_sec: 0,
            max_in_flight: 5_000,
            stamp_at_publish: true,
            progress: true,
        }
    }
}

/// What a publish run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PublishReport {
    /// Messages handed to the client (a prefix of the workload).
    pub attempted: u64,
    /// Messages the service acknowledged with a message id.
    pub published: u64,
    /// Messages that failed after the client's retries.
    pub failed: u64,
    /// Indices (in the workload) of failed messages.
    pub failed_indices: Vec<usize>,
    /// The first few distinct failure messages.
    pub errors: Vec<String>,
    /// Whether the run stopped early on cancellation.
    pub cancelled: bool,
    /// Wall time from the first publish to the last result.
    pub elapsed: Duration,
    /// `published / elapsed`.
    pub events_per_sec: f64,
}

/// Distinct failure messages kept in a [`PublishReport`].
pub const MAX_ERRORS_KEPT: usize = 5;

/// Publishing could not start.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The client could not be built.
    #[error(transparent)]
    Connect(#[from] hotcount::connect::ConnectError),
    /// The options are unusable.
    #[error("invalid publish options: {0}")]
    Options(String),
}

/// `projects/{project}/topics/{topic}` from an id or a full name.
pub fn topic_name(project: &str, topic: &str) -> Result<String, String> {
    if let Some(rest) = topic.strip_prefix("projects/") {
        return match rest.split_once("/topics/") {
            Some((p, id)) if !p.is_empty() && !p.contains('/') => {
                hotcount::config::check_pubsub_id(id)?;
                Ok(topic.to_string())
            }
            _ => Err(format!("{topic:?} is not projects/*/topics/*")),
        };
    }
    hotcount::config::check_pubsub_id(topic)?;
    Ok(format!("projects/{project}/topics/{topic}"))
}

/// Where messages go: the official [`Publisher`], or a fake in tests.
pub trait MessageSink {
    /// Why a publish failed after the client's retries.
    type Error: std::fmt::Display;

    /// Hands `message` over; the future resolves to its message id once the
    /// service has it, or to the final error.
    fn send(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send + 'static;
}

impl MessageSink for Publisher {
    type Error = google_cloud_pubsub::error::PublishError;

    fn send(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<String, Self::Error>> + Send + 'static {
        self.publish(message)
    }
}

/// Connects a publisher to `topic` (full name) and publishes `workload`.
pub async fn connect_and_publish(
    endpoints: &Endpoints,
    topic: &str,
    workload: &Workload,
    options: &PublishOptions,
    shutdown: watch::Receiver<bool>,
) -> Result<PublishReport, PublishError> {
    let publisher = hotcount::connect::publisher(endpoints, topic).await?;
    publish(&publisher, workload, options, shutdown).await
}

/// Publishes `workload` in order until done, or until `shutdown` turns true
/// (then the publishes in flight are still awaited and counted).
pub async fn publish<S: MessageSink>(
    sink: &S,
    workload: &Workload,
    options: &PublishOptions,
    mut shutdown: watch::Receiver<bool>,
) -> Result<PublishReport, PublishError> {
    if options.max_in_flight == 0 {
        return Err(PublishError::Options(
            "max_in_flight must be at least 1".into(),
        ));
    }
    let bar = progress_bar(workload.messages.len() as u64, options.progress);
    let mut report = PublishReport::default();
    let mut in_flight = FuturesUnordered::new();
    let mut stamped: HashMap<usize, Vec<u8>> = HashMap::new();
    let start = Instant::now();
    let tick = (options.rate_per_sec > 0)
        .then(|| Duration::from_secs_f64(1.0 / options.rate_per_sec as f64));
    let duplicated: HashSet<usize> = workload
        .messages
        .iter()
        .filter_map(|m| match m.origin {
            Origin::Duplicate { of } => Some(of),
            _ => None,
        })
        .collect();
    'messages: for (index, message) in workload.messages.iter().enumerate() {
        loop {
            if is_cancelled(&shutdown) {
                report.cancelled = true;
                break 'messages;
            }
            let due = tick.map(|t| start + t.mul_f64(index as f64));
            let full = in_flight.len() >= options.max_in_flight;
            let early = due.is_some_and(|d| Instant::now() < d);
            if !full && !early {
                break;
            }
            let wait = async {
                match due {
                    Some(d) if !full => tokio::time::sleep_until(d).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((i, result)) = in_flight.next(), if !in_flight.is_empty() => {
                    record(&mut report, &bar, i, result);
                }
                () = wait => {}
                () = cancelled(&mut shutdown) => {}
            }
        }
        let data = payload(
            workload,
            index,
            options.stamp_at_publish,
            &duplicated,
            &mut stamped,
        );
        let msg = Message::new()
            .set_data(data)
            .set_attributes(message.attributes.clone());
        let fut = sink.send(msg);
        in_flight.push(async move { (index, fut.await) });
        report.attempted += 1;
    }
    while let Some((i, result)) = in_flight.next().await {
        record(&mut report, &bar, i, result);
    }
    report.elapsed = start.elapsed();
    report.events_per_sec = report.published as f64 / report.elapsed.as_secs_f64().max(1e-9);
    report.failed_indices.sort_unstable();
    bar.finish_and_clear();
    Ok(report)
}

fn record<T, E: std::fmt::Display>(
    report: &mut PublishReport,
    bar: &ProgressBar,
    index: usize,
    result: Result<T, E>,
) {
    match result {
        Ok(_) => report.published += 1,
        Err(e) => {
            report.failed += 1;
            report.failed_indices.push(index);
            let text = e.to_string();
            if report.errors.len() < MAX_ERRORS_KEPT && !report.errors.contains(&text) {
                tracing::warn!(index, error = %text, "publish failed after the client's retries");
                report.errors.push(text);
            }
        }
    }
    bar.inc(1);
}

/// The bytes to publish for message `index`: the workload's payload, or for a
/// valid event (and later its duplicates) the same event stamped now.
fn payload(
    workload: &Workload,
    index: usize,
    stamp: bool,
    duplicated: &HashSet<usize>,
    stamped: &mut HashMap<usize, Vec<u8>>,
) -> Vec<u8> {
    let message = &workload.messages[index];
    if !stamp {
        return message.data.clone();
    }
    match message.origin {
        Origin::Event { .. } => {
            let data = restamp(&message.data, Utc::now());
            if duplicated.contains(&index) {
                stamped.insert(index, data.clone());
            }
            data
        }
        Origin::Duplicate { of } => stamped
            .get(&of)
            .cloned()
            .unwrap_or_else(|| message.data.clone()),
        Origin::Poison { .. } => message.data.clone(),
    }
}

/// `data` with its `occurredAt` set to `at`; unchanged if it is not a JSON object.
pub fn restamp(data: &[u8], at: DateTime<Utc>) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return data.to_vec();
    };
    let Some(object) = value.as_object_mut() else {
        return data.to_vec();
    };
    object.insert(
        "occurredAt".into(),
        at.to_rfc3339_opts(SecondsFormat::Micros, true).into(),
    );
    value.to_string().into_bytes()
}

fn is_cancelled(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow()
}

/// Resolves when `shutdown` turns true; never if its sender is gone.
async fn cancelled(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn progress_bar(len: u64, wanted: bool) -> ProgressBar {
    if !wanted || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {human_pos}/{human_len} published, eta {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    #[test]
    fn restamp_changes_only_occurred_at() {
        let at = DateTime::<Utc>::from_timestamp_micros(1_700_000_000_123_456).unwrap();
        let data = br#"{"eventId":"e","seq":3,"occurredAt":"2020-01-01T00:00:00Z"}"#;
        let out: serde_json::Value = serde_json::from_slice(&restamp(data, at)).unwrap();
        assert_eq!(out["occurredAt"], "2023-11-14T22:13:20.123456Z");
        assert_eq!(out["seq"], 3);
        assert_eq!(restamp(b"{oops", at), b"{oops");
    }

    #[test]
    fn duplicates_reuse_the_stamped_payload_of_their_original() {
        let w = crate::workload::generate(&crate::workload::WorkloadConfig {
            events: 300,
            duplicate_fraction: 0.2,
            ..Default::default()
        });
        let mut stamped = HashMap::new();
        let all: HashSet<usize> = (0..w.messages.len()).collect();
        let mut checked = 0;
        for i in 0..w.messages.len() {
            let data = payload(&w, i, true, &all, &mut stamped);
            if let Origin::Duplicate { of } = w.messages[i].origin {
                assert_eq!(data, stamped[&of]);
                checked += 1;
            }
        }
        assert_eq!(checked, 60);
    }

    /// Records what it is sent; fails every `fail_every`-th message; each
    /// publish takes `latency` (of paused tokio time).
    #[derive(Clone, Default)]
    struct FakeSink {
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
        in_flight: Arc<AtomicUsize>,
        max_in_flight: Arc<AtomicUsize>,
        fail_every: usize,
        latency: Duration,
    }

    impl MessageSink for FakeSink {
        type Error = String;

        fn send(
            &self,
            message: Message,
        ) -> impl Future<Output = Result<String, String>> + Send + 'static {
            let n = {
                let mut sent = self.sent.lock().unwrap();
                sent.push(message.data.to_vec());
                sent.len()
            };
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let (in_flight, latency, fail_every) =
                (self.in_flight.clone(), self.latency, self.fail_every);
            async move {
                tokio::time::sleep(latency).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                if fail_every > 0 && n % fail_every == 0 {
                    Err(format!("NOT_FOUND #{n}"))
                } else {
                    Ok(n.to_string())
                }
            }
        }
    }

    fn small_workload(events: u64) -> Workload {
        crate::workload::generate(&crate::workload::WorkloadConfig {
            events,
            ..Default::default()
        })
    }

    fn options(rate_per_sec: u64, max_in_flight: usize) -> PublishOptions {
        PublishOptions {
            rate_per_sec,
            max_in_flight,
            stamp_at_publish: false,
            progress: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_message_is_sent_in_workload_order_and_counted() {
        let w = small_workload(1_000);
        let sink = FakeSink {
            latency: Duration::from_millis(5),
            ..Default::default()
        };
        let (_tx, rx) = watch::channel(false);
        let r = publish(&sink, &w, &options(0, 64), rx).await.unwrap();
        assert_eq!((r.attempted, r.published, r.failed), (1_000, 1_000, 0));
        assert!(!r.cancelled);
        let sent = sink.sent.lock().unwrap();
        let expected: Vec<_> = w.messages.iter().map(|m| m.data.clone()).collect();
        assert_eq!(*sent, expected);
        assert!(sink.max_in_flight.load(Ordering::SeqCst) <= 64);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_publishes_are_reported_with_their_index() {
        let w = small_workload(100);
        let sink = FakeSink {
            fail_every: 10,
            ..Default::default()
        };
        let (_tx, rx) = watch::channel(false);
        let r = publish(&sink, &w, &options(0, 8), rx).await.unwrap();
        assert_eq!((r.published, r.failed), (90, 10));
        assert_eq!(
            r.failed_indices,
            (0..10).map(|k| k * 10 + 9).collect::<Vec<_>>()
        );
        assert_eq!(r.errors.len(), MAX_ERRORS_KEPT);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_paces_the_publishes() {
        let w = small_workload(500);
        let sink = FakeSink::default();
        let (_tx, rx) = watch::channel(false);
        let r = publish(&sink, &w, &options(1_000, 100), rx).await.unwrap();
        assert_eq!(r.published, 500);
        let secs = r.elapsed.as_secs_f64();
        assert!((0.49..0.52).contains(&secs), "{secs}");
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_stops_after_a_prefix_and_awaits_those_in_flight() {
        let w = small_workload(1_000);
        let sink = FakeSink {
            latency: Duration::from_millis(50),
            ..Default::default()
        };
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = tx.send(true);
        });
        let r = publish(&sink, &w, &options(1_000, 1_000), rx)
            .await
            .unwrap();
        assert!(r.cancelled);
        assert!((240..=260).contains(&r.attempted), "{}", r.attempted);
        assert_eq!(r.published, r.attempted, "in-flight publishes were awaited");
        let sent = sink.sent.lock().unwrap();
        assert_eq!(sent.len() as u64, r.attempted);
        assert_eq!(sent.last(), Some(&w.messages[sent.len() - 1].data));
    }

    #[test]
    fn topic_names_accept_ids_and_full_names() {
        assert_eq!(topic_name("p", "likes").unwrap(), "projects/p/topics/likes");
        assert_eq!(
            topic_name("p", "projects/q/topics/likes").unwrap(),
            "projects/q/topics/likes"
        );
        assert!(topic_name("p", "goog-x").is_err());
        assert!(topic_name("p", "projects//topics/likes").is_err());
    }
}
