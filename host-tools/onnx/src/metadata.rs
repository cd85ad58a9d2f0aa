//! Class names and preprocessing in ONNX `metadata_props`, under sprout's keys, so they
//! travel with an exported model and back through `sprout convert`:
//!
//! | key | value |
//! |---|---|
//! | `sprout.classes` | a JSON array of strings (read too: comma-separated names) |
//! | `sprout.mean`, `sprout.std` | per-channel values, comma-separated (`0.485,0.456,0.406`) |
//! | `sprout.size` | the square input size `S`, or `HxW` |
//! | `sprout.resize` | `crop` or `squash` |
//!
//! The parsers are also those of `sprout convert`'s flags.

use sprout_core::format::{Fit, Metadata};

use crate::error::OnnxError;
use crate::proto::StringStringEntryProto;

pub const CLASSES_KEY: &str = "sprout.classes";
pub const MEAN_KEY: &str = "sprout.mean";
pub const STD_KEY: &str = "sprout.std";
pub const SIZE_KEY: &str = "sprout.size";
pub const RESIZE_KEY: &str = "sprout.resize";

/// The most class names a model may list (a bound before allocating).
const MAX_CLASSES: usize = 1 << 16;

fn bad(key: &str, detail: String) -> OnnxError {
    OnnxError::Metadata { key: key.into(), detail }
}

/// Class names: a JSON array of strings, or comma-separated names.
pub fn parse_classes(text: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = if text.trim_start().starts_with('[') {
        serde_json::from_str(text).map_err(|e| format!("not a JSON array of strings: {e}"))?
    } else {
        text.split(',').map(|n| n.trim().to_string()).collect()
    };
    if names.len() > MAX_CLASSES {
        return Err(format!("{} class names, at most {MAX_CLASSES}", names.len()));
    }
    if let Some(empty) = names.iter().position(String::is_empty) {
        return Err(format!("class name {} of {} is empty", empty + 1, names.len()));
    }
    Ok(names)
}

/// Three comma-separated per-channel values (R, G, B).
pub fn parse_channels(text: &str) -> Result<Vec<f32>, String> {
    let values = text
        .split(',')
        .map(|v| {
            v.trim().parse::<f32>().map_err(|e| format!("'{}' is not a number: {e}", v.trim()))
        })
        .collect::<Result<Vec<f32>, String>>()?;
    if values.len() != 3 {
        return Err(format!("{} values, expected 3 (R,G,B)", values.len()));
    }
    if let Some(v) = values.iter().find(|v| !v.is_finite()) {
        return Err(format!("{v} is not finite"));
    }
    Ok(values)
}

/// `S` (square) or `HxW`, each at least 1.
pub fn parse_size(text: &str) -> Result<(u32, u32), String> {
    let side = |s: &str| match s.trim().parse::<u32>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(format!("'{s}' is not a size of at least 1")),
    };
    match text.split_once('x') {
        Some((h, w)) => Ok((side(h)?, side(w)?)),
        None => side(text).map(|s| (s, s)),
    }
}

/// `crop` or `squash`.
pub fn parse_fit(text: &str) -> Result<Fit, String> {
    match text.trim() {
        "crop" => Ok(Fit::Crop),
        "squash" => Ok(Fit::Squash),
        other => Err(format!("'{other}' is neither crop nor squash")),
    }
}

/// Reads sprout's keys of `props` into `metadata`; other keys are left alone.
pub fn read_metadata_props(
    props: &[StringStringEntryProto],
    metadata: &mut Metadata,
) -> Result<(), OnnxError> {
    for entry in props {
        let (Some(key), Some(value)) = (entry.key.as_deref(), entry.value.as_deref()) else {
            continue;
        };
        let prep = &mut metadata.preprocessing;
        let read = match key {
            CLASSES_KEY => parse_classes(value).map(|c| metadata.class_names = c),
            MEAN_KEY => parse_channels(value).map(|v| prep.mean = v),
            STD_KEY => parse_channels(value).map(|v| prep.std = v),
            SIZE_KEY => parse_size(value).map(|s| prep.resize = Some(s)),
            RESIZE_KEY => parse_fit(value).map(|f| prep.fit = Some(f)),
            _ => Ok(()),
        };
        read.map_err(|detail| bad(key, detail))?;
    }
    Ok(())
}

fn join(values: &[f32]) -> String {
    values.iter().map(f32::to_string).collect::<Vec<_>>().join(",")
}

/// `metadata`'s class names and preprocessing under sprout's keys (those it has).
pub fn metadata_props(metadata: &Metadata) -> Vec<StringStringEntryProto> {
    let prep = &metadata.preprocessing;
    let classes = (!metadata.class_names.is_empty())
        .then(|| serde_json::to_string(&metadata.class_names).expect("strings always serialise"));
    let fit = prep.fit.map(|f| match f {
        Fit::Crop => "crop".to_string(),
        Fit::Squash => "squash".to_string(),
    });
    [
        (CLASSES_KEY, classes),
        (MEAN_KEY, (!prep.mean.is_empty()).then(|| join(&prep.mean))),
        (STD_KEY, (!prep.std.is_empty()).then(|| join(&prep.std))),
        (SIZE_KEY, prep.resize.map(|(h, w)| format!("{h}x{w}"))),
        (RESIZE_KEY, fit),
    ]
    .into_iter()
    .filter_map(|(key, value)| {
        Some(StringStringEntryProto { key: Some(key.into()), value: Some(value?) })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sprout_core::format::Preprocessing;
    use sprout_core::Shape;

    #[test]
    fn metadata_survives_its_props_and_bad_values_name_the_key() {
        let metadata = Metadata {
            class_names: vec!["a, b".into(), "rust".into()],
            input_shape: Shape::d4(1, 3, 8, 8),
            preprocessing: Preprocessing {
                mean: vec![0.5, 0.25, 0.125],
                std: vec![0.2, 0.3, 0.4],
                resize: Some((8, 8)),
                fit: Some(Fit::Squash),
            },
            provenance: "test".into(),
        };
        let mut read = Metadata {
            class_names: vec![],
            preprocessing: Preprocessing::default(),
            ..metadata.clone()
        };
        read_metadata_props(&metadata_props(&metadata), &mut read).unwrap();
        assert_eq!(read, metadata);
        assert_eq!(parse_classes("x, y,z").unwrap(), ["x", "y", "z"]);
        assert_eq!(parse_size("224").unwrap(), (224, 224));
        let entry = |k: &str, v: &str| StringStringEntryProto {
            key: Some(k.into()),
            value: Some(v.into()),
        };
        let err = read_metadata_props(&[entry(MEAN_KEY, "1,2")], &mut read).unwrap_err();
        assert!(err.to_string().contains("sprout.mean") && err.to_string().contains("expected 3"));
        let err = read_metadata_props(&[entry(RESIZE_KEY, "zoom")], &mut read).unwrap_err();
        assert!(err.to_string().contains("'zoom'"), "{err}");
    }
}
