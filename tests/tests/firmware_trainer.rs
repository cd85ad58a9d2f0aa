//! The firmware trainer fine-tunes the zoo MLP's head from a bundle on generated samples to
//! a tested held-out accuracy, allocating nothing from the first sample to the stored
//! checkpoint. A counting `#[global_allocator]` (armed per thread, as in
//! `tests/tests/no_alloc.rs`) proves the zero.

use sprout_bundle::{build, BundleOptions};
use sprout_core::format::bundle::decode;
use sprout_core::rng::SplitMix;
use sprout_core::{Reference, Step};
use sprout_firmware::trainer::{
    EpochReport, Log, SampleCache, Trainer, TrainerError, TrainerMemory,
};
use sprout_train::Model;
use sprout_zoo::Architecture;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static HEAP_CALLS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if ARMED.try_with(Cell::get).unwrap_or(false) {
        HEAP_CALLS.fetch_add(1, Ordering::SeqCst);
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
    let before = HEAP_CALLS.load(Ordering::SeqCst);
    ARMED.with(|a| a.set(true));
    let result = f();
    ARMED.with(|a| a.set(false));
    (HEAP_CALLS.load(Ordering::SeqCst) - before, result)
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
}

#[derive(Default)]
struct Reports(Vec<EpochReport>);

impl Log for Reports {
    fn epoch(&mut self, report: &EpochReport) {
        // Capacity is reserved before training, so this push does not allocate.
        self.0.push(*report);
    }
}

#[test]
fn the_trainer_fine_tunes_the_head_without_allocating() {
    let model = Model::from_zoo(Architecture::Mlp, 16, 3).unwrap();
    let host = build(&model, &BundleOptions { batch: 8, ..BundleOptions::default() }).unwrap();
    let mut words = vec![0u128; host.bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..host.bytes.len()]
        .copy_from_slice(&host.bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..host.bytes.len()];
    let mut steps = Box::new(heapless::Vec::<Step, 64>::new());
    let bundle = decode(file, &mut steps).unwrap();

    const TRAIN: usize = 160;
    const HELD_OUT: usize = 60;
    let f = bundle.feature_bytes();
    let words = |bytes: usize| vec![0u32; bytes.div_ceil(4)];
    let (mut state, mut arena, mut best) = (
        words(bundle.initial_state.len()),
        words(bundle.arena_bytes()),
        words(bundle.initial_state.len()),
    );
    let (mut train_features, mut train_labels) = (vec![0u8; TRAIN * f], vec![0i32; TRAIN]);
    let (mut held_features, mut held_labels) = (vec![0u8; HELD_OUT * f], vec![0i32; HELD_OUT]);
    let memory = TrainerMemory {
        state: bytemuck::cast_slice_mut(&mut state),
        arena: bytemuck::cast_slice_mut(&mut arena),
        best_state: bytemuck::cast_slice_mut(&mut best),
        train: SampleCache::new(&mut train_features, &mut train_labels, f),
        held_out: SampleCache::new(&mut held_features, &mut held_labels, f),
    };
    let mut trainer = Trainer::new(&bundle, Reference, memory, 7).unwrap();
    let mut task = Task::new();
    let mut sample = vec![0f32; 64];
    let mut reports = Reports(Vec::with_capacity(32));
    let mut checkpoint = vec![0u8; 64 * 1024];

    let (calls, result) = heap_calls(|| -> Result<usize, TrainerError> {
        for i in 0..TRAIN + HELD_OUT {
            let class = i % 10;
            task.sample(class, &mut sample);
            trainer.add_sample(&sample, class as i32, i >= TRAIN)?;
        }
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
