//! A compiled plan: ordered kernel calls whose operands are offsets into three memory
//! regions. Plain data, checked once before it runs, so the executor never allocates.

use crate::kernel::{Access, KernelCall, MAX_OPERANDS};
use crate::tensor::DType;
use core::fmt;

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Region {
    /// Frozen weights: read-only, may be flash on a device.
    Frozen,
    /// Persistent training state: trainable weights, buffers, optimizer state.
    State,
    /// Everything else: inputs, labels, activations, gradients, scratch. Reused every step.
    Arena,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Region::Frozen => "frozen-weight region",
            Region::State => "state region",
            Region::Arena => "arena",
        })
    }
}

/// Byte alignment of every operand offset; enough for f32 and for 128-bit SIMD loads.
pub const ALIGN: usize = 16;

/// One operand of a step: a run of `len` elements of `dtype` starting `offset` bytes into
/// `region`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Operand {
    pub region: Region,
    pub offset: usize,
    pub len: usize,
    pub dtype: DType,
}

impl Operand {
    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size()
    }
    /// One past the operand's last byte. Only for checked operands; see [`Self::check_inside`].
    pub fn end(&self) -> usize {
        self.offset + self.bytes()
    }

    /// `Ok` when the operand lies inside a region of `size` bytes, without overflowing;
    /// otherwise the error, attributed to step `step` running `kernel`.
    pub fn check_inside(
        &self,
        size: usize,
        step: usize,
        kernel: &'static str,
    ) -> Result<(), ExecError> {
        let end = self.len.checked_mul(self.dtype.size()).and_then(|b| b.checked_add(self.offset));
        match end {
            Some(end) if end <= size => Ok(()),
            end => Err(ExecError::OutOfBounds {
                step,
                kernel,
                region: self.region,
                end: end.unwrap_or(usize::MAX),
                size,
            }),
        }
    }
}

/// One kernel call. `node` is the index of the graph node it came from, for messages.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Step {
    pub kernel: KernelCall,
    pub operands: heapless::Vec<Operand, MAX_OPERANDS>,
    pub node: u32,
}

/// Bytes each region must hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RegionSizes {
    pub frozen: usize,
    pub state: usize,
    pub arena: usize,
}

impl RegionSizes {
    pub fn get(&self, region: Region) -> usize {
        match region {
            Region::Frozen => self.frozen,
            Region::State => self.state,
            Region::Arena => self.arena,
        }
    }
}

/// A borrowed plan: what the executor runs. On a host it comes from [`crate::compile::Plan`];
/// on a device it can point at `static` data.
#[derive(Clone, Copy, Debug)]
pub struct PlanView<'p> {
    /// Run once per call (per micro-batch when training).
    pub steps: &'p [Step],
    /// Run after every `accumulation` runs of `steps` (the optimizer update); may be empty.
    pub update_steps: &'p [Step],
    pub accumulation: u32,
    pub sizes: RegionSizes,
}

/// Why a plan could not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// A region is smaller than the plan needs.
    RegionTooSmall { region: Region, needed: usize, actual: usize },
    /// A region does not start on a 4-byte boundary.
    Misaligned { region: Region },
    /// A step's operands do not match its kernel's signature.
    MalformedStep { step: usize, kernel: &'static str, detail: &'static str },
    /// An operand lies outside its region.
    OutOfBounds { step: usize, kernel: &'static str, region: Region, end: usize, size: usize },
    /// An operand written by a step overlaps another operand of the same step.
    Overlap { step: usize, kernel: &'static str },
    /// A kernel refused its data.
    Kernel { step: usize, kernel: &'static str, error: crate::error::KernelError },
    /// A plan that accumulates gradients over zero micro-batches.
    ZeroAccumulation,
    /// Values of one type were given for a tensor of another.
    WrongDType { expected: DType, actual: DType },
    /// The number of values given differs from the tensor's element count.
    ValueLength { expected: usize, actual: usize },
    /// An attempt to write into a read-only region.
    ReadOnly { region: Region },
    /// Stored progress with more pending micro-batches than the plan accumulates.
    BadProgress { pending: u32, accumulation: u32 },
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::RegionTooSmall { region, needed, actual } => write!(
                f,
                "the {region} holds {actual} bytes but the plan needs {needed} bytes ({} more)",
                needed - actual
            ),
            ExecError::Misaligned { region } => {
                write!(f, "the {region} must start on a 4-byte boundary")
            }
            ExecError::MalformedStep { step, kernel, detail } => {
                write!(f, "step {step} ({kernel}) is malformed: {detail}")
            }
            ExecError::OutOfBounds { step, kernel, region, end, size } => write!(
                f,
                "step {step} ({kernel}) reaches byte {end} of the {region}, which has {size}"
            ),
            ExecError::Overlap { step, kernel } => {
                write!(f, "step {step} ({kernel}) writes memory that another of its operands uses")
            }
            ExecError::Kernel { step, kernel, error } => {
                write!(f, "step {step} ({kernel}): {error}")
            }
            ExecError::ZeroAccumulation => {
                f.write_str("a plan must accumulate over at least one micro-batch")
            }
            ExecError::WrongDType { expected, actual } => {
                write!(f, "the tensor holds {expected:?} values, {actual:?} values were given")
            }
            ExecError::ValueLength { expected, actual } => {
                write!(f, "the tensor holds {expected} elements, {actual} were given")
            }
            ExecError::ReadOnly { region } => write!(f, "the {region} is read-only"),
            ExecError::BadProgress { pending, accumulation } => write!(
                f,
                "{pending} micro-batches are pending, but the plan updates after {accumulation}"
            ),
        }
    }
}

impl core::error::Error for ExecError {}

impl PlanView<'_> {
    /// Checks every step against its kernel's signature and the region sizes, so running
    /// the plan cannot index out of bounds.
    pub fn validate(&self) -> Result<(), ExecError> {
        if self.accumulation == 0 {
            return Err(ExecError::ZeroAccumulation);
        }
        let all = self.steps.iter().chain(self.update_steps);
        for (i, step) in all.enumerate() {
            validate_step(i, step, &self.sizes)?;
        }
        Ok(())
    }
}

fn validate_step(index: usize, step: &Step, sizes: &RegionSizes) -> Result<(), ExecError> {
    let kernel = step.kernel.name();
    let malformed = |detail| ExecError::MalformedStep { step: index, kernel, detail };
    step.kernel.check().map_err(malformed)?;
    let sig = step.kernel.signature();
    if sig.slots.len() != step.operands.len() {
        return Err(malformed("wrong number of operands"));
    }
    for (slot, op) in sig.slots.iter().zip(&step.operands) {
        if slot.dtype != op.dtype || slot.len != op.len {
            return Err(malformed("an operand's type or length differs from the kernel's"));
        }
        if slot.access != Access::Read && op.region == Region::Frozen {
            return Err(malformed("writes into the frozen-weight region"));
        }
        if op.offset % ALIGN != 0 {
            return Err(malformed("an operand is not aligned"));
        }
        op.check_inside(sizes.get(op.region), index, kernel)?;
    }
    Ok(())
}
