//! `hotcount quarantine`: list, show or re-drive quarantine records.
//!
//! Invariant: `list` and `show` write nothing; `redrive` fails when a
//! record was not re-driven.

use clap::Subcommand;
use hotcount::config::{Endpoints, Target};
use hotcount::connect;
use hotcount::ops::quarantine;

#[derive(Subcommand, Debug)]
pub enum QuarantineAction {
    /// List quarantine records (id, reason, payload size); writes nothing.
    List {
        #[command(flatten)]
        target: Target,
        /// Only the records of this consumer.
        #[arg(long)]
        consumer: Option<String>,
        /// At most this many records.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show one record whole: reason, attributes, payload.
    Show {
        #[command(flatten)]
        target: Target,
        /// The record id, as `list` prints it (`{consumer}:{message id}`).
        id: String,
    },
    /// Publish each record's message to the main topic again, then delete
    /// the record (once the cause of the quarantine is fixed).
    Redrive {
        #[command(flatten)]
        target: Target,
        /// The main topic.
        #[arg(long, env = "HOTCOUNT_TOPIC", default_value = "likes")]
        topic: String,
        /// Record ids, as `list` prints them.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// Runs `action` and prints what it found or did.
pub async fn quarantine_command(
    endpoints: &Endpoints,
    action: QuarantineAction,
) -> anyhow::Result<()> {
    match action {
        QuarantineAction::List {
            target,
            consumer,
            limit,
        } => {
            let db = connect::store_db(endpoints, &target, 1).await?;
            let records = quarantine::list(&db, consumer.as_deref(), limit).await?;
            println!("id\tbytes\tquarantined\treason");
            for r in &records {
                println!(
                    "{}\t{}\t{}\t{}",
                    r.id(),
                    r.record.data_len,
                    r.quarantined_at.as_deref().unwrap_or("-"),
                    r.record.reason
                );
            }
            println!("{} record(s)", records.len());
            Ok(())
        }
        QuarantineAction::Show { target, id } => {
            let db = connect::store_db(endpoints, &target, 1).await?;
            let Some(r) = quarantine::show(&db, &id).await? else {
                anyhow::bail!("no quarantine record {id}");
            };
            println!("record {}", r.id());
            println!("  consumer: {}", r.consumer);
            println!("  message id: {}", r.record.message_id);
            println!("  reason: {}", r.record.reason);
            println!(
                "  quarantined: {}",
                r.quarantined_at.as_deref().unwrap_or("-")
            );
            println!(
                "  attributes: {} kept of {}{}",
                r.record.attributes.len(),
                r.record.attribute_count,
                if r.record.attributes_truncated {
                    " (truncated)"
                } else {
                    ""
                }
            );
            for (k, v) in &r.record.attributes {
                println!("  attribute {k:?}={v:?}");
            }
            println!(
                "  data: {} bytes kept of {} (sha256 {})",
                r.record.data.len(),
                r.record.data_len,
                r.record.data_sha256
            );
            println!(
                "  {}",
                String::from_utf8_lossy(&r.record.data).escape_debug()
            );
            Ok(())
        }
        QuarantineAction::Redrive { target, topic, ids } => {
            let db = connect::store_db_to_write(endpoints, &target, 1).await?;
            let topic = format!("projects/{}/topics/{topic}", target.project);
            let publisher = connect::publisher(endpoints, &topic).await?;
            let mut refused = 0;
            for (id, outcome) in quarantine::redrive(&db, &publisher, &ids).await? {
                match outcome {
                    quarantine::Redrive::Published { message_id } => {
                        println!("redriven\t{id}\t{message_id}");
                    }
                    quarantine::Redrive::Missing => {
                        refused += 1;
                        println!("not found\t{id}");
                    }
                    quarantine::Redrive::Refused(why) => {
                        refused += 1;
                        println!("refused\t{id}\t{why}");
                    }
                }
            }
            if refused > 0 {
                anyhow::bail!("{refused} record(s) not re-driven");
            }
            Ok(())
        }
    }
}
