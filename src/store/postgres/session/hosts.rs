//! Which hosts a session is opened on, in which order: the hosts of the
//! connection string paired with their addresses and ports as the driver
//! pairs them, shuffled under `load_balance_hosts=random`.
//!
//! Invariants: `hostaddr` is what is connected to when given, the host
//! name only what TLS checks; a host without a port takes the first port
//! listed (5432 when none); a cancel request goes to the hosts in the
//! order listed.

use tokio_postgres::config::{Host, LoadBalanceHosts};
use tokio_postgres::Config;

/// One host to try: where to connect, and the name TLS checks.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub(super) addr: Addr,
    pub(super) hostname: Option<String>,
    pub(super) port: u16,
}

/// Where a host is: a TCP host name or address, or a Unix socket's folder.
#[derive(Clone, Debug)]
pub(super) enum Addr {
    Tcp(String),
    Unix(std::path::PathBuf),
}

/// The hosts to open a session on, in the order to try them: as listed,
/// or shuffled when the connection string asks for `load_balance_hosts=random`.
pub(super) fn to_try(config: &Config) -> Vec<Target> {
    let mut targets = targets(config);
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        use rand::seq::SliceRandom;
        targets.shuffle(&mut rand::rng());
    }
    targets
}

/// The hosts of `config` in order (`hostaddr` over `host` to connect, the
/// host name for TLS), each with its port, as the driver pairs them.
pub(super) fn targets(config: &Config) -> Vec<Target> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let ports = config.get_ports();
    let count = hosts.len().max(addrs.len());
    (0..count)
        .filter_map(|i| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            let hostname = match hosts.get(i) {
                Some(Host::Tcp(name)) => Some(name.clone()),
                _ => None,
            };
            let addr = match (addrs.get(i), hosts.get(i)) {
                (Some(ip), _) => Addr::Tcp(ip.to_string()),
                (None, Some(Host::Tcp(name))) => Addr::Tcp(name.clone()),
                (None, Some(Host::Unix(dir))) => Addr::Unix(dir.clone()),
                (None, None) => return None,
            };
            Some(Target {
                addr,
                hostname,
                port,
            })
        })
        .collect()
}

impl Target {
    /// The name TLS checks the server's certificate against.
    pub(super) fn tls_name(&self) -> &str {
        self.hostname.as_deref().unwrap_or("")
    }

    /// The host and port (or the socket's path), as errors show it.
    pub(super) fn shown(&self) -> String {
        match &self.addr {
            Addr::Tcp(host) => format!("{host}:{}", self.port),
            Addr::Unix(dir) => dir
                .join(format!(".s.PGSQL.{}", self.port))
                .display()
                .to_string(),
        }
    }
}
