//! Opening and keeping the pool's sessions, one concern a module: how
//! sockets and sessions behave ([`settings`]), which hosts are tried in
//! which order ([`hosts`]), the socket to one host with its keepalives
//! ([`socket`]), the cleartext-password guard ([`guard`]), the server's
//! start-up report and its check ([`server`]), why opening failed
//! ([`error`]), and the pool's manager that puts them together ([`pool`]).
//!
//! Invariants (each stated in its module): every TCP socket probes an idle
//! peer and gives up on unacknowledged data within seconds; under
//! `sslmode` `prefer` or `require` a request for the password in cleartext
//! ends the connection before the password is sent; a server older than
//! [`OLDEST_SUPPORTED_MAJOR`] or a database not in UTF-8 is refused;
//! opening a session (every host tried) is bounded by the connect timeout,
//! and the idle check by its own timeout. Imports run one way: `pool` uses
//! the others, `socket` uses `hosts`, `settings` and `error`, `error` uses
//! `server`; this file only names them.

pub mod error;
pub mod guard;
mod hosts;
pub mod pool;
pub mod server;
pub mod settings;
pub mod socket;

pub use error::SessionError;
pub use guard::Guard;
pub use pool::{Opened, Sessions};
pub use server::{ServerRefusal, ServerReport, OLDEST_SUPPORTED_MAJOR};
pub use settings::SessionSettings;
pub use socket::{configure, Stream};
