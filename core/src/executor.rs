//! The executor: runs a validated [`PlanView`] over caller-provided memory with no heap.
//! Each step's operands are carved out of the regions with safe, checked splits.

use crate::backend::{Host, Kernels, Memory};
use crate::dispatch::{run_kernel, Fault, Flow, Operands, StepContext, View};
use crate::kernel::{Access, KernelCall, MAX_OPERANDS};
use crate::plan::{ExecError, Operand, PlanView, Region, Step};
use crate::reference::check_labels;
use crate::tensor::{DType, Element};

/// The memory a plan runs over, in backend memory `M`.
pub struct RegionsIn<'m, M: Memory> {
    /// Frozen weights, read-only (flash on a device).
    pub frozen: M::Bytes<'m>,
    /// Trainable weights, buffers and optimizer state; persists between steps.
    pub state: M::BytesMut<'m>,
    /// Scratch memory for one step: inputs, activations, gradients.
    pub arena: M::BytesMut<'m>,
}

/// The memory a plan runs over, in host RAM.
pub type Regions<'m> = RegionsIn<'m, Host>;

impl<M: Memory> RegionsIn<'_, M> {
    fn bytes(&self, region: Region) -> M::Bytes<'_> {
        match region {
            Region::Frozen => M::shorten(self.frozen),
            Region::State => M::view(&self.state),
            Region::Arena => M::view(&self.arena),
        }
    }

    fn len(&self, region: Region) -> usize {
        M::len(self.bytes(region))
    }
}

impl Regions<'_> {
    fn bytes_mut(&mut self, region: Region) -> Option<&mut [u8]> {
        match region {
            Region::Frozen => None,
            Region::State => Some(self.state),
            Region::Arena => Some(self.arena),
        }
    }

    /// Writes `values` into a tensor's memory (feeding inputs, loading weights).
    pub fn write<T: Element>(&mut self, op: &Operand, values: &[T]) -> Result<(), ExecError> {
        checked(op, T::DTYPE, values.len(), self.len(op.region))?;
        let region = op.region;
        let bytes = self.bytes_mut(region).ok_or(ExecError::ReadOnly { region })?;
        bytes[op.offset..op.end()].copy_from_slice(bytemuck::cast_slice(values));
        Ok(())
    }

    /// Reads a tensor's values (outputs, losses, trained weights).
    pub fn read<T: Element>(&self, op: &Operand) -> Result<&[T], ExecError> {
        host_values(self.bytes(op.region), op)
    }
}

/// Checks that `op` holds `len` values of `dtype` inside its region of `region_len` bytes.
fn checked(op: &Operand, dtype: DType, len: usize, region_len: usize) -> Result<(), ExecError> {
    if op.dtype != dtype {
        return Err(ExecError::WrongDType { expected: op.dtype, actual: dtype });
    }
    if op.len != len {
        return Err(ExecError::ValueLength { expected: op.len, actual: len });
    }
    op.check_inside(region_len, 0, "binding")
}

/// `op`'s values, from its region's bytes in host memory.
fn host_values<'a, T: Element>(region: &'a [u8], op: &Operand) -> Result<&'a [T], ExecError> {
    checked(op, T::DTYPE, op.len, region.len())?;
    bytemuck::try_cast_slice(&region[op.offset..op.end()])
        .map_err(|_| ExecError::Misaligned { region: op.region })
}

/// How far training has come: what a resumed run needs to continue bit for bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Optimizer updates done.
    pub updates: u32,
    /// Micro-batches run (they seed the dropout masks).
    pub micro_batches: u64,
    /// Micro-batches accumulated since the last update.
    pub pending: u32,
}

/// What a training call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// Gradients were added to the accumulators; `remaining` micro-batches until the update.
    Accumulated { remaining: u32 },
    /// The optimizer updated the weights; `update` counts updates so far.
    Updated { update: u32 },
    /// The loss scaler found overflowing gradients: parameters, optimizer state and the
    /// update count (`updates`, still the count so far) are as they were; the scale backed
    /// off and the gradient accumulators were zeroed.
    Skipped { updates: u32 },
}

