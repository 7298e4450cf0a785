//! Opening clients: Google's endpoints with Application Default Credentials,
//! or emulators (anonymous credentials) when an emulator address is set;
//! and the database `--store` selects, Firestore or PostgreSQL.
//!
//! Invariants: credentials are never logged (a PostgreSQL URL only with
//! its password hidden); an emulator address is only ever used with
//! anonymous credentials over plain HTTP/2; a PostgreSQL database is
//! handed out only once its schema is this build's ([`store_db`]), and
//! only [`migrate_schema`] (`setup`'s) migrates it; a store is handed out
//! to write only once its data format is one this build knows
//! ([`store_db_to_write`]).

use firestore::{FirestoreDb, FirestoreDbOptions};
use google_cloud_pubsub::client::{
    Publisher, SchemaService, Subscriber, SubscriptionAdmin, TopicAdmin,
};

use crate::config::{Endpoints, StoreLocation, Target};
use crate::store::format::{self, FormatError};
use crate::store::postgres::{
    migrations, MigrateError, PgConfigError, PgDb, PgDbConfig, SchemaError,
};
use crate::store::selected::SelectedDb;

/// A client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("connecting to {service}: {message}")]
pub struct ConnectError {
    /// `pubsub` or `firestore`.
    pub service: &'static str,
    /// What went wrong.
    pub message: String,
}

fn emulator_url(host: &str) -> String {
    if host.contains("://") {
        host.to_string()
    } else {
        format!("http://{host}")
    }
}

fn anonymous() -> google_cloud_auth::credentials::Credentials {
    google_cloud_auth::credentials::anonymous::Builder::new().build()
}

fn pubsub_error(e: impl std::fmt::Display) -> ConnectError {
    ConnectError {
        service: "pubsub",
        message: e.to_string(),
    }
}

/// A Pub/Sub subscriber client.
pub async fn subscriber(endpoints: &Endpoints) -> Result<Subscriber, ConnectError> {
    let mut builder = Subscriber::builder();
    if let Some(host) = &endpoints.pubsub_emulator_host {
        builder = builder
            .with_endpoint(emulator_url(host))
            .with_credentials(anonymous());
    }
    builder.build().await.map_err(pubsub_error)
}

/// A Pub/Sub publisher for `topic` (full name), with the crate's default batching.
pub async fn publisher(endpoints: &Endpoints, topic: &str) -> Result<Publisher, ConnectError> {
    let mut builder = Publisher::builder(topic);
    if let Some(host) = &endpoints.pubsub_emulator_host {
        builder = builder
            .with_endpoint(emulator_url(host))
            .with_credentials(anonymous());
    }
    builder.build().await.map_err(pubsub_error)
}

/// The Pub/Sub topic admin client.
pub async fn topic_admin(endpoints: &Endpoints) -> Result<TopicAdmin, ConnectError> {
    let mut builder = TopicAdmin::builder();
    if let Some(host) = &endpoints.pubsub_emulator_host {
        builder = builder
            .with_endpoint(emulator_url(host))
            .with_credentials(anonymous());
    }
    builder.build().await.map_err(pubsub_error)
}

/// The Pub/Sub subscription admin client.
pub async fn subscription_admin(endpoints: &Endpoints) -> Result<SubscriptionAdmin, ConnectError> {
    let mut builder = SubscriptionAdmin::builder();
    if let Some(host) = &endpoints.pubsub_emulator_host {
        builder = builder
            .with_endpoint(emulator_url(host))
            .with_credentials(anonymous());
    }
    builder.build().await.map_err(pubsub_error)
}

/// The client of Pub/Sub's IAM policy methods (`GetIamPolicy`,
/// `SetIamPolicy` on topics and subscriptions): the crate serves them from
/// its `SchemaService` client, as Google's API does from any of its services.
pub async fn iam_policy(endpoints: &Endpoints) -> Result<SchemaService, ConnectError> {
    let mut builder = SchemaService::builder();
    if let Some(host) = &endpoints.pubsub_emulator_host {
        builder = builder
            .with_endpoint(emulator_url(host))
            .with_credentials(anonymous());
    }
    builder.build().await.map_err(pubsub_error)
}

/// A Firestore client for `target`'s project and database.
pub async fn firestore(
    endpoints: &Endpoints,
    target: &Target,
) -> Result<FirestoreDb, ConnectError> {
    let options =
        FirestoreDbOptions::new(target.project.clone()).with_database_id(target.database.clone());
    let result = match &endpoints.firestore_emulator_host {
        Some(host) => {
            let options = options.with_firebase_api_url(emulator_url(host));
            FirestoreDb::with_options_auth(options, anonymous()).await
        }
        None => FirestoreDb::with_options(options).await,
    };
    result.map_err(|e| ConnectError {
        service: "firestore",
        message: e.to_string(),
    })
}

/// Opens the hotcount database of `target`: the client of [`firestore`]
/// with the document layout of `target`, as the one
/// [`crate::store::firestore::FirestoreDb`] handle.
pub async fn firestore_db(
    endpoints: &Endpoints,
    target: &Target,
) -> Result<crate::store::firestore::FirestoreDb, ConnectError> {
    let client = firestore(endpoints, target).await?;
    let layout = crate::store::firestore::Layout::new(
        &target.project,
        &target.database,
        &target.collection_prefix,
    );
    Ok(crate::store::firestore::FirestoreDb::new(client, layout))
}

