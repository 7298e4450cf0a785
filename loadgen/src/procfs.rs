//! What Linux's `/proc` says about a process (CPU time, peak resident set)
//! and about the machine (CPU model, cores, memory, OS): the load
//! generator's one reader of `/proc`, for `bench`, `chaos` and the report.
//!
//! Invariant: nothing here fails a run; a figure `/proc` does not give
//! (another OS, a process already reaped) is `None`, 0 or a fallback, as
//! each function says.

use std::time::Duration;

/// The process to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proc {
    /// This process (`/proc/self`).
    This,
    /// Another process, by id (e.g. a child consumer).
    Pid(u32),
}

impl Proc {
    fn file(self, name: &str) -> String {
        match self {
            Proc::This => format!("/proc/self/{name}"),
            Proc::Pid(pid) => format!("/proc/{pid}/{name}"),
        }
    }
}

/// Milliseconds per clock tick of `/proc/<pid>/stat`'s CPU times
/// (`USER_HZ` is 100 on Linux).
const MILLIS_PER_TICK: u64 = 10;

/// User + system CPU time of `proc` from `/proc/<pid>/stat` (fields 14 and
/// 15, in clock ticks); `None` when unknown.
pub fn cpu_time(proc: Proc) -> Option<Duration> {
    let stat = std::fs::read_to_string(proc.file("stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * MILLIS_PER_TICK))
}

/// Peak resident set (`VmHWM` of `/proc/<pid>/status`) of `proc`, in
/// bytes; 0 when unknown.
pub fn peak_rss_bytes(proc: Proc) -> u64 {
    let status = std::fs::read_to_string(proc.file("status")).unwrap_or_default();
    kib_field(&status, "VmHWM:").unwrap_or(0)
}

/// Resets this process's peak resident set (`VmHWM`) to its current one
/// (Linux 4.0+; elsewhere a no-op, and the peak then covers the whole
/// process lifetime).
pub fn reset_peak_rss() {
    let _ = std::fs::write(Proc::This.file("clear_refs"), "5");
}

/// The value of a `Key:   1234 kB` line of a `/proc` file, in bytes.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// The machine a report was made on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// Logical cores available.
    pub cores: usize,
    /// CPU model name.
    pub cpu: String,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// OS name and kernel release.
    pub os: String,
}

impl Machine {
    /// Reads `/proc` and `/etc/os-release`; unknown fields stay empty (the
    /// CPU and OS fall back to the architecture and OS family).
    pub fn detect() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let memory_bytes = kib_field(&read("/proc/meminfo"), "MemTotal:").unwrap_or(0);
        let pretty = read("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
        Self {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu,
            memory_bytes,
            os: if kernel.is_empty() {
                pretty
            } else {
                format!("{pretty} (kernel {kernel})")
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_read_from_proc() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(peak_rss_bytes(Proc::This) > 0);
            assert!(peak_rss_bytes(Proc::Pid(std::process::id())) > 0);
        }
    }

    #[test]
    fn cpu_time_is_read_from_proc_and_unknown_for_a_missing_process() {
        if std::path::Path::new("/proc/self/stat").exists() {
            let spin = std::time::Instant::now();
            while spin.elapsed() < Duration::from_millis(30) {}
            assert!(cpu_time(Proc::This).is_some());
        }
        assert_eq!(cpu_time(Proc::Pid(u32::MAX)), None);
        assert_eq!(peak_rss_bytes(Proc::Pid(u32::MAX)), 0);
    }

    #[test]
    fn kib_fields_are_read_as_bytes() {
        let status = "Name:\tx\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(kib_field(status, "VmHWM:"), Some(2 << 20));
        assert_eq!(kib_field(status, "VmSwap:"), None);
    }

    #[test]
    fn machine_is_detected_from_proc() {
        let m = Machine::detect();
        assert!(m.cores >= 1);
        assert!(!m.os.is_empty());
    }
}
