//! Where the services and the counts are: the emulator endpoints, and the
//! store flags every command that touches the counts shares ([`Target`]).
//!
//! Invariants: `--store` and `--store-file` are declared once
//! ([`StoreFlags`]); a [`StoreLocation`] never shows a PostgreSQL password
//! (`Debug`, `Display`, parse errors), only `Serialize` keeps the URL whole.

use super::secret::{FileParser, FromFile};

/// Increments per second a counter shard document should take, by default
/// (Firestore's guidance for one document is about one sustained write per
/// second); `--counter-shard-target-writes-per-sec`.
pub const DEFAULT_COUNTER_SHARD_TARGET_WRITES_PER_SEC: u32 = 1;

/// Counter shard documents per post at most, by default (`--counter-shards`
/// of `run`, and of `replay`, which must spread increments the same way).
pub const DEFAULT_COUNTER_SHARDS: u32 = 16;

/// Where Pub/Sub and Firestore are: Google's endpoints with Application
/// Default Credentials, or emulators (anonymous) when an address is given.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Endpoints {
    /// Pub/Sub emulator address (`host:port`); unset = Google's endpoint with ADC.
    #[arg(long, env = "PUBSUB_EMULATOR_HOST", global = true)]
    pub pubsub_emulator_host: Option<String>,
    /// Firestore emulator address (`host:port`); unset = Google's endpoint with ADC.
    #[arg(long, env = "FIRESTORE_EMULATOR_HOST", global = true)]
    pub firestore_emulator_host: Option<String>,
}

/// Where the counts live: the store (Firestore unless `--store` names a
/// PostgreSQL database) and, for Firestore, which Google Cloud project,
/// database and collections.
///
/// Its flags are [`TargetFlags`]'s: `store` is what `--store-file` holds
/// when that is given, else `--store`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    /// The store.
    pub store: StoreLocation,
    /// Google Cloud project id.
    pub project: String,
    /// Firestore database id.
    pub database: String,
    /// Prefix of every Firestore collection hotcount writes.
    pub collection_prefix: String,
}

/// `--store` and `--store-file` (never both): declared once, flattened
/// into [`TargetFlags`] (every command that reads or writes the counts) and
/// into `setup`'s flags, which only word their help for what setup does.
#[derive(clap::Args, Clone, Debug)]
pub struct StoreFlags {
    /// The store: `firestore` (the default) or a PostgreSQL connection URL
    /// (`postgres://user:password@host:port/database`).
    #[arg(
        long = "store",
        env = "HOTCOUNT_STORE",
        default_value = "firestore",
        value_parser = StoreLocationParser,
        hide_env_values = true
    )]
    pub store: StoreLocation,
    /// A file holding the store as `--store` takes it (a PostgreSQL URL
    /// with its password: a mounted secret); trailing line breaks are
    /// ignored. Not with `--store`.
    #[arg(
        long = "store-file",
        env = "HOTCOUNT_STORE_FILE",
        value_name = "PATH",
        value_parser = FileParser::<StoreLocation>::new(),
        conflicts_with = "store"
    )]
    pub store_file: Option<FromFile<StoreLocation>>,
}

impl StoreFlags {
    /// The store these flags name: the content of `--store-file` when
    /// given, else `--store`.
    pub fn location(&self) -> &StoreLocation {
        self.store_file
            .as_ref()
            .map_or(&self.store, FromFile::value)
    }
}

/// The flags of a [`Target`], as given: [`StoreFlags`], project, database
/// and collection prefix.
#[derive(clap::Args, Clone, Debug)]
pub struct TargetFlags {
    /// `--store` or `--store-file`.
    #[command(flatten)]
    pub location: StoreFlags,
    /// Google Cloud project id.
    #[arg(long, env = "HOTCOUNT_PROJECT", default_value = "hotcount-local")]
    pub project: String,
    /// Firestore database id.
    #[arg(long, env = "HOTCOUNT_DATABASE", default_value = "(default)")]
    pub database: String,
    /// Prefix of every Firestore collection hotcount writes (e.g. `hc_`).
    #[arg(long, env = "HOTCOUNT_COLLECTION_PREFIX", default_value = "")]
    pub collection_prefix: String,
}

impl From<TargetFlags> for Target {
    fn from(flags: TargetFlags) -> Self {
        Target {
            store: flags.location.location().clone(),
            project: flags.project,
            database: flags.database,
            collection_prefix: flags.collection_prefix,
        }
    }
}

impl clap::FromArgMatches for Target {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        TargetFlags::from_arg_matches(matches).map(Target::from)
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Target {
    fn group_id() -> Option<clap::Id> {
        TargetFlags::group_id()
    }

    fn augment_args(cmd: clap::Command) -> clap::Command {
        TargetFlags::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        TargetFlags::augment_args_for_update(cmd)
    }
}

/// Which database holds the counts. Its `Debug` and `Display` hide a
/// PostgreSQL URL's password (they end up in logs); `Serialize` keeps the
/// URL whole, as [`RunArgs::to_flags`] must reproduce it.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreLocation {
    /// Firestore, at the endpoints and [`Target`] given.
    #[default]
    Firestore,
    /// PostgreSQL, by libpq connection URL.
    Postgres {
        /// `postgres://` or `postgresql://` URL.
        url: String,
    },
}

impl std::str::FromStr for StoreLocation {
    type Err = String;

    /// The error never quotes the string: it may hold a password.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("firestore") {
            return Ok(Self::Firestore);
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            crate::store::postgres::conninfo::check_url(s)
                .map_err(|why| format!("not a PostgreSQL connection URL: {why}"))?;
            let (driver, _) = crate::store::postgres::tls::split(s).map_err(|e| e.to_string())?;
            return match driver.parse::<tokio_postgres::Config>() {
                Ok(_) => Ok(Self::Postgres { url: s.to_string() }),
                Err(e) => Err(url_error(s, &e)),
            };
        }
        Err("expected `firestore` or a `postgres://` URL".into())
    }
}

/// Why the driver refused `url`, without quoting it: its message names an
/// option at most, and not even that when a `password` parameter could
/// have run into it (an unencoded `&` in a password makes its tail look
/// like an option).
fn url_error(url: &str, error: &tokio_postgres::Error) -> String {
    let message = match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    };
    let secret_tail = url
        .split_once('?')
        .is_some_and(|(_, query)| query.contains("password"));
    let names_a_secret = message.contains('`') && secret_tail;
    let problem = if names_a_secret {
        "an option is not known or its value is not valid"
    } else {
        message.as_str()
    };
    format!(
        "not a PostgreSQL connection URL: {problem} (percent-encode `@`, `/`, `?`, `&`, `#` and `%` in a password)"
    )
}

/// Parses `--store` for clap without quoting the value in its error (clap
/// would print `invalid value '<the URL>'`, password and all).
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreLocationParser;

impl clap::builder::TypedValueParser for StoreLocationParser {
    type Value = StoreLocation;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<StoreLocation, clap::Error> {
        let flag = arg.map_or_else(|| "--store".to_string(), |a| format!("--{}", a.get_id()));
        let refuse = |reason: &str| {
            let message = format!(
                "invalid value for '{flag}' (not shown: it may hold a password): {reason}\n"
            );
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| refuse("not UTF-8"))?;
        text.parse().map_err(|reason: String| refuse(&reason))
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Firestore => f.write_str("firestore"),
            Self::Postgres { url } => f.write_str(&crate::store::postgres::conninfo::redact(url)),
        }
    }
}

impl std::fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for StoreLocation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Firestore => serializer.serialize_str("firestore"),
            Self::Postgres { url } => serializer.serialize_str(url),
        }
    }
}
