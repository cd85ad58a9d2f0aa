//! Property tests over thousands of seeded random buffer sets: every strategy's placement
//! verifies, respects the lower bound and honours in-place reuse; Exact never loses to greedy,
//! and what it proves optimal an exhaustive search cannot beat.

use sprout_planner::{lower_bound, plan_memory, verify, Buffer, Placement, Strategy};

/// SplitMix64: a tiny seeded generator, so every run checks the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// Zero, powers of two, odd sizes and arbitrary ones, from one byte to 64 MiB.
fn size(rng: &mut Rng) -> usize {
    let bits = rng.below(27);
    match rng.below(10) {
        0 => 0,
        1..=3 => 1 << bits,
        4..=6 => 1 + 2 * rng.below(1 << bits),
        _ => 1 + rng.below(2 << bits),
    }
}

/// `count` buffers over up to `2 * count` steps; about a quarter take over an earlier buffer
/// in place (when one is free to take), then the list is shuffled so targets come after
/// their reusers as often as before.
fn buffers(rng: &mut Rng, count: usize) -> Vec<Buffer> {
    let steps = 1 + rng.below(2 * count);
    let mut buffers: Vec<Buffer> = Vec::with_capacity(count);
    let mut taken = vec![false; count];
    for _ in 0..count {
        let align = [1, 4, 16][rng.below(3)];
        // A one-step buffer that reuses another cannot be reused itself (see PlanError).
        let takeable = |t: usize, b: &Buffer| {
            let reuses_for_one_step = b.first == b.last && b.reuse.is_some();
            !taken[t] && !reuses_for_one_step
        };
        let targets: Vec<usize> =
            buffers.iter().enumerate().filter(|&(t, b)| takeable(t, b)).map(|(t, _)| t).collect();
        let buffer = if !targets.is_empty() && rng.chance(25) {
            let target = targets[rng.below(targets.len())];
            taken[target] = true;
            let reused = buffers[target];
            // Mostly the same size (an element-wise op), sometimes smaller.
            let size = if rng.chance(70) { reused.size } else { rng.below(reused.size + 1) };
            let first = reused.last;
            Buffer::new(size, first, first + rng.below(steps)).aligned(align).reusing(target)
        } else {
            let first = rng.below(steps);
            let length = if rng.chance(20) { rng.below(steps) } else { rng.below(4) };
            Buffer::new(size(rng), first, first + length).aligned(align)
        };
        buffers.push(buffer);
    }
    shuffle(rng, buffers)
}

