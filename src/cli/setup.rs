//! `hotcount setup`: migrate the store, create or bring in line the
//! Pub/Sub resources and roles (not with `--store-only`), store the
//! milestones and raise the data format; print one line per resource.
//!
//! Invariant: a store whose data format is newer than this build knows is
//! refused before anything changes.

use hotcount::config::{Endpoints, StoreLocation, Target};
use hotcount::connect;
use hotcount::ops::setup;

/// Runs setup and prints what it did to each resource.
pub async fn setup(
    endpoints: &Endpoints,
    args: &setup::SetupArgs,
    store: &setup::SetupStore,
) -> anyhow::Result<()> {
    let milestones = store.milestone_setting()?;
    let mut done = setup::migrate_store(store.location()).await?;
    // The store is written (migrations, milestones, the format):
    // refused before anything else changes when its data format
    // is newer than this build knows.
    let writes_store = milestones.is_some()
        || store.data_format.is_some()
        || !matches!(store.location(), StoreLocation::Firestore);
    let db = if writes_store {
        let target = Target {
            store: store.location().clone(),
            project: args.project.clone(),
            database: store.database.clone(),
            collection_prefix: store.collection_prefix.clone(),
        };
        Some(connect::store_db_to_write(endpoints, &target, 2).await?)
    } else {
        None
    };
    if !store.store_only {
        done.extend(setup::setup(endpoints, args).await?);
    }
    if let (Some(setting), Some(db)) = (milestones, &db) {
        let change = setup::store_milestones(db, &setting).await?;
        done.push((format!("milestones {}", setting.describe()), change));
    }
    if let (Some(asked), Some(db)) = (store.data_format, &db) {
        let report = setup::format::raise_data_format(db, asked, store.counter_shards).await?;
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
