//! Kernel geometry: the plain numbers a kernel needs to walk its buffers (batch, channels,
//! spatial sizes, stride, padding, groups). Shared by the graph, the plan and every backend.

/// Output length of a sliding window along one axis, or `None` when the window does not
/// fit, the stride or window is zero, or the sizes overflow.
pub fn window_output(size: usize, kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    let padded = padding.checked_mul(2)?.checked_add(size)?;
    let span = padded.checked_sub(kernel)?;
    (stride > 0 && kernel > 0).then(|| span / stride + 1)
}

/// The product of `dims`, if it fits comfortably (as bytes of 8-byte elements) in `usize`.
fn element_count(dims: &[usize]) -> Option<usize> {
    let count = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
    count.checked_mul(8).map(|_| count)
}

/// Why kernel settings cannot be run.
pub type GeometryError = &'static str;

/// `Ok` when every tensor of `all` (its dimensions) has an element count [`element_count`] accepts.
pub(crate) fn counts(all: &[&[usize]]) -> Result<(), GeometryError> {
    match all.iter().all(|dims| element_count(dims).is_some()) {
        true => Ok(()),
        false => Err("tensor sizes overflow"),
    }
}

/// A dense layer `y[n, m] = x[n, k] · w[m, k]ᵀ + b[m]` (PyTorch's `nn.Linear` layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LinearDims {
    /// Rows of the batch.
    pub n: usize,
    /// Input features.
    pub k: usize,
    /// Output features.
    pub m: usize,
}

impl LinearDims {
    pub fn check(&self) -> Result<(), GeometryError> {
        counts(&[&[self.n, self.k], &[self.m, self.k], &[self.n, self.m]])
    }
}

/// A 2-D convolution over NCHW input with OIHW weights (`w[c_out, c_in / groups, kh, kw]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Conv2dGeometry {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub groups: usize,
    pub out_h: usize,
    pub out_w: usize,
}

impl Conv2dGeometry {
    /// The output seen as `n` samples of `c_out` channels of `out_h · out_w` values.
    pub fn output_channels(&self) -> ChannelDims {
        ChannelDims { outer: self.n, channels: self.c_out, inner: self.out_h * self.out_w }
    }
    /// Input channels seen by one output channel.
    pub fn c_in_per_group(&self) -> usize {
        self.c_in / self.groups
    }
    /// Output channels produced by one group.
    pub fn c_out_per_group(&self) -> usize {
        self.c_out / self.groups
    }
    pub fn input_len(&self) -> usize {
        self.n * self.c_in * self.h * self.w
    }
    pub fn weight_len(&self) -> usize {
        self.c_out * self.c_in_per_group() * self.kh * self.kw
    }
    pub fn output_len(&self) -> usize {
        self.n * self.c_out * self.out_h * self.out_w
    }
    /// Multiply-accumulates of one forward pass.
    pub fn macs(&self) -> usize {
        self.output_len() * self.c_in_per_group() * self.kh * self.kw
    }

    /// Checks that groups divide the channels and the output size follows from the window.
    pub fn check(&self) -> Result<(), GeometryError> {
        let g = self.groups;
        if g == 0 || !self.c_in.is_multiple_of(g) || !self.c_out.is_multiple_of(g) {
            return Err("groups must divide both channel counts");
        }
        let oh = window_output(self.h, self.kh, self.stride.0, self.padding.0);
        let ow = window_output(self.w, self.kw, self.stride.1, self.padding.1);
        if (oh, ow) != (Some(self.out_h), Some(self.out_w)) {
            return Err("the output size does not follow from the window");
        }
        counts(&[
            &[self.n, self.c_in, self.h, self.w],
            &[self.c_out, self.c_in / g, self.kh, self.kw],
            &[self.n, self.c_out, self.out_h, self.out_w, self.c_in / g, self.kh, self.kw],
        ])
    }
}

/// A 2-D pooling window over NCHW input. Padding never wins a max; for averages,
/// `count_include_pad` chooses PyTorch's default (`true`) or ONNX's (`false`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Pool2dGeometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub count_include_pad: bool,
    pub out_h: usize,
    pub out_w: usize,
}

impl Pool2dGeometry {
    pub fn input_len(&self) -> usize {
        self.n * self.c * self.h * self.w
    }
    pub fn output_len(&self) -> usize {
        self.n * self.c * self.out_h * self.out_w
    }

    /// Checks the window fits, padding never fills a whole window, and the output size follows.
    pub fn check(&self) -> Result<(), GeometryError> {
        if self.padding.0 * 2 > self.kh || self.padding.1 * 2 > self.kw {
            return Err("padding must be at most half the window");
        }
        let oh = window_output(self.h, self.kh, self.stride.0, self.padding.0);
        let ow = window_output(self.w, self.kw, self.stride.1, self.padding.1);
        if (oh, ow) != (Some(self.out_h), Some(self.out_w)) {
            return Err("the output size does not follow from the window");
        }
        counts(&[&[self.n, self.c, self.h, self.w], &[self.n, self.c, self.out_h, self.out_w]])
    }
}

