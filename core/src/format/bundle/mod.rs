//! The device bundle: a model's compiled plans (backbone inference, head training, head
//! evaluation), frozen weights and initial state as one checked file the host writes and
//! the firmware embeds. Decoding allocates nothing: steps go into caller-provided storage,
//! sections stay where the bytes are.

mod error;
mod header;

pub use error::BundleError;
pub use header::{
    BackboneIo, BundleHeader, EvalIo, PixelNormalization, PlanHeader, Section, TrainIo,
    TrainableTensor, FRAMING, MAX_CLASSES, MAX_TRAINABLE, SECTION_ALIGN,
};

use crate::format::container;
use crate::{DType, ExecError, Operand, PlanView, Region, Step};

/// A decoded bundle: plans over the caller's step storage, sections borrowed from the file.
#[derive(Clone, Debug)]
pub struct Bundle<'b, 's> {
    pub header: BundleHeader<'b>,
    /// Frozen weights, read in place.
    pub frozen: &'b [u8],
    /// The state region's initial image, to copy into RAM.
    pub initial_state: &'b [u8],
    pub backbone: PlanView<'s>,
    pub train: PlanView<'s>,
    pub eval: PlanView<'s>,
}

impl Bundle<'_, '_> {
    /// Length of one sample's feature vector.
    pub fn feature_len(&self) -> usize {
        self.header.backbone_io.features.len
    }

    /// Bytes of one sample's feature vector (f32 or int8 values).
    pub fn feature_bytes(&self) -> usize {
        let features = self.header.backbone_io.features;
        features.len * features.dtype.size()
    }

    pub fn classes(&self) -> usize {
        self.header.class_names.len()
    }

    pub fn head_batch(&self) -> usize {
        self.header.head_batch as usize
    }

    /// Whether the bundle trains from its input ([`BundleHeader::streams`]).
    pub fn streams(&self) -> bool {
        self.header.streams()
    }

    /// Arena bytes the largest of the three plans needs.
    pub fn arena_bytes(&self) -> usize {
        [self.backbone, self.train, self.eval].iter().map(|p| p.sizes.arena).max().unwrap_or(0)
    }
}

/// Decodes and checks a bundle. Every plan validates against its region sizes, the
/// sections hold the bytes those sizes promise, and the inputs and outputs have the types
/// and lengths the trainer relies on.
pub fn decode<'b, 's, const N: usize>(
    bytes: &'b [u8],
    steps: &'s mut heapless::Vec<Step, N>,
) -> Result<Bundle<'b, 's>, BundleError> {
    let (header, mut rest) = read_header(bytes)?;
    let plans = [header.backbone, header.train, header.eval];
    let needed = plans
        .iter()
        .try_fold(0usize, |n, p| {
            n.checked_add(p.steps as usize)?.checked_add(p.update_steps as usize)
        })
        .unwrap_or(usize::MAX);
    if needed > N {
        return Err(BundleError::TooManySteps { needed, capacity: N });
    }
    steps.clear();
    for index in 0..needed {
        let (step, tail) =
            postcard::take_from_bytes(rest).map_err(|error| BundleError::Step { index, error })?;
        // `needed <= N`, so there is room.
        let _ = steps.push(step);
        rest = tail;
    }
    let steps_end = bytes.len() - container::CHECKSUM_BYTES - rest.len();
    let frozen = section(bytes, "frozen", header.frozen, steps_end)?;
    let state_start = header.frozen.offset as usize + frozen.len();
    let initial_state = section(bytes, "state", header.state, state_start)?;

    let mut all: &'s [Step] = steps.as_slice();
    let mut take = |n: u32| {
        let (head, tail) = all.split_at(n as usize);
        all = tail;
        head
    };
    let mut view = |p: &PlanHeader| PlanView {
        steps: take(p.steps),
        update_steps: take(p.update_steps),
        accumulation: p.accumulation,
        sizes: p.sizes,
    };
    let bundle = Bundle {
        backbone: view(&header.backbone),
        train: view(&header.train),
        eval: view(&header.eval),
        header,
        frozen,
        initial_state,
    };
    check(&bundle)?;
    Ok(bundle)
}

