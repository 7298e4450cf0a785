//! `hotcount dlq inspect|replay`: reads the dead-letter inspect subscription,
//! shows each message with its dead-letter source attributes and delivery
//! count, and republishes selected ones to the main topic.
//!
//! Invariants: `inspect` never acks (every message is nacked after it is
//! shown, so it stays in the dead-letter subscription); `replay` acks a
//! dead letter only after its copy is published to the main topic (a failed
//! publish leaves it in place), and republishes the original data and
//! attributes (minus the `CloudPubSubDeadLetter*` ones, plus
//! [`REPLAYED_FROM_ATTRIBUTE`]) so it takes the normal path again, where a
//! processed duplicate is a no-op.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use google_cloud_pubsub::model::Message;
use google_cloud_pubsub::subscriber::handler::Handler;
use google_cloud_pubsub::subscriber::{MessageStream, ShutdownBehavior, ShutdownToken};
use tokio::time::Instant;

use crate::config::{check_pubsub_id, Endpoints};
use crate::connect;

/// The attribute naming the dead letter a republished message came from.
pub const REPLAYED_FROM_ATTRIBUTE: &str = "hotcountDeadLetterReplayOf";
/// The prefix of the attributes Pub/Sub adds when it dead-letters a message.
pub const DEAD_LETTER_ATTRIBUTE_PREFIX: &str = "CloudPubSubDeadLetter";
/// The delivery count Pub/Sub records on a dead-lettered message.
pub const DELIVERY_COUNT_ATTRIBUTE: &str = "CloudPubSubDeadLetterSourceDeliveryCount";

/// Where the dead letters are and where they go back to.
#[derive(clap::Args, Clone, Debug)]
pub struct DlqArgs {
    /// Google Cloud project id.
    #[arg(long, env = "HOTCOUNT_PROJECT", default_value = "hotcount-local")]
    pub project: String,
    /// The subscription on the dead-letter topic.
    #[arg(long, default_value = "likes-dead-letter-inspect")]
    pub dead_letter_subscription: String,
    /// The main topic dead letters are replayed to.
    #[arg(long, env = "HOTCOUNT_TOPIC", default_value = "likes")]
    pub topic: String,
    /// Read at most this many messages.
    #[arg(long, default_value_t = 100)]
    pub max_messages: usize,
    /// Stop reading when nothing arrives for this long, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub wait_ms: u64,
}

/// A dead-letter tool failure.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// A setting is invalid.
    #[error("invalid setting: {0}")]
    Invalid(String),
    /// Pub/Sub failed.
    #[error("{op}: {message}")]
    PubSub {
        /// What was being done.
        op: &'static str,
        /// The error.
        message: String,
    },
    /// No client.
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
}

impl DlqError {
    /// Pub/Sub failures may pass; the tools are safe to run again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, DlqError::PubSub { .. })
    }
}

/// One dead-lettered message as shown to an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Message id in the dead-letter topic.
    pub message_id: String,
    /// Publish time in the dead-letter topic (RFC 3339), if known.
    pub publish_time: Option<String>,
    /// Deliveries on the source subscription before it was dead-lettered.
    pub source_delivery_count: Option<u32>,
    /// Deliveries on the inspect subscription (when it has a dead-letter policy).
    pub delivery_attempt: Option<i32>,
    /// Every attribute (the `CloudPubSubDeadLetterSource*` ones included).
    pub attributes: BTreeMap<String, String>,
    /// The payload.
    pub data: Vec<u8>,
}

