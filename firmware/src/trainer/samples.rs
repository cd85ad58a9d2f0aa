//! A fixed-capacity cache of labeled feature vectors in caller memory: what the backbone
//! made of each sample, so later epochs run only the head.

/// Feature rows and their labels; row `i` is `features[i * len..(i + 1) * len]`.
pub struct SampleCache<'m> {
    features: &'m mut [f32],
    labels: &'m mut [i32],
    feature_len: usize,
    count: usize,
}

impl<'m> SampleCache<'m> {
    /// A cache holding as many rows as both buffers have room for.
    pub fn new(features: &'m mut [f32], labels: &'m mut [i32], feature_len: usize) -> Self {
        Self { features, labels, feature_len, count: 0 }
    }

    /// Rows it can hold.
    pub fn capacity(&self) -> usize {
        (self.features.len() / self.feature_len.max(1)).min(self.labels.len())
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The next free row, to be filled and then committed with [`Self::commit`].
    pub fn next_row(&mut self) -> Option<&mut [f32]> {
        let at = self.count * self.feature_len;
        (self.count < self.capacity()).then(|| &mut self.features[at..at + self.feature_len])
    }

    /// Counts the row [`Self::next_row`] filled, with its label.
    pub fn commit(&mut self, label: i32) {
        if self.count < self.capacity() {
            self.labels[self.count] = label;
            self.count += 1;
        }
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.features[i * self.feature_len..(i + 1) * self.feature_len]
    }

    pub fn label(&self, i: usize) -> i32 {
        self.labels[i]
    }

    /// Forgets every row.
    pub fn clear(&mut self) {
        self.count = 0;
    }
}
