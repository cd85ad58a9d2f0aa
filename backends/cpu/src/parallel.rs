//! Splitting independent work over the backend's thread pool: the output is cut into whole
//! items (rows, samples, planes), handed out as one contiguous share of items per worker,
//! always the same share to the same end of the pool; a thread done with its own share
//! takes one that no thread has started. Each participant keeps its own scratch across the
//! shares it takes. Sums over the batch (weight gradients, batch statistics) split the
//! batch instead, one partial sum per thread.

use std::ops::Range;
use std::sync::{Mutex, PoisonError};

use crate::pool::Pool;

/// How many workers of `pool` share `items` independent items worth `work`
/// multiply-accumulates (or values touched) in all: at least one, at most one per item,
/// and each with at least the pool's [`Pool::min_work`].
pub fn workers(pool: &Pool, items: usize, work: usize) -> usize {
    pool.threads().min(items).min(work / pool.min_work().max(1)).max(1)
}

/// Cuts `out` into items of `item_len` values (the last may be shorter) and runs
/// `f(first_item, out_chunk, scratch)` over contiguous runs of items on up to `workers`
/// threads of `pool` (inline over the whole output when one), each thread with its own
/// `scratch_len` values of `scratch`, which holds `workers` such pieces.
pub fn for_each_chunk<T: Send, F>(
    pool: &Pool,
    workers: usize,
    out: &mut [T],
    item_len: usize,
    scratch: &mut [f32],
    scratch_len: usize,
    f: F,
) where
    F: Fn(usize, &mut [T], &mut [f32]) + Sync,
{
    let (len, item_len) = (out.len(), item_len.max(1));
    let items = len.div_ceil(item_len);
    let bound = |item: usize| (item * item_len).min(len);
    for_each_run(pool, workers, out, items, bound, Pieces { scratch, len: scratch_len }, f)
}

/// Each thread's piece of a split's scratch: `len` values of `scratch` apiece.
struct Pieces<'a> {
    scratch: &'a mut [f32],
    len: usize,
}

/// [`for_each_chunk`] over `items` items of any lengths: item `i` is the values
/// `bound(i)..bound(i + 1)` of `out`, with `bound(0) == 0` and `bound(items) == out.len()`.
fn for_each_run<T: Send, F>(
    pool: &Pool,
    workers: usize,
    out: &mut [T],
    items: usize,
    bound: impl Fn(usize) -> usize + Sync,
    pieces: Pieces<'_>,
    f: F,
) where
    F: Fn(usize, &mut [T], &mut [f32]) + Sync,
{
    let Pieces { scratch, len: scratch_len } = pieces;
    assert!(scratch.len() >= workers * scratch_len, "scratch holds one piece per worker");
    if workers <= 1 || items <= 1 {
        f(0, out, &mut scratch[..scratch_len]);
        return;
    }
    let per_run = items.div_ceil(workers);
    // What is left to hand out: the rest of the output and its items, and of the scratch.
    // The calling thread takes shares from the front, helpers from the back, each share
    // whole: with two threads each keeps to exactly its own half of every kernel's output,
    // so the samples one kernel leaves in a core's cache are the ones the next kernel
    // reads there. Many short runs would even out a thread that starts late, but they
    // move the halves' boundary from kernel to kernel, and on two cores training ran
    // slower with them than with whole shares.
    let rest = Mutex::new((out, 0..items));
    let pieces = Mutex::new(scratch);
    let caller = std::thread::current().id();
    pool.run(workers - 1, &|| {
        let from_back = std::thread::current().id() != caller;
        let mut piece: Option<&mut [f32]> = None;
        loop {
            let (chunk, first) = {
                let mut rest = rest.lock().unwrap_or_else(PoisonError::into_inner);
                let (out, left) = std::mem::take(&mut *rest);
                if left.is_empty() {
                    return;
                }
                let run = per_run.min(left.len());
                let (start, end) = (left.start, left.end);
                if from_back {
                    let (out, chunk) = out.split_at_mut(bound(end - run) - bound(start));
                    *rest = (out, start..end - run);
                    (chunk, end - run)
                } else {
                    let (chunk, out) = out.split_at_mut(bound(start + run) - bound(start));
                    *rest = (out, start + run..end);
                    (chunk, start)
                }
            };
            let piece = piece.get_or_insert_with(|| {
                let mut pieces = pieces.lock().unwrap_or_else(PoisonError::into_inner);
                let (piece, others) = std::mem::take(&mut *pieces).split_at_mut(scratch_len);
                *pieces = others;
                piece
            });
            f(first, chunk, piece);
        }
    });
}

