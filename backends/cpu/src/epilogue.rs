//! What a fused convolution ([`ConvKernels::conv2d_norm_act`]) does to each output plane
//! while it is still in cache: an evaluation-mode batch norm, then a rectifier, with the
//! arithmetic of the separate kernels (`norm::normalize`, the rectifiers of `pointwise`), so
//! fusing changes no result.
//!
//! [`ConvKernels::conv2d_norm_act`]: sprout_core::backend::ConvKernels::conv2d_norm_act

use crate::norm::{inv_std, normalized};
use crate::pointwise::{map_in_place, relu6_value, relu_value};
use sprout_core::reference::{FrozenNorm, Rectifier};

/// A batch norm over a convolution's output channels and the rectifier after it.
#[derive(Clone, Copy)]
pub struct Epilogue<'a> {
    pub norm: FrozenNorm<'a>,
    pub rectifier: Option<Rectifier>,
}

impl Epilogue<'_> {
    /// Normalises and rectifies `plane`, values of output channel `c`, in one vector pass
    /// while it is in cache.
    pub fn apply(&self, c: usize, plane: &mut [f32]) {
        let n = &self.norm;
        let (gamma, beta, mean) = (n.gamma[c], n.beta[c], n.mean[c]);
        let invstd = inv_std(n.var[c], n.cfg.eps);
        let norm = move |x| normalized(x, gamma, beta, mean, invstd);
        match self.rectifier {
            None => map_in_place(plane, norm),
            Some(Rectifier { relu6: true }) => map_in_place(plane, move |x| relu6_value(norm(x))),
            Some(Rectifier { relu6: false }) => map_in_place(plane, move |x| relu_value(norm(x))),
        }
    }

    /// [`Epilogue::apply`] over `rows` of `row_len` values, the first of channel `first`.
    pub fn apply_rows(&self, first: usize, rows: &mut [f32], row_len: usize) {
        for (i, row) in rows.chunks_mut(row_len.max(1)).enumerate() {
            self.apply(first + i, row)
        }
    }
}
