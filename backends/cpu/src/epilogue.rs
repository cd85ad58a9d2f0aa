//! What a fused convolution ([`ConvKernels::conv2d_norm_act`]) does to its outputs while
//! they are still in cache: an evaluation-mode batch norm, then a rectifier, with the
//! arithmetic of the separate kernels (`norm::normalize`, the rectifiers of `pointwise`), so
//! fusing changes no result, as a row map ([`Epilogue::rows`], [`with_row_map!`]) that the
//! GEMM and the direct depthwise loops apply to each block of values right after storing
//! it, or that a kernel applies to a whole plane ([`map_plane`]).
//!
//! [`ConvKernels::conv2d_norm_act`]: sprout_core::backend::ConvKernels::conv2d_norm_act

use crate::gemm::RowMap;
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
    /// Channel `c`'s normalisation of one value.
    #[inline(always)]
    fn norm_of(&self, c: usize) -> impl Fn(f32) -> f32 {
        let n = &self.norm;
        let (gamma, beta, mean) = (n.gamma[c], n.beta[c], n.mean[c]);
        let invstd = inv_std(n.var[c], n.cfg.eps);
        move |x| normalized(x, gamma, beta, mean, invstd)
    }

    /// This epilogue as the map of a product's rows, row `i` being channel `i`: `RECTIFIER`
    /// is [`NO_RECTIFIER`], [`RELU`] or [`RELU6`], the rectifier it has.
    pub fn rows<const RECTIFIER: u8>(&self) -> EpilogueRows<'_, RECTIFIER> {
        debug_assert_eq!(
            RECTIFIER,
            match self.rectifier {
                None => NO_RECTIFIER,
                Some(Rectifier { relu6: false }) => RELU,
                Some(Rectifier { relu6: true }) => RELU6,
            }
        );
        EpilogueRows(self)
    }
}

/// Evaluates `$body` with `$rows` bound to the row map of `$then` (an
/// `Option<&Epilogue>`; [`crate::gemm::Unmapped`] without one): one monomorphic `$body`
/// per rectifier, so the map inlines into the loops that store each value.
macro_rules! with_row_map {
    ($then:expr, |$rows:ident| $body:expr) => {{
        use sprout_core::reference::Rectifier;
        use $crate::epilogue::{NO_RECTIFIER, RELU, RELU6};
        match $then.map(|then| (then, then.rectifier)) {
            None => {
                let $rows = &$crate::gemm::Unmapped;
                $body
            }
            Some((then, None)) => {
                let $rows = &then.rows::<NO_RECTIFIER>();
                $body
            }
            Some((then, Some(Rectifier { relu6: false }))) => {
                let $rows = &then.rows::<RELU>();
                $body
            }
            Some((then, Some(Rectifier { relu6: true }))) => {
                let $rows = &then.rows::<RELU6>();
                $body
            }
        }
    }};
}
pub(crate) use with_row_map;

/// `plane`, values of output channel `c`, through `rows`' map in one vector pass while it
/// is in cache (nothing to do for [`crate::gemm::Unmapped`]).
pub fn map_plane<R: RowMap>(rows: &R, c: usize, plane: &mut [f32]) {
    if !R::IDENTITY {
        map_in_place(plane, rows.row(c));
    }
}

/// [`Epilogue::rows`]' rectifiers, fixed when the product is compiled.
pub const NO_RECTIFIER: u8 = 0;
pub const RELU: u8 = 1;
pub const RELU6: u8 = 2;

/// An [`Epilogue`] applied by a matrix product to each value it stores ([`Epilogue::rows`]):
/// the separate batch norm's and rectifier's arithmetic.
pub struct EpilogueRows<'a, const RECTIFIER: u8>(&'a Epilogue<'a>);

impl<const RECTIFIER: u8> RowMap for EpilogueRows<'_, RECTIFIER> {
    #[inline(always)]
    fn row(&self, c: usize) -> impl Fn(f32) -> f32 {
        let norm = self.0.norm_of(c);
        move |x| match RECTIFIER {
            RELU6 => relu6_value(norm(x)),
            RELU => relu_value(norm(x)),
            _ => norm(x),
        }
    }
}