/// Runs one plan with one backend. Holds the training counters, so accumulation and the
/// update that consumes (and zeroes) the accumulators cannot be forgotten or doubled.
pub struct Executor<'p, K> {
    plan: PlanView<'p>,
    kernels: K,
    updates: u32,
    micro_batches: u64,
    pending: u32,
}

impl<'p, K: Kernels> Executor<'p, K> {
    /// Checks the plan once; afterwards no step can reach outside its regions.
    pub fn new(plan: PlanView<'p>, kernels: K) -> Result<Self, ExecError> {
        plan.validate()?;
        Ok(Self { plan, kernels, updates: 0, micro_batches: 0, pending: 0 })
    }

    /// Hands the backend back, with whatever scratch it grew, for the next plan to run on.
    pub fn into_kernels(self) -> K {
        self.kernels
    }

    /// Optimizer updates done so far.
    pub fn updates(&self) -> u32 {
        self.updates
    }

    /// The training counters, to store in a checkpoint.
    pub fn progress(&self) -> Progress {
        Progress { updates: self.updates, micro_batches: self.micro_batches, pending: self.pending }
    }

    /// Continues from stored counters (a resumed run): AdamW's bias correction, dropout
    /// masks and gradient accumulation pick up exactly where they stopped.
    pub fn resume_at(&mut self, progress: Progress) -> Result<(), ExecError> {
        if progress.pending >= self.plan.accumulation {
            return Err(ExecError::BadProgress {
                pending: progress.pending,
                accumulation: self.plan.accumulation,
            });
        }
        self.updates = progress.updates;
        self.micro_batches = progress.micro_batches;
        self.pending = progress.pending;
        Ok(())
    }

    /// Checks that the caller's memory is large enough and aligned.
    pub fn check_regions(&self, regions: &RegionsIn<'_, K::Memory>) -> Result<(), ExecError> {
        for region in [Region::Frozen, Region::State, Region::Arena] {
            let (bytes, needed) = (regions.bytes(region), self.plan.sizes.get(region));
            let actual = <K::Memory as Memory>::len(bytes);
            if actual < needed {
                return Err(ExecError::RegionTooSmall { region, needed, actual });
            }
            // An empty region holds no operand, so where it points does not matter.
            if needed > 0 && !<K::Memory as Memory>::is_aligned(bytes, 4) {
                return Err(ExecError::Misaligned { region });
            }
        }
        Ok(())
    }

    /// Checks the caller's memory and every label a loss will read (where the host can see
    /// it), so bad data fails a call before anything (batch-norm statistics included) has
    /// changed.
    fn check_inputs(&self, regions: &RegionsIn<'_, K::Memory>) -> Result<(), ExecError> {
        self.check_regions(regions)?;
        for (index, step) in self.plan.steps.iter().enumerate() {
            if let (KernelCall::CrossEntropy(d), Some(labels)) = (step.kernel, step.operands.get(1))
            {
                let Some(region) = <K::Memory as Memory>::host(regions.bytes(labels.region)) else {
                    continue;
                };
                let kernel = step.kernel.name();
                check_labels(host_values(region, labels)?, d.cols)
                    .map_err(|error| ExecError::Kernel { step: index, kernel, error })?;
            }
        }
        Ok(())
    }

    /// Runs the plan's steps once without learning (inference, evaluation).
    pub fn run(&mut self, regions: &mut RegionsIn<'_, K::Memory>) -> Result<(), ExecError> {
        self.run_observed(regions, &mut ())
    }

    /// [`Executor::run`], telling `observer` about each kernel call (a profiler).
    pub fn run_observed(
        &mut self,
        regions: &mut RegionsIn<'_, K::Memory>,
        observer: &mut impl StepObserver,
    ) -> Result<(), ExecError> {
        self.check_inputs(regions)?;
        let ctx = self.context(0.0);
        let steps = Steps { list: self.plan.steps, first_index: 0 };
        run_steps(&mut self.kernels, steps, regions, &ctx, observer).map(|_| ())
    }

