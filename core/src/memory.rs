//! Where a backend's tensors live: [`Memory`] says how a plan's regions are carved into the
//! operands a kernel receives, and [`Host`] is plain RAM (byte and element slices).

use core::ops::Range;

use bytemuck::Pod;

/// The memory a backend computes in. The executor carves one step's operands out of the
/// plan's regions with these operations (checked against the plan first), and hands the
/// typed views to the kernels. [`Host`] is RAM; a device backend names its own buffer views
/// (a device pointer and a length), so the whole plan runs over one arena on the device.
pub trait Memory {
    /// A shared view of a region's bytes.
    type Bytes<'a>: Copy;
    /// An exclusive view of a region's bytes.
    type BytesMut<'a>;
    /// A shared view of `T` values: a kernel's input.
    type Slice<'a, T: Pod>: Copy;
    /// An exclusive view of `T` values: a kernel's output.
    type SliceMut<'a, T: Pod>;

    /// Length in bytes.
    fn len(bytes: Self::Bytes<'_>) -> usize;
    /// Whether the first byte sits on a multiple of `align` in the backend's address space.
    fn is_aligned(bytes: Self::Bytes<'_>, align: usize) -> bool;
    /// The shared view, for a shorter time.
    fn shorten<'a, 'b: 'a>(bytes: Self::Bytes<'b>) -> Self::Bytes<'a>;
    /// A shared view of an exclusive one, for as long as it is borrowed.
    fn view<'a>(bytes: &'a Self::BytesMut<'_>) -> Self::Bytes<'a>;
    /// An exclusive view, for as long as it is borrowed.
    fn reborrow<'a>(bytes: &'a mut Self::BytesMut<'_>) -> Self::BytesMut<'a>;
    /// The exclusive view given up for a shared one.
    fn freeze(bytes: Self::BytesMut<'_>) -> Self::Bytes<'_>;
    /// The bytes in `range` (inside the view).
    fn range(bytes: Self::Bytes<'_>, range: Range<usize>) -> Self::Bytes<'_>;
    /// The view split before byte `mid` (inside the view).
    fn split_at_mut(
        bytes: Self::BytesMut<'_>,
        mid: usize,
    ) -> (Self::BytesMut<'_>, Self::BytesMut<'_>);
    /// The bytes as `T` values, or `None` when misaligned or not a whole number of them.
    fn cast<T: Pod>(bytes: Self::Bytes<'_>) -> Option<Self::Slice<'_, T>>;
    /// The bytes as `T` values to write, or `None` as for [`Memory::cast`].
    fn cast_mut<T: Pod>(bytes: Self::BytesMut<'_>) -> Option<Self::SliceMut<'_, T>>;
    /// The bytes, when the host can read them without a copy (for checks made before a
    /// step runs, like the labels a loss will read); `None` on a device.
    fn host(bytes: Self::Bytes<'_>) -> Option<&[u8]>;
}

/// Host RAM: views are slices. Every operation is a slice operation, so a plan on the host
/// runs as if the executor used slices directly (no copies, no allocation).
#[derive(Clone, Copy, Debug, Default)]
pub struct Host;

impl Memory for Host {
    type Bytes<'a> = &'a [u8];
    type BytesMut<'a> = &'a mut [u8];
    type Slice<'a, T: Pod> = &'a [T];
    type SliceMut<'a, T: Pod> = &'a mut [T];

    fn len(bytes: &[u8]) -> usize {
        bytes.len()
    }
    fn is_aligned(bytes: &[u8], align: usize) -> bool {
        (bytes.as_ptr() as usize).is_multiple_of(align)
    }
    fn shorten<'a, 'b: 'a>(bytes: Self::Bytes<'b>) -> Self::Bytes<'a> {
        bytes
    }
    fn view<'a>(bytes: &'a &mut [u8]) -> &'a [u8] {
        bytes
    }
    fn reborrow<'a>(bytes: &'a mut &mut [u8]) -> &'a mut [u8] {
        bytes
    }
    fn freeze(bytes: Self::BytesMut<'_>) -> Self::Bytes<'_> {
        bytes
    }
    fn range(bytes: Self::Bytes<'_>, range: Range<usize>) -> Self::Bytes<'_> {
        &bytes[range]
    }
    fn split_at_mut(
        bytes: Self::BytesMut<'_>,
        mid: usize,
    ) -> (Self::BytesMut<'_>, Self::BytesMut<'_>) {
        bytes.split_at_mut(mid)
    }
    fn cast<T: Pod>(bytes: Self::Bytes<'_>) -> Option<Self::Slice<'_, T>> {
        bytemuck::try_cast_slice(bytes).ok()
    }
    fn cast_mut<T: Pod>(bytes: Self::BytesMut<'_>) -> Option<Self::SliceMut<'_, T>> {
        bytemuck::try_cast_slice_mut(bytes).ok()
    }
    fn host(bytes: Self::Bytes<'_>) -> Option<&[u8]> {
        Some(bytes)
    }
}