/// Opens a bundle's frame (magic, version, length, CRC-32) and decodes its header; returns
/// the header and the body's bytes after it (the steps, then the sections).
pub fn read_header(bytes: &[u8]) -> Result<(BundleHeader<'_>, &[u8]), BundleError> {
    let body = container::open(FRAMING, bytes)?;
    postcard::take_from_bytes(body).map_err(BundleError::Header)
}

/// The bytes of `s`, which must start at an aligned file offset no earlier than
/// `earliest` and end inside the body.
fn section<'b>(
    bytes: &'b [u8],
    name: &'static str,
    s: Section,
    earliest: usize,
) -> Result<&'b [u8], BundleError> {
    let start = s.offset as usize;
    let body_end = bytes.len() - container::CHECKSUM_BYTES;
    match start.checked_add(s.len as usize) {
        Some(end)
            if start >= earliest && end <= body_end && start.is_multiple_of(SECTION_ALIGN) =>
        {
            Ok(&bytes[start..end])
        }
        _ => Err(BundleError::Section { section: name, offset: s.offset, len: s.len }),
    }
}

/// Checks the plans against their sizes and the sections, and the inputs and outputs.
fn check(b: &Bundle<'_, '_>) -> Result<(), BundleError> {
    let h = &b.header;
    let plans = [("backbone", &b.backbone), ("training", &b.train), ("evaluation", &b.eval)];
    for (plan, view) in plans {
        view.validate().map_err(|error| BundleError::Plan { plan, error })?;
        for (region, actual) in
            [(Region::Frozen, b.frozen.len()), (Region::State, b.initial_state.len())]
        {
            let needed = view.sizes.get(region);
            if needed > actual {
                let error = ExecError::RegionTooSmall { region, needed, actual };
                return Err(BundleError::Plan { plan, error });
            }
        }
    }
    let batch = h.head_batch as usize;
    let classes = h.class_names.len();
    let features = h.backbone_io.features.len;
    let feature_type = h.backbone_io.features.dtype;
    if !matches!(feature_type, DType::F32 | DType::I8) {
        return Err(BundleError::Operand { operand: "backbone features" });
    }
    let io: [(&'static str, &PlanView<'_>, Operand, DType, Option<usize>); 7] = [
        (
            "backbone sample",
            &b.backbone,
            h.backbone_io.sample,
            DType::F32,
            Some(h.sample_shape.numel()),
        ),
        ("backbone features", &b.backbone, h.backbone_io.features, feature_type, None),
        (
            "training features",
            &b.train,
            h.train_io.features,
            feature_type,
            batch.checked_mul(features),
        ),
        ("training labels", &b.train, h.train_io.labels, DType::I32, Some(batch)),
        ("training loss", &b.train, h.train_io.loss, DType::F32, Some(1)),
        (
            "evaluation features",
            &b.eval,
            h.eval_io.features,
            feature_type,
            batch.checked_mul(features),
        ),
        ("evaluation logits", &b.eval, h.eval_io.logits, DType::F32, batch.checked_mul(classes)),
    ];
    for (name, plan, op, dtype, len) in io {
        let fits = op.check_inside(plan.sizes.get(op.region), 0, name).is_ok();
        let right_len = len.is_none_or(|n| op.len == n);
        if op.region != Region::Arena || op.dtype != dtype || !fits || !right_len {
            return Err(BundleError::Operand { operand: name });
        }
    }
    for t in &h.trainable {
        if t.operand.region != Region::State
            || t.operand.check_inside(b.initial_state.len(), 0, "trainable").is_err()
        {
            return Err(BundleError::Operand { operand: "trainable" });
        }
    }
    if batch == 0 || features == 0 || classes == 0 {
        return Err(BundleError::Empty);
    }
    Ok(())
}
