//! Runtime choice of vector extension: `multiversion!` compiles one loop for AVX-512F,
//! AVX2 with FMA and the baseline on x86-64 and runs the widest the CPU has; on aarch64 the
//! baseline already is NEON, so the loop is compiled once.

/// Defines `$name` (with visibility `$vis`), which runs `$generic` compiled for the widest
/// vector extension the CPU has: AVX-512F, AVX2 with FMA, else the baseline.
///
/// Written `$name = fused $generic(…)`, `$generic` takes a `const FUSED: bool`, true where
/// the compiled code has a fused multiply-add instruction (every variant but the x86-64
/// baseline), so that `f32::mul_add` is one instruction there and never a library call.
///
/// Written `$name = avx512 $wide, fused $generic(…)`, AVX-512F CPUs run `$wide` instead: a
/// function with its own AVX-512 code, itself compiled with `avx512f,fma` enabled.
macro_rules! multiversion {
    ($vis:vis $name:ident = avx512 $wide:ident, fused $generic:ident($($arg:ident: $ty:ty),*)
        $(-> $ret:ty)?) => {
        multiversion!(@ $vis $name, [$wide], [$generic::<true>],
            [$generic::<{ cfg!(target_arch = "aarch64") }>], ($($arg: $ty),*) $(-> $ret)?);
    };
    ($vis:vis $name:ident = fused $generic:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        multiversion!(@ $vis $name, [$generic::<true>], [$generic::<true>],
            [$generic::<{ cfg!(target_arch = "aarch64") }>], ($($arg: $ty),*) $(-> $ret)?);
    };
    ($vis:vis $name:ident = $generic:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        multiversion!(@ $vis $name, [$generic], [$generic], [$generic],
            ($($arg: $ty),*) $(-> $ret)?);
    };
    (@ $vis:vis $name:ident, [$($wide:tt)*], [$($fused:tt)*], [$($base:tt)*],
        ($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,fma")]
                fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $($wide)*($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $($fused)*($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports AVX-512F (which implies FMA), checked just above.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU supports AVX2 and FMA, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $($base)*($($arg),*)
        }
    };
}
