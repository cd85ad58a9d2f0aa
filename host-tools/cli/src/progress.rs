//! Progress bars and summary lines, made the same way for every command: an `indicatif` bar
//! on standard error (position/length, elapsed time, ETA, a rate in the task's unit and a
//! short message) at most [`COLUMNS`] wide, drawn only when standard error is a terminal, so
//! logs and pipes get no escape codes or carriage returns.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use crate::text::short_count;

/// The widest a bar or a summary line gets, so an 80-column terminal never wraps them
/// (the template's field widths add up to it; the tests check).
#[cfg(test)]
pub const COLUMNS: usize = 80;

/// What a bar counts; names the rate (`img/s`, `B/s`, `ep/s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Images,
    Epochs,
    Bytes,
}

impl Unit {
    fn symbol(self) -> &'static str {
        match self {
            Unit::Images => "img",
            Unit::Epochs => "ep",
            Unit::Bytes => "B",
        }
    }
}

/// Label, bar, count, times, rate and message: 13 + 17 + 13 + 1 + 11 + 1 + 12 + 1 + 11
/// = 80 columns, each field cut (`!`) to its width so the line never passes [`COLUMNS`].
const TEMPLATE: &str = "{prefix:13!} [{bar:13}] {count:>13!} {times:>11!} {rate:>12!} {msg:11!}";

/// A bar over `len` steps of `unit`, labelled `label` (at most 13 characters are shown), on
/// standard error when that is a terminal and hidden otherwise.
pub fn bar(label: &str, len: u64, unit: Unit) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    bar_on(target, label, len, unit)
}

fn bar_on(target: ProgressDrawTarget, label: &str, len: u64, unit: Unit) -> ProgressBar {
    let symbol = unit.symbol();
    let style = ProgressStyle::with_template(TEMPLATE)
        .expect("the bar template is valid")
        .with_key("count", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let len = s.len().map_or("?".into(), short_count);
            let _ = write!(w, "{}/{len}", short_count(s.pos()));
        })
        .with_key("times", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{}<{}", clock(s.elapsed()), clock(s.eta()));
        })
        .with_key("rate", move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{} {symbol}/s", rate(s.per_sec()));
        })
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(len), target).with_style(style);
    bar.set_prefix(label.to_string());
    bar
}

/// `mm:ss` under an hour, `HhMM` from there.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s < 3600 {
        format!("{:02}:{:02}", s / 60, s % 60)
    } else {
        format!("{}h{:02}", s / 3600, s / 60 % 60)
    }
}

/// A rate with three significant digits at most (`0.42`, `9.5`, `212`, `12.3 k`).
pub fn rate(per_second: f64) -> String {
    if !per_second.is_finite() || per_second <= 0.0 {
        "0".into()
    } else if per_second < 1.0 {
        format!("{per_second:.2}")
    } else if per_second < 10.0 {
        format!("{per_second:.1}")
    } else {
        short_count(per_second.round() as u64)
    }
}

/// A loss-like value in at most 8 columns: three decimals, scientific when large or tiny.
pub fn decimal(value: f64) -> String {
    if value == 0.0 || (1e-3..1e4).contains(&value.abs()) {
        format!("{value:.3}")
    } else {
        format!("{value:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// An 80-column terminal that keeps every line drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            COLUMNS as u16
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.write_str(s)
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.0.lock().unwrap().extend(s.lines().map(str::to_string));
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn bars_fit_80_columns_even_with_long_labels_counts_and_messages() {
        for unit in [Unit::Images, Unit::Epochs, Unit::Bytes] {
            let screen = Screen::default();
            let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
            let bar = bar_on(target, "epoch 1234/99999", 123_456_789_012, unit);
            bar.set_message("loss 123456.789 and then some more words");
            bar.set_position(98_765_432_109);
            bar.tick();
            let lines = screen.0.lock().unwrap().clone();
            let drawn: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
            for line in &drawn {
                assert!(line.chars().count() <= COLUMNS, "{} columns: {line}", line.len());
            }
            let last = drawn.last().expect("something is drawn");
            assert!(last.starts_with("epoch 1234/99 ["), "{last}");
            assert!(last.contains("98.8 G/123 G"), "{last}");
            assert!(last.contains(&format!(" {}/s ", unit.symbol())), "{last}");
            assert!(last.ends_with("loss 123456"), "{last}");
        }
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(clock(Duration::from_secs(75)), "01:15");
        assert_eq!(clock(Duration::from_secs(3 * 3600 + 5 * 60)), "3h05");
        assert_eq!(rate(0.0), "0");
        assert_eq!(rate(0.4251), "0.43");
        assert_eq!(rate(9.46), "9.5");
        assert_eq!(rate(212.4), "212");
        assert_eq!(rate(12_345.0), "12.3 k");
        assert_eq!(decimal(0.41234), "0.412");
        assert_eq!(decimal(0.0), "0.000");
        assert_eq!(decimal(12_345.6), "1.23e4");
        assert_eq!(decimal(-2.5e-5), "-2.50e-5");
        assert!(decimal(f64::MAX).len() <= 8);
    }
}
