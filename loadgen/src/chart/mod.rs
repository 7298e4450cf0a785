//! Line charts rendered to PNG with no font or system library: a title,
//! axes with their labels and units, grid, one polyline, and tick labels,
//! in a built-in 5x7 bitmap font ([`font`]).
//!
//! Invariant: rendering is pure and total: any finite or non-finite input
//! yields a valid PNG of the requested size (non-finite points are skipped);
//! y ticks are round steps written with one SI suffix for the whole axis
//! (`20M`, `2.5k`, never `20000k`).

use std::io::Write;

mod font;

/// An RGB colour.
type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const GRID: Rgb = [225, 225, 225];
const AXIS: Rgb = [40, 40, 40];
const TITLE: Rgb = [0, 0, 0];
const LINE: Rgb = [31, 119, 180];

/// Glyph scale: each font pixel becomes `SCALE` x `SCALE`.
const SCALE: usize = 2;
/// Height of a line of text in pixels.
const TEXT_HEIGHT: usize = font::HEIGHT * SCALE;
const MARGIN_LEFT: usize = 96;
const MARGIN_RIGHT: usize = 30;
const MARGIN_TOP: usize = 40;
const MARGIN_BOTTOM: usize = 56;

/// A chart: one series over labelled x ticks and an automatic y scale.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// What the chart shows, drawn above it.
    pub title: String,
    /// What the x axis is, with its unit (e.g. `time (s)`), under the ticks.
    pub x_label: String,
    /// What the y axis is, with its unit (e.g. `latency (ms)`), along it.
    pub y_label: String,
    /// Points `(x, y)` in data units, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// X range shown.
    pub x_range: (f64, f64),
    /// Labelled x ticks `(x, label)`.
    pub x_ticks: Vec<(f64, String)>,
    /// Suffix of y tick labels (e.g. `ms`; usually empty, the unit being
    /// in [`LineChart::y_label`]).
    pub y_unit: String,
}

