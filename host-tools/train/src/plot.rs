//! The training curve of a run folder, `curve.png` and `curve.svg`: train and validation loss
//! (top panel) and validation accuracy (bottom panel) per epoch, on numbered, labelled axes
//! with legends. Text is drawn with an embedded font, so no system fonts are needed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::checkpoint::EpochRecord;
use crate::files::write_atomic;
use crate::TrainError;

/// The size of the picture, in pixels.
pub const CURVE_SIZE: (u32, u32) = (800, 600);
const FONT: &str = "sans-serif";
const TRAIN: RGBColor = RGBColor(214, 39, 40);
const VALIDATION: RGBColor = RGBColor(31, 119, 180);
const GRID: RGBColor = RGBColor(230, 230, 230);

/// Registers the embedded font once; `false` when it does not load.
fn font_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok())
}

type Drawn<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Points `(epoch, value)` of the finite values.
fn points(history: &[EpochRecord], value: impl Fn(&EpochRecord) -> f32) -> Vec<(u32, f64)> {
    history.iter().map(|r| (r.epoch, f64::from(value(r)))).filter(|(_, v)| v.is_finite()).collect()
}

/// A line of a panel: its legend label, colour and `(epoch, value)` points.
type Series<'a> = (&'a str, RGBColor, Vec<(u32, f64)>);

/// One panel of the picture: a caption, the y axis and its lines.
struct Panel<'a> {
    caption: &'a str,
    y_label: &'a str,
    y_range: std::ops::Range<f64>,
    /// Digits after the point of the y axis numbers.
    y_digits: usize,
    series: Vec<Series<'a>>,
    legend: SeriesLabelPosition,
}

/// Draws `panel` on `area` against epochs `first..=last`.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: Panel<'_>,
    first: u32,
    last: u32,
) -> Drawn<DB> {
    let Panel { caption, y_label, y_range, y_digits, series, legend } = panel;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(first..last, y_range)?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID)
        .y_label_formatter(&|v| format!("{v:.y_digits$}"))
        .x_desc("epoch")
        .y_desc(y_label)
        .x_labels((last - first + 1).min(12) as usize)
        .y_labels(6)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .draw()?;
    for (label, colour, values) in series {
        let style = colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(values.clone(), style))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        chart.draw_series(values.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 14))
        .draw()
}

/// Draws the whole curve on `root`.
fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, history: &[EpochRecord]) -> Drawn<DB> {
    root.fill(&WHITE)?;
    let first = history.first().map_or(1, |r| r.epoch);
    let last = history.last().map_or(1, |r| r.epoch).max(first + 1);
    let train = points(history, |r| r.train_loss);
    let val = points(history, |r| r.val_loss);
    let top = train.iter().chain(&val).map(|p| p.1).fold(0.0, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let accuracy = points(history, |r| 100.0 * r.val_accuracy);
    let (upper, lower) = root.split_vertically(CURVE_SIZE.1 * 55 / 100);
    let loss = Panel {
        caption: "loss",
        y_label: "cross-entropy",
        y_range: 0.0..top,
        y_digits: if top < 0.5 { 2 } else { 1 },
        series: vec![("train loss", TRAIN, train), ("validation loss", VALIDATION, val)],
        legend: SeriesLabelPosition::UpperRight,
    };
    panel(&upper, loss, first, last)?;
    let accuracy = Panel {
        caption: "validation accuracy",
        y_label: "accuracy (%)",
        y_range: 0.0..100.0,
        y_digits: 0,
        series: vec![("validation accuracy", VALIDATION, accuracy)],
        legend: SeriesLabelPosition::LowerRight,
    };
    panel(&lower, accuracy, first, last)?;
    root.present()
}

fn plot_error(path: &Path, detail: impl std::fmt::Display) -> TrainError {
    TrainError::Plot { path: path.to_path_buf(), detail: detail.to_string() }
}

/// The curve of `history` as PNG bytes ([`CURVE_SIZE`], RGB).
pub fn render_png(history: &[EpochRecord]) -> Result<Vec<u8>, String> {
    if !font_ready() {
        return Err("the embedded font does not load".into());
    }
    let (width, height) = CURVE_SIZE;
    let mut rgb = vec![255u8; (width * height * 3) as usize];
    draw(BitMapBackend::with_buffer(&mut rgb, CURVE_SIZE).into_drawing_area(), history)
        .map_err(|e| e.to_string())?;
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(&rgb).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(png)
}

/// The curve of `history` as an SVG document.
pub fn render_svg(history: &[EpochRecord]) -> Result<String, String> {
    if !font_ready() {
        return Err("the embedded font does not load".into());
    }
    let mut svg = String::new();
    draw(SVGBackend::with_string(&mut svg, CURVE_SIZE).into_drawing_area(), history)
        .map_err(|e| e.to_string())?;
    Ok(svg)
}

/// Writes `DIR/curve.png` and `DIR/curve.svg` atomically.
pub fn write_curves(dir: &Path, history: &[EpochRecord]) -> Result<(), TrainError> {
    let png_path = dir.join("curve.png");
    let png = render_png(history).map_err(|e| plot_error(&png_path, e))?;
    write_atomic(&png_path, &png)?;
    let svg_path = dir.join("curve.svg");
    let svg = render_svg(history).map_err(|e| plot_error(&svg_path, e))?;
    write_atomic(&svg_path, svg.as_bytes())
}
