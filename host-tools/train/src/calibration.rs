//! Calibration data for int8 quantization, which needs inputs but no labels: the pictures
//! at any depth under a folder, or the `x` of a tensor file, thinned to an even, seeded pick.

use std::path::Path;

use sprout_data::{Dataset, Pipeline, ResizeMode, Rng};

use crate::model::Model;
use crate::preprocess::image_input;
use crate::source::{read_unlabelled_tensors, DataSource};
use crate::TrainError;

/// The seed of the pick of calibration samples.
const PICK_SEED: u64 = 0x5eed;

/// `count` indices below `n`, evenly spread with a seeded offset and increasing; all of
/// `0..n` when `count >= n`.
pub fn even_pick(n: usize, count: usize, seed: u64) -> Vec<usize> {
    if count >= n {
        return (0..n).collect();
    }
    let stride = n as f64 / count as f64;
    let offset = f64::from(Rng::new(seed).range(0.0, 1.0)) * stride;
    (0..count).map(|i| ((offset + i as f64 * stride) as usize).min(n - 1)).collect()
}

/// At most `samples` calibration inputs for `model` from `path`: every PNG/JPEG under a
/// folder (any depth, sorted by path), read as the model says (see
/// [`image_input`](crate::image_input)), or the `x` of a `.npz` / `.safetensors` file.
pub fn open_calibration(
    model: &Model,
    path: &Path,
    samples: usize,
    pipeline: &Pipeline,
    resize: Option<ResizeMode>,
) -> Result<DataSource, TrainError> {
    let batch = model.batch();
    if path.is_dir() {
        let input = image_input(model, resize)
            .map_err(|e| TrainError::Mismatch(format!("{}: {e}", path.display())))?;
        let all = Dataset::unlabelled(path)?;
        let set = all.subset(&even_pick(all.len(), samples, PICK_SEED));
        let pipeline = &Pipeline { resize: input.fit, ..pipeline.clone() };
        return DataSource::folder(set, input.eval, batch, 0, false, pipeline);
    }
    let set = read_unlabelled_tensors(path)?;
    if set.sample_dims != model.sample_dims() {
        return Err(TrainError::Tensor {
            path: path.to_path_buf(),
            tensor: "x".into(),
            expected: format!("samples of shape {:?}", model.sample_dims()),
            actual: format!("{:?}", set.sample_dims),
        });
    }
    let picked = set.subset(&even_pick(set.len(), samples, PICK_SEED));
    Ok(DataSource::tensors(picked, batch, 0, false))
}

#[cfg(test)]
mod tests {
    use super::even_pick;

    #[test]
    fn the_pick_is_even_increasing_seeded_and_whole_when_small() {
        assert_eq!(even_pick(5, 8, 1), [0, 1, 2, 3, 4]);
        let pick = even_pick(1000, 10, 3);
        assert_eq!(pick.len(), 10);
        assert!(pick.windows(2).all(|w| (99..=101).contains(&(w[1] - w[0]))), "{pick:?}");
        assert!(pick[0] < 100 && pick[9] < 1000);
        assert_eq!(pick, even_pick(1000, 10, 3));
        assert_ne!(pick, even_pick(1000, 10, 4));
    }
}
