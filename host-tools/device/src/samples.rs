//! `SampleSet`: the images of a data folder as a device takes them: labels by the device's
//! class names, RGB8 pixels resized to its sample shape, a training and a validation split.

use std::path::Path;

use sprout_core::link::{SampleShape, Split};
use sprout_data::{load_resized, Dataset, Limits, ResizeMode};

use crate::error::LinkError;

/// The images of a data folder, labelled for a device; decoded one at a time.
#[derive(Clone, Debug)]
pub struct SampleSet {
    parts: Vec<(Dataset, Split)>,
    /// (part, index in the part's data set, device label).
    samples: Vec<(usize, usize, u16)>,
    shape: SampleShape,
}

impl SampleSet {
    /// Reads `root`: either `ROOT/train/<class>/*` with an optional `ROOT/val/<class>/*`
    /// held out for validation, or `ROOT/<class>/*`, all for training. Every class folder
    /// must name one of `classes` (the device's, in label order).
    pub fn open(root: &Path, classes: &[String], shape: SampleShape) -> Result<Self, LinkError> {
        let train = root.join("train");
        let mut folders = vec![(root.to_path_buf(), Split::Train)];
        if train.is_dir() {
            folders = vec![(train, Split::Train)];
            if root.join("val").is_dir() {
                folders.push((root.join("val"), Split::Validation));
            }
        }
        let mut parts = Vec::new();
        let mut samples = Vec::new();
        for (part, (folder, split)) in folders.into_iter().enumerate() {
            let dataset = Dataset::open(&folder)?;
            let labels = dataset
                .classes
                .iter()
                .map(|class| match classes.iter().position(|c| c == class) {
                    Some(label) => Ok(label as u16),
                    None => Err(LinkError::UnknownClass {
                        class: class.clone(),
                        folder: folder.clone(),
                        device: classes.to_vec(),
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            samples.extend(
                dataset.samples.iter().enumerate().map(|(i, (_, c))| (part, i, labels[*c])),
            );
            parts.push((dataset, split));
        }
        Ok(Self { parts, samples, shape })
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// How many images there are of `split`.
    pub fn count(&self, split: Split) -> usize {
        (0..self.len()).filter(|&i| self.split(i) == split).count()
    }

    /// The device label of sample `index`.
    pub fn label(&self, index: usize) -> u16 {
        self.samples[index].2
    }

    pub fn split(&self, index: usize) -> Split {
        self.parts[self.samples[index].0].1
    }

    /// Sample `index` as the device takes it: RGB8, row-major, squashed to its shape.
    pub fn pixels(&self, index: usize) -> Result<Vec<u8>, LinkError> {
        let (part, i, _) = self.samples[index];
        let path = &self.parts[part].0.samples[i].0;
        let SampleShape { width, height } = self.shape;
        let (width, height) = (u32::from(width), u32::from(height));
        Ok(load_resized(path, width, height, ResizeMode::Squash, &Limits::current())?.into_raw())
    }
}
