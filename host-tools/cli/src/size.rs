//! Byte sizes as people type them (`256KiB`, `1.5MiB`, `300000`, `64kB`) and as the reports
//! print them (`256.0 KiB`).
//!
//! Units, case-insensitive: `B` (or none) for bytes; `KiB`, `MiB`, `GiB` and the linker-script
//! shorthands `k`, `M`, `G` (as in `memory.x`: `LENGTH = 256K`) are powers of 1024; `kB`, `MB`,
//! `GB` are powers of 1000. A fraction that is not a whole number of bytes rounds down, so a
//! budget never grows past what was typed.

use std::fmt;

/// A size that could not be read; the message quotes it and says what would be accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError {
    input: String,
    problem: String,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid size '{}': {} (give a number of bytes with an optional unit B, KiB, MiB, \
             kB, MB, k or M, for example 300000, 256KiB or 1.5MiB)",
            self.input, self.problem
        )
    }
}

impl std::error::Error for SizeError {}

/// The number of bytes `text` stands for.
pub fn parse_size(text: &str) -> Result<usize, SizeError> {
    let error = |problem: &str| SizeError { input: text.to_string(), problem: problem.into() };
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit = unit.trim();
    if number.is_empty() {
        return Err(error(if trimmed.is_empty() {
            "it is empty"
        } else if trimmed.starts_with('-') {
            "a size cannot be negative"
        } else {
            "it does not start with a number"
        }));
    }
    let multiplier =
        unit_multiplier(unit).ok_or_else(|| error(&format!("unknown unit '{unit}'")))?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return Err(error("the number has more than one decimal point"));
    }
    if whole.is_empty() && fraction.is_empty() {
        return Err(error("it does not start with a number"));
    }
    // Exact integer arithmetic: `1.5MiB` is 15 * 2^20 / 10, with no float rounding.
    let too_large = || error("it is too large");
    if fraction.len() > 18 {
        return Err(error("the number has too many decimal places"));
    }
    let digits: u128 = format!("{whole}{fraction}").parse().map_err(|_| too_large())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let bytes = digits.checked_mul(multiplier).ok_or_else(too_large)? / scale;
    usize::try_from(bytes).map_err(|_| too_large())
}

/// Bytes per unit, or `None` for an unknown unit.
fn unit_multiplier(unit: &str) -> Option<u128> {
    const KI: u128 = 1 << 10;
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => KI,
        "m" | "mib" => KI * KI,
        "g" | "gib" => KI * KI * KI,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return None,
    })
}

/// `bytes` in the largest binary unit that keeps the number at least 1, with one decimal:
/// `512 B`, `256.0 KiB`, `1.5 MiB`.
pub fn format_size(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_bytes() {
        assert_eq!(parse_size("300000"), Ok(300_000));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size(" 42 "), Ok(42));
        assert_eq!(parse_size("17B"), Ok(17));
        assert_eq!(parse_size("17 b"), Ok(17));
    }

    #[test]
    fn binary_units_and_linker_shorthands_are_powers_of_1024() {
        assert_eq!(parse_size("256KiB"), Ok(262_144));
        assert_eq!(parse_size("256kib"), Ok(262_144));
        assert_eq!(parse_size("256K"), Ok(262_144));
        assert_eq!(parse_size("256k"), Ok(262_144));
        assert_eq!(parse_size("1.5MiB"), Ok(1_572_864));
        assert_eq!(parse_size("2M"), Ok(2_097_152));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
    }

    #[test]
    fn decimal_units_are_powers_of_1000() {
        assert_eq!(parse_size("64kB"), Ok(64_000));
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("1.5MB"), Ok(1_500_000));
        assert_eq!(parse_size("0.25mb"), Ok(250_000));
    }

    #[test]
    fn fractions_round_down_to_whole_bytes() {
        assert_eq!(parse_size("1.1KiB"), Ok(1126)); // 1126.4
        assert_eq!(parse_size(".5KiB"), Ok(512));
        assert_eq!(parse_size("2.KiB"), Ok(2048));
        assert_eq!(parse_size("1.5"), Ok(1));
    }

    #[test]
    fn garbage_is_rejected_with_a_message_that_quotes_it() {
        for (input, problem) in [
            ("", "it is empty"),
            ("KiB", "does not start with a number"),
            ("-5KiB", "cannot be negative"),
            ("12XB", "unknown unit 'XB'"),
            ("12 KiB extra", "unknown unit 'KiB extra'"),
            ("1.2.3", "more than one decimal point"),
            (".", "does not start with a number"),
            ("1e6", "unknown unit 'e6'"),
            ("99999999999999999999999999999999999999999", "too large"),
            ("99999999999GiB", "too large"),
        ] {
            let message = parse_size(input).unwrap_err().to_string();
            assert!(message.contains(&format!("'{input}'")), "{input}: {message}");
            assert!(message.contains(problem), "{input}: {message}");
        }
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(262_144), "256.0 KiB");
        assert_eq!(format_size(301_234), "294.2 KiB");
        assert_eq!(format_size(1_572_864), "1.5 MiB");
    }
}