/// A tensor seen as `[outer, channels, inner]`: batch, channel axis, everything after it.
/// Batch-norm statistics, bias gradients and global pooling reduce over `outer` and `inner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ChannelDims {
    pub outer: usize,
    pub channels: usize,
    pub inner: usize,
}

impl ChannelDims {
    pub fn len(&self) -> usize {
        self.outer * self.channels * self.inner
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Elements that share one channel.
    pub fn per_channel(&self) -> usize {
        self.outer * self.inner
    }

    pub fn check(&self) -> Result<(), GeometryError> {
        counts(&[&[self.outer, self.channels, self.inner]])
    }
}

/// A tensor of up to four dimensions with its axes reordered: axis `i` of the output is
/// axis `perm[i]` of the input. A lower rank is padded in front with size-1 axes that stay
/// in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PermuteDims {
    /// The input's dimensions.
    pub dims: [usize; 4],
    pub perm: [usize; 4],
}

impl PermuteDims {
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The output's dimensions.
    pub fn output_dims(&self) -> [usize; 4] {
        core::array::from_fn(|i| self.dims[self.perm[i] % 4])
    }

    /// Checks that `perm` names each of the four axes once.
    pub fn check(&self) -> Result<(), GeometryError> {
        let mut seen = [false; 4];
        for &a in &self.perm {
            match seen.get_mut(a) {
                Some(s) if !*s => *s = true,
                _ => return Err("the permutation must name each axis once"),
            }
        }
        counts(&[&self.dims])
    }
}

/// A tensor of up to four dimensions broadcast to a larger shape under numpy's rules: each
/// axis of `from` is that of `to` or 1 (repeated along it). A lower rank is padded in front
/// with size-1 axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BroadcastDims {
    pub from: [usize; 4],
    pub to: [usize; 4],
}

impl BroadcastDims {
    /// Elements of the tensor broadcast.
    pub fn from_len(&self) -> usize {
        self.from.iter().product()
    }
    /// Elements of the broadcast result.
    pub fn to_len(&self) -> usize {
        self.to.iter().product()
    }
    /// The step in `from` of one step along each axis of `to` (0 along a repeated axis).
    pub fn strides(&self) -> [usize; 4] {
        let mut strides = [0; 4];
        let mut s = 1;
        for a in (0..4).rev() {
            strides[a] = if self.from[a] == 1 { 0 } else { s };
            s *= self.from[a];
        }
        strides
    }

    /// Checks that every axis of `from` is that of `to` or 1.
    pub fn check(&self) -> Result<(), GeometryError> {
        if self.from.iter().zip(&self.to).any(|(&f, &t)| f != t && f != 1) {
            return Err("each axis must be the target's or 1");
        }
        counts(&[&self.from, &self.to])
    }
}

/// A run of one axis cut out of a tensor, each seen as `[outer, block]`: per outer index,
/// `len` elements from `start` of the input's `whole` (the axis length, start and run
/// length, each times everything after the axis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SliceDims {
    pub outer: usize,
    pub whole: usize,
    pub start: usize,
    pub len: usize,
}

impl SliceDims {
    /// Elements of the whole tensor.
    pub fn whole_len(&self) -> usize {
        self.outer * self.whole
    }
    /// Elements of the cut-out part.
    pub fn part_len(&self) -> usize {
        self.outer * self.len
    }

    /// Checks that the run lies inside the axis.
    pub fn check(&self) -> Result<(), GeometryError> {
        match self.start.checked_add(self.len) {
            Some(end) if end <= self.whole => counts(&[&[self.outer, self.whole]]),
            _ => Err("the slice runs past the end of its axis"),
        }
    }
}

/// Two tensors joined along one axis, each seen as `[outer, block]`: `first` and `second`
/// are the elements one outer index holds of each (the axis length times everything after
/// it), and the joined tensor holds `first + second` per outer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConcatDims {
    pub outer: usize,
    pub first: usize,
    pub second: usize,
}

impl ConcatDims {
    /// Elements of the joined tensor.
    pub fn len(&self) -> usize {
        self.outer * (self.first + self.second)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Elements of one part: the second or the first.
    pub fn part_len(&self, second: bool) -> usize {
        self.outer * if second { self.second } else { self.first }
    }

    pub fn check(&self) -> Result<(), GeometryError> {
        let block = self.first.checked_add(self.second).ok_or("tensor sizes overflow")?;
        counts(&[&[self.outer, block]])
    }
}

/// A 2-D row-wise problem: `rows` independent rows of `cols` values (softmax, cross-entropy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RowDims {
    pub rows: usize,
    pub cols: usize,
}

impl RowDims {
    pub fn check(&self) -> Result<(), GeometryError> {
        if self.cols == 0 {
            return Err("rows must hold at least one value");
        }
        counts(&[&[self.rows, self.cols]])
    }
}