/// Values of the `partials` of a [`sum_over_batch`] of `len` outputs on `threads` threads.
pub fn partials_len(threads: usize, len: usize) -> usize {
    if threads > 1 {
        threads * len
    } else {
        0
    }
}

/// The scratch of a [`sum_over_batch`]: [`partials_len`] values for the sums of the parts of
/// the batch, and `pieces` of `piece_len` values, one for each thread to use as it likes.
pub struct Scratch<'a> {
    pub partials: &'a mut [f32],
    pub pieces: &'a mut [f32],
    pub piece_len: usize,
}

/// `out` = a sum over `samples` samples worth `work` multiply-accumulates (or values read),
/// made of items of `item_len` values: `f(first_item, samples, items, piece)` writes the
/// sums over the range `samples` of the items from `first_item` on into `items`.
///
/// The batch is cut into one contiguous part of whole samples per thread, each summed into
/// its own partial sum of all of `out`, and the parts are added up in order: the result
/// depends on the number of threads but never on which thread ran what. Each thread first
/// reads the samples that the sample-split kernels before it wrote there (the caller the
/// front part, a helper a back one, as in [`for_each_chunk`]), where a split over the
/// items would read half of every sample from the other core's cache; a thread that
/// finishes its own part takes one that no thread has started. Where splitting the
/// items gives more threads work (a batch of one), the items are split, each summed over
/// the whole batch.
pub fn sum_over_batch<F>(
    pool: &Pool,
    samples: usize,
    work: usize,
    out: &mut [f32],
    item_len: usize,
    scratch: Scratch<'_>,
    f: F,
) where
    F: Fn(usize, Range<usize>, &mut [f32], &mut [f32]) + Sync,
{
    let Scratch { partials, pieces, piece_len } = scratch;
    let len = out.len();
    let items = len.div_ceil(item_len.max(1));
    let (parts, by_items) = (workers(pool, samples, work), workers(pool, items, work));
    if parts < 2 || parts < by_items || len == 0 {
        for_each_chunk(pool, by_items, out, item_len, pieces, piece_len, |first, items, piece| {
            f(first, 0..samples, items, piece)
        });
        return;
    }
    // The parts' partial sums one after the other, each part one share of the split: each
    // thread starts on its own part (the caller the first, a helper the last) and then
    // takes any part not yet started; every item's sum is the same whoever computes it.
    let partials = &mut partials[..parts * len];
    let bound = |k: usize| (k / items) * len + ((k % items) * item_len).min(len);
    let pieces = Pieces { scratch: pieces, len: piece_len };
    for_each_run(pool, parts, partials, parts * items, bound, pieces, |first, chunk, piece| {
        let (mut chunk, mut k) = (chunk, first);
        while !chunk.is_empty() {
            let (part, item) = (k / items, k % items);
            let take = chunk.len().min(len - item * item_len);
            let (this, rest) = std::mem::take(&mut chunk).split_at_mut(take);
            f(item, part * samples / parts..(part + 1) * samples / parts, this, piece);
            (chunk, k) = (rest, (part + 1) * items);
        }
    });
    let (first, rest) = partials.split_at(len);
    out.copy_from_slice(first);
    for partial in rest.chunks_exact(len) {
        out.iter_mut().zip(partial).for_each(|(sum, &v)| *sum += v);
    }
}

/// Values of an element-wise pass one run takes at least: a few pages.
const SPAN: usize = 4096;

/// Runs `f(offset, span)` over `out` cut into spans of [`SPAN`] values, on as many threads
/// of `pool` as its length repays: an element-wise pass, where `offset` locates the inputs
/// that go with `span`.
pub fn for_each_span<T: Send, F>(pool: &Pool, out: &mut [T], f: F)
where
    F: Fn(usize, &mut [T]) + Sync,
{
    let workers = workers(pool, out.len().div_ceil(SPAN), out.len());
    for_each_chunk(pool, workers, out, SPAN, &mut [], 0, |first, span, _| f(first * SPAN, span));
}

