//! The arena over time, drawn two ways: an ASCII grid for the terminal (time across, offsets
//! up, a letter per large buffer) and an SVG with one rectangle per arena buffer.

use std::collections::HashMap;
use std::fmt::Write;

use crate::report::Report;
use crate::size::format_size;

/// Letters for the largest buffers, in order: `A`..`Z`, then `a`..`z`.
pub const LETTERS: &[u8; 52] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The letter of the `rank`-th largest buffer, if it gets one.
pub fn letter(rank: usize) -> Option<char> {
    LETTERS.get(rank).map(|&b| b as char)
}

/// Draws the arena as `rows` offset bands (top: high offsets) by at most `columns` time
/// buckets. A cell shows the letter of the largest buffer in it when that buffer is one of
/// `lettered` (indices into `report.buffers`, largest first), `.` for any other buffer and a
/// space when the band is free at that time.
pub fn ascii(report: &Report, lettered: &[usize], columns: usize, rows: usize) -> String {
    let (arena, steps) = (report.arena_bytes, report.steps);
    if arena == 0 || steps == 0 || columns == 0 || rows == 0 {
        return "the arena is empty: nothing to draw\n".to_string();
    }
    let columns = columns.min(steps);
    let buffers = &report.buffers;
    // The largest buffer in each cell, by index. Among equal sizes the one that starts later
    // wins, so an in-place chain (one offset, one size, consecutive lifetimes) shows each
    // member in turn rather than its first member throughout.
    let rank = |i: usize| {
        let b = &buffers[i];
        (std::cmp::Reverse(b.size), std::cmp::Reverse(b.first_step), b.offset, b.name.as_str())
    };
    let mut cells: Vec<Option<usize>> = vec![None; columns * rows];
    for (i, b) in buffers.iter().enumerate().filter(|(_, b)| b.size > 0) {
        let (left, right) =
            (scale(b.first_step, columns, steps), scale(b.last_step, columns, steps));
        let (low, high) = (scale(b.offset, rows, arena), scale(b.end() - 1, rows, arena));
        for band in low..=high.min(rows - 1) {
            for column in left..=right.min(columns - 1) {
                let cell = &mut cells[band * columns + column];
                if cell.is_none_or(|other| rank(i) < rank(other)) {
                    *cell = Some(i);
                }
            }
        }
    }
    let letters: HashMap<usize, char> =
        lettered.iter().enumerate().filter_map(|(r, &i)| Some((i, letter(r)?))).collect();

    let label_width = format_size(arena).len().max(8);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "arena over time: x = step ({steps} steps in {columns} columns), y = offset ({} in \
         {rows} rows of {})",
        format_size(arena),
        format_size(arena.div_ceil(rows)),
    );
    for band in (0..rows).rev() {
        // The top row is labelled with the arena's top edge, others with their lower edge.
        let label = match band {
            b if b == rows - 1 => format_size(arena),
            0 => "0 B".to_string(),
            b if b == rows / 2 => format_size(lower_edge(b, rows, arena)),
            _ => String::new(),
        };
        let line: String = (0..columns)
            .map(|column| match cells[band * columns + column] {
                None => ' ',
                Some(i) => letters.get(&i).copied().unwrap_or('.'),
            })
            .collect();
        let _ = writeln!(out, "{label:>label_width$} |{line}|");
    }
    let _ = writeln!(out, "{:>label_width$} +{}+", "", "-".repeat(columns));
    let _ = writeln!(out, "{:>label_width$}  {}", "step", step_axis(columns, steps));
    out
}

/// The bucket (of `buckets` over `0..total`) that `value` falls in.
fn scale(value: usize, buckets: usize, total: usize) -> usize {
    (value as u128 * buckets as u128 / total as u128) as usize
}

/// The lowest byte offset of band `band` of `bands` over `arena` bytes.
fn lower_edge(band: usize, bands: usize, arena: usize) -> usize {
    (band as u128 * arena as u128).div_ceil(bands as u128) as usize
}

