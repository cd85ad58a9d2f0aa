//! Value parsers for the numeric options (learning rate, momentum, weight decay, fractions,
//! logit adjustment):
//! NaN, infinities and values outside each option's range are refused at parse time.

/// A float in `range`, or an error saying which range `text` is outside.
fn float_in(text: &str, ok: impl Fn(f32) -> bool, range: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(v) if v.is_finite() && ok(v) => Ok(v),
        _ => Err(format!("'{text}' is not a number {range}")),
    }
}

/// A learning rate: in `[0, 10]` (0 keeps the weights, e.g. to measure a frozen model).
pub fn learning_rate(text: &str) -> Result<f32, String> {
    float_in(text, |v| (0.0..=10.0).contains(&v), "in [0, 10], e.g. 0.05")
}

/// SGD momentum: in `[0, 1)`.
pub fn momentum(text: &str) -> Result<f32, String> {
    float_in(text, |v| (0.0..1.0).contains(&v), "in [0, 1), e.g. 0.9")
}

/// Weight decay: in `[0, 1]`.
pub fn weight_decay(text: &str) -> Result<f32, String> {
    float_in(text, |v| (0.0..=1.0).contains(&v), "in [0, 1], e.g. 0.0005")
}

/// A logit adjustment's tau: 0 or more.
pub fn logit_adjust(text: &str) -> Result<f32, String> {
    float_in(text, |v| v >= 0.0, "of 0 or more, e.g. 1")
}

/// A fraction strictly between 0 and 1.
pub fn fraction(text: &str) -> Result<f32, String> {
    float_in(text, |v| v > 0.0 && v < 1.0, "between 0 and 1 (exclusive), e.g. 0.2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_and_out_of_range_values_are_refused() {
        for bad in ["nan", "NaN", "inf", "-inf", "1e30", "-1", "11", "x"] {
            assert!(learning_rate(bad).is_err(), "--lr {bad}");
        }
        assert_eq!(learning_rate("0.05"), Ok(0.05));
        assert_eq!(learning_rate("0"), Ok(0.0));
        assert!(momentum("1").is_err() && momentum("nan").is_err());
        assert_eq!(momentum("0"), Ok(0.0));
        assert!(weight_decay("-0.1").is_err() && weight_decay("inf").is_err());
        assert!(fraction("1").is_err() && fraction("nan").is_err());
        assert_eq!(fraction("0.2"), Ok(0.2));
        assert!(logit_adjust("-0.5").is_err() && logit_adjust("nan").is_err());
        assert!(logit_adjust("inf").is_err());
        assert_eq!(logit_adjust("0"), Ok(0.0));
        assert_eq!(logit_adjust("1.5"), Ok(1.5));
    }
}
