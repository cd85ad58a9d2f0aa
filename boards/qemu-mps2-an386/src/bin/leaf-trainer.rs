//! The leaf classifier's head fine-tuned on the emulated Cortex-M4, served over UART0: the
//! host (`sprout device train/pull/push --port tcp:...`) pushes labeled pictures, starts
//! training, watches progress and pulls the best checkpoint, which is also kept in the
//! emulated flash. The device bundle (int8 backbone, float head) is embedded at build time
//! from `SPROUT_LEAF_BUNDLE`; everything else is static memory inside the 256 KiB RAM.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, Ordering};

use qemu_mps2_an386 as board;
use sprout_core::link::{DeviceSession, Polled};
use sprout_core::Step;
use sprout_cortex_m::CortexM;
use sprout_firmware::bundle::{self, Bundle};
use sprout_firmware::device::DeviceTrainer;
use sprout_firmware::storage::CheckpointStore;
use sprout_firmware::trainer::{EpochReport, Log, SampleCache, Trainer, TrainerMemory};

/// The bundle's partition (the bundle, then erased flash) at an address its sections'
/// alignment divides.
#[repr(C, align(16))]
struct Aligned<T: ?Sized>(T);

const PARTITION: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/leaf.bundle"));
static BUNDLE: Aligned<[u8; PARTITION.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/leaf.bundle")));
include!(concat!(env!("OUT_DIR"), "/leaf_bundle_len.rs"));

/// Plan steps of the three plans together.
const STEPS: usize = 48;
/// The largest arena, state and checkpoint the firmware takes (LeafNet at 64x64 with an
/// int8 backbone needs 110,592, 4,636 and 4,672 bytes).
const ARENA: usize = 112 * 1024;
const STATE: usize = 4_736;
const CHECKPOINT: usize = 4_864;
/// Cached samples and the bytes of one sample's features (int8 LeafNet: 192).
const TRAIN_SAMPLES: usize = 320;
const HELD_OUT_SAMPLES: usize = 96;
const FEATURE_BYTES: usize = 192;
/// Checkpoint slots in the emulated flash: two of 8 KiB from its start.
const SLOT_BYTES: u32 = 8 * 1024;

/// All of the firmware's working memory, in `.bss`.
#[repr(C, align(8))]
struct Memory {
    arena: [u8; ARENA],
    state: [u8; STATE],
    best_state: [u8; STATE],
    checkpoint: [u8; CHECKPOINT],
    incoming: [u8; CHECKPOINT],
    train_features: [u8; TRAIN_SAMPLES * FEATURE_BYTES],
    held_out_features: [u8; HELD_OUT_SAMPLES * FEATURE_BYTES],
    train_labels: [i32; TRAIN_SAMPLES],
    held_out_labels: [i32; HELD_OUT_SAMPLES],
    steps: heapless::Vec<Step, STEPS>,
}

fn memory() -> &'static mut Memory {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    static mut MEMORY: Memory = Memory {
        arena: [0; ARENA],
        state: [0; STATE],
        best_state: [0; STATE],
        checkpoint: [0; CHECKPOINT],
        incoming: [0; CHECKPOINT],
        train_features: [0; TRAIN_SAMPLES * FEATURE_BYTES],
        held_out_features: [0; HELD_OUT_SAMPLES * FEATURE_BYTES],
        train_labels: [0; TRAIN_SAMPLES],
        held_out_labels: [0; HELD_OUT_SAMPLES],
        steps: heapless::Vec::new(),
    };
    if TAKEN.swap(true, Ordering::AcqRel) {
        board::exit(false);
    }
    let place = &raw mut MEMORY;
    // SAFETY: `TAKEN` lets this line run once, so the reference is unique.
    unsafe { &mut *place }
}

/// Epoch reports to the defmt log.
struct Defmt;

impl Log for Defmt {
    fn epoch(&mut self, r: &EpochReport) {
        defmt::info!(
            "epoch {=u32}: loss {=f32}, held-out accuracy {=f32}% (best {=f32}%), {=u32} steps",
            r.epoch,
            r.loss,
            100.0 * r.accuracy,
            100.0 * r.best_accuracy,
            r.step
        );
    }
}

/// Logs `error` and ends the emulation as failed.
fn fail(what: &str, error: impl core::fmt::Display) -> ! {
    defmt::error!("{=str}: {}", what, defmt::Display2Format(&error));
    board::exit(false)
}

#[cortex_m_rt::entry]
fn main() -> ! {
    let Some(mut b) = board::init() else { board::exit(false) };
    let m = memory();
    let bundle: Bundle<'_, '_> =
        bundle::decode(&BUNDLE.0[..BUNDLE_LEN], &mut m.steps).unwrap_or_else(|e| fail("bundle", e));
    let rows = bundle.feature_bytes();
    let memory = TrainerMemory {
        state: &mut m.state,
        arena: &mut m.arena,
        best_state: &mut m.best_state,
        train: SampleCache::new(&mut m.train_features, &mut m.train_labels, rows),
        held_out: SampleCache::new(&mut m.held_out_features, &mut m.held_out_labels, rows),
    };
    let trainer = Trainer::new(&bundle, CortexM, memory, bundle.header.model_hash)
        .unwrap_or_else(|e| fail("trainer", e));
    let store = CheckpointStore::new(b.storage, 0, SLOT_BYTES).unwrap_or_else(|e| fail("flash", e));
    let mut app = DeviceTrainer::new(trainer, store, &mut m.checkpoint, &mut m.incoming)
        .unwrap_or_else(|e| fail("device", e));
    defmt::info!(
        "leaf-trainer on {=str}: bundle {=usize} bytes, arena {=usize} of {=usize} bytes, {=usize}+{=usize} cached samples of {=usize} bytes",
        board::NAME,
        BUNDLE_LEN,
        bundle.arena_bytes(),
        ARENA,
        TRAIN_SAMPLES,
        HELD_OUT_SAMPLES,
        rows
    );
    let mut session = DeviceSession::default();
    let mut training = false;
    loop {
        let Ok(polled) = session.poll(&mut b.uart, &mut app);
        if polled == Polled::Answered && app.is_training() != training {
            training = app.is_training();
            if training {
                let (train, held_out) = app.trainer().samples();
                let before = app.initial_accuracy().unwrap_or(0.0);
                defmt::info!(
                    "training on {=usize} samples, {=usize} held out; held-out accuracy before training {=f32}%",
                    train,
                    held_out,
                    100.0 * before
                );
            }
        }
        if let Some(Err(e)) = app.run_epoch(&mut Defmt) {
            defmt::error!("training failed: {}", defmt::Display2Format(&e));
        }
        if training && !app.is_training() {
            training = false;
            let best = app.trainer().best().map_or(0.0, |(info, _)| info.accuracy);
            defmt::info!("training ended; best held-out accuracy {=f32}%", 100.0 * best);
            defmt::info!(
                "stack: {=usize} of {=usize} bytes used at most",
                board::stack::peak(),
                board::stack::size()
            );
        }
    }
}
