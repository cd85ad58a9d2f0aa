//! Tensor shapes: up to four dimensions in NCHW order, stored inline so shapes live in plans
//! and on devices without a heap.

use core::fmt;

/// The most dimensions a tensor may have (N, C, H, W).
pub const MAX_RANK: usize = 4;

/// A tensor shape of rank 0 to 4. Rank 0 is a scalar with one element.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [usize; MAX_RANK],
    rank: u8,
}

/// A shape with more than [`MAX_RANK`] dimensions was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankTooHigh {
    pub rank: usize,
}

impl fmt::Display for RankTooHigh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} exceeds the maximum of {MAX_RANK}", self.rank)
    }
}

impl core::error::Error for RankTooHigh {}

impl Shape {
    /// A scalar (one element).
    pub const SCALAR: Shape = Shape { dims: [1; MAX_RANK], rank: 0 };

    /// A shape from its dimensions, outermost first.
    pub fn new(dims: &[usize]) -> Result<Self, RankTooHigh> {
        if dims.len() > MAX_RANK {
            return Err(RankTooHigh { rank: dims.len() });
        }
        let mut all = [1; MAX_RANK];
        all[..dims.len()].copy_from_slice(dims);
        Ok(Shape { dims: all, rank: dims.len() as u8 })
    }

    /// Shorthands for the ranks sprout uses; they cannot fail.
    pub const fn d1(a: usize) -> Self {
        Shape { dims: [a, 1, 1, 1], rank: 1 }
    }
    pub const fn d2(a: usize, b: usize) -> Self {
        Shape { dims: [a, b, 1, 1], rank: 2 }
    }
    pub const fn d3(a: usize, b: usize, c: usize) -> Self {
        Shape { dims: [a, b, c, 1], rank: 3 }
    }
    pub const fn d4(n: usize, c: usize, h: usize, w: usize) -> Self {
        Shape { dims: [n, c, h, w], rank: 4 }
    }

    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// Dimension `axis`, if the shape has it.
    pub fn dim(&self, axis: usize) -> Option<usize> {
        self.dims().get(axis).copied()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.dims().iter().product()
    }

    /// All dimensions after the first, multiplied: the per-sample size of a batch.
    pub fn per_sample(&self) -> usize {
        self.dims().iter().skip(1).product()
    }

    /// The same shape with the first dimension replaced.
    pub fn with_batch(&self, n: usize) -> Self {
        self.with_dim(0, n)
    }

    /// The same shape with dimension `axis` replaced (unchanged when it has no such axis).
    pub fn with_dim(&self, axis: usize, n: usize) -> Self {
        let mut s = *self;
        if axis < s.rank() {
            s.dims[axis] = n;
        }
        s
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.dims().iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Shapes are written as their dimensions (a sequence of at most [`MAX_RANK`] integers);
/// reading more than that is an error, never a longer shape.
#[cfg(feature = "serde")]
mod wire {
    use super::{Shape, MAX_RANK};
    use core::fmt;
    use serde::de::{Error, SeqAccess, Visitor};

    impl serde::Serialize for Shape {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(self.dims())
        }
    }

    impl<'de> serde::Deserialize<'de> for Shape {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_seq(Dims)
        }
    }

    struct Dims;

    impl<'de> Visitor<'de> for Dims {
        type Value = Shape;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "at most {MAX_RANK} dimensions")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
            let mut dims = [1; MAX_RANK];
            let mut rank = 0;
            while let Some(d) = seq.next_element::<usize>()? {
                match dims.get_mut(rank) {
                    Some(slot) => *slot = d,
                    None => return Err(A::Error::invalid_length(rank + 1, &self)),
                }
                rank += 1;
            }
            Shape::new(&dims[..rank]).map_err(A::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numel_and_display() {
        let s = Shape::d4(2, 3, 4, 5);
        assert_eq!(s.numel(), 120);
        assert_eq!(s.per_sample(), 60);
        assert_eq!(s.with_batch(7).numel(), 420);
        assert_eq!(Shape::SCALAR.numel(), 1);
        extern crate std;
        assert_eq!(std::format!("{s}"), "[2, 3, 4, 5]");
    }

    #[test]
    fn rank_five_is_an_error() {
        assert_eq!(Shape::new(&[1, 2, 3, 4, 5]), Err(RankTooHigh { rank: 5 }));
        assert_eq!(Shape::new(&[3, 4]).unwrap(), Shape::d2(3, 4));
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn wire_form_is_the_dims_and_rank_is_checked() {
        let s = Shape::d4(2, 3, 4, 5);
        let bytes = postcard::to_allocvec(&s).unwrap();
        assert_eq!(bytes, [4, 2, 3, 4, 5]);
        assert_eq!(postcard::from_bytes::<Shape>(&bytes), Ok(s));
        let scalar = postcard::to_allocvec(&Shape::SCALAR).unwrap();
        assert_eq!(postcard::from_bytes::<Shape>(&scalar), Ok(Shape::SCALAR));
        assert!(postcard::from_bytes::<Shape>(&[5, 1, 1, 1, 1, 1]).is_err());
    }
}
