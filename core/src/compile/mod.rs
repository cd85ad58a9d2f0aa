//! Compiling a graph into a [`Plan`]: pick the nodes that matter, lower them to kernels,
//! give every tensor a region and an offset. Buffers are laid out one after another for
//! now; the memory planner will replace [`layout`] with lifetime-aware placement.

use crate::graph::{Graph, GraphError, Phase};
use crate::kernel::Kernel;
use crate::lower::{lower, Mode};
use crate::plan::{Operand, PlanView, Region, RegionSizes, Step, ALIGN};
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

    /// The operand of a named tensor, or an error that says which name is unknown.
    pub fn operand(&self, name: &str) -> Result<Operand, UnknownTensor> {
        self.binding(name).map(|b| b.operand).ok_or_else(|| UnknownTensor { name: name.into() })
    }

    /// Copies every parameter and buffer that `other` also has (matched by name) from this
    /// plan's memory into `other`'s: how trained weights move from a training plan to an
    /// evaluation plan.
    pub fn copy_weights(&self, memory: &HostMemory, other: &Plan, other_memory: &mut HostMemory) {
        let is_weight =
            |r: Role| matches!(r, Role::FrozenParam | Role::TrainableParam | Role::Buffer);
        for to in other.bindings.iter().filter(|b| is_weight(b.role)) {
            if let Some(from) = self.binding(&to.name).filter(|b| is_weight(b.role)) {
                let src =
                    &memory.region(from.operand.region)[from.operand.offset..from.operand.end()];
                other_memory.region_mut(to.operand.region)[to.operand.offset..to.operand.end()]
                    .copy_from_slice(src);
            }
        }
    }

    /// Region images holding the initial values of weights, buffers and optimizer state.
    pub fn initial_memory(&self, graph: &Graph) -> HostMemory {
        let mut mem = HostMemory::zeroed(self.sizes);
        for b in &self.bindings {
            let init = match &graph.tensor(b.tensor).init {
                Some(init) => init,
                None => continue,
            };
            let values = init.materialize(b.shape.numel());
            let bytes: &[u8] = bytemuck::cast_slice(&values);
            mem.region_mut(b.operand.region)[b.operand.offset..b.operand.end()]
                .copy_from_slice(bytes);
        }
        mem
    }
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

/// Compiles the nodes needed for `outputs` in evaluation mode (inference).
pub fn compile_inference(graph: &Graph, outputs: &[TensorId]) -> Result<Plan, GraphError> {
    compile_outputs(graph, outputs, Mode::Eval)
}

/// Compiles the nodes needed for `outputs` in the given mode, without optimizer steps: for
/// example the loss and gradients of a differentiated graph, to inspect or check them.
pub fn compile_outputs(
    graph: &Graph,
    outputs: &[TensorId],
    mode: Mode,
) -> Result<Plan, GraphError> {
    for &o in outputs {
        graph.check_id(o)?;
    }
    let needed = ancestors(graph, outputs);
    compile(graph, &needed, mode, 1)
}

/// Compiles a differentiated graph with its optimizer steps in training mode.
pub(crate) fn compile_training(
    graph: &Graph,
    loss: TensorId,
    accumulation: u32,
) -> Result<Plan, GraphError> {
    // Roots: the loss, and every node that changes state without producing a value.
    let mut roots = vec![loss];
    for node in graph.nodes().iter().filter(|n| n.outputs.is_empty()) {
        roots.extend(node.inputs.iter().chain(&node.state));
    }
    let mut needed = ancestors(graph, &roots);
    for (i, node) in graph.nodes().iter().enumerate() {
        needed[i] |= node.outputs.is_empty();
    }
    compile(graph, &needed, Mode::Train, accumulation)
}

/// Marks the nodes whose outputs `roots` depend on.
fn ancestors(graph: &Graph, roots: &[TensorId]) -> Vec<bool> {
    let mut producer = vec![None; graph.tensors().len()];
    for (i, node) in graph.nodes().iter().enumerate() {
        for o in &node.outputs {
            producer[o.index()] = Some(i);
        }
    }
    let mut needed = vec![false; graph.nodes().len()];
    let mut stack: Vec<TensorId> = roots.to_vec();
    while let Some(t) = stack.pop() {
        if let Some(n) = producer[t.index()] {
            if !needed[n] {
                needed[n] = true;
                let node = &graph.nodes()[n];
                stack.extend(node.inputs.iter().chain(&node.state));
            }
        }
    }
    needed
}

fn compile(
    graph: &Graph,
    needed: &[bool],
    mode: Mode,
    accumulation: u32,
) -> Result<Plan, GraphError> {
    let mut lowered: Vec<(usize, Kernel, Vec<TensorId>)> = Vec::new();
    for (i, node) in graph.nodes().iter().enumerate().filter(|(i, _)| needed[*i]) {
        let (kernel, operands) = lower(graph, node, mode);
        lowered.push((i, kernel, operands));
    }
    let mut used = vec![false; graph.tensors().len()];
    for (_, _, operands) in &lowered {
        for t in operands {
            used[t.index()] = true;
        }
    }
    let (bindings, sizes) = layout(graph, &used);
    let mut place = vec![None; graph.tensors().len()];
    for b in &bindings {
        place[b.tensor.index()] = Some(b.operand);
    }
    let mut steps = Vec::new();
    let mut update_steps = Vec::new();
    for (i, kernel, operands) in lowered {
        let mut ops = heapless::Vec::new();
        for t in operands {
            let operand = place[t.index()].expect("every operand of a lowered node has a place");
            ops.push(operand).map_err(|_| GraphError::Invalid {
                op: kernel.name(),
                node: graph.nodes()[i].name.clone(),
                detail: "too many operands".into(),
            })?;
        }
        let step = Step { kernel, operands: ops, node: i as u32 };
        match graph.nodes()[i].phase {
            Phase::Update if accumulation > 1 => update_steps.push(step),
            _ => steps.push(step),
        }
    }
    Ok(Plan { steps, update_steps, accumulation, sizes, bindings })
}

/// Sequential placement: each used tensor gets the next aligned offset of its region.
fn layout(graph: &Graph, used: &[bool]) -> (Vec<Binding>, RegionSizes) {
    let mut sizes = RegionSizes::default();
    let mut bindings = Vec::new();
    for (i, t) in graph.tensors().iter().enumerate().filter(|(i, _)| used[*i]) {
        let region = match t.role {
            Role::FrozenParam => Region::Frozen,
            r if r.is_state() => Region::State,
            _ => Region::Arena,
        };
        let end = match region {
            Region::Frozen => &mut sizes.frozen,
            Region::State => &mut sizes.state,
            Region::Arena => &mut sizes.arena,
        };
        let offset = end.next_multiple_of(ALIGN);
        *end = offset + t.bytes();
        let operand = Operand { region, offset, len: t.shape.numel(), dtype: t.dtype };
        bindings.push(Binding {
            name: t.name.clone(),
            tensor: TensorId(i as u32),
            role: t.role,
            shape: t.shape,
            operand,
        });
    }
    (bindings, sizes)
}