    /// One training micro-batch: forward, backward, and, every `accumulation` calls, the
    /// optimizer update at learning rate `learning_rate`.
    pub fn train_step(
        &mut self,
        regions: &mut RegionsIn<'_, K::Memory>,
        learning_rate: f32,
    ) -> Result<StepOutcome, ExecError> {
        self.train_step_observed(regions, learning_rate, &mut ())
    }

    /// [`Executor::train_step`], telling `observer` about each kernel call (a profiler).
    pub fn train_step_observed(
        &mut self,
        regions: &mut RegionsIn<'_, K::Memory>,
        learning_rate: f32,
        observer: &mut impl StepObserver,
    ) -> Result<StepOutcome, ExecError> {
        self.check_inputs(regions)?;
        let ctx = self.context(learning_rate);
        let steps = Steps { list: self.plan.steps, first_index: 0 };
        let flow = run_steps(&mut self.kernels, steps, regions, &ctx, observer)?;
        self.micro_batches += 1;
        self.pending += 1;
        if self.pending < self.plan.accumulation {
            return Ok(StepOutcome::Accumulated {
                remaining: self.plan.accumulation - self.pending,
            });
        }
        let updates = Steps { list: self.plan.update_steps, first_index: self.plan.steps.len() };
        let update_flow = run_steps(&mut self.kernels, updates, regions, &ctx, observer)?;
        self.pending = 0;
        if flow == Flow::SkipParameterUpdates || update_flow == Flow::SkipParameterUpdates {
            return Ok(StepOutcome::Skipped { updates: self.updates });
        }
        self.updates += 1;
        Ok(StepOutcome::Updated { update: self.updates })
    }

    fn context(&self, learning_rate: f32) -> StepContext {
        StepContext { learning_rate, update: self.updates, micro_batch: self.micro_batches }
    }
}

/// Watches a plan run, one kernel call at a time: a host's profiler times the calls (no
/// clock is assumed here). `()` watches nothing.
pub trait StepObserver {
    /// Step `index` (its number in the plan; update steps follow the micro-batch steps) is
    /// about to run `kernel`.
    fn before(&mut self, index: usize, kernel: &KernelCall);
    /// Step `index` ran `kernel` successfully.
    fn after(&mut self, index: usize, kernel: &KernelCall);
}

impl StepObserver for () {
    fn before(&mut self, _: usize, _: &KernelCall) {}
    fn after(&mut self, _: usize, _: &KernelCall) {}
}

/// An observer that may be switched off.
impl<T: StepObserver> StepObserver for Option<T> {
    fn before(&mut self, index: usize, kernel: &KernelCall) {
        if let Some(observer) = self {
            observer.before(index, kernel)
        }
    }
    fn after(&mut self, index: usize, kernel: &KernelCall) {
        if let Some(observer) = self {
            observer.after(index, kernel)
        }
    }
}

/// A run of consecutive plan steps and the plan index of the first.
struct Steps<'p> {
    list: &'p [Step],
    first_index: usize,
}

/// Runs `steps` in order; once a step asks for it (a loss scaler that found an overflow),
/// the parameter updates among the rest are skipped, and the answer says so.
fn run_steps<K: Kernels>(
    kernels: &mut K,
    steps: Steps<'_>,
    regions: &mut RegionsIn<'_, K::Memory>,
    ctx: &StepContext,
    observer: &mut impl StepObserver,
) -> Result<Flow, ExecError> {
    let mut flow = Flow::Continue;
    for (i, step) in steps.list.iter().enumerate() {
        if flow == Flow::SkipParameterUpdates && step.kernel.updates_parameters() {
            continue;
        }
        let index = steps.first_index + i;
        let kernel = step.kernel.name();
        let views = split_operands(index, step, regions)?;
        observer.before(index, &step.kernel);
        let asked =
            run_kernel(kernels, &step.kernel, Operands::new(views), ctx).map_err(|f| match f {
                Fault::Malformed(detail) => {
                    ExecError::MalformedStep { step: index, kernel, detail }
                }
                Fault::Kernel(error) => ExecError::Kernel { step: index, kernel, error },
            })?;
        observer.after(index, &step.kernel);
        if asked == Flow::SkipParameterUpdates {
            flow = asked;
        }
    }
    Ok(flow)
}

