//! The training curve as a PNG: train loss (red, scaled to its maximum) and validation
//! accuracy (blue, 0 to 1) per epoch, on axes with tick marks; no text, so no fonts.

use std::path::Path;

use crate::checkpoint::EpochRecord;
use crate::files::write_atomic;
use crate::TrainError;

const WIDTH: usize = 640;
const HEIGHT: usize = 400;
const MARGIN: usize = 40;
const LOSS: [u8; 3] = [214, 39, 40];
const ACCURACY: [u8; 3] = [31, 119, 180];
const AXIS: [u8; 3] = [60, 60, 60];
const GRID: [u8; 3] = [225, 225, 225];

struct Canvas {
    rgb: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, colour: [u8; 3]) {
        if (0..WIDTH as i64).contains(&x) && (0..HEIGHT as i64).contains(&y) {
            let i = (y as usize * WIDTH + x as usize) * 3;
            self.rgb[i..i + 3].copy_from_slice(&colour);
        }
    }

    /// A line two pixels thick (Bresenham).
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), colour: [u8; 3]) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            for (ox, oy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                self.set(x + ox, y + oy, colour);
            }
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }
}

/// Draws the curve of `history` as PNG bytes.
pub fn render_curve(history: &[EpochRecord]) -> Vec<u8> {
    let mut c = Canvas { rgb: vec![255; WIDTH * HEIGHT * 3] };
    let (left, right) = (MARGIN as i64, (WIDTH - MARGIN / 2) as i64);
    let (top, bottom) = ((MARGIN / 2) as i64, (HEIGHT - MARGIN) as i64);
    // Horizontal grid at tenths, vertical ticks at every epoch.
    for i in 0..=10 {
        let y = bottom - (bottom - top) * i / 10;
        c.line((left, y), (right, y), GRID);
        c.line((left - 6, y), (left, y), AXIS);
    }
    let epochs = history.len().max(2) as i64;
    let x_of = |i: usize| left + (right - left) * i as i64 / (epochs - 1);
    for i in 0..epochs as usize {
        c.line((x_of(i), bottom), (x_of(i), bottom + 6), AXIS);
    }
    c.line((left, top), (left, bottom), AXIS);
    c.line((left, bottom), (right, bottom), AXIS);
    let max_loss =
        history.iter().map(|r| r.train_loss).filter(|l| l.is_finite()).fold(0.0, f32::max);
    let y_of = |v: f32| bottom - ((bottom - top) as f32 * v.clamp(0.0, 1.0)).round() as i64;
    let series = [
        (
            LOSS,
            history
                .iter()
                .map(|r| r.train_loss / max_loss.max(f32::MIN_POSITIVE))
                .collect::<Vec<_>>(),
        ),
        (ACCURACY, history.iter().map(|r| r.val_accuracy).collect()),
    ];
    for (colour, values) in series {
        let points: Vec<(i64, i64)> =
            values.iter().enumerate().map(|(i, &v)| (x_of(i), y_of(v))).collect();
        for pair in points.windows(2) {
            c.line(pair[0], pair[1], colour);
        }
        for &(x, y) in &points {
            for ox in -3..=3 {
                for oy in -3..=3 {
                    c.set(x + ox, y + oy, colour);
                }
            }
        }
    }
    let mut png = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png, WIDTH as u32, HEIGHT as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().expect("writing into memory cannot fail");
        writer.write_image_data(&c.rgb).expect("the image has the announced size");
    }
    png
}

/// Writes the curve of `history` to `path` atomically.
pub fn write_curve(path: &Path, history: &[EpochRecord]) -> Result<(), TrainError> {
    write_atomic(path, &render_curve(history))
}
