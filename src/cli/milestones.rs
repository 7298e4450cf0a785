//! `hotcount milestones`: list milestone records, or retry given-up ones.
//!
//! Invariant: `list` writes nothing.

use clap::Subcommand;
use hotcount::config::{Endpoints, Target};
use hotcount::connect;
use hotcount::ops::milestones;

#[derive(Subcommand, Debug)]
pub enum MilestonesAction {
    /// List milestone records (id, status, attempts, times, last error);
    /// writes nothing.
    List {
        #[command(flatten)]
        target: Target,
        /// Only records with this status (pending, leased, done, dead).
        #[arg(long, value_parser = ["pending", "leased", "done", "dead"])]
        status: Option<String>,
    },
    /// Make given-up (dead) records pending again, due now: the ones named,
    /// or every dead one; a running service delivers them with the same
    /// Idempotency-Key.
    Retry {
        #[command(flatten)]
        target: Target,
        /// Record ids as `list` prints them (`{post}:{n}`); none = every dead one.
        ids: Vec<String>,
    },
}

/// Runs `action` and prints what it found or did.
pub async fn milestones_command(
    endpoints: &Endpoints,
    action: MilestonesAction,
) -> anyhow::Result<()> {
    match action {
        MilestonesAction::List { target, status } => {
            let db = connect::store_db(endpoints, &target, 1).await?;
            let records = milestones::list(&db, status.as_deref()).await?;
            println!("id\tstatus\tattempts\tlikes\treached\tdue\tdelivered\tlast error");
            for r in &records {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    r.id(),
                    r.status.as_str(),
                    r.attempts,
                    r.likes,
                    milestones::show_time(Some(r.reached_at)),
                    milestones::show_time(r.due_at),
                    milestones::show_time(r.delivered_at),
                    r.last_error.as_deref().unwrap_or("-"),
                );
            }
            println!("{} record(s)", records.len());
            Ok(())
        }
        MilestonesAction::Retry { target, ids } => {
            let db = connect::store_db_to_write(endpoints, &target, 1).await?;
            let retried = milestones::retry(&db, &ids).await?;
            println!("{retried} record(s) made pending again");
            Ok(())
        }
    }
}
