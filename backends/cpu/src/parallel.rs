//! Splitting independent work over scoped threads: the output is cut into whole items
//! (rows, samples, planes) and each worker gets a contiguous run of them and its own scratch.

/// Multiply-accumulates below which a worker is not worth its thread's start-up cost.
const MIN_WORK_PER_WORKER: usize = 1 << 18;

/// How many workers share `items` independent items worth `work` multiply-accumulates in
/// all, given `threads`: at least one, at most one per item.
pub fn workers(threads: usize, items: usize, work: usize) -> usize {
    threads.min(items).min(work / MIN_WORK_PER_WORKER).max(1)
}

/// Cuts `out` into items of `item_len` values and runs `f(first_item, out_chunk, scratch)`
/// on `workers` scoped threads (inline when one), each over a contiguous run of items and
/// with its own `scratch_len` values of `scratch`.
pub fn for_each_chunk<F>(
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
    std::thread::scope(|scope| {
        let (mut out, mut scratch) = (out, scratch);
        let mut first = 0;
        while !out.is_empty() {
            let take = (per_worker * item_len).min(out.len());
            let (chunk, rest) = out.split_at_mut(take);
            let (piece, spare) = scratch.split_at_mut(scratch_len);
            (out, scratch) = (rest, spare);
            let f = &f;
            scope.spawn(move || f(first, chunk, piece));
            first += per_worker;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_bounded_by_threads_items_and_work() {
        assert_eq!(workers(8, 3, usize::MAX), 3);
        assert_eq!(workers(2, 100, usize::MAX), 2);
        assert_eq!(workers(8, 100, MIN_WORK_PER_WORKER * 4), 4);
        assert_eq!(workers(8, 100, 10), 1);
        assert_eq!(workers(0, 0, 0), 1);
    }

    #[test]
    fn every_item_is_visited_once_with_its_own_scratch() {
        let mut out = vec![0.0; 7 * 3];
        let mut scratch = vec![0.0; 3 * 2];
        for_each_chunk(3, &mut out, 3, &mut scratch, 2, |first, chunk, piece| {
            assert_eq!(piece.len(), 2);
            for (i, item) in chunk.chunks_mut(3).enumerate() {
                item.fill((first + i) as f32);
            }
        });
        let expected: Vec<f32> = (0..7).flat_map(|i| [i as f32; 3]).collect();
        assert_eq!(out, expected);
    }
}
