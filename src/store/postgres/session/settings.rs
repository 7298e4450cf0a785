//! How the store's sockets and sessions behave: the connect timeout, the
//! keepalive probes and `TCP_USER_TIMEOUT` of every TCP socket, the
//! server's connection check, and the idle check on checkout.
//!
//! Invariants: the defaults notice a server that vanished without a reset
//! within seconds (idle 10 s, 3 probes 5 s apart, unacknowledged data 25 s),
//! and every wait (opening, the idle check) has a bound.

use std::time::Duration;

/// How sockets and sessions behave (see the module invariants).
#[derive(Clone, Debug)]
pub struct SessionSettings {
    /// Longest wait to open a session, every host tried.
    pub connect_timeout: Duration,
    /// Idle time before the first keepalive probe.
    pub keepalive_idle: Duration,
    /// Time between keepalive probes.
    pub keepalive_interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub keepalive_retries: u32,
    /// Longest time sent data may stay unacknowledged before the
    /// connection is dropped (`TCP_USER_TIMEOUT`).
    pub tcp_user_timeout: Duration,
    /// The server's `client_connection_check_interval` (`None`: off).
    pub connection_check_interval: Option<Duration>,
    /// A connection idle this long is checked with a round trip before it
    /// is handed out again.
    pub idle_check_after: Duration,
    /// Longest wait for that check.
    pub idle_check_timeout: Duration,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            keepalive_idle: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(5),
            keepalive_retries: 3,
            tcp_user_timeout: Duration::from_secs(25),
            connection_check_interval: Some(Duration::from_secs(1)),
            idle_check_after: Duration::from_secs(5),
            idle_check_timeout: Duration::from_secs(2),
        }
    }
}
