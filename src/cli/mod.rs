//! The `hotcount` command line: every command's flags ([`Cli`]) and the
//! dispatch to its module, which calls `ops` (or the service) and prints
//! the report (binary-only modules; `tests/module_graph.rs` counts them as
//! `main`).
//!
//! Invariant: a command fails (exit 1) with its error on stderr; only
//! `run`'s drain has its own exit codes (`run.rs`).

mod count;
mod dlq;
mod milestones;
mod quarantine;
mod reconcile;
mod replay;
mod rollups;
mod run;
mod setup;
mod users;

use clap::{Parser, Subcommand};
use hotcount::config::{Endpoints, RunArgs, Target};
use hotcount::ops::{replay as replay_ops, setup as setup_ops};

/// Exactly-once like counter for viral posts.
#[derive(Parser, Debug)]
#[command(version, about)]
pub struct Cli {
    #[command(flatten)]
    pub endpoints: Endpoints,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
    /// (never lowered); with `--store-only`, the store alone. Idempotent;
    /// every change is reported.
    Setup {
        #[command(flatten)]
        args: setup_ops::SetupArgs,
        #[command(flatten)]
        store: setup_ops::SetupStore,
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
    Replay(replay_ops::ReplayArgs),
    /// Inspect or replay dead-lettered messages.
    #[command(subcommand)]
    Dlq(dlq::DlqAction),
    /// List, show or re-drive quarantine records.
    #[command(subcommand)]
    Quarantine(quarantine::QuarantineAction),
    /// List milestone records, or retry given-up ones.
    #[command(subcommand)]
    Milestones(milestones::MilestonesAction),
    /// Refresh rollups from every counter shard their posts have.
    #[command(subcommand)]
    Rollups(rollups::RollupsAction),
    /// A user's data: export it (an access request), or erase it exactly.
    #[command(subcommand)]
    Users(users::UsersAction),
}

/// Runs the command `cli` names.
pub async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let endpoints = &cli.endpoints;
    match cli.command {
        Command::Run(args) => run::run(endpoints, &args).await,
        Command::Count {
            target,
            live,
            post_ids,
        } => count::count(endpoints, &target, live, &post_ids).await,
        Command::Reconcile {
            target,
            posts,
            repair,
        } => reconcile::reconcile(endpoints, &target, posts, repair).await,
        Command::Replay(args) => replay::replay(endpoints, &args).await,
        Command::Dlq(action) => dlq::dlq_command(endpoints, action).await,
        Command::Quarantine(action) => quarantine::quarantine_command(endpoints, action).await,
        Command::Milestones(action) => milestones::milestones_command(endpoints, action).await,
        Command::Rollups(action) => rollups::rollups_command(endpoints, action).await,
        Command::Users(action) => users::users_command(endpoints, action).await,
        Command::Setup { args, store } => setup::setup(endpoints, &args, &store).await,
    }
}
