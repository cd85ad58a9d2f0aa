//! The host-side plan: owned steps, named bindings with lifetimes, statistics, and the
//! aligned memory images a host runs it over.

use crate::graph::Graph;
use crate::plan::{Operand, PlanView, Region, RegionSizes, Step};
use crate::shape::Shape;
use crate::tensor::{Role, TensorId};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// A named tensor of a plan, so callers can feed inputs and read outputs and weights.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub name: String,
    pub tensor: TensorId,
    pub role: Role,
    pub shape: Shape,
    pub operand: Operand,
    /// First and last step (of `steps` followed by `update_steps`) that use the tensor.
    /// Inputs and labels start at step 0; tensors kept for the caller end at the last step.
    pub first_step: usize,
    pub last_step: usize,
}

/// What a plan costs: memory against the lower bound, and arithmetic by stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlanStats {
    /// The largest number of arena bytes live at any one step: no placement can do better.
    pub lower_bound_bytes: usize,
    pub strategy: sprout_planner::Strategy,
    pub forward_flops: u64,
    pub backward_flops: u64,
    /// Forward work repeated by gradient checkpointing.
    pub recompute_flops: u64,
    pub optimizer_flops: u64,
}

/// The step at which a plan's arena holds the most live bytes, and what is live there.
#[derive(Clone, Debug, PartialEq)]
pub struct ArenaPeak<'p> {
    /// Index into the plan's steps followed by its update steps.
    pub step: usize,
    /// Arena bytes live at that step: the union of the live tensors' places, so an output
    /// written over its input counts once.
    pub bytes: usize,
    /// The arena tensors live at that step, largest first (ties in offset order).
    pub live: Vec<&'p Binding>,
}

/// A compiled, self-contained plan (host side; devices run a [`PlanView`] of it).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub update_steps: Vec<Step>,
    pub accumulation: u32,
    pub sizes: RegionSizes,
    /// Every tensor the plan touches, with its place.
    pub bindings: Vec<Binding>,
    pub stats: PlanStats,
}

impl Plan {
    pub fn view(&self) -> PlanView<'_> {
        PlanView {
            steps: &self.steps,
            update_steps: &self.update_steps,
            accumulation: self.accumulation,
            sizes: self.sizes,
        }
    }

    pub fn binding(&self, name: &str) -> Option<&Binding> {
        self.bindings.iter().find(|b| b.name == name)
    }

    pub fn binding_of(&self, tensor: TensorId) -> Option<&Binding> {
        self.bindings.iter().find(|b| b.tensor == tensor)
    }

    /// Where the arena is fullest (the first such step); `None` for a plan without arena
    /// tensors. Its bytes are the plan's lower bound when the bound counts what this does.
    pub fn arena_peak(&self) -> Option<ArenaPeak<'_>> {
        let arena: Vec<&Binding> =
            self.bindings.iter().filter(|b| b.operand.region == Region::Arena).collect();
        let live_at = |step: usize| -> Vec<&Binding> {
            arena.iter().copied().filter(|b| (b.first_step..=b.last_step).contains(&step)).collect()
        };
        let last = arena.iter().map(|b| b.last_step).max()?;
        let (step, bytes) = (0..=last)
            .map(|step| (step, covered_bytes(&live_at(step))))
            .fold((0, 0), |best, at| if at.1 > best.1 { at } else { best });
        let mut live = live_at(step);
        live.sort_by_key(|b| (core::cmp::Reverse(b.operand.bytes()), b.operand.offset));
        Some(ArenaPeak { step, bytes, live })
    }

    /// The operand of a named tensor, or an error that says which name is unknown.
    pub fn operand(&self, name: &str) -> Result<Operand, UnknownTensor> {
        self.binding(name).map(|b| b.operand).ok_or_else(|| UnknownTensor { name: name.into() })
    }

    /// Copies every parameter and buffer that `other` also has (same name, length and type)
    /// from this plan's memory into `other`'s, and says how many: how trained weights move
    /// from a training plan to an evaluation plan, or a pretrained backbone under a new head.
    pub fn copy_weights(
        &self,
        memory: &HostMemory,
        other: &Plan,
        other_memory: &mut HostMemory,
    ) -> usize {
        let is_weight =
            |r: Role| matches!(r, Role::FrozenParam | Role::TrainableParam | Role::Buffer);
        let mut copied = 0;
        for to in other.bindings.iter().filter(|b| is_weight(b.role)) {
            let same = |from: &&Binding| {
                is_weight(from.role)
                    && from.operand.len == to.operand.len
                    && from.operand.dtype == to.operand.dtype
            };
            if let Some(from) = self.binding(&to.name).filter(same) {
                let src =
                    &memory.region(from.operand.region)[from.operand.offset..from.operand.end()];
                other_memory.region_mut(to.operand.region)[to.operand.offset..to.operand.end()]
                    .copy_from_slice(src);
                copied += 1;
            }
        }
        copied
    }

    /// Region images holding the initial values of weights, buffers and optimizer state.
    pub fn initial_memory(&self, graph: &Graph) -> HostMemory {
        let mut mem = HostMemory::zeroed(self.sizes);
        for b in &self.bindings {
            let init = match &graph.tensor(b.tensor).init {
                Some(init) => init,
                None => continue,
            };
            let bytes = init.to_bytes(b.operand.dtype, b.shape.numel());
            mem.region_mut(b.operand.region)[b.operand.offset..b.operand.end()]
                .copy_from_slice(&bytes);
        }
        mem
    }
}

