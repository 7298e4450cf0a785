//! Line charts rendered to PNG with no font or system library: axes, grid,
//! one polyline, and tick labels in a built-in 5-pixel-high font.
//!
//! Invariant: rendering is pure and total: any finite or non-finite input
//! yields a valid PNG of the requested size (non-finite points are skipped).

use std::io::Write;

/// An RGB colour.
type Rgb = [u8; 3];

const WHITE: Rgb = [255, 255, 255];
const GRID: Rgb = [225, 225, 225];
const AXIS: Rgb = [40, 40, 40];
const LINE: Rgb = [31, 119, 180];

/// Glyph scale: each font pixel becomes `SCALE` x `SCALE`.
const SCALE: usize = 2;
const MARGIN_LEFT: usize = 80;
const MARGIN_RIGHT: usize = 30;
const MARGIN_TOP: usize = 20;
const MARGIN_BOTTOM: usize = 36;

/// A chart: one series over labelled x ticks and an automatic y scale.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Points `(x, y)` in data units, drawn in order.
    pub points: Vec<(f64, f64)>,
    /// X range shown.
    pub x_range: (f64, f64),
    /// Labelled x ticks `(x, label)`; labels use `0-9 . % m s k p / -` and space.
    pub x_ticks: Vec<(f64, String)>,
    /// Suffix of y tick labels (e.g. `ms`).
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

        let mut y = 0.0;
        while y <= y_top + y_step * 1e-9 {
            let row = py(y).round() as usize;
            c.hline(left, right, row, GRID);
            let label = format!("{}{}", format_tick(y, y_step), self.y_unit);
            let w = text_width(&label);
            c.text(
                left.saturating_sub(w + 6),
                row.saturating_sub(5),
                &label,
                AXIS,
            );
            y += y_step;
        }
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

    fn text(&mut self, x: usize, y: usize, text: &str, color: Rgb) {
        let mut cursor = x;
        for ch in text.chars() {
            let (rows, width) = glyph(ch);
            for (r, bits) in rows.iter().enumerate() {
                for col in 0..width {
                    if bits & (1 << (width - 1 - col)) != 0 {
                        for sy in 0..SCALE {
                            for sx in 0..SCALE {
                                self.set(cursor + col * SCALE + sx, y + r * SCALE + sy, color);
                            }
                        }
                    }
                }
            }
            cursor += (width + 1) * SCALE;
        }
    }
}

/// Width in pixels of `text` in the built-in font.
fn text_width(text: &str) -> usize {
    let columns: usize = text.chars().map(|c| glyph(c).1 + 1).sum();
    (columns * SCALE).saturating_sub(SCALE)
}

/// A glyph five rows high and 3 (or 5) columns wide, one row per byte, the
/// highest of `width` bits the leftmost column. Unknown characters are blank.
fn glyph(ch: char) -> ([u8; 5], usize) {
    if ch == 'm' {
        return ([0b00000, 0b00000, 0b11010, 0b10101, 0b10101], 5);
    }
    let rows = match ch {
        '0' => [0b111, 0b101, 0b101, 0b101, 0b111],
        '1' => [0b010, 0b110, 0b010, 0b010, 0b111],
        '2' => [0b111, 0b001, 0b111, 0b100, 0b111],
        '3' => [0b111, 0b001, 0b111, 0b001, 0b111],
        '4' => [0b101, 0b101, 0b111, 0b001, 0b001],
        '5' => [0b111, 0b100, 0b111, 0b001, 0b111],
        '6' => [0b111, 0b100, 0b111, 0b101, 0b111],
        '7' => [0b111, 0b001, 0b001, 0b010, 0b010],
        '8' => [0b111, 0b101, 0b111, 0b101, 0b111],
        '9' => [0b111, 0b101, 0b111, 0b001, 0b111],
        '.' => [0b000, 0b000, 0b000, 0b000, 0b010],
        '%' => [0b101, 0b001, 0b010, 0b100, 0b101],
        '-' => [0b000, 0b000, 0b111, 0b000, 0b000],
        '/' => [0b001, 0b001, 0b010, 0b100, 0b100],
        's' => [0b000, 0b011, 0b110, 0b001, 0b110],
        'k' => [0b100, 0b101, 0b110, 0b101, 0b101],
        'p' => [0b000, 0b111, 0b101, 0b111, 0b100],
        _ => [0; 5],
    };
    (rows, 3)
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
    fn renders_a_png_of_the_requested_size() {
        let chart = LineChart {
            width: 320,
            height: 200,
            points: vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 9.0)],
            x_range: (0.0, 3.0),
            x_ticks: vec![(0.0, "0%".into()), (1.0, "90%".into()), (2.0, "99%".into())],
            y_unit: "ms".into(),
        };
        let png = chart.render_png().unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (320, 200));
    }
}