/// Borrows every operand of `step`: written operands mutably and alone, read operands
/// shared (two reads of one tensor are fine; a read overlapping a write is not).
fn split_operands<'a, M: Memory>(
    index: usize,
    step: &Step,
    regions: &'a mut RegionsIn<'_, M>,
) -> Result<heapless::Vec<View<'a, M>, MAX_OPERANDS>, ExecError> {
    let kernel = step.kernel.name();
    let signature = step.kernel.signature();
    let mut slots: [Option<View<'a, M>>; MAX_OPERANDS] = Default::default();
    for op in &step.operands {
        op.check_inside(regions.len(op.region), index, kernel)?;
    }
    let frozen: M::Bytes<'a> = M::shorten(regions.frozen);
    for (i, op) in step.operands.iter().enumerate().filter(|(_, op)| op.region == Region::Frozen) {
        slots[i] = Some(View::Read(M::range(frozen, op.offset..op.end())));
    }
    let writes = |i: usize| signature.slots.get(i).map(|s| s.access != Access::Read);
    let writes: [bool; MAX_OPERANDS] = core::array::from_fn(|i| writes(i).unwrap_or(false));
    let (state, arena) = (M::reborrow(&mut regions.state), M::reborrow(&mut regions.arena));
    split_region(index, kernel, step, Region::State, state, &writes, &mut slots)?;
    split_region(index, kernel, step, Region::Arena, arena, &writes, &mut slots)?;
    let mut views = heapless::Vec::new();
    for slot in slots.into_iter().take(step.operands.len()) {
        let view = slot.ok_or(ExecError::MalformedStep {
            step: index,
            kernel,
            detail: "an operand was not placed",
        })?;
        // At most MAX_OPERANDS slots exist.
        let _ = views.push(view);
    }
    Ok(views)
}

