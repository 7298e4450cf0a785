//! `hotcount count`: each post's like count, or with `--live` each change
//! of the posts' rollups as it happens.
//!
//! Invariant: reads only.

use anyhow::Context as _;
use hotcount::config::{Endpoints, Target};
use hotcount::connect;
use hotcount::ops::live;

use super::run::wait_for_signal;

/// Prints each post's count (`POST<TAB>count`), or with `follow` (`--live`) each
/// rollup change until interrupted.
pub async fn count(
    endpoints: &Endpoints,
    target: &Target,
    follow: bool,
    post_ids: &[String],
) -> anyhow::Result<()> {
    if follow {
        let db = connect::store_db(endpoints, target, 2).await?;
        let print = |change: &live::RollupChange| {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", live::line(change)).is_ok() && out.flush().is_ok()
        };
        tokio::select! {
            () = live::watch(&db, post_ids, print) => {}
            () = wait_for_signal() => {}
        }
        Ok(())
    } else {
        let db = connect::store_db(endpoints, target, 1).await?;
        for post in post_ids {
            let count = db
                .count(post)
                .await
                .with_context(|| format!("counting {post}"))?;
            println!("{post}\t{count}");
        }
        Ok(())
    }
}
