//! The firmware trainer fine-tunes the zoo MLP's head from a bundle on generated samples to
//! a tested held-out accuracy, allocating nothing from the first sample to the stored
//! checkpoint; with a sparse update (`sprout_bundle::sparse`) it trains the int8 layers'
//! biases and pointwise weights too, on the Cortex-M kernels. A counting `#[global_allocator]` (armed per thread, as in
//! `tests/tests/no_alloc.rs`) proves the zero.

use sprout_bundle::sparse::{self, DeviceMemory, Int8Layer};
use sprout_bundle::{build, BundleBuildError, BundleOptions};
use sprout_core::format::bundle::decode;
use sprout_core::rng::SplitMix;
use sprout_core::{save_model, Host, Kernels, Reference, Step};
use sprout_cortex_m::CortexM;
use sprout_firmware::trainer::{
    EpochReport, Log, SampleCache, Trainer, TrainerError, TrainerMemory,
};
use sprout_train::{quantize, DataSource, Model, QuantizeSettings, TensorSet};
use sprout_zoo::Architecture;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// Heap calls of this thread while armed (per thread: tests run in parallel).
    static HEAP_CALLS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    if ARMED.try_with(Cell::get).unwrap_or(false) {
        let _ = HEAP_CALLS.try_with(|c| c.set(c.get() + 1));
    }
}

// SAFETY: every call is forwarded unchanged to `System`; counting does not touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap calls this thread makes while `f` runs.
fn heap_calls<R>(f: impl FnOnce() -> R) -> (usize, R) {
    let before = HEAP_CALLS.with(Cell::get);
    ARMED.with(|a| a.set(true));
    let result = f();
    ARMED.with(|a| a.set(false));
    (HEAP_CALLS.with(Cell::get) - before, result)
}

/// Ten classes, each a random prototype in input space; samples are noisy copies.
struct Task {
    prototypes: Vec<Vec<f32>>,
    rng: SplitMix,
}

impl Task {
    fn new() -> Self {
        let mut rng = SplitMix::new(11);
        let prototypes =
            (0..10).map(|_| (0..64).map(|_| rng.uniform(-1.0, 1.0)).collect()).collect();
        Self { prototypes, rng: SplitMix::new(12) }
    }

    fn sample(&mut self, class: usize, out: &mut [f32]) {
        for (o, p) in out.iter_mut().zip(&self.prototypes[class]) {
            *o = p + self.rng.uniform(-0.6, 0.6);
        }
    }

