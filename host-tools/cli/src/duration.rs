//! Time limits as people type them: `500ms`, `90s`, `10m`, `2h` (a bare number is seconds),
//! or `none` for no limit; held as milliseconds, as the device link counts them.

/// A time limit in milliseconds; `None`: no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeLimit(pub Option<u32>);

/// The limit `text` stands for. At most `u32::MAX` ms (49 days).
pub fn parse_limit(text: &str) -> Result<TimeLimit, String> {
    let trimmed = text.trim();
    if trimmed.eq_ignore_ascii_case("none") {
        return Ok(TimeLimit(None));
    }
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let not_a_duration =
        || format!("'{text}' is not a duration (for example 500ms, 90s, 10m, 2h, or none)");
    if number.is_empty() {
        return Err(not_a_duration());
    }
    let scale = match unit.trim() {
        "ms" => 1.0,
        "" | "s" => 1e3,
        "m" | "min" => 60e3,
        "h" => 3600e3,
        other => {
            return Err(format!("unknown unit '{other}' in '{text}' (give ms, s, m or h, or none)"))
        }
    };
    let value: f64 = number.parse().map_err(|_| not_a_duration())?;
    let ms = (value * scale).round();
    if !(1.0..=f64::from(u32::MAX)).contains(&ms) {
        return Err(format!("'{text}' is outside 1 ms to 49 days (give none for no limit)"));
    }
    Ok(TimeLimit(Some(ms as u32)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_bad_ones_are_named() {
        let cases =
            [("500ms", 500), ("90", 90_000), ("1.5s", 1500), ("10m", 600_000), ("2h", 7_200_000)];
        for (text, ms) in cases {
            assert_eq!(parse_limit(text), Ok(TimeLimit(Some(ms))), "{text}");
        }
        assert_eq!(parse_limit("None"), Ok(TimeLimit(None)));
        for (text, needle) in [
            ("5d", "unknown unit 'd'"),
            ("-1s", "not a duration"),
            ("", "not a duration"),
            ("0", "outside 1 ms"),
            ("50d", "unknown unit"),
            ("2000h", "outside 1 ms to 49 days"),
        ] {
            let error = parse_limit(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }
}
