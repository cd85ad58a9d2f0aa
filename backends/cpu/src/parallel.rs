//! Splitting independent work over the backend's thread pool: the output is cut into whole
//! items (rows, samples, planes) and each worker takes a contiguous run of them with its own
//! scratch.

use std::sync::Mutex;

use crate::pool::Pool;

/// How many workers of `pool` share `items` independent items worth `work`
/// multiply-accumulates (or values touched) in all: at least one, at most one per item,
/// and each with at least the pool's [`Pool::min_work`].
pub fn workers(pool: &Pool, items: usize, work: usize) -> usize {
    pool.threads().min(items).min(work / pool.min_work().max(1)).max(1)
}

/// Cuts `out` into items of `item_len` values and runs `f(first_item, out_chunk, scratch)`
/// over `workers` contiguous runs of items on `pool` (inline when one), each run with its
/// own `scratch_len` values of `scratch`.
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
    let items = out.len().checked_div(item_len).unwrap_or(0);
    let per_worker = items.div_ceil(workers.max(1)).max(1);
    if workers <= 1 || items <= per_worker {
        f(0, out, &mut scratch[..scratch_len]);
        return;
    }
    // What is left to hand out: the rest of the output, of the scratch, and its first item.
    let rest = Mutex::new((out, scratch, 0));
    pool.run(workers - 1, &|| loop {
        let (chunk, piece, first) = {
            let mut rest = rest.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let (out, scratch, first) = std::mem::take(&mut *rest);
            if out.is_empty() {
                return;
            }
            let (chunk, out) = out.split_at_mut((per_worker * item_len).min(out.len()));
            let (piece, scratch) = scratch.split_at_mut(scratch_len);
            *rest = (out, scratch, first + per_worker);
            (chunk, piece, first)
        };
        f(first, chunk, piece);
    });
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
        let pool = Pool::new(3);
        for scratch_len in [0, 2] {
            let mut out = vec![0.0; 7 * 3];
            let mut scratch = vec![0.0; 3 * scratch_len];
            for_each_chunk(
                &pool,
                3,
                &mut out,
                3,
                &mut scratch,
                scratch_len,
                |first, chunk, piece| {
                    assert_eq!(piece.len(), scratch_len);
                    piece.fill(first as f32);
                    for (i, item) in chunk.chunks_mut(3).enumerate() {
                        item.fill((first + i) as f32);
                    }
                },
            );
            let expected: Vec<f32> = (0..7).flat_map(|i| [i as f32; 3]).collect();
            assert_eq!(out, expected);
            // Runs start at items 0, 3 and 6, each writing its own piece.
            let pieces: Vec<f32> =
                [0.0, 3.0, 6.0].iter().flat_map(|&v| vec![v; scratch_len]).collect();
            assert_eq!(scratch, pieces);
        }
    }
}
