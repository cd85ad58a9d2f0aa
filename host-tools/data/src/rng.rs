//! `Rng`: the one seeded pseudo-random generator of the crate (SplitMix64), so generated images,
//! shuffles and augmentations are the same on every machine for the same seed.

/// SplitMix64 (Steele, Lea and Flood 2014): 64 bits of state, passes BigCrush, and any seed,
/// zero included, is a good one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent generator for item `stream` of the family `seed` (an image index, an
    /// epoch): the same pair always gives the same sequence.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut mixer = Self::new(seed ^ stream.wrapping_mul(0xD605_BBB5_8C8A_BBA5));
        Self::new(mixer.next_u64() ^ stream)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, with 24 random bits.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift (bias below `n / 2^64`).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f32) -> bool {
        self.unit() < p
    }

    /// Puts `items` in a uniformly random order (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

/// FNV-1a: a stable 64-bit hash, to turn a class name into a seed stream or a cache key into
/// a file name.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xCBF2_9CE4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3))
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // The first outputs of the reference C implementation seeded with 1234567.
        let mut rng = Rng::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
    }

    #[test]
    fn draws_stay_in_their_ranges_and_cover_them() {
        let mut rng = Rng::new(3);
        let mut seen = [0usize; 5];
        for _ in 0..1000 {
            let u = rng.range(-2.0, 3.0);
            assert!((-2.0..3.0).contains(&u));
            seen[rng.below(5)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 150), "below(5) is lopsided: {seen:?}");
    }

    #[test]
    fn shuffle_is_a_permutation_and_derived_streams_differ() {
        let mut items: Vec<u32> = (0..50).collect();
        Rng::derive(9, 1).shuffle(&mut items);
        let mut sorted = items.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(items, sorted);
        assert_ne!(Rng::derive(9, 1).next_u64(), Rng::derive(9, 2).next_u64());
        assert_eq!(Rng::derive(9, 1).next_u64(), Rng::derive(9, 1).next_u64());
    }
}