/// The chart could not be encoded.
#[derive(Debug, thiserror::Error)]
#[error("encoding the PNG: {0}")]
pub struct ChartError(#[from] png::EncodingError);

impl LineChart {
    /// Renders the chart as PNG bytes.
    pub fn render_png(&self) -> Result<Vec<u8>, ChartError> {
        let canvas = self.draw();
        let mut out = Vec::new();
        {
            let mut encoder =
                png::Encoder::new(&mut out, canvas.width as u32, canvas.height as u32);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            let mut writer = encoder.write_header()?;
            writer.write_image_data(&canvas.pixels)?;
            writer.finish()?;
        }
        out.flush().ok();
        Ok(out)
    }

    fn draw(&self) -> Canvas {
        let width = self.width.max(MARGIN_LEFT + MARGIN_RIGHT + 10);
        let height = self.height.max(MARGIN_TOP + MARGIN_BOTTOM + 10);
        let mut c = Canvas::new(width, height);
        let (left, right) = (MARGIN_LEFT, width - MARGIN_RIGHT);
        let (top, bottom) = (MARGIN_TOP, height - MARGIN_BOTTOM);
        let (x0, x1) = self.x_range;
        let x_span = if (x1 - x0).is_finite() && x1 > x0 {
            x1 - x0
        } else {
            1.0
        };
        let y_max = self
            .points
            .iter()
            .map(|p| p.1)
            .filter(|y| y.is_finite())
            .fold(0.0_f64, f64::max);
        let (y_step, y_top) = nice_scale(y_max);
        let px = |x: f64| left as f64 + (x - x0) / x_span * (right - left) as f64;
        let py = |y: f64| bottom as f64 - y / y_top * (bottom - top) as f64;

        let title_x = (width.saturating_sub(text_width(&self.title))) / 2;
        c.text(title_x, 10, &self.title, TITLE);
        let ticks = y_ticks(y_step, y_top);
        for (y, label) in &ticks {
            let row = py(*y).round() as usize;
            c.hline(left, right, row, GRID);
            let label = format!("{label}{}", self.y_unit);
            let w = text_width(&label);
            c.text(
                left.saturating_sub(w + 6),
                row.saturating_sub(TEXT_HEIGHT / 2),
                &label,
                AXIS,
            );
        }
        // The y label, read bottom to top, left of the widest tick label.
        let widest = ticks
            .iter()
            .map(|(_, l)| text_width(&format!("{l}{}", self.y_unit)))
            .max()
            .unwrap_or(0);
        let label_x = left.saturating_sub(widest + 6 + 8 + TEXT_HEIGHT);
        let label_bottom = (top + bottom + text_width(&self.y_label)) / 2;
        c.text_up(label_x, label_bottom.min(height - 1), &self.y_label, AXIS);
        for (x, label) in &self.x_ticks {
            let col = px(*x).round() as usize;
            if col < left || col > right {
                continue;
            }
            c.vline(col, top, bottom, GRID);
            let w = text_width(label);
            let start = col.saturating_sub(w / 2).min(width.saturating_sub(w + 1));
            c.text(start, bottom + 8, label, AXIS);
        }
        let x_label_x = (left + right).saturating_sub(text_width(&self.x_label)) / 2;
        c.text(
            x_label_x,
            bottom + 8 + TEXT_HEIGHT + 10,
            &self.x_label,
            AXIS,
        );
        c.hline(left, right, bottom, AXIS);
        c.vline(left, top, bottom, AXIS);

        let mut last: Option<(f64, f64)> = None;
        for (x, y) in &self.points {
            if !x.is_finite() || !y.is_finite() {
                last = None;
                continue;
            }
            let p = (px(*x), py(*y));
            if let Some(q) = last {
                c.line(q, p, LINE);
            }
            last = Some(p);
        }
        c
    }
}

/// The y ticks from 0 to `top` every `step`, labelled with one SI suffix
/// for the whole axis (the one of `top`: `0, 5M, 10M`, `0, 0.5k, 1k`).
fn y_ticks(step: f64, top: f64) -> Vec<(f64, String)> {
    let mut ticks = Vec::new();
    let mut y = 0.0;
    while y <= top + step * 1e-9 {
        ticks.push((y, si_tick(y, step, top)));
        y += step;
    }
    ticks
}

/// `v` as a tick of an axis going up to `top` every `step`: scaled by the
/// SI prefix of `top` (G from 10^9, M from 10^6, k from 10,000: a plain
/// `2500` reads better than `2.5k`) with as many decimals as
/// `step` needs at that scale.
pub fn si_tick(v: f64, step: f64, top: f64) -> String {
    let (scale, suffix) = if top >= 1e9 {
        (1e9, "G")
    } else if top >= 1e6 {
        (1e6, "M")
    } else if top >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    if v == 0.0 {
        return "0".into();
    }
    format!("{}{suffix}", format_tick(v / scale, step / scale))
}

/// A tick step from {1, 2, 5} x 10^k giving about 5 ticks up to at least `max`,
/// and the top of the axis (a multiple of the step).
pub fn nice_scale(max: f64) -> (f64, f64) {
    if !max.is_finite() || max <= 0.0 {
        return (1.0, 1.0);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    (step, (max / step).ceil().max(1.0) * step)
}

/// `v` with as many decimals as `step` needs.
pub fn format_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}")
}

struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Self {
        let mut pixels = Vec::with_capacity(width * height * 3);
        for _ in 0..width * height {
            pixels.extend_from_slice(&WHITE);
        }
        Self {
            width,
            height,
            pixels,
        }
    }

    fn set(&mut self, x: usize, y: usize, color: Rgb) {
        if x < self.width && y < self.height {
            let i = (y * self.width + x) * 3;
            self.pixels[i..i + 3].copy_from_slice(&color);
        }
    }

    fn hline(&mut self, x0: usize, x1: usize, y: usize, color: Rgb) {
        for x in x0..=x1 {
            self.set(x, y, color);
        }
    }

    fn vline(&mut self, x: usize, y0: usize, y1: usize, color: Rgb) {
        for y in y0..=y1 {
            self.set(x, y, color);
        }
    }

    /// A 2-pixel-wide segment, by stepping along its longer axis.
    fn line(&mut self, a: (f64, f64), b: (f64, f64), color: Rgb) {
        let steps = (b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil().max(1.0) as usize;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            let x = a.0 + (b.0 - a.0) * t;
            let y = a.1 + (b.1 - a.1) * t;
            if x < 0.0 || y < 0.0 {
                continue;
            }
            let (x, y) = (x.round() as usize, y.round() as usize);
            for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                self.set(x + dx, y + dy, color);
            }
        }
    }

    /// `text` left to right, its top-left corner at (`x`, `y`).
    fn text(&mut self, x: usize, y: usize, text: &str, color: Rgb) {
        self.glyphs(text, color, |cursor, col, row| (x + cursor + col, y + row));
    }

    /// `text` read bottom to top (turned a quarter left), its bottom-left
    /// corner at (`x`, `y`).
    fn text_up(&mut self, x: usize, y: usize, text: &str, color: Rgb) {
        self.glyphs(text, color, |cursor, col, row| {
            (x + row, y.saturating_sub(cursor + col))
        });
    }

    /// Sets the pixels of `text`'s glyphs, placed by `at(cursor, column,
    /// row)` (all in pixels along and across the line).
    fn glyphs(
        &mut self,
        text: &str,
        color: Rgb,
        at: impl Fn(usize, usize, usize) -> (usize, usize),
    ) {
        let mut cursor = 0;
        for ch in text.chars() {
            for (r, bits) in font::glyph(ch).iter().enumerate() {
                for col in 0..font::WIDTH {
                    if bits & (1 << (font::WIDTH - 1 - col)) == 0 {
                        continue;
                    }
                    for sy in 0..SCALE {
                        for sx in 0..SCALE {
                            let (x, y) = at(cursor, col * SCALE + sx, r * SCALE + sy);
                            self.set(x, y, color);
                        }
                    }
                }
            }
            cursor += (font::WIDTH + 1) * SCALE;
        }
    }
}

/// Width in pixels of `text` in the built-in font.
fn text_width(text: &str) -> usize {
    (text.chars().count() * (font::WIDTH + 1) * SCALE).saturating_sub(SCALE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_scale_covers_the_maximum_with_round_steps() {
        assert_eq!(nice_scale(9.0), (2.0, 10.0));
        assert_eq!(nice_scale(100.0), (20.0, 100.0));
        assert_eq!(nice_scale(0.7), (0.2, 0.8));
        assert_eq!(nice_scale(0.0), (1.0, 1.0));
        assert_eq!(nice_scale(f64::NAN), (1.0, 1.0));
        assert_eq!(format_tick(0.4, 0.2), "0.4");
        assert_eq!(format_tick(40.0, 20.0), "40");
    }

    #[test]
    fn y_ticks_carry_one_si_suffix_and_no_trailing_zeros_of_thousands() {
        let labels = |max: f64| -> Vec<String> {
            let (step, top) = nice_scale(max);
            y_ticks(step, top).into_iter().map(|(_, l)| l).collect()
        };
        assert_eq!(
            labels(23_000_000.0),
            ["0", "5M", "10M", "15M", "20M", "25M"]
        );
        assert_eq!(
            labels(2_300.0),
            ["0", "500", "1000", "1500", "2000", "2500"]
        );
        assert_eq!(labels(46_000.0), ["0", "10k", "20k", "30k", "40k", "50k"]);
        assert_eq!(labels(1_200_000.0), ["0", "0.5M", "1.0M", "1.5M"]);
        assert_eq!(labels(12_000_000.0), ["0", "5M", "10M", "15M"]);
        assert_eq!(labels(0.7), ["0", "0.2", "0.4", "0.6", "0.8"]);
        assert_eq!(si_tick(2_500.0, 500.0, 12_500.0), "2.5k");
    }

    #[test]
    fn renders_a_png_of_the_requested_size() {
        let chart = LineChart {
            width: 320,
            height: 200,
            points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 9.0)],
            x_range: (0.0, 3.0),
            x_ticks: vec![(0.0, "0%".into()), (1.0, "90%".into()), (2.0, "99%".into())],
            y_unit: "ms".into(),
            title: "A title wider than the chart itself, cut at its edge".into(),
            x_label: "percentile".into(),
            y_label: "latency (ms), longer than the axis is tall".into(),
        };
        let png = chart.render_png().unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (320, 200));
    }
}
