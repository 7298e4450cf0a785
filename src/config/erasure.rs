//! Erased users: the flags of the tombstone check ([`ErasureFlags`]:
//! the hash key and how often tombstones are re-read), validated into
//! [`ErasureConfig`].
//!
//! Invariant: no key (or an empty one) means no event is checked against
//! tombstones; the key's value is never shown ([`Secret`]).

use std::time::Duration;

use super::secret::{FileParser, FromFile};
use super::{range, ConfigError, Secret};

/// `--user-hash-key` or `--user-hash-key-file`: the key of the keyed hash
/// erased users' tombstones hold, declared once for `run`, `users` and
/// `replay` (each words its help for what it does with it, `mut_arg`).
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
pub struct UserHashKeyFlags {
    /// Key of the keyed hash (HMAC-SHA256) that erased users' tombstones
    /// hold instead of their ids (`hotcount users erase`): the same key on
    /// every replica and in the `users` commands. Unset: no event is checked
    /// against tombstones.
    #[arg(long, env = "HOTCOUNT_USER_HASH_KEY", hide_env_values = true)]
    pub user_hash_key: Option<Secret>,
    /// A file holding `--user-hash-key`; trailing line breaks are ignored.
    #[arg(
        long,
        env = "HOTCOUNT_USER_HASH_KEY_FILE",
        value_name = "PATH",
        value_parser = FileParser::<Secret>::new(),
        conflicts_with = "user_hash_key"
    )]
    pub user_hash_key_file: Option<FromFile<Secret>>,
}

impl UserHashKeyFlags {
    /// The key given, by value or by file; `None` when neither (or empty).
    pub fn key(&self) -> Option<Secret> {
        Secret::given(
            self.user_hash_key.as_ref(),
            self.user_hash_key_file.as_ref(),
        )
    }
}

/// `hotcount run`'s flags of the erased users' tombstone check.
#[derive(clap::Args, Clone, Debug, PartialEq, serde::Serialize)]
#[command(next_help_heading = "Erased users")]
pub struct ErasureFlags {
    /// The tombstones' hash key.
    #[serde(flatten)]
    #[command(flatten)]
    pub key: UserHashKeyFlags,
    /// How often each replica re-reads the erased users' tombstones, in
    /// milliseconds: an erasure waits twice this before it removes
    /// memberships.
    #[arg(long, env = "HOTCOUNT_TOMBSTONE_REFRESH_MS", default_value_t = 5_000)]
    pub tombstone_refresh_ms: u64,
}

/// What the erasure flags validate into.
#[derive(Clone, Debug)]
pub struct ErasureConfig {
    /// The tombstones' hash key; `None` = no tombstone check.
    pub user_hash_key: Option<Secret>,
    /// How often the tombstones are re-read.
    pub tombstone_refresh: Duration,
}

impl ErasureFlags {
    /// The key given (by value or file) and the refresh interval, checked.
    pub fn validate(&self) -> Result<ErasureConfig, ConfigError> {
        Ok(ErasureConfig {
            user_hash_key: self.key.key(),
            tombstone_refresh: Duration::from_millis(range(
                "tombstone-refresh-ms",
                self.tombstone_refresh_ms,
                100,
                60_000,
            )?),
        })
    }
}