/// Carves the operands of `step` that live in `region` out of `bytes` (all operands are
/// known to lie inside their regions).
fn split_region<'a, M: Memory>(
    index: usize,
    kernel: &'static str,
    step: &Step,
    region: Region,
    bytes: M::BytesMut<'a>,
    writes: &[bool; MAX_OPERANDS],
    slots: &mut [Option<View<'a, M>>; MAX_OPERANDS],
) -> Result<(), ExecError> {
    let mine = |i: &usize| step.operands[*i].region == region;
    let mut written: heapless::Vec<usize, MAX_OPERANDS> =
        (0..step.operands.len()).filter(mine).filter(|i| writes[*i]).collect();
    written.sort_unstable_by_key(|i| step.operands[*i].offset);

    // Alternate gaps (shared, for reads) and written operands (exclusive).
    let mut gaps: heapless::Vec<(usize, M::Bytes<'a>), { MAX_OPERANDS + 1 }> = heapless::Vec::new();
    let mut rest = bytes;
    let mut position = 0;
    for &i in &written {
        let op = &step.operands[i];
        if op.offset < position {
            return Err(ExecError::Overlap { step: index, kernel });
        }
        let (gap, tail) = M::split_at_mut(rest, op.offset - position);
        let (mine, tail) = M::split_at_mut(tail, op.bytes());
        let _ = gaps.push((position, M::freeze(gap)));
        slots[i] = Some(View::Write(mine));
        rest = tail;
        position = op.end();
    }
    let _ = gaps.push((position, M::freeze(rest)));

    for i in (0..step.operands.len()).filter(mine).filter(|i| !writes[*i]) {
        let op = &step.operands[i];
        let gap = gaps
            .iter()
            .find(|(start, gap)| op.offset >= *start && op.end() <= start + M::len(*gap));
        let &(start, gap) = gap.ok_or(ExecError::Overlap { step: index, kernel })?;
        slots[i] = Some(View::Read(M::range(gap, op.offset - start..op.end() - start)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Reference;
    use crate::kernel::KernelCall;
    use crate::plan::{PlanView, RegionSizes};

    fn arena_operand(offset: usize, len: usize) -> Operand {
        Operand { region: Region::Arena, offset, len, dtype: DType::F32 }
    }

    fn step(kernel: KernelCall, operands: &[Operand]) -> Step {
        Step { kernel, operands: operands.iter().copied().collect(), node: 0 }
    }

    fn run_one(s: Step, arena: &mut [u32]) -> Result<(), ExecError> {
        let steps = [s];
        let sizes = RegionSizes { frozen: 0, state: 0, arena: arena.len() * 4 };
        let view = PlanView { steps: &steps, update_steps: &[], accumulation: 1, sizes };
        let mut exec = Executor::new(view, Reference)?;
        let mut regions =
            Regions { frozen: &[], state: &mut [], arena: bytemuck::cast_slice_mut(arena) };
        exec.run(&mut regions)
    }

    #[test]
    fn one_tensor_may_be_read_twice() {
        let mut arena = [0u32; 8];
        arena[0] = 3.0f32.to_bits();
        let s = step(
            KernelCall::Add(1),
            &[arena_operand(0, 1), arena_operand(0, 1), arena_operand(16, 1)],
        );
        run_one(s, &mut arena).unwrap();
        assert_eq!(f32::from_bits(arena[4]), 6.0);
    }

    /// What an observer saw: `(before, index, kernel name)` per call.
    #[derive(Default)]
    struct Log(heapless::Vec<(bool, usize, &'static str), 8>);

    impl StepObserver for Log {
        fn before(&mut self, index: usize, kernel: &KernelCall) {
            let _ = self.0.push((true, index, kernel.name()));
        }
        fn after(&mut self, index: usize, kernel: &KernelCall) {
            let _ = self.0.push((false, index, kernel.name()));
        }
    }

    #[test]
    fn an_observer_sees_each_step_start_and_end_in_plan_order() {
        let (x, y) = (arena_operand(0, 1), arena_operand(16, 1));
        let steps = [step(KernelCall::Relu(1), &[x, y])];
        let update_steps = [step(KernelCall::Fill(2.0, 1), &[x])];
        let sizes = RegionSizes { frozen: 0, state: 0, arena: 32 };
        let view = PlanView { steps: &steps, update_steps: &update_steps, accumulation: 1, sizes };
        let mut exec = Executor::new(view, Reference).unwrap();
        let mut arena = [0u32; 8];
        let bytes = bytemuck::cast_slice_mut(&mut arena);
        let mut regions = Regions { frozen: &[], state: &mut [], arena: bytes };
        let mut log = Log::default();
        exec.train_step_observed(&mut regions, 0.1, &mut log).unwrap();
        let seen = [(true, 0, "relu"), (false, 0, "relu"), (true, 1, "fill"), (false, 1, "fill")];
        assert_eq!(log.0, seen);
        let mut off: Option<Log> = None;
        exec.run_observed(&mut regions, &mut off).unwrap();
        assert!(off.is_none());
    }

    /// Device-style memory: views are address ranges, and the host never sees the bytes.
    struct Addresses;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Span<'a> {
        start: usize,
        len: usize,
        life: core::marker::PhantomData<&'a ()>,
    }

    #[derive(Debug, PartialEq)]
    struct SpanMut<'a>(Span<'a>);

    fn span<'a>(start: usize, len: usize) -> Span<'a> {
        Span { start, len, life: core::marker::PhantomData }
    }

    impl Memory for Addresses {
        type Bytes<'a> = Span<'a>;
        type BytesMut<'a> = SpanMut<'a>;
        type Slice<'a, T: bytemuck::Pod> = Span<'a>;
        type SliceMut<'a, T: bytemuck::Pod> = SpanMut<'a>;

        fn len(bytes: Span<'_>) -> usize {
            bytes.len
        }
        fn is_aligned(bytes: Span<'_>, align: usize) -> bool {
            bytes.start.is_multiple_of(align)
        }
        fn shorten<'a, 'b: 'a>(bytes: Span<'b>) -> Span<'a> {
            span(bytes.start, bytes.len)
        }
        fn view<'a>(bytes: &'a SpanMut<'_>) -> Span<'a> {
            span(bytes.0.start, bytes.0.len)
        }
        fn reborrow<'a>(bytes: &'a mut SpanMut<'_>) -> SpanMut<'a> {
            SpanMut(span(bytes.0.start, bytes.0.len))
        }
        fn freeze(bytes: Self::BytesMut<'_>) -> Self::Bytes<'_> {
            bytes.0
        }
        fn range(bytes: Self::Bytes<'_>, range: core::ops::Range<usize>) -> Self::Bytes<'_> {
            span(bytes.start + range.start, range.len())
        }
        fn split_at_mut(
            bytes: Self::BytesMut<'_>,
            mid: usize,
        ) -> (Self::BytesMut<'_>, Self::BytesMut<'_>) {
            let Span { start, len, .. } = bytes.0;
            (SpanMut(span(start, mid)), SpanMut(span(start + mid, len - mid)))
        }
        fn cast<T: bytemuck::Pod>(bytes: Self::Bytes<'_>) -> Option<Self::Slice<'_, T>> {
            Some(bytes)
        }
        fn cast_mut<T: bytemuck::Pod>(bytes: Self::BytesMut<'_>) -> Option<Self::SliceMut<'_, T>> {
            Some(bytes)
        }
        fn host(_: Self::Bytes<'_>) -> Option<&[u8]> {
            None
        }
    }

    #[test]
    fn operands_are_carved_out_of_a_device_arena_without_host_bytes() {
        let state = Operand { region: Region::State, offset: 8, len: 2, dtype: DType::F32 };
        let s = step(KernelCall::Add(2), &[state, arena_operand(0, 2), arena_operand(32, 2)]);
        let mut regions = RegionsIn::<Addresses> {
            frozen: span(0x100, 0),
            state: SpanMut(span(0x200, 16)),
            arena: SpanMut(span(0x1000, 64)),
        };
        let views = split_operands(0, &s, &mut regions).unwrap();
        let got: heapless::Vec<_, MAX_OPERANDS> = views
            .into_iter()
            .map(|v| match v {
                View::Read(b) => (false, b.start, b.len),
                View::Write(b) => (true, b.0.start, b.0.len),
            })
            .collect();
        assert_eq!(got, [(false, 0x208, 8), (false, 0x1000, 8), (true, 0x1020, 8)]);
        let s = step(KernelCall::Relu(4), &[arena_operand(0, 4), arena_operand(8, 4)]);
        assert_eq!(
            split_operands(0, &s, &mut regions).err(),
            Some(ExecError::Overlap { step: 0, kernel: "relu" })
        );
    }

    #[test]
    fn a_write_overlapping_a_read_is_refused() {
        let mut arena = [0u32; 8];
        let s = step(KernelCall::Relu(8), &[arena_operand(0, 8), arena_operand(16, 4)]);
        assert!(matches!(run_one(s, &mut arena), Err(ExecError::MalformedStep { .. })));
        let s = step(KernelCall::Relu(4), &[arena_operand(0, 4), arena_operand(0, 4)]);
        assert_eq!(run_one(s, &mut arena), Err(ExecError::Overlap { step: 0, kernel: "relu" }));
    }

    #[test]
    fn writing_into_frozen_weights_is_refused_before_running() {
        let frozen = Operand { region: Region::Frozen, offset: 0, len: 4, dtype: DType::F32 };
        let s = step(KernelCall::Relu(4), &[arena_operand(0, 4), frozen]);
        let mut arena = [0u32; 4];
        assert!(matches!(
            run_one(s, &mut arena),
            Err(ExecError::MalformedStep { detail: "writes into the frozen-weight region", .. })
        ));
    }

    #[test]
    fn an_operand_past_the_region_is_refused_before_running() {
        let s = step(KernelCall::Relu(4), &[arena_operand(0, 4), arena_operand(16, 4)]);
        let mut arena = [0u32; 6];
        let err = run_one(s, &mut arena).unwrap_err();
        let expected = ExecError::OutOfBounds {
            step: 0,
            kernel: "relu",
            region: Region::Arena,
            end: 32,
            size: 24,
        };
        assert_eq!(err, expected);
    }

    #[test]
    fn a_short_arena_says_how_many_bytes_the_plan_needs() {
        let steps = [step(KernelCall::Relu(4), &[arena_operand(0, 4), arena_operand(16, 4)])];
        let sizes = RegionSizes { frozen: 0, state: 0, arena: 32 };
        let view = PlanView { steps: &steps, update_steps: &[], accumulation: 1, sizes };
        let mut exec = Executor::new(view, Reference).unwrap();
        let mut arena = [0u32; 6];
        let mut regions =
            Regions { frozen: &[], state: &mut [], arena: bytemuck::cast_slice_mut(&mut arena) };
        let err = exec.run(&mut regions).unwrap_err();
        assert_eq!(
            err,
            ExecError::RegionTooSmall { region: Region::Arena, needed: 32, actual: 24 }
        );
        extern crate std;
        let message = std::format!("{err}");
        assert!(message.contains("needs 32 bytes"), "{message}");
    }

    #[test]
    fn progress_survives_a_new_executor() {
        use crate::shape::Shape;
        use crate::{compile_training_step, nn, Graph, TrainConfig};
        let mut g = Graph::new(3);
        let x = g.input("x", Shape::d2(2, 3)).unwrap();
        let y = g.labels("y", 2).unwrap();
        let h = nn::linear(&mut g, "fc", x, 2).unwrap();
        let h =
            g.dropout("drop", h, crate::hyperparams::DropoutConfig { p: 0.5, seed: 1 }).unwrap();
        let loss = g.cross_entropy("loss", h, y).unwrap();
        let params: alloc::vec::Vec<_> = g.parameters().collect();
        let cfg = TrainConfig { accumulation: 2, ..TrainConfig::sgd(0.9) };
        let t = compile_training_step(&g, loss, &params, &cfg).unwrap();
        let run = |steps: usize, resume: Option<Progress>| {
            let mut memory = t.plan.initial_memory(&t.graph);
            let mut exec = Executor::new(t.plan.view(), Reference).unwrap();
            let mut regions = memory.regions();
            regions
                .write(&t.plan.operand("x").unwrap(), &[1.0f32, -2.0, 0.5, 0.3, 0.2, -1.0])
                .unwrap();
            regions.write(&t.plan.operand("y").unwrap(), &[1i32, 0]).unwrap();
            if let Some(p) = resume {
                exec.resume_at(p).unwrap();
            }
            for _ in 0..steps {
                exec.train_step(&mut regions, 0.1).unwrap();
            }
            exec.progress()
        };
        let after_three = run(3, None);
        assert_eq!(after_three, Progress { updates: 1, micro_batches: 3, pending: 1 });
        assert_eq!(run(5, None), run(2, Some(after_three)));
        let mut exec = Executor::new(t.plan.view(), Reference).unwrap();
        let bad = Progress { pending: 2, ..Progress::default() };
        assert_eq!(
            exec.resume_at(bad),
            Err(ExecError::BadProgress { pending: 2, accumulation: 2 })
        );
    }
}
