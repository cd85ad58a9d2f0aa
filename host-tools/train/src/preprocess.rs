//! A model's own preprocessing, the one place a picture's way into a model is decided:
//! its input size, normalisation and fit (crop or squash), as the model file records them,
//! for `train`, `eval`, `predict` and `quantize --calib` alike.

use sprout_core::format::Fit;
use sprout_data::{Normalize, ResizeMode, Transform};

use crate::model::Model;
use crate::TrainError;

/// How pictures become a model's input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ImageInput {
    /// The square input size.
    pub size: u32,
    /// How a picture is fitted to `size x size`.
    pub fit: ResizeMode,
    /// Resize and normalise: validation, evaluation, prediction, calibration.
    pub eval: Transform,
    /// With flips and colour jitter: training.
    pub train: Transform,
}

fn mode(fit: Fit) -> ResizeMode {
    match fit {
        Fit::Crop => ResizeMode::Crop,
        Fit::Squash => ResizeMode::Squash,
    }
}

/// The `--resize` spelling of a mode.
fn flag(mode: ResizeMode) -> &'static str {
    match mode {
        ResizeMode::Crop => "crop",
        ResizeMode::Squash => "squash",
    }
}

/// The fit a model records for `mode`.
pub fn fit_of(mode: ResizeMode) -> Fit {
    match mode {
        ResizeMode::Crop => Fit::Crop,
        ResizeMode::Squash => Fit::Squash,
    }
}

/// How pictures become `model`'s input. The model must take `[N, 3, S, S]` and record its
/// normalisation (3 means and standard deviations) and its size `S`; `asked` (`--resize`)
/// must agree with the fit the model records, or, when it records none, chooses it
/// (default: crop).
pub fn image_input(model: &Model, asked: Option<ResizeMode>) -> Result<ImageInput, TrainError> {
    let refuse = |detail: String| Err(TrainError::Mismatch(detail));
    let Some(size) = model.image_size() else {
        return refuse(format!(
            "pictures need a model with [N, 3, S, S] input; this one takes {:?}",
            model.sample_dims()
        ));
    };
    let prep = &model.metadata.preprocessing;
    let normalize = match (&prep.mean[..], &prep.std[..]) {
        (&[m0, m1, m2], &[s0, s1, s2]) => Normalize { mean: [m0, m1, m2], std: [s0, s1, s2] },
        ([], []) => {
            return refuse(
                "the model records no normalisation for pictures: give it with `sprout \
                 convert --mean R,G,B --std R,G,B` (e.g. ImageNet's --mean 0.485,0.456,0.406 \
                 --std 0.229,0.224,0.225)"
                    .into(),
            )
        }
        (mean, _) => {
            return refuse(format!(
                "the model's normalisation has {} channel means, pictures have 3",
                mean.len()
            ))
        }
    };
    match prep.resize {
        Some((h, w)) if (h, w) == (size, size) => {}
        Some((h, w)) => {
            return refuse(format!(
                "the model resizes pictures to {h}x{w} but takes {size}x{size} inputs"
            ))
        }
        None => {
            return refuse(format!(
                "the model records no picture size: give it with `sprout convert --size {size}`"
            ))
        }
    }
    let fit = match (prep.fit.map(mode), asked) {
        (Some(own), Some(asked)) if own != asked => {
            return refuse(format!(
                "--resize {} disagrees with the model, which was made for --resize {}",
                flag(asked),
                flag(own)
            ))
        }
        (Some(own), _) => own,
        (None, asked) => asked.unwrap_or(ResizeMode::Crop),
    };
    Ok(ImageInput {
        size,
        fit,
        eval: Transform { normalize, ..Transform::eval(size) },
        train: Transform { normalize, ..Transform::train(size) },
    })
}