impl DeadLetter {
    fn of(message: &Message, handler: &Handler) -> Self {
        let attributes: BTreeMap<String, String> = message
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            message_id: message.message_id.clone(),
            publish_time: message.publish_time.map(String::from),
            source_delivery_count: attributes
                .get(DELIVERY_COUNT_ATTRIBUTE)
                .and_then(|v| v.parse().ok()),
            delivery_attempt: handler.delivery_attempt(),
            attributes,
            data: message.data.to_vec(),
        }
    }

    /// The first `max_chars` characters of the payload (lossy UTF-8, one line).
    pub fn preview(&self, max_chars: usize) -> String {
        let text = String::from_utf8_lossy(&self.data);
        let mut out: String = text
            .chars()
            .take(max_chars)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if text.chars().count() > max_chars {
            out.push('…');
        }
        out
    }

    /// The attributes the message had before it was dead-lettered.
    pub fn original_attributes(&self) -> BTreeMap<String, String> {
        self.attributes
            .iter()
            .filter(|(k, _)| !k.starts_with(DEAD_LETTER_ATTRIBUTE_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Which dead letters to replay.
#[derive(Clone, Debug)]
pub enum Selection {
    /// Every message read.
    All,
    /// These dead-letter message ids.
    Ids(BTreeSet<String>),
}

/// A replayed dead letter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// Its id in the dead-letter topic.
    pub dead_letter_id: String,
    /// The id of its copy on the main topic.
    pub message_id: String,
}

fn subscription(args: &DlqArgs) -> Result<String, DlqError> {
    check_pubsub_id(&args.dead_letter_subscription).map_err(DlqError::Invalid)?;
    Ok(format!(
        "projects/{}/subscriptions/{}",
        args.project, args.dead_letter_subscription
    ))
}

/// Reads up to `max_messages` dead letters and nacks them all (they stay).
pub async fn inspect(endpoints: &Endpoints, args: &DlqArgs) -> Result<Vec<DeadLetter>, DlqError> {
    let (token, held) = read(endpoints, args).await?;
    let letters = held.iter().map(|(l, _)| l.clone()).collect();
    for (_, handler) in held {
        handler.nack();
    }
    close(token).await;
    Ok(letters)
}

/// Waits until the stream's acks and nacks reach Pub/Sub (call once every
/// handler is resolved).
async fn close(token: ShutdownToken) {
    token.shutdown().await;
}

/// Republishes the selected dead letters to the main topic and acks them;
/// the others are nacked (they stay).
pub async fn replay(
    endpoints: &Endpoints,
    args: &DlqArgs,
    selection: &Selection,
) -> Result<Vec<Replayed>, DlqError> {
    check_pubsub_id(&args.topic).map_err(DlqError::Invalid)?;
    let topic = format!("projects/{}/topics/{}", args.project, args.topic);
    let publisher = connect::publisher(endpoints, &topic).await?;
    let (token, held) = read(endpoints, args).await?;
    let mut replayed = Vec::new();
    let mut failure = None;
    for (letter, handler) in held {
        let selected = match selection {
            Selection::All => true,
            Selection::Ids(ids) => ids.contains(&letter.message_id),
        };
        if !selected || failure.is_some() {
            handler.nack();
            continue;
        }
        let mut attributes = letter.original_attributes();
        attributes.insert(REPLAYED_FROM_ATTRIBUTE.into(), letter.message_id.clone());
        let message = Message::new()
            .set_data(letter.data.clone())
            .set_attributes(attributes);
        match publisher.publish(message).await {
            Ok(message_id) => {
                handler.ack();
                tracing::info!(dead_letter = %letter.message_id, %message_id, "dead letter replayed");
                replayed.push(Replayed {
                    dead_letter_id: letter.message_id,
                    message_id,
                });
            }
            Err(e) => {
                handler.nack();
                failure = Some(DlqError::PubSub {
                    op: "publishing a dead letter",
                    message: e.to_string(),
                });
            }
        }
    }
    close(token).await;
    match failure {
        Some(error) => Err(error),
        None => Ok(replayed),
    }
}

/// Holds up to `max_messages` distinct dead letters with their handlers,
/// reading until nothing arrives for `wait_ms`. The stream is closed before
/// this returns (its lease loop lives on until every handler is resolved),
/// so a nacked message is not redelivered to this reader.
async fn read(
    endpoints: &Endpoints,
    args: &DlqArgs,
) -> Result<(ShutdownToken, Vec<(DeadLetter, Handler)>), DlqError> {
    let name = subscription(args)?;
    let subscriber = connect::subscriber(endpoints).await?;
    let max = args.max_messages.max(1);
    let mut stream = subscriber
        .subscribe(name)
        .set_max_outstanding_messages(i64::try_from(max).unwrap_or(i64::MAX))
        .set_shutdown_behavior(ShutdownBehavior::WaitForProcessing)
        .build();
    let token = stream.shutdown_token();
    let wait = Duration::from_millis(args.wait_ms.max(1));
    let mut held: Vec<(DeadLetter, Handler)> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut last = Instant::now();
    while held.len() < max {
        let left = wait.saturating_sub(last.elapsed());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left, stream.next()).await {
            Ok(Some(Ok((message, handler)))) => {
                last = Instant::now();
                if seen.insert(message.message_id.clone()) {
                    held.push((DeadLetter::of(&message, &handler), handler));
                } else {
                    handler.nack();
                }
            }
            Ok(Some(Err(e))) => {
                return Err(DlqError::PubSub {
                    op: "reading the dead-letter subscription",
                    message: e.to_string(),
                })
            }
            Ok(None) | Err(_) => break,
        }
    }
    close_reading(stream).await;
    Ok((token, held))
}

/// How long a closed stream is given to reach the server before handlers
/// are resolved (a message nacked earlier could be redelivered to it).
const CLOSE_GRACE: Duration = Duration::from_millis(300);

async fn close_reading(stream: MessageStream) {
    // Dropping the stream signals its shutdown; with `WaitForProcessing` the
    // lease loop keeps the held messages leased until they are resolved.
    drop(stream);
    tokio::time::sleep(CLOSE_GRACE).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(data: &[u8]) -> DeadLetter {
        DeadLetter {
            message_id: "1".into(),
            publish_time: None,
            source_delivery_count: Some(5),
            delivery_attempt: None,
            attributes: BTreeMap::from([
                ("CloudPubSubDeadLetterSourceSubscription".into(), "s".into()),
                ("origin".into(), "app".into()),
            ]),
            data: data.to_vec(),
        }
    }

    #[test]
    fn replay_strips_dead_letter_attributes_only() {
        let attrs = letter(b"{}").original_attributes();
        assert_eq!(attrs, BTreeMap::from([("origin".into(), "app".into())]));
    }

    #[test]
    fn preview_is_one_line_and_truncated() {
        assert_eq!(letter(b"ab\ncdef").preview(4), "ab c…");
        assert_eq!(letter(b"ab").preview(4), "ab");
    }
}