fn shuffle(rng: &mut Rng, buffers: Vec<Buffer>) -> Vec<Buffer> {
    let mut order: Vec<usize> = (0..buffers.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut position = vec![0; buffers.len()];
    for (new, &old) in order.iter().enumerate() {
        position[old] = new;
    }
    order
        .iter()
        .map(|&old| Buffer { reuse: buffers[old].reuse.map(|t| position[t]), ..buffers[old] })
        .collect()
}

/// Plans with `strategy` and checks what every placement must satisfy.
fn checked_plan(buffers: &[Buffer], strategy: Strategy) -> Placement {
    let placement = plan_memory(buffers, strategy).expect("generated buffers are valid");
    let context = || format!("{strategy:?} on {buffers:?}: {placement:?}");
    assert_eq!(verify(buffers, &placement), Ok(()), "{}", context());
    let bound = lower_bound(buffers);
    assert!(placement.arena_bytes >= bound, "below the lower bound {bound}: {}", context());
    assert_eq!(
        placement.proven_optimal && bound == placement.arena_bytes,
        placement.arena_bytes == bound
    );
    for (i, b) in buffers.iter().enumerate() {
        if b.size == 0 {
            assert_eq!(placement.offsets[i], 0, "zero-size buffer {i}: {}", context());
        } else if let Some(target) = b.reuse {
            let (mine, theirs) = (placement.offsets[i], placement.offsets[target]);
            assert_eq!(mine, theirs, "buffer {i} reuses {target}: {}", context());
        }
    }
    placement
}

/// Arena / lower bound, summed over the cases with a nonzero bound.
#[derive(Default)]
struct Ratios {
    sum: f64,
    cases: usize,
    at_bound: usize,
}

impl Ratios {
    fn add(&mut self, buffers: &[Buffer], placement: &Placement) {
        let bound = lower_bound(buffers);
        if bound > 0 {
            self.sum += placement.arena_bytes as f64 / bound as f64;
            self.cases += 1;
            self.at_bound += usize::from(placement.arena_bytes == bound);
        }
    }

    fn mean(&self) -> f64 {
        self.sum / self.cases as f64
    }
}

#[test]
fn every_strategy_places_random_buffers_safely() {
    let mut rng = Rng(0x5EED_0001);
    let (mut greedy_ratio, mut first_fit_ratio) = (Ratios::default(), Ratios::default());
    for case in 0..6_000 {
        let count = 1 + case % 60;
        let buffers = buffers(&mut rng, count);
        let greedy = checked_plan(&buffers, Strategy::GreedyBySize);
        let first_fit = checked_plan(&buffers, Strategy::FirstFitInTime);
        assert_eq!(greedy.strategy, Strategy::GreedyBySize);
        assert_eq!(first_fit.strategy, Strategy::FirstFitInTime);
        greedy_ratio.add(&buffers, &greedy);
        first_fit_ratio.add(&buffers, &first_fit);
    }
    eprintln!(
        "arena / lower bound over {} cases: GreedyBySize {:.4} ({} at the bound), \
         FirstFitInTime {:.4} ({} at the bound)",
        greedy_ratio.cases,
        greedy_ratio.mean(),
        greedy_ratio.at_bound,
        first_fit_ratio.mean(),
        first_fit_ratio.at_bound,
    );
    // Largest first with best fit stays close to the bound, and packs better than first fit
    // in time on average.
    assert!(greedy_ratio.mean() < 1.03);
    assert!(greedy_ratio.mean() < first_fit_ratio.mean());
}

#[test]
fn exact_never_loses_to_greedy() {
    let mut rng = Rng(0x5EED_0002);
    let exact = Strategy::Exact { max_nodes: 5_000, max_buffers: 12 };
    let (mut greedy_ratio, mut exact_ratio) = (Ratios::default(), Ratios::default());
    let (mut improved, mut proven) = (0, 0);
    for case in 0..2_000 {
        let buffers = buffers(&mut rng, 1 + case % 12);
        let greedy = checked_plan(&buffers, Strategy::GreedyBySize);
        let searched = checked_plan(&buffers, exact);
        assert_eq!(searched.strategy, exact);
        assert!(searched.arena_bytes <= greedy.arena_bytes, "{buffers:?}");
        if searched.proven_optimal {
            let first_fit = checked_plan(&buffers, Strategy::FirstFitInTime);
            assert!(searched.arena_bytes <= first_fit.arena_bytes, "{buffers:?}");
        }
        improved += usize::from(searched.arena_bytes < greedy.arena_bytes);
        proven += usize::from(searched.proven_optimal);
        greedy_ratio.add(&buffers, &greedy);
        exact_ratio.add(&buffers, &searched);
    }
    eprintln!(
        "arena / lower bound over {} cases of 1..=12 buffers: GreedyBySize {:.4}, Exact {:.4}; \
         Exact improved on greedy {improved} times and proved {proven} placements optimal",
        exact_ratio.cases,
        greedy_ratio.mean(),
        exact_ratio.mean(),
    );
    assert!(improved > 0 && proven > 1_500);
}

/// Whether `buffers` fit in `arena` bytes, by trying every aligned offset (small cases only).
fn fits(buffers: &[Buffer], arena: usize, offsets: &mut Vec<usize>) -> bool {
    let Some(b) = buffers.get(offsets.len()) else { return true };
    let clear = |offset: usize, offsets: &[usize]| {
        buffers.iter().zip(offsets).all(|(other, &at)| {
            !other.overlaps_in_time(b) || at + other.size <= offset || offset + b.size <= at
        })
    };
    for offset in (0..=arena.saturating_sub(b.size)).step_by(b.align) {
        if b.size <= arena && clear(offset, offsets) {
            offsets.push(offset);
            if fits(buffers, arena, offsets) {
                return true;
            }
            offsets.pop();
        }
    }
    false
}

#[test]
fn what_exact_proves_optimal_exhaustive_search_cannot_beat() {
    let mut rng = Rng(0x5EED_0003);
    let mut beaten_greedy = 0;
    for case in 0..2_000 {
        let count = 2 + case % 5;
        let steps = 1 + rng.below(2 * count);
        let buffers: Vec<Buffer> = (0..count)
            .map(|_| {
                let first = rng.below(steps);
                let last = first + rng.below(3);
                Buffer::new(1 + rng.below(7), first, last).aligned([1, 1, 2, 4][rng.below(4)])
            })
            .collect();
        let placement = checked_plan(&buffers, Strategy::exact());
        assert!(placement.proven_optimal, "{buffers:?}");
        let arena = placement.arena_bytes;
        assert!(!fits(&buffers, arena - 1, &mut Vec::new()), "{buffers:?} fit in {}", arena - 1);
        beaten_greedy +=
            usize::from(arena < checked_plan(&buffers, Strategy::GreedyBySize).arena_bytes);
    }
    assert!(beaten_greedy > 0);
}
