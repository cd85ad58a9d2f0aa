//! f32 <-> f16 conversions of whole slices: F16C vector loops where the CPU has them (chosen
//! at run time), else the `half` crate's slice conversions (NEON on aarch64, scalar otherwise).

use half::f16;
use half::slice::HalfFloatSliceExt;

/// `y[i] = f16(x[i])`, rounded to nearest, ties to even (the reference's rounding).
pub fn f32_to_f16(x: &[f32], y: &mut [f16]) {
    assert_eq!(x.len(), y.len(), "a cast keeps its length");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU supports F16C (and so AVX), checked just above.
        return unsafe { f16c::narrow(x, y) };
    }
    y.convert_from_f32_slice(x)
}

/// `y[i] = f32(x[i])`: exact.
pub fn f16_to_f32(x: &[f16], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "a cast keeps its length");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") {
        // SAFETY: the CPU supports F16C (and so AVX), checked just above.
        return unsafe { f16c::widen(x, y) };
    }
    x.convert_to_f32_slice(y)
}

/// `x = rectifier(f32(f16(x)))` and `h = f16(x)` over the whole eights of `x` where the
/// CPU has F16C (ReLU6 when `relu6`, else ReLU; NaN and -0 kept, as `pointwise`'s loops
/// rectify); returns how many values it did: none without F16C.
pub fn rectify_through_f16c(x: &mut [f32], h: &mut [f16], relu6: bool) -> usize {
    assert_eq!(x.len(), h.len(), "a cast keeps its length");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") {
        let body = x.len() - x.len() % 8;
        // SAFETY: the CPU supports F16C (and so AVX), checked just above.
        unsafe {
            match relu6 {
                true => f16c::rectify::<true>(&mut x[..body], &mut h[..body]),
                false => f16c::rectify::<false>(&mut x[..body], &mut h[..body]),
            }
        }
        return body;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = relu6;
    0
}

/// Eight values per instruction; the last `len % 8` go through the `half` crate, which
/// rounds the same way. Both take slices of equal length.
#[cfg(target_arch = "x86_64")]
mod f16c {
    use core::arch::x86_64::{
        __m128i, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_max_ps, _mm256_min_ps,
        _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps, _mm_loadu_si128, _mm_storeu_si128,
        _MM_FROUND_TO_NEAREST_INT,
    };
    use half::f16;
    use half::slice::HalfFloatSliceExt;

    #[target_feature(enable = "avx,f16c")]
    pub(super) fn narrow(x: &[f32], y: &mut [f16]) {
        let mut xs = x.chunks_exact(8);
        let mut ys = y.chunks_exact_mut(8);
        for (x, y) in (&mut xs).zip(&mut ys) {
            // SAFETY: `x` holds 8 f32 (32 bytes) and `y` 8 f16 (16 bytes); both intrinsics
            // take unaligned addresses.
            unsafe {
                let wide = _mm256_loadu_ps(x.as_ptr());
                let half = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(wide);
                _mm_storeu_si128(y.as_mut_ptr().cast::<__m128i>(), half);
            }
        }
        ys.into_remainder().convert_from_f32_slice(xs.remainder());
    }

    #[target_feature(enable = "avx,f16c")]
    pub(super) fn widen(x: &[f16], y: &mut [f32]) {
        let mut xs = x.chunks_exact(8);
        let mut ys = y.chunks_exact_mut(8);
        for (x, y) in (&mut xs).zip(&mut ys) {
            // SAFETY: `x` holds 8 f16 (16 bytes) and `y` 8 f32 (32 bytes); both intrinsics
            // take unaligned addresses.
            unsafe {
                let half = _mm_loadu_si128(x.as_ptr().cast::<__m128i>());
                _mm256_storeu_ps(y.as_mut_ptr(), _mm256_cvtph_ps(half));
            }
        }
        xs.remainder().convert_to_f32_slice(ys.into_remainder());
    }

    /// [`super::rectify_through_f16c`] over whole eights. `max(0, v)` and `min(6, v)`
    /// return `v` where it is NaN or a zero of either sign, as the scalar rectifiers do.
    #[target_feature(enable = "avx,f16c")]
    pub(super) fn rectify<const RELU6: bool>(x: &mut [f32], h: &mut [f16]) {
        let (zero, six) = (_mm256_setzero_ps(), _mm256_set1_ps(6.0));
        for (x, h) in x.chunks_exact_mut(8).zip(h.chunks_exact_mut(8)) {
            // SAFETY: `x` holds 8 f32 (32 bytes) and `h` 8 f16 (16 bytes); the intrinsics
            // take unaligned addresses.
            unsafe {
                let half =
                    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(x.as_ptr()));
                let mut v = _mm256_max_ps(zero, _mm256_cvtph_ps(half));
                if RELU6 {
                    v = _mm256_min_ps(six, v);
                }
                _mm256_storeu_ps(x.as_mut_ptr(), v);
                let half = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm_storeu_si128(h.as_mut_ptr().cast::<__m128i>(), half);
            }
        }
    }
}