/// Bytes covered by the places of `live` (overlapping places count once).
fn covered_bytes(live: &[&Binding]) -> usize {
    let mut spans: Vec<(usize, usize)> =
        live.iter().map(|b| (b.operand.offset, b.operand.end())).collect();
    spans.sort_unstable();
    let (mut bytes, mut reached) = (0, 0);
    for (start, end) in spans {
        let start = start.max(reached);
        if end > start {
            bytes += end - start;
            reached = end;
        }
    }
    bytes
}

/// A name that no tensor of the plan has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownTensor {
    pub name: String,
}

impl core::fmt::Display for UnknownTensor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "the plan has no tensor named '{}'", self.name)
    }
}

impl core::error::Error for UnknownTensor {}

/// The three regions as 16-byte-aligned heap buffers, for running plans on a host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostMemory {
    frozen: Vec<u128>,
    state: Vec<u128>,
    arena: Vec<u128>,
    sizes: RegionSizes,
}

impl HostMemory {
    pub fn zeroed(sizes: RegionSizes) -> Self {
        let words = |bytes: usize| vec![0u128; bytes.div_ceil(16)];
        Self {
            frozen: words(sizes.frozen),
            state: words(sizes.state),
            arena: words(sizes.arena),
            sizes,
        }
    }

    /// Zeroes the arena by trading its buffer for a new zeroed one. Between steps the arena
    /// holds nothing a later step reads (a run resumed from its state starts on a zeroed
    /// one), and on a host the new buffer's pages stay unused, so not resident, until a step
    /// writes them: work between steps (validation, checkpoints) runs without the arena.
    pub fn release_arena(&mut self) {
        let words = self.arena.len();
        self.arena = Vec::new();
        self.arena = vec![0u128; words];
    }

    pub fn region(&self, region: Region) -> &[u8] {
        let words = match region {
            Region::Frozen => &self.frozen,
            Region::State => &self.state,
            Region::Arena => &self.arena,
        };
        &bytemuck::cast_slice(words)[..self.sizes.get(region)]
    }

    pub fn region_mut(&mut self, region: Region) -> &mut [u8] {
        let words = match region {
            Region::Frozen => &mut self.frozen,
            Region::State => &mut self.state,
            Region::Arena => &mut self.arena,
        };
        &mut bytemuck::cast_slice_mut(words)[..self.sizes.get(region)]
    }

    /// Borrows the three regions for the executor.
    pub fn regions(&mut self) -> crate::executor::Regions<'_> {
        let sizes = self.sizes;
        crate::executor::Regions {
            frozen: &bytemuck::cast_slice(&self.frozen)[..sizes.frozen],
            state: &mut bytemuck::cast_slice_mut(&mut self.state)[..sizes.state],
            arena: &mut bytemuck::cast_slice_mut(&mut self.arena)[..sizes.arena],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_arena_reads_as_zeros_and_keeps_the_state() {
        let mut memory = HostMemory::zeroed(RegionSizes { frozen: 4, state: 8, arena: 40 });
        memory.region_mut(Region::Arena).fill(7);
        memory.region_mut(Region::State).fill(3);
        memory.release_arena();
        assert_eq!(memory.region(Region::Arena), [0u8; 40]);
        assert_eq!(memory.region(Region::State), [3u8; 8]);
    }

    fn binding(
        name: &str,
        region: Region,
        offset: usize,
        len: usize,
        steps: (usize, usize),
    ) -> Binding {
        Binding {
            name: name.into(),
            tensor: TensorId(0),
            role: Role::Activation,
            shape: Shape::d1(len),
            operand: Operand { region, offset, len, dtype: crate::tensor::DType::F32 },
            first_step: steps.0,
            last_step: steps.1,
        }
    }

    #[test]
    fn the_arena_peak_counts_shared_places_once_and_lists_the_largest_first() {
        let bindings = vec![
            binding("x", Region::Arena, 0, 4, (0, 3)),
            // `g#1` is written over `g` at step 2: one place, live from 1 to 3.
            binding("g", Region::Arena, 16, 8, (1, 2)),
            binding("g#1", Region::Arena, 16, 8, (2, 3)),
            binding("small", Region::Arena, 48, 2, (2, 2)),
            binding("w", Region::Frozen, 0, 100, (0, 3)),
        ];
        let plan = Plan {
            steps: Vec::new(),
            update_steps: Vec::new(),
            accumulation: 1,
            sizes: RegionSizes { frozen: 400, state: 0, arena: 64 },
            bindings,
            stats: PlanStats {
                lower_bound_bytes: 0,
                strategy: sprout_planner::Strategy::default(),
                forward_flops: 0,
                backward_flops: 0,
                recompute_flops: 0,
                optimizer_flops: 0,
            },
        };
        let peak = plan.arena_peak().unwrap();
        assert_eq!((peak.step, peak.bytes), (2, 16 + 32 + 8));
        let names: Vec<&str> = peak.live.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["g", "g#1", "x", "small"]);
    }
}
