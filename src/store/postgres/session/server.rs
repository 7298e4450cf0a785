//! The server's start-up report and the check that hotcount runs on it:
//! the PostgreSQL major version and the database's encoding.
//!
//! Invariants: a server older than [`OLDEST_SUPPORTED_MAJOR`] (or whose
//! version does not parse) or a database whose encoding is not UTF-8 is
//! refused ([`ServerRefusal`]), with the fix in the message.

/// The oldest PostgreSQL major version served: the first with
/// `client_connection_check_interval` (a session's statement ends when its
/// client has gone), which the store sets on every session.
pub const OLDEST_SUPPORTED_MAJOR: u32 = 14;

/// What the server reported of itself when the session started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerReport {
    /// `server_version`, e.g. `15.6 (Debian 15.6-0+deb12u1)`.
    pub version: String,
    /// `server_encoding`, e.g. `UTF8`.
    pub encoding: String,
    /// The database connected to.
    pub database: String,
}

impl ServerReport {
    /// The major version (`15` of `15.6`; `9` of `9.6.24`), if it parses.
    pub fn major(&self) -> Option<u32> {
        let digits: String = self
            .version
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    }

    /// Whether hotcount can use this server and database.
    pub fn check(&self) -> Result<(), ServerRefusal> {
        if self
            .major()
            .is_none_or(|major| major < OLDEST_SUPPORTED_MAJOR)
        {
            return Err(ServerRefusal::TooOld {
                version: self.version.clone(),
            });
        }
        if !self.encoding.eq_ignore_ascii_case("UTF8") {
            return Err(ServerRefusal::Encoding {
                database: self.database.clone(),
                encoding: self.encoding.clone(),
            });
        }
        Ok(())
    }
}

/// A server or database hotcount does not run on, with the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerRefusal {
    /// Older than [`OLDEST_SUPPORTED_MAJOR`].
    #[error("the server is PostgreSQL {version}; hotcount needs PostgreSQL {OLDEST_SUPPORTED_MAJOR} or newer: upgrade the server, or point --store at one that is")]
    TooOld {
        /// The version it reported.
        version: String,
    },
    /// Not UTF-8: a valid id that the encoding cannot hold would fail its batch.
    #[error("database \"{database}\" has server_encoding {encoding}; hotcount needs UTF8 (post and user ids are UTF-8 text, which {encoding} cannot always hold): create a database with CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0 (and a UTF-8 or C locale), run `hotcount setup --store <its URL>`, and point --store at it")]
    Encoding {
        /// The database.
        database: String,
        /// Its encoding.
        encoding: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_servers_from_the_oldest_supported_major_with_utf8_are_served() {
        let report = |version: &str, encoding: &str| ServerReport {
            version: version.into(),
            encoding: encoding.into(),
            database: "hc".into(),
        };
        assert!(report("15.6 (Debian 15.6-0+deb12u1)", "UTF8")
            .check()
            .is_ok());
        assert!(report("14.0", "UTF8").check().is_ok());
        assert!(report("18beta1", "UTF8").check().is_ok());
        assert!(matches!(
            report("13.16", "UTF8").check(),
            Err(ServerRefusal::TooOld { .. })
        ));
        assert!(matches!(
            report("9.6.24", "UTF8").check(),
            Err(ServerRefusal::TooOld { .. })
        ));
        assert!(report("", "UTF8").check().is_err());
        for encoding in ["LATIN1", "SQL_ASCII", "WIN1252"] {
            let refusal = report("16.2", encoding).check();
            assert!(
                matches!(refusal, Err(ServerRefusal::Encoding { .. })),
                "{encoding}"
            );
            let advice = refusal.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(advice.contains("ENCODING 'UTF8'"), "{advice}");
        }
    }
}
