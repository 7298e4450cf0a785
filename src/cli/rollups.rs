//! `hotcount rollups refresh`: bring each post's rollup to the sum of its
//! counter shards.
//!
//! Invariant: safe beside running replicas.

use clap::Subcommand;
use hotcount::config::{Endpoints, Target};
use hotcount::connect;
use hotcount::ops::rollups;

#[derive(Subcommand, Debug)]
pub enum RollupsAction {
    /// Bring each post's rollup to the sum of every counter shard it has,
    /// creating missing ones (after an upgrade from a build before rollups,
    /// once none of its replicas runs); safe beside running replicas.
    Refresh {
        #[command(flatten)]
        target: Target,
        /// Only these posts (repeatable); default: every post with shards or likes.
        #[arg(long = "post")]
        posts: Vec<String>,
        /// Counter shards a post may have (`run --counter-shards` of every
        /// build that wrote them, the largest).
        #[arg(long, default_value_t = hotcount::config::DEFAULT_COUNTER_SHARDS)]
        counter_shards: u32,
    },
}

/// Runs `action` and prints what it did.
pub async fn rollups_command(endpoints: &Endpoints, action: RollupsAction) -> anyhow::Result<()> {
    let RollupsAction::Refresh {
        target,
        posts,
        counter_shards,
    } = action;
    let db = connect::store_db_to_write(endpoints, &target, 2).await?;
    let report = rollups::refresh(&db, posts, counter_shards).await?;
    println!(
        "rollups: {} posts read, {} rollups written",
        report.posts, report.written
    );
    Ok(())
}
