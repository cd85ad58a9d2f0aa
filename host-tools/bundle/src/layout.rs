//! One memory layout for the three plans of a bundle: a tensor the training plan keeps in
//! its state region lives there for every plan (so evaluation sees the trained weights);
//! every other weight or buffer goes, once by name, into one shared frozen region.

use crate::BundleBuildError;
use sprout_core::plan::ALIGN;
use sprout_core::{HostMemory, Operand, Plan, Region, RegionSizes, Step};
use std::collections::{BTreeMap, HashMap};

/// The shared frozen image being built, and the training plan whose state all plans share.
pub struct Layout<'t> {
    training: &'t Plan,
    frozen: Vec<u8>,
    frozen_at: BTreeMap<String, usize>,
}

/// A plan rewritten onto the shared layout.
pub struct Placed {
    pub steps: Vec<Step>,
    pub update_steps: Vec<Step>,
    pub accumulation: u32,
    pub arena: usize,
}

impl<'t> Layout<'t> {
    pub fn new(training: &'t Plan) -> Self {
        Self { training, frozen: Vec::new(), frozen_at: BTreeMap::new() }
    }

    /// Rewrites `plan`'s frozen and state operands onto the shared layout, taking the
    /// values of new frozen tensors from `memory` (the plan's initial memory).
    pub fn place(&mut self, plan: &Plan, memory: &HostMemory) -> Result<Placed, BundleBuildError> {
        let mut moved: HashMap<(Region, usize), Operand> = HashMap::new();
        for b in plan.bindings.iter().filter(|b| b.operand.region != Region::Arena) {
            let from = b.operand;
            let to = match self.training.binding(&b.name) {
                Some(t) if t.operand.region == Region::State => {
                    if (t.operand.len, t.operand.dtype) != (from.len, from.dtype) {
                        return Err(BundleBuildError::Split {
                            detail: format!("'{}' differs between the head's plans", b.name),
                        });
                    }
                    t.operand
                }
                _ => {
                    let bytes = &memory.region(from.region)[from.offset..from.end()];
                    Operand {
                        region: Region::Frozen,
                        offset: self.frozen_offset(&b.name, bytes),
                        ..from
                    }
                }
            };
            moved.insert((from.region, from.offset), to);
        }
        let mv = |steps: &[Step]| -> Vec<Step> {
            steps
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    for op in s.operands.iter_mut() {
                        if let Some(to) = moved.get(&(op.region, op.offset)) {
                            *op = *to;
                        }
                    }
                    s
                })
                .collect()
        };
        Ok(Placed {
            steps: mv(&plan.steps),
            update_steps: mv(&plan.update_steps),
            accumulation: plan.accumulation,
            arena: plan.sizes.arena,
        })
    }

    /// Where the frozen tensor `name` lives, appending its bytes the first time.
    fn frozen_offset(&mut self, name: &str, bytes: &[u8]) -> usize {
        if let Some(&at) = self.frozen_at.get(name) {
            return at;
        }
        let at = self.frozen.len().next_multiple_of(ALIGN);
        self.frozen.resize(at, 0);
        self.frozen.extend_from_slice(bytes);
        self.frozen_at.insert(name.to_string(), at);
        at
    }

    /// The shared frozen image.
    pub fn frozen(&self) -> &[u8] {
        &self.frozen
    }

    /// Region sizes of a placed plan.
    pub fn sizes(&self, placed: &Placed) -> RegionSizes {
        RegionSizes {
            frozen: self.frozen.len(),
            state: self.training.sizes.state,
            arena: placed.arena,
        }
    }
}
