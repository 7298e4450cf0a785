//! `hotcount users`: a user's data, exported or erased exactly; the
//! erased users' tombstones, listed, re-applied or lifted.
//!
//! Invariant: an erasure is resumable (running it again after a kill
//! finishes it); without the hash key no tombstone is written.

use anyhow::Context as _;
use clap::Subcommand;
use hotcount::config::{Endpoints, Target, UserHashKeyFlags, DEFAULT_COUNTER_SHARDS};
use hotcount::connect;
use hotcount::ops::users;

#[derive(Subcommand, Debug)]
pub enum UsersAction {
    /// Print one JSON line per post the user likes now (`post`, `since`,
    /// `lastEventAt`, `recordedAt`); writes nothing.
    Export {
        #[command(flatten)]
        target: Target,
        /// The user id.
        user: String,
    },
    /// Remove each like of each user exactly (its post's count, rollup and
    /// listeners follow), through the pipeline's own conditional commits,
    /// while the service runs; then delete the quarantine records that
    /// carry the id. Resumable: run it again after a kill. With
    /// --user-hash-key it writes a tombstone, which builds before data
    /// format 2 do not check: refused until the store is at format 2
    /// (`hotcount setup --data-format 2`, once every replica runs this build).
    Erase {
        #[command(flatten)]
        flags: EraseFlags,
        /// User ids.
        #[arg(required = true)]
        users: Vec<String>,
    },
    /// Print every tombstone (the keyed hashes of erased users, no id), one
    /// a line: keep the list outside the store's backups.
    Tombstones {
        #[command(flatten)]
        target: Target,
    },
    /// After restoring a backup taken before some erasures: write back the
    /// tombstones listed in FILE (as `tombstones` printed them), then erase
    /// every user whose keyed hash is among them. Needs the key, and the
    /// store at data format 2 (`hotcount setup --data-format 2`).
    Reapply {
        #[command(flatten)]
        flags: EraseFlags,
        /// The file of tombstones, one hash a line.
        #[arg(long)]
        tombstones: std::path::PathBuf,
    },
    /// Lift the tombstone `erase` left: the user's events count again.
    Restore {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        hash: UserHash,
        /// User ids.
        #[arg(required = true)]
        users: Vec<String>,
    },
}

/// How `erase` and `reapply` commit.
#[derive(clap::Args, Debug)]
pub struct EraseFlags {
    #[command(flatten)]
    target: Target,
    /// Print what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// The service's consumer name (namespaces the batch markers).
    #[arg(long, env = "HOTCOUNT_CONSUMER", default_value = "hotcount")]
    consumer: String,
    /// Counter shards per post (as the service's `--counter-shards`).
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = DEFAULT_COUNTER_SHARDS)]
    counter_shards: u32,
    /// Batch marker lifetime, in days (as the service's `--marker-ttl-days`).
    #[arg(long, env = "HOTCOUNT_MARKER_TTL_DAYS", default_value_t = 40)]
    marker_ttl_days: u64,
    /// Memberships per transaction (1..=200).
    #[arg(long, default_value_t = users::ERASE_CHUNK)]
    chunk: usize,
    #[command(flatten)]
    hash: UserHash,
}

impl EraseFlags {
    /// The store the erasure commits through, and its settings.
    async fn open(
        &self,
        endpoints: &Endpoints,
    ) -> anyhow::Result<(users::EraseStore, users::EraseSettings)> {
        let db = connect::store_db_to_write(endpoints, &self.target, 2).await?;
        let settle = std::time::Duration::from_millis(2 * self.hash.tombstone_refresh_ms);
        let tombstone = self
            .hash
            .key()
            .map(|key| users::TombstoneSettings { key, settle });
        if tombstone.is_none() {
            eprintln!("no --user-hash-key: no tombstone is written, and the erased memberships are kept (they hold the id)");
        } else if !self.dry_run {
            // Builds before data format 2 do not check tombstones.
            users::require_tombstone_format(&db).await?;
        }
        let ttl = std::time::Duration::from_secs(86_400 * self.marker_ttl_days.clamp(1, 3650));
        let store = users::erase_store(db, &self.consumer, self.counter_shards, ttl);
        let settings = users::EraseSettings {
            dry_run: self.dry_run,
            chunk: self.chunk,
            counter_shards: self.counter_shards,
            tombstone,
        };
        Ok((store, settings))
    }
}

