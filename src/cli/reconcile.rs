//! `hotcount reconcile`: compare each post's counter shards with its liked
//! memberships, repair with `--repair`, print one line per post.
//!
//! Invariant: without `--repair` it writes nothing but the rollups of posts
//! already repaired; it fails while a post differs or failed.

use hotcount::config::{Endpoints, Target};
use hotcount::connect;
use hotcount::ops::reconcile;

/// Reconciles `posts` (every post when empty) and prints the result.
pub async fn reconcile(
    endpoints: &Endpoints,
    target: &Target,
    posts: Vec<String>,
    repair: bool,
) -> anyhow::Result<()> {
    let db = if repair {
        connect::store_db_to_write(endpoints, target, 1).await?
    } else {
        connect::store_db(endpoints, target, 1).await?
    };
    let reports = if posts.is_empty() {
        reconcile::reconcile_all(&db, repair).await?
    } else {
        reconcile::reconcile_posts(&db, &posts, repair).await
    };
    // The counts repaired changed: so do the rollups of those posts.
    reconcile::refresh_rollups(&db, &reports).await;
    println!("post\tshards\tliked\tdifference\tstatus");
    let (mut unrepaired, mut failed) = (0, 0);
    for r in &reports {
        let status = match (&r.error, r.difference(), r.repaired) {
            (Some(error), _, _) => {
                failed += 1;
                format!("failed: {error}")
            }
            (None, 0, false) => "ok".to_string(),
            (None, _, true) => "repaired".to_string(),
            (None, _, false) => {
                unrepaired += 1;
                "differs".to_string()
            }
        };
        println!(
            "{}\t{}\t{}\t{:+}\t{status}",
            r.post_id,
            r.shards_sum,
            r.liked,
            r.difference()
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} post(s) failed (see their lines); the others are reported as done");
    }
    if unrepaired > 0 {
        anyhow::bail!("{unrepaired} post(s) differ; run again with --repair to fix them");
    }
    Ok(())
}
