//! Splitting independent work over the backend's thread pool: the output is cut into whole
//! items (rows, samples, planes), handed out in contiguous runs of items, several runs per
//! worker so that one that starts late or loses its core holds back little; each
//! participant keeps its own scratch across the runs it takes.

use std::sync::{Mutex, PoisonError};

use crate::pool::Pool;

/// Runs of items each worker of a split gets on average. A split ends when its last run
/// does, so a run is the longest one thread may wait for another at the end of every
/// kernel: many short runs keep that wait short, and taking a run costs one lock.
const RUNS_PER_WORKER: usize = 16;

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
pub fn for_each_chunk<F>(
    pool: &Pool,
    workers: usize,
    out: &mut [f32],
    item_len: usize,
    scratch: &mut [f32],
    scratch_len: usize,
    f: F,
) where
    F: Fn(usize, &mut [f32], &mut [f32]) + Sync,
{
    assert!(scratch.len() >= workers * scratch_len, "scratch holds one piece per worker");
    let items = out.len().div_ceil(item_len.max(1));
    if workers <= 1 || items <= 1 {
        f(0, out, &mut scratch[..scratch_len]);
        return;
    }
    let per_run = items.div_ceil(workers * RUNS_PER_WORKER);
    // What is left to hand out: the rest of the output and its first item, and of the
    // scratch. The calling thread takes runs from the front, helpers from the back: with
    // two threads each keeps to its own end of every kernel's output, so the samples one
    // kernel leaves in a core's cache are mostly the ones the next kernel reads there.
    let rest = Mutex::new((out, 0));
    let pieces = Mutex::new(scratch);
    let caller = std::thread::current().id();
    pool.run(workers - 1, &|| {
        let from_back = std::thread::current().id() != caller;
        let mut piece: Option<&mut [f32]> = None;
        loop {
            let (chunk, first) = {
                let mut rest = rest.lock().unwrap_or_else(PoisonError::into_inner);
                let (out, first) = std::mem::take(&mut *rest);
                if out.is_empty() {
                    return;
                }
                let left = out.len().div_ceil(item_len.max(1));
                let run = per_run.min(left);
                if from_back {
                    // The last `run` items; the last of all may be shorter.
                    let (out, chunk) = out.split_at_mut((left - run) * item_len);
                    *rest = (out, first);
                    (chunk, first + left - run)
                } else {
                    let (chunk, out) = out.split_at_mut((run * item_len).min(out.len()));
                    *rest = (out, first + run);
                    (chunk, first)
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

/// Values of an element-wise pass one run takes at least: a few pages.
const SPAN: usize = 4096;

/// Runs `f(offset, span)` over `out` cut into spans of [`SPAN`] values, on as many threads
/// of `pool` as its length repays: an element-wise pass, where `offset` locates the inputs
/// that go with `span`.
pub fn for_each_span<F>(pool: &Pool, out: &mut [f32], f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let workers = workers(pool, out.len().div_ceil(SPAN), out.len());
    for_each_chunk(pool, workers, out, SPAN, &mut [], 0, |first, span, _| f(first * SPAN, span));
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
            // Eight items, fewer than the runs three workers take: runs of one.
            assert_eq!(runs.into_inner(), 8);
            if scratch_len > 0 {
                let counted: f32 = scratch.iter().step_by(scratch_len).sum();
                assert_eq!(counted, 8.0, "{scratch:?}");
            }
        }
    }

    /// The calling thread's items are a prefix and the helper's the rest, whoever takes
    /// how many: each keeps to its own end of the output.
    #[test]
    fn the_caller_takes_the_front_and_helpers_the_back() {
        let pool = Pool::eager(2);
        let caller = std::thread::current().id();
        let mut helped = 0;
        for _ in 0..20 {
            let mut out = vec![0.0; 64];
            for_each_chunk(&pool, 2, &mut out, 1, &mut [], 0, |_, chunk, _| {
                // Slow runs, so that the helper takes some.
                std::thread::sleep(std::time::Duration::from_micros(200));
                let by_caller = std::thread::current().id() == caller;
                chunk.iter_mut().for_each(|v| *v = if by_caller { 1.0 } else { 2.0 });
            });
            let front = out.iter().take_while(|&&v| v == 1.0).count();
            assert!(out[front..].iter().all(|&v| v == 2.0), "{out:?}");
            helped += usize::from(front < out.len());
        }
        assert!(helped > 0, "the helper took no run in 20 splits");
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
}