/// One summary line of what an erasure did (`who` names the user).
fn erased_line(dry_run: bool, who: &str, e: &users::Erased) -> String {
    let verb = if dry_run { "would erase" } else { "erased" };
    format!(
        "{verb}\t{who}\tlikes removed {}\tunliked memberships {}\talready erased {}\tmemberships deleted {}\tquarantine records {}",
        e.likes, e.unliked, e.already, e.deleted, e.quarantine
    )
}

/// The tombstones' keyed hash, as the service's flags give it.
#[derive(clap::Args, Debug)]
#[command(mut_arg("user_hash_key", |a| a.help(
    "The service's `--user-hash-key`: with it, `erase` writes the user's tombstone first (every replica then drops the user's events) and deletes the erased memberships at the end"
)))]
pub struct UserHash {
    /// `--user-hash-key` or its file (the one declaration is
    /// [`UserHashKeyFlags`]).
    #[command(flatten)]
    key: UserHashKeyFlags,
    /// The service's `--tombstone-refresh-ms`: `erase` waits twice this
    /// after writing a tombstone.
    #[arg(long, env = "HOTCOUNT_TOMBSTONE_REFRESH_MS", default_value_t = 5_000)]
    tombstone_refresh_ms: u64,
}

impl UserHash {
    fn key(&self) -> Option<Vec<u8>> {
        Some(self.key.key()?.expose().as_bytes().to_vec())
    }
}

/// Runs `action` and prints what it found or did.
pub async fn users_command(endpoints: &Endpoints, action: UsersAction) -> anyhow::Result<()> {
    match action {
        UsersAction::Export { target, user } => {
            let db = connect::store_db(endpoints, &target, 1).await?;
            let lines = users::export(&db, &user).await?;
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            for line in &lines {
                serde_json::to_writer(&mut out, line)?;
                writeln!(out)?;
            }
            out.flush()?;
            Ok(())
        }
        UsersAction::Erase { flags, users: ids } => {
            let (store, settings) = flags.open(endpoints).await?;
            for user in &ids {
                let progress =
                    |done: u64, total: u64| eprintln!("{user}: {done}/{total} memberships erased");
                let e = users::erase(&store, user, &settings, progress)
                    .await
                    .with_context(|| {
                        format!("erasing {user} (running the command again resumes it)")
                    })?;
                println!("{}", erased_line(flags.dry_run, user, &e));
            }
            Ok(())
        }
        UsersAction::Tombstones { target } => {
            let db = connect::store_db(endpoints, &target, 1).await?;
            for hash in users::tombstones(&db).await? {
                println!("{hash}");
            }
            Ok(())
        }
        UsersAction::Reapply { flags, tombstones } => {
            let text = std::fs::read_to_string(&tombstones)
                .with_context(|| format!("reading {}", tombstones.display()))?;
            let hashes: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            let (store, settings) = flags.open(endpoints).await?;
            if settings.tombstone.is_none() {
                anyhow::bail!(
                    "--user-hash-key (HOTCOUNT_USER_HASH_KEY) is needed to re-apply tombstones"
                );
            }
            let done = users::reapply(&store, &hashes, &settings)
                .await
                .context("re-applying the tombstones (running the command again resumes it)")?;
            for (hash, e) in &done {
                println!("{}", erased_line(flags.dry_run, hash, e));
            }
            println!(
                "{} tombstone(s); {} user(s) found and erased",
                hashes.len(),
                done.len()
            );
            Ok(())
        }
        UsersAction::Restore {
            target,
            hash,
            users: ids,
        } => {
            let Some(key) = hash.key() else {
                anyhow::bail!(
                    "--user-hash-key (HOTCOUNT_USER_HASH_KEY) is needed to find a tombstone"
                );
            };
            let db = connect::store_db_to_write(endpoints, &target, 1).await?;
            for user in &ids {
                if users::restore(&db, &key, user).await? {
                    println!("restored\t{user}");
                } else {
                    println!("no tombstone\t{user}");
                }
            }
            Ok(())
        }
    }
}
