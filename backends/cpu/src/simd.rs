//! Runtime choice of vector extension: `multiversion!` compiles one loop for AVX-512F,
//! AVX2 and the baseline on x86-64 and runs the widest the CPU has; on aarch64 the
//! baseline already is NEON, so the loop is compiled once.

/// Defines `$name` (with visibility `$vis`), which runs `$generic` compiled for the widest vector extension the CPU
/// has: AVX-512F, AVX2, else the baseline.
macro_rules! multiversion {
    ($vis:vis $name:ident = $generic:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?) => {
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $generic($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $generic($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports AVX-512F, checked just above.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2, checked just above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $generic($($arg),*)
        }
    };
}
