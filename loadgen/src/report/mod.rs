//! End-to-end latency (membership `occurredAt` -> `updatedAt`) and commit
//! throughput, written as `report.md` with `latency.png` and `throughput.png`.
//!
//! Invariant: every number in the report comes from the memberships read
//! back (one sample per membership: only its newest event is visible), and
//! the Markdown says so; a membership without `updatedAt` is counted as
//! missing, a negative latency (clock skew) as zero and counted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::Utc;
use hdrhistogram::Histogram;
use hotcount::config::{Endpoints, Target};

use crate::chart::ChartError;
use crate::procfs::Machine;
use crate::readback::{self, MembershipRow, ReadError, Reader};
use crate::workload::WorkloadConfig;

mod render;

pub use render::{markdown, percentile_chart, throughput_chart};

/// Largest latency tracked exactly, in microseconds (one day); larger ones saturate.
pub const MAX_LATENCY_MICROS: u64 = 86_400_000_000;
/// Most throughput buckets listed; wider buckets are used beyond it.
pub const MAX_THROUGHPUT_BUCKETS: i64 = 60;

/// What was measured from the memberships.
#[derive(Clone, Debug)]
pub struct Measurements {
    /// Latency in microseconds, one sample per membership with an `updatedAt`.
    pub latency_micros: Histogram<u64>,
    /// Memberships without `updatedAt`.
    pub missing_updated_at: u64,
    /// Samples with `updatedAt < occurredAt` (recorded as 0).
    pub negative: u64,
    /// Memberships committed per bucket.
    pub throughput: Throughput,
}

/// Memberships per `updatedAt` bucket.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Throughput {
    /// Bucket width in seconds.
    pub bucket_secs: i64,
    /// `(bucket start, seconds since the Unix epoch; memberships)`, every bucket
    /// from the first commit to the last, empty ones included.
    pub buckets: Vec<(i64, u64)>,
}

impl Throughput {
    /// The busiest bucket's rate, per second.
    pub fn peak_per_sec(&self) -> f64 {
        let peak = self.buckets.iter().map(|b| b.1).max().unwrap_or(0);
        peak as f64 / self.bucket_secs.max(1) as f64
    }

    /// Mean rate over the span of the buckets, per second.
    pub fn mean_per_sec(&self) -> f64 {
        let total: u64 = self.buckets.iter().map(|b| b.1).sum();
        let span = self.buckets.len() as i64 * self.bucket_secs.max(1);
        if span == 0 {
            0.0
        } else {
            total as f64 / span as f64
        }
    }
}

/// The summary percentiles of a latency histogram, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

/// What the report says about how it was produced.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    /// The command line, as typed.
    pub command_line: String,
    /// Settings given to the command, `(name, value)`.
    pub settings: Vec<(String, String)>,
    /// The workload's settings, when known (from the truth file).
    pub workload: Option<WorkloadConfig>,
}

/// The files written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFiles {
    /// `report.md`.
    pub markdown: PathBuf,
    /// `latency.png`.
    pub latency_png: PathBuf,
    /// `throughput.png`.
    pub throughput_png: PathBuf,
}

/// The report could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Reading the memberships failed.
    #[error("report: {0}")]
    Read(#[from] ReadError),
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A chart could not be encoded.
    #[error(transparent)]
    Chart(#[from] ChartError),
}

impl ReportError {
    /// Only a failed read may pass on retry.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ReportError::Read(e) if e.is_retryable())
    }
}

/// Latency and throughput of `rows`.
pub fn measure(rows: &[MembershipRow]) -> Measurements {
    let mut latency_micros = Histogram::<u64>::new_with_max(MAX_LATENCY_MICROS, 3)
        .expect("1..=one day at 3 significant figures is a valid histogram");
    let mut missing_updated_at = 0;
    let mut negative = 0;
    let mut commits = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(updated) = row.updated_at_micros else {
            missing_updated_at += 1;
            continue;
        };
        let latency = updated - row.occurred_at_micros;
        if latency < 0 {
            negative += 1;
        }
        latency_micros.saturating_record(latency.max(0) as u64);
        commits.push(updated.div_euclid(1_000_000));
    }
    Measurements {
        latency_micros,
        missing_updated_at,
        negative,
        throughput: bucket(&commits),
    }
}

/// Buckets commit seconds: 1 s wide, or wider so there are at most
/// [`MAX_THROUGHPUT_BUCKETS`].
pub fn bucket(commit_secs: &[i64]) -> Throughput {
    let (Some(first), Some(last)) = (commit_secs.iter().min(), commit_secs.iter().max()) else {
        return Throughput {
            bucket_secs: 1,
            buckets: Vec::new(),
        };
    };
    let span = last - first + 1;
    let width = (span + MAX_THROUGHPUT_BUCKETS - 1) / MAX_THROUGHPUT_BUCKETS;
    let width = width.max(1);
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    for s in commit_secs {
        *counts.entry((s - first) / width).or_default() += 1;
    }
    let n = (last - first) / width + 1;
    let buckets = (0..n)
        .map(|i| (first + i * width, counts.get(&i).copied().unwrap_or(0)))
        .collect();
    Throughput {
        bucket_secs: width,
        buckets,
    }
}

/// p50/p90/p99/p99.9/max/mean of a histogram in microseconds, as milliseconds.
pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |micros: u64| micros as f64 / 1_000.0;
    Percentiles {
        count: h.len(),
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
        mean_ms: h.mean() / 1_000.0,
    }
}

