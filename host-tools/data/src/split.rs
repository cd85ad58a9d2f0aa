//! A stratified, seeded train/validation split of a [`Dataset`]: per class, a shuffle seeded
//! by the split seed and the class picks which images validate.

use crate::folder::Dataset;
use crate::rng::Rng;

impl Dataset {
    /// Splits the images into `(train, validation)`. Of a class's `n` images,
    /// `round(n * fraction)` validate, at least one when `n >= 2` and never all of them:
    /// every class keeps a training image. The choice depends only on `seed`, the class and
    /// the file list; both halves keep the class-by-class, file-name order and the classes.
    pub fn split(&self, fraction: f32, seed: u64) -> (Dataset, Dataset) {
        let mut validates = vec![false; self.samples.len()];
        for label in 0..self.classes.len() {
            let mut members: Vec<usize> =
                (0..self.samples.len()).filter(|&i| self.samples[i].1 == label).collect();
            let n = members.len();
            if n < 2 {
                continue;
            }
            let take = ((n as f64 * f64::from(fraction)).round() as usize).clamp(1, n - 1);
            Rng::derive(seed, label as u64).shuffle(&mut members);
            for &i in &members[..take] {
                validates[i] = true;
            }
        }
        let part = |validation: bool| Dataset {
            root: self.root.clone(),
            classes: self.classes.clone(),
            samples: self
                .samples
                .iter()
                .zip(&validates)
                .filter(|(_, &v)| v == validation)
                .map(|(s, _)| s.clone())
                .collect(),
        };
        (part(false), part(true))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::PathBuf;

    use crate::Dataset;

    /// Classes with 10, 5, 2 and 1 images.
    fn dataset() -> Dataset {
        let counts = [10, 5, 2, 1];
        let samples = counts
            .iter()
            .enumerate()
            .flat_map(|(label, &n)| {
                (0..n).map(move |i| (PathBuf::from(format!("c{label}/{i:02}.png")), label))
            })
            .collect();
        Dataset {
            root: PathBuf::from("data"),
            classes: (0..counts.len()).map(|c| format!("c{c}")).collect(),
            samples,
        }
    }

    fn per_class(d: &Dataset) -> Vec<usize> {
        (0..d.classes.len()).map(|c| d.samples.iter().filter(|s| s.1 == c).count()).collect()
    }

    #[test]
    fn the_split_is_stratified_disjoint_and_complete() {
        let all = dataset();
        let (train, val) = all.split(0.2, 0);
        // 10 -> 2, 5 -> 1, 2 -> 1 (at least one), 1 -> 0 (the one image trains).
        assert_eq!(per_class(&val), [2, 1, 1, 0]);
        assert_eq!(per_class(&train), [8, 4, 1, 1]);
        let t: HashSet<_> = train.samples.iter().collect();
        let v: HashSet<_> = val.samples.iter().collect();
        assert!(t.is_disjoint(&v));
        assert_eq!(t.len() + v.len(), all.len());
        assert_eq!((&train.classes, &val.classes), (&all.classes, &all.classes));
        // Class by class, in file order.
        let mut sorted = train.samples.clone();
        sorted.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        assert_eq!(train.samples, sorted);
    }

    #[test]
    fn the_split_follows_the_seed_and_never_empties_a_class() {
        let all = dataset();
        assert_eq!(all.split(0.3, 7), all.split(0.3, 7));
        let seeds: HashSet<_> = (0..8).map(|seed| all.split(0.3, seed).1.samples).collect();
        assert!(seeds.len() > 1, "the seed changes which images validate");
        let (train, val) = all.split(0.99, 1);
        assert_eq!(per_class(&train), [1, 1, 1, 1]);
        assert_eq!(per_class(&val), [9, 4, 1, 0]);
    }
}
