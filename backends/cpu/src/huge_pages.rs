//! Transparent huge pages for the large buffers kernels stream through (a plan's arena, the
//! backend's scratch): with 4 KiB pages a training step's passes over tens of MiB miss the
//! TLB every page, each miss a page walk (two-dimensional in a virtual machine).
//!
//! Linux backs memory with 2 MiB pages only where asked (`madvise`) on systems set to
//! `madvise` mode; the advice covers pages not yet touched, so it is given before a buffer
//! is first written. Elsewhere, or where the kernel refuses, nothing changes.

use sprout_core::{HostMemory, Region};

/// Bytes of one huge page.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Asks for huge pages under the whole 2 MiB pages that `buffer` spans, if any.
pub fn advise<T>(buffer: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        let start = buffer.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(buffer);
        let (first, last) = (start.next_multiple_of(HUGE_PAGE), end / HUGE_PAGE * HUGE_PAGE);
        if last > first {
            // SAFETY: the range lies inside `buffer`, which this call borrows mutably; the
            // advice changes how its pages are backed, never their contents. A refusal is
            // harmless, so the result is ignored.
            unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buffer;
}

/// Asks for huge pages under every region of `memory`: call it before the first step (and
/// after [`HostMemory::release_arena`]), while the pages are still untouched.
pub fn advise_memory(memory: &mut HostMemory) {
    for region in [Region::Frozen, Region::State, Region::Arena] {
        advise(memory.region_mut(region));
    }
}

/// `scratch` grown to at least `len` values and their first `len`: a buffer that has to grow
/// is replaced by a new one, advised before it is written (the old contents are dropped).
pub fn grow(scratch: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if scratch.len() < len {
        let mut grown = Vec::with_capacity(len);
        advise(grown.spare_capacity_mut());
        grown.resize(len, 0.0);
        *scratch = grown;
    }
    &mut scratch[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_scratch_is_zeroed_and_long_enough() {
        let mut scratch = vec![1.0; 3];
        assert_eq!(grow(&mut scratch, 2), [1.0, 1.0]);
        let len = 3 << 20;
        let grown = grow(&mut scratch, len);
        assert_eq!(grown.len(), len);
        assert!(grown.iter().all(|&v| v == 0.0));
    }
}