/// Connects to the store of `target`, reads its memberships and writes the report into `dir`.
pub async fn connect_and_report(
    endpoints: &Endpoints,
    target: &Target,
    dir: &Path,
    info: &RunInfo,
) -> Result<ReportFiles, ReportError> {
    let db = readback::connect(endpoints, target).await?;
    report(&db, dir, info).await
}

/// Connects to the store of `target` and measures its memberships.
pub async fn connect_and_measure(
    endpoints: &Endpoints,
    target: &Target,
) -> Result<Measurements, ReadError> {
    let db = readback::connect(endpoints, target).await?;
    let rows = readback::read_memberships(&db).await?;
    Ok(measure(&rows))
}

/// Reads the store's memberships and writes the report into `dir`.
pub async fn report(db: &Reader, dir: &Path, info: &RunInfo) -> Result<ReportFiles, ReportError> {
    let rows = readback::read_memberships(db).await?;
    write_report(dir, &measure(&rows), info, &Machine::detect())
}

/// Writes `report.md`, `latency.png` and `throughput.png` into `dir` (created if needed).
pub fn write_report(
    dir: &Path,
    m: &Measurements,
    info: &RunInfo,
    machine: &Machine,
) -> Result<ReportFiles, ReportError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ReportError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let files = ReportFiles {
        markdown: dir.join("report.md"),
        latency_png: dir.join("latency.png"),
        throughput_png: dir.join("throughput.png"),
    };
    let latency = percentile_chart(&m.latency_micros).render_png()?;
    std::fs::write(&files.latency_png, latency).map_err(io(&files.latency_png))?;
    let throughput = throughput_chart(&m.throughput).render_png()?;
    std::fs::write(&files.throughput_png, throughput).map_err(io(&files.throughput_png))?;
    let text = markdown(m, info, machine, Utc::now());
    std::fs::write(&files.markdown, text).map_err(io(&files.markdown))?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(occurred: i64, updated: Option<i64>) -> MembershipRow {
        MembershipRow {
            post_id: "p".into(),
            user_id: "u".into(),
            liked: true,
            occurred_at_micros: occurred,
            updated_at_micros: updated,
        }
    }

    #[test]
    fn percentiles_of_a_uniform_histogram_are_where_expected() {
        let mut h = Histogram::<u64>::new_with_max(MAX_LATENCY_MICROS, 3).unwrap();
        for ms in 1..=1000u64 {
            h.record(ms * 1_000).unwrap();
        }
        let p = percentiles(&h);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002;
        assert_eq!(p.count, 1000);
        assert!(close(p.p50_ms, 500.0), "{p:?}");
        assert!(close(p.p90_ms, 900.0), "{p:?}");
        assert!(close(p.p99_ms, 990.0), "{p:?}");
        assert!(close(p.p999_ms, 999.0), "{p:?}");
        assert!(close(p.max_ms, 1000.0), "{p:?}");
        assert!(close(p.mean_ms, 500.5), "{p:?}");
        assert_eq!(
            percentiles(&Histogram::new(3).unwrap()),
            Percentiles::default()
        );
    }

    #[test]
    fn latency_is_sampled_per_membership_with_skew_and_gaps_counted() {
        let s = 1_000_000;
        let rows = [
            row(10 * s, Some(10 * s + 20_000)),
            row(10 * s, Some(11 * s)),
            row(12 * s, Some(12 * s - 5)),
            row(12 * s, None),
        ];
        let m = measure(&rows);
        assert_eq!(m.latency_micros.len(), 3);
        assert_eq!((m.negative, m.missing_updated_at), (1, 1));
        assert_eq!(m.latency_micros.min(), 0);
        assert_eq!(m.throughput.buckets, vec![(10, 1), (11, 2)]);
    }

    #[test]
    fn throughput_buckets_widen_to_stay_readable() {
        let secs: Vec<i64> = (0..600).collect();
        let t = bucket(&secs);
        assert_eq!(t.bucket_secs, 10);
        assert_eq!(t.buckets.len(), 60);
        assert!(t.buckets.iter().all(|b| b.1 == 10));
        assert!((t.peak_per_sec() - 1.0).abs() < 1e-9);
        assert!((t.mean_per_sec() - 1.0).abs() < 1e-9);
        let gap = bucket(&[5, 5, 8]);
        assert_eq!(gap.buckets, vec![(5, 2), (6, 0), (7, 0), (8, 1)]);
    }

    #[test]
    fn report_files_are_written_and_linked() {
        let dir = std::env::temp_dir().join(format!("hotcount-report-{}", std::process::id()));
        let rows: Vec<_> = (0..500)
            .map(|i| row(i * 1_000, Some(i * 1_000 + 3_000 + i * 97)))
            .collect();
        let info = RunInfo {
            command_line: "hotcount-loadgen report --out x".into(),
            settings: vec![("out".into(), "x".into())],
            workload: Some(WorkloadConfig::default()),
        };
        let files = write_report(&dir, &measure(&rows), &info, &Machine::detect()).unwrap();
        let md = std::fs::read_to_string(&files.markdown).unwrap();
        assert!(md.contains("](latency.png)") && md.contains("](throughput.png)"));
        assert!(md.contains("sampled over memberships"));
        assert!(md.contains("| p99.9 |"));
        assert!(std::fs::read(&files.latency_png)
            .unwrap()
            .starts_with(b"\x89PNG"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
