//! A trace drawn as one PNG (panels stacked with [`crate::chart`]) and as
//! Markdown tables.
//!
//! Invariant: pure: the same traces give the same bytes and the same text.
//! Panels, top to bottom, each titled with the scenario and what it shows,
//! its axes labelled with their units: arrivals (events/s), backlog
//! (events), replicas pulling, oldest unacked age (s); the x axis in
//! minutes.

use std::fmt::Write as _;
use std::io::Cursor;

use crate::chart::{ChartError, LineChart};

use super::model::{Step, Trace};
use super::{limits, CandidateResult, SimulateConfig};

/// Width of the PNG, in pixels.
pub const WIDTH: usize = 960;
/// Height of one panel, in pixels.
pub const PANEL_HEIGHT: usize = 260;

/// The PNG could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A panel could not be encoded.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// A panel could not be read back to be stacked.
    #[error("stacking the panels: {0}")]
    Decode(#[from] png::DecodingError),
    /// The stacked image could not be encoded.
    #[error("encoding the PNG: {0}")]
    Encode(#[from] png::EncodingError),
}

/// The trace's four panels stacked into one PNG.
pub fn render_png(trace: &Trace) -> Result<Vec<u8>, RenderError> {
    type Value = fn(&Step) -> f64;
    let series: [(&str, &str, Value); 4] = [
        ("Arrivals: events published per second", "events / s", |s| {
            s.arrivals
        }),
        (
            "Backlog: events published and not yet acked",
            "events",
            |s| s.backlog,
        ),
        ("Replicas pulling (started and ready)", "replicas", |s| {
            f64::from(s.ready)
        }),
        ("Age of the oldest unacked event", "age (s)", |s| {
            f64::from(s.oldest_age_secs)
        }),
    ];
    let horizon = trace.steps.len() as f64;
    let mut panels = Vec::with_capacity(series.len());
    for (title, y_label, value) in &series {
        let chart = LineChart {
            width: WIDTH,
            height: PANEL_HEIGHT,
            title: format!(
                "Spike {}, the picked autoscaler. {title}",
                trace.scenario.name
            ),
            x_label: "time since the start of the run (min)".into(),
            y_label: (*y_label).to_string(),
            points: trace
                .steps
                .iter()
                .map(|s| (f64::from(s.t_secs), value(s)))
                .collect(),
            x_range: (0.0, horizon),
            x_ticks: minute_ticks(trace.steps.len()),
            y_unit: String::new(),
        };
        panels.push(chart.render_png()?);
    }
    stack(&panels)
}

fn minute_ticks(secs: usize) -> Vec<(f64, String)> {
    let minutes = secs / 60;
    let every = if minutes > 60 { 10 } else { 5 };
    (0..=minutes)
        .step_by(every)
        .map(|m| ((m * 60) as f64, format!("{m}")))
        .collect()
}

/// Decodes each RGB panel and encodes them one under the other.
fn stack(panels: &[Vec<u8>]) -> Result<Vec<u8>, RenderError> {
    let mut rows = Vec::new();
    let mut width = 0;
    let mut height = 0;
    for panel in panels {
        let mut reader = png::Decoder::new(Cursor::new(panel)).read_info()?;
        let mut buf = vec![0; reader.output_buffer_size().unwrap_or(0)];
        let info = reader.next_frame(&mut buf)?;
        buf.truncate(info.buffer_size());
        width = info.width;
        height += info.height;
        rows.extend_from_slice(&buf);
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&rows)?;
    writer.finish()?;
    Ok(out)
}

/// One row of the candidates table: the worst over the seeds under each profile.
pub fn candidate_row(result: &CandidateResult, picked: bool) -> String {
    let Some(spike) = result.worst.first() else {
        return String::new();
    };
    let mut row = format!(
        "| {}{} | {} | {:.0} |",
        result.name,
        if picked { " **(picked)**" } else { "" },
        spike.peak_replicas,
        spike.replica_minutes,
    );
    for s in &result.worst {
        let settled = match s.settled_after_secs {
            Some(secs) => format!("{secs}"),
            None => "never".to_string(),
        };
        let _ = write!(row, " {} / {settled} |", s.max_age_secs);
    }
    let _ = write!(row, " {} |", if result.meets { "yes" } else { "no" });
    row
}

/// Header of the candidates table.
pub fn candidate_header(config: &SimulateConfig) -> String {
    format!(
        "| autoscaler | peak replicas (spike) | replica-minutes (spike, mean) | spike: max age / under {} s after (s) | long hold: same | replicas {:.0} % slower: same | meets target |\n|---|---:|---:|---:|---:|---:|---|",
        config.age_target_secs,
        config.slow_replica_fraction * 100.0
    )
}

/// Header of the spike-growth table.
pub fn growth_header() -> String {
    "| spike | peak events/s | replicas at 100 % | peak replicas | max oldest age (s) | Firestore writes/s: peak (before the spike) | above the 500/50/5 ramp: at most x, for (min) | the ramp from before to the peak | hottest post increments/s | hottest counter doc writes/s: counter shards as set / 1000 | counter shards needed at 1 write/s | busiest stream MB/s (of 10) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|".to_string()
}

/// One row of the spike-growth table.
pub fn growth_row(label: &str, trace: &Trace) -> String {
    let s = &trace.summary;
    let sc = &trace.scenario;
    let needed = (sc.spike.peak_events_per_sec / sc.replica.events_per_sec).ceil();
    let ramp_min = limits::firestore_ramp_secs(s.base_db_writes, s.peak_db_writes) / 60.0;
    format!(
        "| {label} | {:.0} | {needed:.0} | {} | {} | {:.0} ({:.0}) | x{:.0}, {:.0} min | {ramp_min:.0} min | {:.0} | {:.1} ({}) / {:.1} | {} | {:.1} |",
        sc.spike.peak_events_per_sec,
        s.peak_replicas,
        s.max_age_secs,
        s.peak_db_writes,
        s.base_db_writes,
        s.peak_db_writes_over_ramp,
        f64::from(s.secs_over_ramp) / 60.0,
        s.peak_hot_post_increments,
        s.peak_hottest_counter_doc_writes,
        sc.load.counter_shards,
        s.peak_hottest_counter_doc_writes_at_max_shards,
        limits::counter_shards_needed(s.peak_hot_post_increments),
        s.peak_stream_bytes / 1e6,
    )
}

/// The trace every `every_secs` seconds as a Markdown table.
pub fn timeline(trace: &Trace, every_secs: usize) -> String {
    let mut out = String::from(
        "| t (min) | arrivals/s | backlog | oldest age (s) | replicas asked | replicas pulling | acked/s | Firestore writes/s | ready for (500/50/5) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for step in trace.steps.iter().step_by(every_secs.max(1)) {
        let _ = writeln!(
            out,
            "| {:.0} | {:.0} | {:.0} | {} | {} | {} | {:.0} | {:.0} | {:.0} |",
            f64::from(step.t_secs) / 60.0,
            step.arrivals,
            step.backlog,
            step.oldest_age_secs,
            step.replicas,
            step.ready,
            step.served,
            step.db_writes,
            step.db_write_ramp,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::model::{
        self, Autoscaler, Load, MetricPipeline, ReplicaModel, Scenario, Spike,
    };

    #[test]
    fn the_png_stacks_four_panels_of_the_full_width() {
        let scenario = Scenario {
            name: "fixed".into(),
            spike: Spike {
                base_events_per_sec: 100.0,
                peak_events_per_sec: 1_000.0,
                start_secs: 10,
                ramp_secs: 10,
                hold_secs: 10,
                decay_secs: 10,
                noise_fraction: 0.0,
            },
            replica: ReplicaModel {
                events_per_sec: 500.0,
                capacity_jitter_fraction: 0.0,
                start_secs: 5,
                start_jitter_secs: 0,
                streams: 1,
                commits_per_1k_events: 2.0,
                max_commits_per_sec: 10.0,
            },
            metrics: MetricPipeline {
                sample_period_secs: 10,
                visibility_delay_min_secs: 0,
                visibility_delay_max_secs: 0,
            },
            autoscaler: Autoscaler::Fixed { replicas: 1 },
            load: Load {
                hot_post_share: 0.5,
                message_bytes: 100.0,
                membership_writes_per_event: 1.0,
                counter_shards: 4,
                counter_shard_target_writes_per_sec: 1,
            },
            tail_secs: 60,
            age_target_secs: 10,
        };
        let trace = model::simulate(&scenario, 1);
        let png = render_png(&trace).unwrap();
        let reader = png::Decoder::new(Cursor::new(png)).read_info().unwrap();
        let info = reader.info();
        assert_eq!(info.width as usize, WIDTH);
        assert_eq!(info.height as usize, 4 * PANEL_HEIGHT);
        assert!(timeline(&trace, 30).lines().count() >= 4);
    }
}
