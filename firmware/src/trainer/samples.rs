//! A fixed-capacity cache of labeled feature vectors in caller memory: what the backbone
//! made of each sample, so later epochs run only the head. Rows are raw bytes, so the
//! features of an int8 backbone take one byte each.

/// Feature rows and their labels; row `i` is `features[i * row_bytes..(i + 1) * row_bytes]`.
pub struct SampleCache<'m> {
    features: &'m mut [u8],
    labels: &'m mut [i32],
    row_bytes: usize,
    count: usize,
}

impl<'m> SampleCache<'m> {
    /// A cache of rows of `row_bytes` ([`sprout_core::format::bundle::Bundle::feature_bytes`]) holding as
    /// many rows as both buffers have room for.
    pub fn new(features: &'m mut [u8], labels: &'m mut [i32], row_bytes: usize) -> Self {
        Self { features, labels, row_bytes, count: 0 }
    }

    /// Rows it can hold.
    pub fn capacity(&self) -> usize {
        (self.features.len() / self.row_bytes.max(1)).min(self.labels.len())
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a row with its label; `false` (storing nothing) when the cache is full or
    /// `row` is not [`Self::row_bytes`] long.
    pub fn push(&mut self, row: &[u8], label: i32) -> bool {
        let at = self.count * self.row_bytes;
        if self.count >= self.capacity() || row.len() != self.row_bytes {
            return false;
        }
        self.features[at..at + self.row_bytes].copy_from_slice(row);
        self.labels[self.count] = label;
        self.count += 1;
        true
    }

    /// Row `i`'s bytes; empty past the last row.
    pub fn row(&self, i: usize) -> &[u8] {
        match i < self.count {
            true => &self.features[i * self.row_bytes..(i + 1) * self.row_bytes],
            false => &[],
        }
    }

    /// Row `i`'s label; `-1` past the last row.
    pub fn label(&self, i: usize) -> i32 {
        match i < self.count {
            true => self.labels[i],
            false => -1,
        }
    }

    /// Forgets every row.
    pub fn clear(&mut self) {
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_kept_until_the_cache_is_full() {
        let (mut features, mut labels) = ([0u8; 10], [0i32; 4]);
        let mut cache = SampleCache::new(&mut features, &mut labels, 3);
        assert_eq!(cache.capacity(), 3);
        assert!(cache.push(&[1, 2, 3], 7));
        assert!(!cache.push(&[1, 2], 7), "a short row is refused");
        assert!(cache.push(&[4, 5, 6], 8));
        assert!(cache.push(&[7, 8, 9], 9));
        assert!(!cache.push(&[0, 0, 0], 1), "full");
        assert_eq!((cache.len(), cache.row(1), cache.label(2)), (3, &[4u8, 5, 6][..], 9));
        assert_eq!((cache.row(3), cache.label(3)), (&[][..], -1));
        cache.clear();
        assert!(cache.is_empty());
    }
}
