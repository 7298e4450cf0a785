//! The `hotcount` command: parse, set up telemetry, run, map errors to exit codes.
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use hotcount::config::{Endpoints, RunArgs, Target};
use hotcount::ops::{dlq, live, milestones, quarantine, reconcile, replay, rollups, setup, users};
use hotcount::{connect, service, telemetry};
use tokio::sync::watch;

/// mimalloc instead of the system allocator: the pipeline allocates many
/// small, short-lived objects on several threads, where glibc's malloc
/// spent ~45 % of the consumer's CPU (docs/benchmarks-history.md, profile).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The exit code of `run` when the drain did not end by the shutdown
/// deadline (plus 2 s) and the backstop ended the process: nothing is
/// lost (what was not acked is redelivered), but the stop was not clean.
const DRAIN_INCOMPLETE: i32 = 3;

/// Exactly-once like counter for viral posts.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(flatten)]
    endpoints: Endpoints,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Consume like events and count them until SIGINT/SIGTERM.
    Run(Box<RunArgs>),
    /// Print the like count of each post (sum of its counter shards); with
    /// --live, each change of the posts' rollups as it happens.
    Count {
        #[command(flatten)]
        target: Target,
        /// Print each post's rollup (`POST<TAB>likes<TAB>asOf`), then each
        /// change of it as it happens, until interrupted.
        #[arg(long)]
        live: bool,
        /// Post ids.
        #[arg(required = true)]
        post_ids: Vec<String>,
    },
    /// Create the topics and subscriptions or bring them in line (retention,
    /// ack deadline, retry and dead-letter policy, exactly-once), grant the
    /// roles on them, and with `--store postgres://...` apply the schema
    /// migrations; with `--data-format N`, raise the store's data format
    /// (never lowered). Idempotent; every change is reported.
    Setup {
        #[command(flatten)]
        args: setup::SetupArgs,
        #[command(flatten)]
        store: setup::SetupStore,
    },
    /// Compare each post's counter shards with its liked memberships; fix with --repair.
    Reconcile {
        #[command(flatten)]
        target: Target,
        /// Only these posts (repeatable); default: every post with shards or likes.
        #[arg(long = "post")]
        posts: Vec<String>,
        /// Write a correcting increment for each difference (one transaction per post).
        #[arg(long)]
        repair: bool,
    },
    /// Replay a time window of the topic through an isolated subscription.
    Replay(replay::ReplayArgs),
    /// Inspect or replay dead-lettered messages.
    #[command(subcommand)]
    Dlq(DlqAction),
    /// List, show or re-drive quarantine records.
    #[command(subcommand)]
    Quarantine(QuarantineAction),
    /// List milestone records, or retry given-up ones.
    #[command(subcommand)]
    Milestones(MilestonesAction),
    /// Refresh rollups from every counter shard their posts have.
    #[command(subcommand)]
    Rollups(RollupsAction),
    /// A user's data: export it (an access request), or erase it exactly.
    #[command(subcommand)]
    Users(UsersAction),
}