/// The selected database could not be opened (or, by `setup`'s
/// [`migrate_schema`], migrated).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No Firestore client.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The PostgreSQL URL or pool settings cannot be used.
    #[error("{store}: {error}")]
    Postgres {
        /// The store, its password hidden.
        store: String,
        /// What is wrong (not a `source`: the message holds it).
        error: PgConfigError,
    },
    /// The PostgreSQL schema is missing or older than this build's.
    #[error("{store}: {error}")]
    Schema {
        /// The store, its password hidden.
        store: String,
        /// What is wrong (not a `source`: the message holds it).
        error: SchemaError,
    },
    /// Applying the PostgreSQL schema migrations failed (none is
    /// half-applied; only [`migrate_schema`]).
    #[error("migrating the PostgreSQL schema of {store}: {error}")]
    Migrate {
        /// The store, its password hidden.
        store: String,
        /// What failed (not a `source`: the message holds it).
        error: MigrateError,
    },
    /// The store's data format is newer than this build knows, or could
    /// not be read.
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl OpenError {
    /// Whether opening again may succeed without an operator's change.
    pub fn is_retryable(&self) -> bool {
        match self {
            OpenError::Schema { error, .. } => error.is_retryable(),
            OpenError::Migrate { error, .. } => error.is_retryable(),
            OpenError::Format(error) => error.is_retryable(),
            OpenError::Connect(_) | OpenError::Postgres { .. } => false,
        }
    }
}

/// Opens the database `target.store` names: Firestore (at `endpoints`,
/// [`firestore_db`]) or a PostgreSQL pool of at most `max_connections`,
/// after checking the server (version, encoding) and that `setup` brought
/// its schema to this build's migrations ([`PgDb::check_schema`]). Store
/// calls have the default deadline (the operator tools' 30 s).
pub async fn store_db(
    endpoints: &Endpoints,
    target: &Target,
    max_connections: usize,
) -> Result<SelectedDb, OpenError> {
    let default = crate::store::firestore::DEFAULT_CALL_TIMEOUT;
    store_db_within(endpoints, target, max_connections, default).await
}

/// [`store_db`] for a command that writes: refused when the store's data
/// format is newer than this build knows ([`format::check_known`]: the
/// read at start is retried while the store fails transiently, bounded).
pub async fn store_db_to_write(
    endpoints: &Endpoints,
    target: &Target,
    max_connections: usize,
) -> Result<SelectedDb, OpenError> {
    let db = store_db(endpoints, target, max_connections).await?;
    let found = format::check_known(&db).await?;
    tracing::debug!(store = %target.store, data_format = found, "data format checked");
    Ok(db)
}

/// [`store_db`] whose store calls end within `call_timeout` (a Firestore
/// RPC; a PostgreSQL call, and its batch transaction's
/// `statement_timeout`): `run`'s `--store-call-timeout-ms`.
pub async fn store_db_within(
    endpoints: &Endpoints,
    target: &Target,
    max_connections: usize,
    call_timeout: std::time::Duration,
) -> Result<SelectedDb, OpenError> {
    match &target.store {
        StoreLocation::Firestore => {
            let db = firestore_db(endpoints, target).await?;
            Ok(SelectedDb::Firestore(db.with_call_timeout(call_timeout)))
        }
        StoreLocation::Postgres { url } => {
            let mut config = PgDbConfig::new(url.clone());
            config.max_connections = config.max_connections.max(max_connections);
            config.call_timeout = call_timeout;
            let store = target.store.to_string();
            let db = pg_db(&config, &store)?;
            let version = db
                .check_schema()
                .await
                .map_err(|error| OpenError::Schema { store, error })?;
            tracing::debug!(store = %target.store, version, "PostgreSQL schema checked");
            Ok(SelectedDb::Postgres(db))
        }
    }
}

/// A PostgreSQL handle for `config` (no connection made yet); `store` is
/// the URL as shown, its password hidden.
fn pg_db(config: &PgDbConfig, store: &str) -> Result<PgDb, OpenError> {
    PgDb::new(config).map_err(|error| OpenError::Postgres {
        store: store.to_string(),
        error,
    })
}

/// One schema migration of the store and whether [`migrate_schema`]
/// applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStep {
    /// Its version (migrations apply in increasing order).
    pub version: i32,
    /// Its short name.
    pub name: &'static str,
    /// `true`: this run applied it; `false`: the store had it already.
    pub applied: bool,
}

/// Brings the schema of the store `store` names to this build's (only
/// `setup` calls it): for PostgreSQL, applies the missing migrations
/// ([`PgDb::migrate`], each in its own transaction) and returns every
/// migration in order with whether this run applied it; Firestore has no
/// schema, so nothing.
pub async fn migrate_schema(store: &StoreLocation) -> Result<Vec<MigrationStep>, OpenError> {
    let StoreLocation::Postgres { url } = store else {
        return Ok(Vec::new());
    };
    let shown = store.to_string();
    let db = pg_db(&PgDbConfig::new(url.clone()), &shown)?;
    let report = db.migrate().await.map_err(|error| OpenError::Migrate {
        store: shown,
        error,
    })?;
    Ok(migrations::MIGRATIONS
        .iter()
        .map(|migration| MigrationStep {
            version: migration.version,
            name: migration.name,
            applied: report.applied.contains(&migration.version),
        })
        .collect())
}