/// [`for_each_span`] over two outputs of one length at once: `f(offset, span, other)`, with
/// `other` the same values of `second`.
pub fn for_each_span_pair<T: Send, U: Send, F>(pool: &Pool, out: &mut [T], second: &mut [U], f: F)
where
    F: Fn(usize, &mut [T], &mut [U]) + Sync,
{
    assert_eq!(out.len(), second.len(), "both outputs have one length");
    let second = Shared { data: second.as_mut_ptr(), len: second.len() };
    for_each_span(pool, out, |at, span| {
        // SAFETY: `for_each_span` hands each range of values to one call only.
        let other = unsafe { second.span(at, span.len()) };
        f(at, span, other)
    });
}

/// The second output of [`for_each_span_pair`], shared by the threads of its split; it
/// stays mutably borrowed for the whole split.
struct Shared<U> {
    data: *mut U,
    len: usize,
}

// SAFETY: threads of one split reach the values only through disjoint spans (see
// `for_each_span_pair`), and `U: Send` lets each span's values move to its thread.
unsafe impl<U: Send> Sync for Shared<U> {}

impl<U> Shared<U> {
    /// The `len` values from `at`.
    ///
    /// # Safety
    /// No other reference to those values lives while the result does.
    #[allow(clippy::mut_from_ref)]
    unsafe fn span(&self, at: usize, len: usize) -> &mut [U] {
        assert!(at + len <= self.len, "a span lies inside the output");
        // SAFETY: inside the output (checked above), and the caller's promise makes the
        // borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.data.add(at), len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_bounded_by_threads_items_and_work() {
        let pool = Pool::new(8);
        let min = pool.min_work();
        assert_eq!(workers(&pool, 3, usize::MAX), 3);
        assert_eq!(workers(&Pool::new(2), 100, usize::MAX), 2);
        assert_eq!(workers(&pool, 100, min * 4), 4);
        assert_eq!(workers(&pool, 100, min * 2 - 1), 1);
        assert_eq!(workers(&pool, 100, 10), 1);
        assert_eq!(workers(&Pool::new(0), 0, 0), 1);
        assert_eq!(workers(&Pool::eager(8), 100, 10), 8);
    }

    #[test]
    fn every_item_is_visited_once_with_its_own_scratch() {
        let pool = Pool::eager(3);
        for scratch_len in [0, 2] {
            // Seven whole items of three values and a last one of two.
            let mut out = vec![0.0; 7 * 3 + 2];
            let mut scratch = vec![0.0; 3 * scratch_len];
            let runs = std::sync::atomic::AtomicUsize::new(0);
            for_each_chunk(
                &pool,
                3,
                &mut out,
                3,
                &mut scratch,
                scratch_len,
                |first, chunk, piece| {
                    assert_eq!(piece.len(), scratch_len);
                    // Each thread's piece counts the runs it took.
                    piece.iter_mut().for_each(|v| *v += 1.0);
                    runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    for (i, item) in chunk.chunks_mut(3).enumerate() {
                        item.iter_mut().for_each(|v| *v += (first + i) as f32);
                    }
                },
            );
            let expected: Vec<f32> = (0..8).flat_map(|i| [i as f32; 3]).take(23).collect();
            assert_eq!(out, expected);
            // Eight items over three workers: shares of three, three and two.
            assert_eq!(runs.into_inner(), 3);
            if scratch_len > 0 {
                let counted: f32 = scratch.iter().step_by(scratch_len).sum();
                assert_eq!(counted, 3.0, "{scratch:?}");
            }
        }
    }

    /// The calling thread's items are the first half and the helper's the second, or the
    /// caller's all of them when the helper came too late: each keeps to its own end of
    /// the output, in whole shares.
    #[test]
    fn the_caller_takes_the_front_half_and_helpers_the_back() {
        let pool = Pool::eager(2);
        let caller = std::thread::current().id();
        let mut helped = 0;
        for _ in 0..20 {
            let mut out = vec![0.0; 64];
            for_each_chunk(&pool, 2, &mut out, 1, &mut [], 0, |_, chunk, _| {
                // A slow share, so that the helper comes in time for the other.
                std::thread::sleep(std::time::Duration::from_micros(200));
                let by_caller = std::thread::current().id() == caller;
                chunk.iter_mut().for_each(|v| *v = if by_caller { 1.0 } else { 2.0 });
            });
            let front = out.iter().take_while(|&&v| v == 1.0).count();
            assert!(out[front..].iter().all(|&v| v == 2.0), "{out:?}");
            assert!(front == 32 || front == 64, "the caller took {front} items");
            helped += usize::from(front < out.len());
        }
        assert!(helped > 0, "the helper took no share in 20 splits");
    }