#[derive(Subcommand, Debug)]
enum RollupsAction {
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

#[derive(Subcommand, Debug)]
enum UsersAction {
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
struct EraseFlags {
    #[command(flatten)]
    target: Target,
    /// Print what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// The service's consumer name (namespaces the batch markers).
    #[arg(long, env = "HOTCOUNT_CONSUMER", default_value = "hotcount")]
    consumer: String,
    /// Counter shards per post (as the service's `--counter-shards`).
    #[arg(long, env = "HOTCOUNT_COUNTER_SHARDS", default_value_t = hotcount::config::DEFAULT_COUNTER_SHARDS)]
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
struct UserHash {
    /// The service's `--user-hash-key`: with it, `erase` writes the user's
    /// tombstone first (every replica then drops the user's events) and
    /// deletes the erased memberships at the end.
    #[arg(long, env = "HOTCOUNT_USER_HASH_KEY", hide_env_values = true)]
    user_hash_key: Option<hotcount::config::Secret>,
    /// A file holding `--user-hash-key`; trailing line breaks are ignored.
    #[arg(
        long,
        env = "HOTCOUNT_USER_HASH_KEY_FILE",
        value_name = "PATH",
        value_parser = hotcount::config::FileParser::<hotcount::config::Secret>::new(),
        conflicts_with = "user_hash_key"
    )]
    user_hash_key_file: Option<hotcount::config::FromFile<hotcount::config::Secret>>,
    /// The service's `--tombstone-refresh-ms`: `erase` waits twice this
    /// after writing a tombstone.
    #[arg(long, env = "HOTCOUNT_TOMBSTONE_REFRESH_MS", default_value_t = 5_000)]
    tombstone_refresh_ms: u64,
}

impl UserHash {
    fn key(&self) -> Option<Vec<u8>> {
        let key = hotcount::config::Secret::given(
            self.user_hash_key.as_ref(),
            self.user_hash_key_file.as_ref(),
        )?;
        Some(key.expose().as_bytes().to_vec())
    }
}

#[derive(Subcommand, Debug)]
enum MilestonesAction {
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

#[derive(Subcommand, Debug)]
enum QuarantineAction {
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

#[derive(Subcommand, Debug)]
enum DlqAction {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = matches!(&cli.command, Command::Run(args) if args.log_json);
    telemetry::init_tracing(json);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(args) => {
            let config = args.validate()?;
            let (stop_tx, stop) = watch::channel(false);
            // The drain ends by the deadline (commits stop, transactions
            // are rolled back, the rest is nacked); this is the backstop if
            // an RPC hangs past it: whatever is unacked is redelivered.
            let backstop = config.shutdown_deadline + std::time::Duration::from_secs(2);
            tokio::spawn(async move {
                wait_for_signal().await;
                tracing::info!("signal received; draining (a second signal exits at once)");
                let _ = stop_tx.send(true);
                tokio::spawn(async move {
                    tokio::time::sleep(backstop).await;
                    tracing::error!(
                        ?backstop,
                        exit_code = DRAIN_INCOMPLETE,
                        "drain did not end by the shutdown deadline; exiting (unacked messages are redelivered)"
                    );
                    std::process::exit(DRAIN_INCOMPLETE);
                });
                wait_for_signal().await;
                eprintln!("second signal: exiting without draining");
                std::process::exit(130);
            });
            let stats = Arc::new(telemetry::Stats::default());
            service::run(&cli.endpoints, &config, stop, stats).await?;
            Ok(())
        }
        Command::Count {
            target,
            live: true,
            post_ids,
        } => {
            let db = connect::store_db(&cli.endpoints, &target, 2).await?;
            let print = |change: &live::RollupChange| {
                use std::io::Write as _;
                let mut out = std::io::stdout().lock();
                writeln!(out, "{}", live::line(change)).is_ok() && out.flush().is_ok()
            };
            tokio::select! {
                () = live::watch(&db, &post_ids, print) => {}
                () = wait_for_signal() => {}
            }
            Ok(())
        }
        Command::Count {
            target,
            live: false,
            post_ids,
        } => {
            let db = connect::store_db(&cli.endpoints, &target, 1).await?;
            for post in post_ids {
                let count = db
                    .count(&post)
                    .await
                    .with_context(|| format!("counting {post}"))?;
                println!("{post}\t{count}");
            }
            Ok(())
        }
        Command::Reconcile {
            target,
            posts,
            repair,
        } => reconcile(&cli.endpoints, &target, posts, repair).await,
        Command::Replay(args) => {
            let report = replay::run(&cli.endpoints, &args).await?;
            print_replay(&report);
            match report.ending {
                replay::Ending::Paused => anyhow::bail!(
                    "replay paused: divergence {:.4} exceeds --max-divergence {}",
                    report.divergence(),
                    args.max_divergence
                ),
                replay::Ending::Failed => anyhow::bail!(
                    "replay stopped: {}; what it committed before is above (replaying again is safe: processed events are duplicates)",
                    report.failure.as_deref().unwrap_or("unknown failure")
                ),
                replay::Ending::WindowEnd | replay::Ending::Drained => Ok(()),
            }
        }
        Command::Dlq(action) => match action {
            DlqAction::Inspect(args) => {
                let letters = dlq::inspect(&cli.endpoints, &args).await?;
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
                let replayed = dlq::replay(&cli.endpoints, &args, &selection).await?;
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
        },
        Command::Quarantine(action) => quarantine_command(&cli.endpoints, action).await,
        Command::Milestones(action) => milestones_command(&cli.endpoints, action).await,
        Command::Rollups(RollupsAction::Refresh {
            target,
            posts,
            counter_shards,
        }) => {
            let db = connect::store_db_to_write(&cli.endpoints, &target, 2).await?;
            let report = rollups::refresh(&db, posts, counter_shards).await?;
            println!(
                "rollups: {} posts read, {} rollups written",
                report.posts, report.written
            );
            Ok(())
        }
        Command::Users(action) => users_command(&cli.endpoints, action).await,
        Command::Setup { args, store } => {
            let milestones = store.milestone_setting()?;
            let mut done = setup::migrate_store(store.location()).await?;
            // The store is written (migrations, milestones, the format):
            // refused before anything else changes when its data format
            // is newer than this build knows.
            let writes_store = milestones.is_some()
                || store.data_format.is_some()
                || !matches!(store.location(), hotcount::config::StoreLocation::Firestore);
            let db = if writes_store {
                let target = Target {
                    store: store.location().clone(),
                    project: args.project.clone(),
                    database: store.database.clone(),
                    collection_prefix: store.collection_prefix.clone(),
                };
                Some(connect::store_db_to_write(&cli.endpoints, &target, 2).await?)
            } else {
                None
            };
            done.extend(setup::setup(&cli.endpoints, &args).await?);
            if let (Some(setting), Some(db)) = (milestones, &db) {
                let change = setup::store_milestones(db, &setting).await?;
                done.push((format!("milestones {}", setting.describe()), change));
            }
            if let (Some(asked), Some(db)) = (store.data_format, &db) {
                let report =
                    setup::format::raise_data_format(db, asked, store.counter_shards).await?;
                done.extend(report.lines());
            }
            for (name, change) in done {
                match change.detail() {
                    detail if detail.is_empty() => println!("{}\t{name}", change.word()),
                    detail => println!("{}\t{name}\t{detail}", change.word()),
                }
            }
            Ok(())
        }
    }
}

async fn users_command(endpoints: &Endpoints, action: UsersAction) -> anyhow::Result<()> {
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

async fn milestones_command(endpoints: &Endpoints, action: MilestonesAction) -> anyhow::Result<()> {
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

async fn quarantine_command(endpoints: &Endpoints, action: QuarantineAction) -> anyhow::Result<()> {
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

async fn reconcile(
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

fn print_replay(report: &replay::ReplayReport) {
    let e = &report.effects;
    let mode = if report.dry_run {
        "dry run (nothing written)"
    } else {
        "committed"
    };
    println!("replay\t{mode}");
    println!(
        "subscription\t{} ({})",
        report.subscription,
        if report.deleted { "deleted" } else { "kept" }
    );
    println!("ending\t{:?}", report.ending);
    println!(
        "messages\t{}\tskipped outside the window\t{}\terased users' events dropped\t{}",
        report.messages, report.skipped, report.erased
    );
    println!(
        "applied\t{}\tduplicates\t{}\tstale\t{}\tpoison\t{}\tdivergence\t{:.4}",
        e.applied,
        e.duplicates,
        e.stale,
        e.poison,
        report.divergence()
    );
    for (post, delta) in &report.deltas {
        println!("delta\t{post}\t{delta:+}");
    }
}

async fn wait_for_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// Flags that may carry a secret, each with its `-file` form.
    const SECRET_FLAGS: [&str; 4] = [
        "store",
        "milestone-webhook-secret",
        "milestone-webhook-previous-secret",
        "user-hash-key",
    ];

    /// `(command path, long flags)` for `command` and every subcommand.
    fn flags_of(command: &clap::Command, path: &str, out: &mut Vec<(String, Vec<String>)>) {
        let longs = command
            .get_arguments()
            .filter_map(clap::Arg::get_long)
            .map(str::to_string)
            .collect();
        out.push((path.to_string(), longs));
        for sub in command.get_subcommands() {
            flags_of(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_command_taking_a_secret_also_reads_it_from_a_file() {
        let mut commands = Vec::new();
        flags_of(&super::Cli::command(), "hotcount", &mut commands);
        let mut checked = 0;
        for (path, longs) in &commands {
            for flag in SECRET_FLAGS
                .iter()
                .filter(|f| longs.iter().any(|l| l == *f))
            {
                let file = format!("{flag}-file");
                assert!(
                    longs.contains(&file),
                    "`{path}` takes --{flag} but not --{file}"
                );
                checked += 1;
            }
        }
        // run, count, setup, reconcile, replay, the store tools and `users`.
        assert!(checked > 15, "only {checked} secret flags found");
    }
}
