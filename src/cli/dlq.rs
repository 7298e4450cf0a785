//! `hotcount dlq`: inspect dead letters, or republish chosen ones.
//!
//! Invariant: `inspect` acks nothing.

use clap::Subcommand;
use hotcount::config::Endpoints;
use hotcount::ops::dlq;

#[derive(Subcommand, Debug)]
pub enum DlqAction {
    /// Show dead letters (message id, source attributes, delivery counts, payload preview); acks nothing.
    Inspect(dlq::DlqArgs),
    /// Republish selected dead letters to the main topic and ack them.
    Replay {
        #[command(flatten)]
        args: dlq::DlqArgs,
        /// Dead-letter message ids to replay (repeatable).
        #[arg(long = "message-id", required_unless_present = "all")]
        message_ids: Vec<String>,
        /// Replay every dead letter read.
        #[arg(long, conflicts_with = "message_ids")]
        all: bool,
    },
}

/// Runs `action` and prints what it found or did.
pub async fn dlq_command(endpoints: &Endpoints, action: DlqAction) -> anyhow::Result<()> {
    match action {
        DlqAction::Inspect(args) => {
            let letters = dlq::inspect(endpoints, &args).await?;
            for l in &letters {
                println!("message {}", l.message_id);
                println!("  published: {}", l.publish_time.as_deref().unwrap_or("-"));
                let count = l
                    .source_delivery_count
                    .map_or("-".into(), |n| n.to_string());
                println!("  source delivery count: {count}");
                let attempt = l.delivery_attempt.map_or("-".into(), |n| n.to_string());
                println!("  delivery attempt here: {attempt}");
                for (k, v) in &l.attributes {
                    println!("  attribute {k}={v}");
                }
                println!("  data ({} bytes): {}", l.data.len(), l.preview(120));
            }
            println!("{} dead letter(s); none acked", letters.len());
            Ok(())
        }
        DlqAction::Replay {
            args,
            message_ids,
            all,
        } => {
            let selection = if all {
                dlq::Selection::All
            } else {
                dlq::Selection::Ids(message_ids.iter().cloned().collect())
            };
            let replayed = dlq::replay(endpoints, &args, &selection).await?;
            for r in &replayed {
                println!("replayed\t{}\t{}", r.dead_letter_id, r.message_id);
            }
            if let dlq::Selection::Ids(ids) = &selection {
                let done: std::collections::BTreeSet<&String> =
                    replayed.iter().map(|r| &r.dead_letter_id).collect();
                for id in ids.iter().filter(|id| !done.contains(id)) {
                    println!("not found\t{id}");
                }
            }
            Ok(())
        }
    }
}
