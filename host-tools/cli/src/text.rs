//! The human-readable `sprout plan` report: a header, the memory and FLOP table, the largest
//! arena buffers and the ASCII picture of the arena over time.

use std::fmt::Write;

use crate::picture::{self, letter};
use crate::report::Report;
use crate::size::format_size;

/// Columns (time buckets) and rows (offset bands) of the ASCII picture.
pub const PICTURE_COLUMNS: usize = 72;
pub const PICTURE_ROWS: usize = 20;

/// Width at which the legend wraps.
const LEGEND_WIDTH: usize = 100;

/// How many recomputed activations are named before the list is cut short.
const RECOMPUTED_SHOWN: usize = 12;

/// The whole report, with the `top` largest buffers listed and lettered in the picture.
pub fn render(report: &Report, top: usize) -> String {
    let mut out = String::new();
    header(&mut out, report);
    table(&mut out, report);
    let largest = report.largest(top);
    buffers(&mut out, report, &largest);
    out.push('\n');
    out.push_str(&picture::ascii(report, &largest, PICTURE_COLUMNS, PICTURE_ROWS));
    legend(&mut out, report, &largest);
    out
}

fn header(out: &mut String, r: &Report) {
    let strategy = if r.strategy == r.strategy_used {
        r.strategy.to_string()
    } else {
        format!("{} (too many buffers to search: {} placement used)", r.strategy, r.strategy_used)
    };
    let _ = writeln!(
        out,
        "{}, batch {}, trainable {} ({} tensors, {} of {} parameters), strategy {strategy}",
        r.model, r.batch, r.trainable, r.trainable_tensors, r.trainable_params, r.model_params,
    );
    let on = |flag: bool| if flag { "on" } else { "off" };
    let budget = match r.budget_bytes {
        None => "no budget".to_string(),
        Some(b) => format!("budget {b} B ({})", format_size(b)),
    };
    let _ = writeln!(
        out,
        "passes: early updates {}, in-place ops {}; {budget}\n",
        on(r.update_early),
        on(r.in_place)
    );
}

fn table(out: &mut String, r: &Report) {
    let bytes = |b: usize| format!("{b} B ({})", format_size(b));
    let flops = |f: u64| format!("{f} ({})", short_count(f));
    let rows = [
        ("arena", bytes(r.arena_bytes)),
        ("lower bound", bytes(r.lower_bound_bytes)),
        ("arena / lower bound", format!("{:.3}x", r.ratio)),
        ("state", bytes(r.state_bytes)),
        ("frozen weights", bytes(r.frozen_bytes)),
        ("steps", r.steps.to_string()),
        ("forward FLOPs", flops(r.forward_flops)),
        ("backward FLOPs", flops(r.backward_flops)),
        ("optimizer FLOPs", flops(r.optimizer_flops)),
        (
            "recompute FLOPs",
            format!(
                "{} ({}, {:.1}% of forward)",
                r.recompute_flops,
                short_count(r.recompute_flops),
                r.recompute_overhead_percent()
            ),
        ),
        ("recomputed", format!("{} activations", r.recomputed.len())),
    ];
    for (name, value) in rows {
        let _ = writeln!(out, "  {name:<20} {value}");
    }
    if !r.recomputed.is_empty() {
        let shown: Vec<&str> =
            r.recomputed.iter().take(RECOMPUTED_SHOWN).map(String::as_str).collect();
        let more = r.recomputed.len() - shown.len();
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        let _ = writeln!(out, "  {:<20} {}{tail}", "", shown.join(", "));
    }
}

fn buffers(out: &mut String, r: &Report, largest: &[usize]) {
    if largest.is_empty() {
        return;
    }
    let name_width = largest.iter().map(|&i| r.buffers[i].name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(out, "\n{} largest arena buffers (of {}):", largest.len(), r.buffers.len());
    let _ = writeln!(out, "     {:<name_width$}  {:>20}  {:>10}  steps", "name", "size", "offset");
    for (rank, &i) in largest.iter().enumerate() {
        let b = &r.buffers[i];
        let mark = letter(rank).unwrap_or(' ');
        let size = format!("{} B ({})", b.size, format_size(b.size));
        let _ = writeln!(
            out,
            "  {mark}  {:<name_width$}  {size:>20}  {:>10}  {}..{}",
            b.name, b.offset, b.first_step, b.last_step
        );
    }
}

fn legend(out: &mut String, r: &Report, largest: &[usize]) {
    let mut marks: Vec<String> = largest
        .iter()
        .enumerate()
        .filter_map(|(rank, &i)| Some(format!("{} {}", letter(rank)?, r.buffers[i].name)))
        .collect();
    marks.push(". other buffers".to_string());
    marks.push("blank: free".to_string());
    // Entries joined by commas, wrapped under the `legend:` label.
    let mut line = String::from("legend:");
    for (k, mark) in marks.iter().enumerate() {
        if k > 0 && line.len() + mark.len() + 2 > LEGEND_WIDTH {
            let _ = writeln!(out, "{line},");
            line = " ".repeat("legend:".len());
        } else if k > 0 {
            line.push(',');
        }
        line.push(' ');
        line.push_str(mark);
    }
    let _ = writeln!(out, "{line}");
}

/// A count with a metric suffix and three significant digits: `950`, `12.3 k`, `4.56 G`.
pub fn short_count(value: u64) -> String {
    let mut scaled = value as f64;
    for suffix in ["", " k", " M", " G", " T"] {
        if scaled < 999.5 {
            return if suffix.is_empty() {
                value.to_string()
            } else if scaled < 9.995 {
                format!("{scaled:.2}{suffix}")
            } else if scaled < 99.95 {
                format!("{scaled:.1}{suffix}")
            } else {
                format!("{scaled:.0}{suffix}")
            };
        }
        scaled /= 1000.0;
    }
    format!("{:.0} P", scaled)
}

#[cfg(test)]
mod tests {
    use super::short_count;

    #[test]
    fn counts_read_with_three_significant_digits() {
        assert_eq!(short_count(0), "0");
        assert_eq!(short_count(950), "950");
        assert_eq!(short_count(12_345), "12.3 k");
        assert_eq!(short_count(4_560_000_000), "4.56 G");
        assert_eq!(short_count(999_999), "1.00 M");
        assert_eq!(short_count(123_456_789), "123 M");
    }
}