    /// Each (sample, item) pair is summed once, by parts of the batch or by items, the
    /// parts added up in order; each thread has its own piece.
    #[test]
    fn sums_over_the_batch_take_each_sample_of_each_item_once() {
        let pool = Pool::eager(3);
        // (samples, items): parts of the batch; one sample: items split.
        for (samples, items) in [(5, 2), (7, 4), (2, 3), (1, 4), (1, 1), (4, 0)] {
            let mut out = vec![f32::NAN; 2 * items];
            let mut partials = vec![f32::NAN; partials_len(3, out.len())];
            let mut pieces = vec![0.0; 3];
            let seen = Mutex::new(vec![0; samples * items]);
            let scratch = Scratch { partials: &mut partials, pieces: &mut pieces, piece_len: 1 };
            sum_over_batch(&pool, samples, 1000, &mut out, 2, scratch, |first, at, sums, piece| {
                piece[0] += 1.0;
                for (i, sum) in sums.chunks_exact_mut(2).enumerate() {
                    let mut seen = seen.lock().unwrap();
                    at.clone().for_each(|n| seen[n * items + first + i] += 1);
                    sum[0] = at.len() as f32;
                    sum[1] = at.clone().map(|n| (n * items + first + i) as f32).sum();
                }
            });
            let seen = seen.into_inner().unwrap();
            assert!(seen.iter().all(|&v| v == 1), "{samples} x {items}: {seen:?}");
            for (i, sum) in out.chunks_exact(2).enumerate() {
                let want: f32 = (0..samples).map(|n| (n * items + i) as f32).sum();
                assert_eq!(sum, [samples as f32, want], "{samples} x {items}");
            }
        }
    }

    /// Each part of the batch is one share: summed whole by one thread, in one call, the
    /// caller's the first part; a helper's slowness never splits a part it started.
    #[test]
    fn each_part_of_the_batch_is_summed_whole_by_one_thread() {
        let pool = Pool::eager(2);
        let caller = std::thread::current().id();
        let (samples, items) = (4, 32);
        let mut out = vec![f32::NAN; items];
        let mut partials = vec![f32::NAN; partials_len(2, items)];
        let scratch = Scratch { partials: &mut partials, pieces: &mut [], piece_len: 0 };
        let calls = Mutex::new(Vec::new());
        sum_over_batch(&pool, samples, 1000, &mut out, 1, scratch, |first, at, sums, _| {
            let by_caller = std::thread::current().id() == caller;
            // The helper far slower than the caller.
            let pause = if by_caller { 300 } else { 5000 };
            std::thread::sleep(std::time::Duration::from_micros(pause));
            calls.lock().unwrap().push((at.clone(), first, sums.len(), by_caller));
            for (i, sum) in sums.iter_mut().enumerate() {
                *sum = at.clone().map(|n| (n * items + first + i) as f32).sum();
            }
        });
        for (i, sum) in out.iter().enumerate() {
            let want: f32 = (0..samples).map(|n| (n * items + i) as f32).sum();
            assert_eq!(*sum, want, "item {i}");
        }
        let mut calls = calls.into_inner().unwrap();
        calls.sort_by_key(|(at, ..)| at.start);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0], (0..2, 0, items, true));
        assert_eq!((calls[1].0.clone(), calls[1].1, calls[1].2), (2..4, 0, items));
    }

    #[test]
    fn spans_cover_the_output_once_at_their_offsets() {
        let pool = Pool::eager(2);
        let mut out = vec![0.0; 3 * SPAN + 5];
        for_each_span(&pool, &mut out, |at, span| {
            span.iter_mut().enumerate().for_each(|(i, v)| *v += (at + i) as f32)
        });
        assert!(out.iter().enumerate().all(|(i, &v)| v == i as f32));
    }

    #[test]
    fn span_pairs_are_the_same_values_of_both_outputs() {
        let pool = Pool::eager(2);
        let mut out = vec![0; 3 * SPAN + 5];
        let mut second = vec![0u16; out.len()];
        for_each_span_pair(&pool, &mut out, &mut second, |at, span, other| {
            assert_eq!(span.len(), other.len());
            for (i, (a, b)) in span.iter_mut().zip(other).enumerate() {
                *a += at + i;
                *b += (at + i) as u16 % 1000 + 1;
            }
        });
        assert!(out.iter().enumerate().all(|(i, &v)| v == i), "each value written once");
        assert!(second.iter().enumerate().all(|(i, &v)| v == i as u16 % 1000 + 1));
    }
}