    /// Caches [`TRAIN`] training and [`HELD_OUT`] held-out samples in `trainer`, the classes
    /// in turn, each made in `sample` (so nothing allocates).
    fn cache<K: Kernels<Memory = Host> + Clone>(
        &mut self,
        trainer: &mut Trainer<'_, '_, '_, K>,
        sample: &mut [f32],
    ) -> Result<(), TrainerError> {
        for i in 0..TRAIN + HELD_OUT {
            let class = i % 10;
            self.sample(class, sample);
            trainer.add_sample(sample, class as i32, i >= TRAIN)?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Reports(Vec<EpochReport>);

impl Log for Reports {
    fn epoch(&mut self, report: &EpochReport) {
        // Capacity is reserved before training, so this push does not allocate.
        self.0.push(*report);
    }
}

/// Runs `f` on a trainer over the bundle `bytes` (copied to an aligned buffer, as the
/// firmware embeds it), with room for `train` and `held_out` cached samples.
fn with_trainer<K: Kernels<Memory = Host> + Clone, R>(
    bytes: &[u8],
    kernels: K,
    (train, held_out): (usize, usize),
    f: impl FnOnce(&mut Trainer<'_, '_, '_, K>) -> R,
) -> R {
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..bytes.len()];
    let mut steps = Box::new(heapless::Vec::<Step, 96>::new());
    let bundle = decode(file, &mut steps).unwrap();
    let f_bytes = bundle.feature_bytes();
    let words = |bytes: usize| vec![0u32; bytes.div_ceil(4)];
    let (mut state, mut arena, mut best) = (
        words(bundle.initial_state.len()),
        words(bundle.arena_bytes()),
        words(bundle.initial_state.len()),
    );
    let (mut train_features, mut train_labels) = (vec![0u8; train * f_bytes], vec![0i32; train]);
    let (mut held_features, mut held_labels) =
        (vec![0u8; held_out * f_bytes], vec![0i32; held_out]);
    let memory = TrainerMemory {
        state: bytemuck::cast_slice_mut(&mut state),
        arena: bytemuck::cast_slice_mut(&mut arena),
        best_state: bytemuck::cast_slice_mut(&mut best),
        train: SampleCache::new(&mut train_features, &mut train_labels, f_bytes),
        held_out: SampleCache::new(&mut held_features, &mut held_labels, f_bytes),
    };
    let mut trainer = Trainer::new(&bundle, kernels, memory, 7).unwrap();
    f(&mut trainer)
}

const TRAIN: usize = 160;
const HELD_OUT: usize = 60;

#[test]
fn the_trainer_fine_tunes_the_head_without_allocating() {
    let model = Model::from_zoo(Architecture::Mlp, 16, 3).unwrap();
    let host = build(&model, &BundleOptions { batch: 8, ..BundleOptions::default() }).unwrap();
    with_trainer(&host.bytes, Reference, (TRAIN, HELD_OUT), fine_tunes_the_head);
}

fn fine_tunes_the_head(trainer: &mut Trainer<'_, '_, '_, Reference>) {
    let mut task = Task::new();
    let mut sample = vec![0f32; 64];
    let mut reports = Reports(Vec::with_capacity(32));
    let mut checkpoint = vec![0u8; 64 * 1024];

    let (calls, result) = heap_calls(|| -> Result<usize, TrainerError> {
        task.cache(trainer, &mut sample)?;
        for _ in 0..12 {
            trainer.train_epoch(&mut reports)?;
        }
        trainer.encode_best(&mut checkpoint)
    });
    let used = result.unwrap();
    assert_eq!(calls, 0, "heap calls while collecting, training and checkpointing");
    // The counter works: an allocation while armed counts.
    let (control, ()) = heap_calls(|| drop(std::hint::black_box(Box::new(1u8))));
    assert_eq!(control, 2);

    let reports = &reports.0;
    assert_eq!(reports.len(), 12);
    let first = reports[0];
    let last = reports[11];
    assert_eq!(last.step, 12 * (TRAIN / 8) as u32);
    assert!(last.loss < first.loss * 0.5, "loss {} -> {}", first.loss, last.loss);
    let best = reports.iter().map(|r| r.accuracy).fold(0.0, f32::max);
    assert!(best >= 0.9, "held-out accuracy {best}; {reports:?}");
    assert_eq!(last.best_accuracy, best);

    // The best checkpoint restores to the accuracy it recorded.
    let (info, _) = trainer.best().unwrap();
    assert_eq!(info.accuracy, best);
    let restored = trainer.restore(&checkpoint[..used]).unwrap();
    assert_eq!(restored, info);
    assert_eq!(trainer.evaluate().unwrap(), best);

    // Bad input is refused, not trusted.
    assert_eq!(
        trainer.add_sample(&sample[..10], 0, false),
        Err(TrainerError::SampleLength { expected: 64, actual: 10 })
    );
    assert_eq!(
        trainer.add_sample(&sample, 10, false),
        Err(TrainerError::Label { label: 10, classes: 10 })
    );
    assert_eq!(trainer.add_sample(&sample, 1, false), Err(TrainerError::Full { capacity: TRAIN }));
    assert!(matches!(trainer.restore(&checkpoint[..used - 1]), Err(TrainerError::Checkpoint(_))));
}

/// The zoo MLP in int8 with a float head and both hidden layers trainable in integer units
/// (with quantization-aware scaling), calibrated on the task's samples.
fn sparse_mlp() -> Model {
    int8_mlp(Some("features.*"))
}

/// The zoo MLP in int8 with a float head, the layers `trainable` chooses kept in integer
/// units, calibrated on the task's samples.
fn int8_mlp(trainable: Option<&str>) -> Model {
    let model = Model::from_zoo(Architecture::Mlp, 8, 1).unwrap();
    let mut task = Task::new();
    let mut x = vec![0f32; 64 * 64];
    for (i, sample) in x.chunks_mut(64).enumerate() {
        task.sample(i % 10, sample);
    }
    let set = TensorSet {
        x,
        y: (0..64).map(|i| i % 10).collect(),
        sample_dims: vec![64],
        path: "calibration".into(),
    };
    let settings = QuantizeSettings {
        keep_float: Some("head".into()),
        trainable: trainable.map(Into::into),
        ..QuantizeSettings::default()
    };
    let int8 = quantize(&model, &mut DataSource::tensors(set, 8, 1, false), &settings).unwrap();
    Model::from_bytes(&save_model(&int8.file).unwrap(), "mlp-int8.sprout".as_ref()).unwrap()
}

/// Device memory of the bundle training `trainable` on `model`, with `samples` cached.
fn memory(model: &Model, trainable: &str, samples: usize) -> DeviceMemory {
    let options = BundleOptions { trainable: trainable.into(), ..BundleOptions::default() };
    sparse::measure(&build(model, &options).unwrap(), samples).unwrap()
}

#[test]
fn a_sparse_update_reaches_as_deep_as_the_budget_allows() {
    let model = sparse_mlp();
    let pointwise =
        |b: &str, w: &str| Int8Layer { bias: b.into(), pointwise_weight: Some(w.into()) };
    assert_eq!(
        sparse::int8_layers(&model.zoo.graph),
        [
            pointwise("features.0.bias", "features.0.weight"),
            pointwise("features.2.bias", "features.2.weight")
        ]
    );
    let float = Model::from_zoo(Architecture::Mlp, 8, 1).unwrap();
    let error = sparse::choose(&float, &BundleOptions::default(), 1 << 30, 16).err().unwrap();
    assert!(error.to_string().contains("--trainable-int8"), "{error}");

    let head = memory(&model, "head", 16);
    let last_bias = memory(&model, "head,features.2.bias", 16);
    let biases = memory(&model, "head,features.0.bias,features.2.bias", 16);
    let everything = memory(&model, "head,features.*", 16);
    // Caching stops at the first trained layer: the head's input (64 int8 values), the first
    // layer's output (128) or the quantized input (64), each with its label.
    assert_eq!([head.per_sample, last_bias.per_sample, biases.per_sample], [68, 132, 68]);
    assert!(last_bias.state > head.state && everything.state > biases.state);
    assert_eq!(everything.gradients, 4 * (64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10));

    let options = BundleOptions::default();
    let choose = |budget| sparse::choose(&model, &options, budget, 16).unwrap();
    let all = choose(everything.total());
    assert_eq!(all.biases, ["features.0.bias", "features.2.bias"]);
    assert_eq!(all.weights, ["features.0.weight", "features.2.weight"]);
    assert_eq!(all.memory, everything);
    // Biases reach deepest first; weights come with what is left.
    let shallow = choose(last_bias.total().min(biases.total()));
    assert!(shallow.weights.is_empty() && !shallow.biases.is_empty(), "{:?}", shallow.biases);
    assert!(shallow.memory.total() <= last_bias.total().min(biases.total()));
    let only_head = choose(head.total());
    assert!(only_head.biases.is_empty() && only_head.weights.is_empty());
    let error = sparse::choose(&model, &options, head.total() - 1, 16).err().unwrap();
    assert!(
        matches!(error, BundleBuildError::OverBudget { smallest, .. } if smallest == head.total()),
        "{error}"
    );
}

#[test]
fn frozen_int8_weights_stay_int8_in_the_bundle_and_only_trained_ones_widen() {
    let frozen = |model: &Model, trainable: &str| {
        let options = BundleOptions { trainable: trainable.into(), ..BundleOptions::default() };
        let host = build(model, &options).unwrap();
        let mut steps = Box::new(heapless::Vec::<Step, 256>::new());
        let frozen = decode(&host.bytes, &mut steps).unwrap().frozen.len();
        frozen
    };
    let (plain, sparse) = (int8_mlp(None), sparse_mlp());
    let int8 = frozen(&plain, "head");
    // Nothing of the backbone trains: its layers are bundled as a plain int8 model's.
    assert_eq!(frozen(&sparse, "head"), int8);
    // Biases only: every weight stays int8 (the trained biases live in the state).
    assert_eq!(frozen(&sparse, "head,features.0.bias,features.2.bias"), int8);
    // A trained weight leaves the frozen weights (its units are state), its layer's i8
    // weight is computed on the device: the frozen section shrinks by its 128 x 64 bytes.
    let weight = frozen(&sparse, "head,features.2.bias,features.2.weight");
    assert_eq!(int8 - weight, 128 * 64, "{int8} -> {weight}");
}

#[test]
fn the_trainer_updates_int8_biases_and_weights_without_allocating() {
    let model = sparse_mlp();
    let options = BundleOptions { batch: 8, ..BundleOptions::default() };
    let choice = sparse::choose(&model, &options, 1 << 20, TRAIN + HELD_OUT).unwrap();
    assert_eq!(
        choice.trainable,
        "head,features.0.bias,features.2.bias,features.0.weight,features.2.weight"
    );
    with_trainer(&choice.bundle.bytes, CortexM, (TRAIN, HELD_OUT), |trainer| {
        let mut task = Task::new();
        let mut sample = vec![0f32; 64];
        let mut reports = Reports(Vec::with_capacity(16));
        let (calls, result) = heap_calls(|| -> Result<(), TrainerError> {
            task.cache(trainer, &mut sample)?;
            for _ in 0..8 {
                trainer.train_epoch(&mut reports)?;
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(calls, 0, "heap calls while collecting and training");
        let (first, last) = (reports.0[0], reports.0[7]);
        assert!(last.loss < first.loss * 0.5, "loss {} -> {}", first.loss, last.loss);
        assert!(last.best_accuracy >= 0.9, "{:?}", reports.0);

        // The int8 layers' biases and weights moved, and stay finite integer units.
        let bundle = trainer.bundle();
        let (_, best) = trainer.best().unwrap();
        for name in ["features.0.bias", "features.2.weight"] {
            let t = bundle.header.trainable.iter().find(|t| t.name == name).unwrap();
            let at = t.operand.offset..t.operand.offset + 4 * t.operand.len;
            let before: &[f32] = bytemuck::cast_slice(&bundle.initial_state[at.clone()]);
            let after: &[f32] = bytemuck::cast_slice(&best[at]);
            let moved = before.iter().zip(after).filter(|(b, a)| b != a).count();
            assert!(moved > before.len() / 2, "{name}: {moved} of {} moved", before.len());
            assert!(after.iter().all(|v| v.is_finite()), "{name}: {after:?}");
        }
    });
}

#[test]
fn an_epoch_trained_a_few_batches_at_a_time_is_the_same_epoch() {
    let model = sparse_mlp();
    let options = BundleOptions { batch: 8, ..BundleOptions::default() };
    let choice = sparse::choose(&model, &options, 1 << 20, TRAIN + HELD_OUT).unwrap();
    // Two epochs, `batches` batches per call: the reports, the best state and the calls.
    let run = |batches: usize| {
        with_trainer(&choice.bundle.bytes, CortexM, (TRAIN, HELD_OUT), |trainer| {
            Task::new().cache(trainer, &mut [0f32; 64]).unwrap();
            let mut reports = Reports::default();
            let mut calls = 0;
            let mut losses = Vec::new();
            while reports.0.len() < 2 {
                calls += 1;
                trainer.train_batches(batches, &mut reports).unwrap();
                losses.extend(trainer.epoch_loss());
            }
            (reports.0, trainer.best().unwrap().1.to_vec(), calls, losses)
        })
    };
    let (whole, whole_state, whole_calls, no_losses) = run(usize::MAX);
    let (split, split_state, split_calls, losses) = run(3);
    assert_eq!(whole, split);
    assert!(whole_state == split_state, "the best states differ");
    // 160 / 8 = 20 training batches and 60 held-out samples in 8 batches: 28 an epoch.
    assert_eq!((whole_calls, split_calls), (2, 2 * 28usize.div_ceil(3)));
    // Between calls the loss so far is known; an epoch ended in one call leaves none.
    assert!(no_losses.is_empty() && losses.iter().all(|l| l.is_finite() && *l > 0.0));
    assert_eq!(whole[1].step, 2 * 20);
}