/// Step numbers under the first, middle and last columns.
fn step_axis(columns: usize, steps: usize) -> String {
    let mut axis = vec![b' '; columns + 8];
    let first_step = |column: usize| (column * steps).div_ceil(columns);
    let mut put = |column: usize, text: String, right_align: bool| {
        let start = if right_align { (column + 1).saturating_sub(text.len()) } else { column };
        for (k, byte) in text.bytes().enumerate() {
            if let Some(slot) = axis.get_mut(start + k) {
                *slot = byte;
            }
        }
    };
    put(0, "0".to_string(), false);
    if columns >= 24 {
        let middle = columns / 2;
        put(middle, first_step(middle).to_string(), false);
    }
    put(columns - 1, (steps - 1).to_string(), true);
    String::from_utf8_lossy(&axis).trim_end().to_string()
}

/// Fill colour of a buffer by its role.
fn role_color(role: &str) -> &'static str {
    match role {
        "input" | "label" => "#8c8c8c",
        "activation" => "#4e79a7",
        "gradient" => "#e15759",
        "scratch" => "#f28e2b",
        "optimizer-state" => "#59a14f",
        "trainable-param" | "frozen-param" | "buffer" => "#b07aa1",
        _ => "#76b7b2",
    }
}

/// The arena as an SVG image: x is the step, y the offset (high offsets at the top), one
/// `<rect>` per arena buffer coloured by role, with a `<title>` tooltip holding its name,
/// size, offset, lifetime and role. Buffers are the only `<rect>` elements, so tools can count
/// them; the legend and axes are lines and text.
pub fn svg(report: &Report) -> String {
    // Margins and the plot area, in pixels.
    const LEFT: f64 = 90.0;
    const RIGHT: f64 = 30.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 70.0;
    const WIDTH: f64 = 900.0;
    const HEIGHT: f64 = 480.0;
    const MIN_HEIGHT: f64 = 1.0;
    let steps = report.steps.max(1) as f64;
    let arena = report.arena_bytes.max(1) as f64;
    let x = |step: f64| LEFT + step * WIDTH / steps;
    let y = |offset: f64| TOP + HEIGHT - offset * HEIGHT / arena;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="monospace" font-size="12">"#,
        w = LEFT + WIDTH + RIGHT,
        h = TOP + HEIGHT + BOTTOM,
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="20">{}</text>"#,
        escape(&format!(
            "{}, batch {}, trainable {}: arena {} ({:.3}x the lower bound {}), {} placement",
            report.model,
            report.batch,
            report.trainable,
            format_size(report.arena_bytes),
            report.ratio,
            format_size(report.lower_bound_bytes),
            report.strategy_used,
        ))
    );
    for b in &report.buffers {
        // At least one pixel tall, growing up from the buffer's offset, so tiny buffers
        // keep a tooltip.
        let bottom = y(b.offset as f64);
        let height = (bottom - y(b.end() as f64)).max(MIN_HEIGHT);
        let (left, top) = (x(b.first_step as f64), bottom - height);
        let width = x(b.last_step as f64 + 1.0) - left;
        let _ = writeln!(
            out,
            r##"<rect x="{left:.2}" y="{top:.2}" width="{width:.2}" height="{height:.2}" fill="{}" stroke="#ffffff" stroke-width="0.25"><title>{}</title></rect>"##,
            role_color(b.role),
            escape(&format!(
                "{}: {} B ({}) at offset {}, steps {}..{}, {}",
                b.name,
                b.size,
                format_size(b.size),
                b.offset,
                b.first_step,
                b.last_step,
                b.role
            )),
        );
    }
    // Axes, ticks and labels.
    let (x0, y0, x1, y1) = (LEFT, TOP + HEIGHT, LEFT + WIDTH, TOP);
    let _ = writeln!(
        out,
        r##"<g stroke="#333333"><line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}"/><line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}"/></g>"##
    );
    for fraction in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let offset = (arena * fraction).round();
        let _ = writeln!(
            out,
            r#"<text x="{:.2}" y="{:.2}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y(offset) + 4.0,
            escape(&format_size(offset as usize))
        );
    }
    let last = report.steps.saturating_sub(1);
    for step in [0, last / 2, last] {
        let _ = writeln!(
            out,
            r#"<text x="{:.2}" y="{:.2}" text-anchor="middle">{step}</text>"#,
            x(step as f64 + 0.5),
            y0 + 16.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.2}" y="{:.2}" text-anchor="middle">step</text>"#,
        LEFT + WIDTH / 2.0,
        y0 + 34.0
    );
    let _ = writeln!(
        out,
        r#"<text x="16" y="{:.2}" text-anchor="middle" transform="rotate(-90 16 {:.2})">arena offset</text>"#,
        TOP + HEIGHT / 2.0,
        TOP + HEIGHT / 2.0
    );
    // Legend: the roles that occur, as coloured text.
    let mut roles: Vec<&str> = report.buffers.iter().map(|b| b.role).collect();
    roles.sort_unstable();
    roles.dedup();
    for (k, role) in roles.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<text x="{:.2}" y="{:.2}" fill="{}">&#9632; {role}</text>"#,
            LEFT + 130.0 * k as f64,
            y0 + 56.0,
            role_color(role)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// `text` with the five XML special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{buffer, report};

    /// The grid rows of an ASCII picture, top first, without labels and frame.
    fn grid(picture: &str) -> Vec<String> {
        picture
            .lines()
            .filter_map(|l| {
                l.split_once('|').map(|(_, rest)| rest.trim_end_matches('|').to_string())
            })
            .collect()
    }

    #[test]
    fn cells_show_the_largest_buffer_and_free_space() {
        // 4 steps x 100 bytes: `big` fills the lower half for steps 0..=1, `small` the upper
        // quarter at step 3, `tiny` (unlettered) the bottom quarter at step 3.
        let r = report(
            vec![
                buffer("big", 0, 50, 0, 1),
                buffer("small", 75, 25, 3, 3),
                buffer("tiny", 0, 25, 3, 3),
            ],
            100,
            4,
        );
        let picture = ascii(&r, &[0, 1], 4, 4);
        assert_eq!(grid(&picture), ["   B", "    ", "AA  ", "AA ."], "{picture}");
        assert!(picture.contains("100 B |"), "{picture}");
        assert!(picture.contains("0 B |"), "{picture}");
    }

    #[test]
    fn an_in_place_chain_shows_each_member_in_turn() {
        let r = report(
            vec![buffer("a", 0, 10, 0, 1), buffer("b", 0, 10, 1, 2), buffer("c", 0, 10, 2, 3)],
            10,
            4,
        );
        assert_eq!(grid(&ascii(&r, &[0, 1, 2], 4, 1)), ["ABCC"]);
    }

    #[test]
    fn steps_are_bucketed_into_at_most_the_given_columns() {
        let r = report(vec![buffer("x", 0, 10, 0, 99)], 10, 100);
        let picture = ascii(&r, &[0], 72, 2);
        let rows = grid(&picture);
        assert_eq!(rows.len(), 2);
        assert!(
            rows.iter().all(|row| row.len() == 72 && row.chars().all(|c| c == 'A')),
            "{picture}"
        );
        assert!(picture.lines().last().unwrap().trim_end().ends_with("99"), "{picture}");
    }

    #[test]
    fn an_empty_arena_draws_nothing() {
        assert!(ascii(&report(vec![], 0, 3), &[], 72, 20).contains("empty"));
    }

    #[test]
    fn svg_has_one_rect_per_buffer_with_an_escaped_tooltip() {
        let r = report(vec![buffer("a<b>&\"c\"", 0, 50, 0, 1), buffer("d", 50, 50, 1, 3)], 100, 4);
        let svg = svg(&r);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect").count(), 2);
        assert!(svg
            .contains("<title>a&lt;b&gt;&amp;&quot;c&quot;: 50 B (50 B) at offset 0, steps 0..1"));
        // `d` spans steps 1..=3 of 4 over 900 px and the upper half of 480 px.
        assert!(
            svg.contains(r#"<rect x="315.00" y="40.00" width="675.00" height="240.00""#),
            "{svg}"
        );
    }
}
