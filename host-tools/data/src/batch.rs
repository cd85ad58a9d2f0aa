//! `Batcher`: turns a `Dataset` into `[N, 3, S, S]` input and label batches, in a seeded
//! shuffled order per epoch, decoding images lazily (or once, with the in-memory cache).

use crate::error::DataError;
use crate::folder::Dataset;
use crate::pixels::Image;
use crate::rng::Rng;
use crate::transform::Transform;

/// One batch: `x` holds `len` images of `[3, size, size]` back to back, `y` their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub x: Vec<f32>,
    pub y: Vec<i32>,
}

impl Batch {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether the batch has no samples.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// Batches of a data set: every sample once per epoch, the last batch possibly smaller.
pub struct Batcher {
    dataset: Dataset,
    transform: Transform,
    batch_size: usize,
    seed: u64,
    shuffle: bool,
    /// Decoded images by sample index, when caching.
    cache: Option<Vec<Option<Image>>>,
}

impl Batcher {
    /// Shuffled batches of `batch_size` (at least 1), the order and augmentations derived from
    /// `seed` and the epoch.
    pub fn new(dataset: Dataset, transform: Transform, batch_size: usize, seed: u64) -> Self {
        Self { dataset, transform, batch_size: batch_size.max(1), seed, shuffle: true, cache: None }
    }

    /// Keeps the data set's order (class by class) in every epoch.
    pub fn no_shuffle(mut self) -> Self {
        self.shuffle = false;
        self
    }

    /// Keeps every decoded image in memory after its first use (for small data sets).
    pub fn cached(mut self) -> Self {
        self.cache = Some(vec![None; self.dataset.len()]);
        self
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    /// Batches per epoch.
    pub fn batches(&self) -> usize {
        self.dataset.len().div_ceil(self.batch_size)
    }

    /// The sample indices of `epoch`, in the order they are batched.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.dataset.len()).collect();
        if self.shuffle {
            Rng::derive(self.seed, epoch).shuffle(&mut order);
        }
        order
    }

    /// The batches of `epoch`.
    pub fn epoch(&mut self, epoch: u64) -> Epoch<'_> {
        Epoch { order: self.order(epoch), next: 0, epoch, batcher: self }
    }

    /// Sample `index` decoded (from the cache, when there is one).
    fn image(&mut self, index: usize) -> Result<Image, DataError> {
        match self.cache.as_mut().map(|cache| &mut cache[index]) {
            Some(Some(image)) => Ok(image.clone()),
            Some(slot) => Ok(slot.insert(self.dataset.image(index)?).clone()),
            None => self.dataset.image(index),
        }
    }
}

/// The batches of one epoch, as an iterator; a sample that fails to decode ends its batch
/// with the error.
pub struct Epoch<'a> {
    batcher: &'a mut Batcher,
    order: Vec<usize>,
    next: usize,
    epoch: u64,
}

impl Iterator for Epoch<'_> {
    type Item = Result<Batch, DataError>;

    fn next(&mut self) -> Option<Self::Item> {
        let end = (self.next + self.batcher.batch_size).min(self.order.len());
        let indices = self.order.get(self.next..end).filter(|i| !i.is_empty())?;
        self.next = end;
        let size = self.batcher.transform.size as usize;
        let mut batch =
            Batch { x: Vec::with_capacity(indices.len() * 3 * size * size), y: Vec::new() };
        for &index in indices {
            let image = match self.batcher.image(index) {
                Ok(image) => image,
                Err(error) => return Some(Err(error)),
            };
            // Augmentation depends on the sample and the epoch only, not on the batch size.
            let mut rng = Rng::derive(self.batcher.seed ^ self.epoch.rotate_left(32), index as u64);
            self.batcher.transform.apply(&image, &mut rng, &mut batch.x);
            batch.y.push(self.batcher.dataset.samples[index].1 as i32);
        }
        Some(Ok(batch))
    }
}
