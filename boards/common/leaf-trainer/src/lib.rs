//! The leaf classifier's head fine-tuned on a microcontroller, as a firmware main loop any
//! board runs with [`serve`]: the host (`sprout device train/pull/push --port ...`) pushes
//! labeled pictures over the board's serial stream, starts training, watches progress and
//! pulls the best checkpoint, which is also kept in the board's flash. The device bundle
//! (int8 LeafNet backbone, float head; or a sparse update that also trains int8 biases of
//! the last blocks; or one that trains from the input, such as the stem's biases, whose
//! samples the host streams every epoch and whose training runs as each arrives) is
//! embedded at build time from `SPROUT_LEAF_BUNDLE` (this crate's
//! `build.rs`), in a partition where another bundle may replace it in the built image;
//! everything else is static memory ([`Memory`]), logged with `defmt` through whatever
//! transport the board gives it. [`stack`] guards the stack against overflow and measures
//! its deepest use, which the trainer logs when a run ends and whenever a request (a push,
//! a pull) took it deeper; a run's end also logs the clock ticks its training took where
//! the board has a clock ([`Board::clock`]). The board's status LED is lit while a run
//! goes on, and its start button starts a run of [`BUTTON_EPOCHS`] on the samples the
//! device holds, at the bundle's learning rate, without the host.
#![no_std]

pub use cortex_stack as stack;

use core::fmt::Display;
use core::sync::atomic::{AtomicBool, Ordering};

use embedded_hal::digital::{InputPin, OutputPin, PinState};
use embedded_io::{Read, ReadReady, Write};
use embedded_storage::nor_flash::NorFlash;
use sprout_core::format::bundle::{self, Bundle};
use sprout_core::format::container;
use sprout_core::link::{DeviceApp, DeviceSession, Polled, TrainingConfig};
use sprout_core::Step;
use sprout_cortex_m::CortexM;
use sprout_firmware::controls::{StartButton, StatusLight};
use sprout_firmware::device::DeviceTrainer;
use sprout_firmware::storage::CheckpointStore;
use sprout_firmware::trainer::{EpochReport, Log, SampleCache, Trainer, TrainerMemory};

/// The bundle's partition (the bundle, then erased flash) at an address its sections'
/// alignment divides.
#[repr(C, align(16))]
struct Aligned<T: ?Sized>(T);

const PARTITION: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/leaf.bundle"));
/// The partition, under a symbol of its own: a tool may write another bundle into a built
/// image there (`cargo xtask` does, to run one firmware with two bundles).
#[export_name = "SPROUT_LEAF_BUNDLE"]
static BUNDLE: Aligned<[u8; PARTITION.len()]> =
    Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/leaf.bundle")));

/// Plan steps of the three plans together: LeafNet's head takes 45, a sparse update of the
/// biases of its last three int8 blocks (`features.8` to `features.10`) 110 (each int8
/// clamp's gradient reads a bit mask taken in the forward pass, and each block's backward
/// pass past its projection is one fused step), the stem update (the biases of
/// `features.0` to `features.2`, trained from the input) 172, and 4 to spare.
const STEPS: usize = 176;
/// The largest arena, state and checkpoint the firmware takes. LeafNet at 64x64 with an
/// int8 backbone needs 110,592 bytes of arena (the backbone's) and a 4,636-byte state
/// (4,672-byte checkpoints) training the head; that sparse update at a head batch of one
/// without momentum an 18,868-byte training arena and a 7,308-byte state (7,344).
const ARENA: usize = 112 * 1024;
const STATE: usize = 7_424;
const CHECKPOINT: usize = 7_552;
/// Cached samples and the bytes of one sample's features (int8 LeafNet's head: 192). The
/// buffers hold as many rows as fit: a sparse update caches deeper, larger features (512
/// bytes before `features.8`), so fewer of them (64 and 21). The stem update caches none
/// (its samples are streamed): the rows it leaves unused paid for its plan steps and for
/// the stack its training needs inside a link request: on every board the statics (with
/// the board's own, such as an RTT buffer) end below the same 4 KiB boundary, so the stack
/// above the guard keeps 24 KiB on the 256 KiB boards (`cargo xtask test sizes` checks it).
const TRAIN_SAMPLES: usize = 172;
const HELD_OUT_SAMPLES: usize = 56;
const FEATURE_BYTES: usize = 192;

/// Batches (training or held-out) trained between two link polls: a sparse update's batch
/// takes a few million instructions, a whole epoch of them would leave the host's requests
/// unanswered for seconds.
const BATCHES_PER_TURN: usize = 4;

/// Epochs of a run the start button starts (the host's `sprout device train` default).
pub const BUTTON_EPOCHS: u16 = 10;
/// Reads in a row that make a button press: the idle main loop reads the button every
/// few hundred instructions, so this spans a millisecond or more, past a contact's bounce.
const DEBOUNCE_READS: u16 = 2_000;

/// All of the trainer's working memory, in `.bss`.
#[repr(C, align(8))]
pub struct Memory {
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

/// The working memory, once; `None` on a second call.
fn memory() -> Option<&'static mut Memory> {
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
        return None;
    }
    let place = &raw mut MEMORY;
    // SAFETY: `TAKEN` lets this line run once, so the reference is unique.
    Some(unsafe { &mut *place })
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

/// What the trainer needs of a board.
pub struct Board<IO, F, L, B> {
    /// The board's name, for the log.
    pub name: &'static str,
    /// The serial stream the host talks over.
    pub serial: IO,
    /// The flash region for two checkpoint slots of `slot_bytes` each, from its start
    /// (each slot a whole number of erase sectors).
    pub flash: F,
    pub slot_bytes: u32,
    /// Ends the run (`false`: failed) the board's way.
    pub exit: fn(bool) -> !,
    /// Clock ticks counting up, wrapping at [`CLOCK_WRAP`] (SysTick's range); `None` where
    /// the board runs no such clock. Under `qemu-system-arm -icount shift=0` the QEMU
    /// board's ticks count executed instructions.
    pub clock: Option<fn() -> u32>,
    /// The LED lit while a training run goes on, and the pin level that lights it.
    pub status_led: L,
    pub led_lit: PinState,
    /// The button that starts a run, and the pin level it reads when pressed.
    pub start_button: B,
    pub button_pressed: PinState,
}

/// Where [`Board::clock`] wraps: 2^24 ticks.
pub const CLOCK_WRAP: u32 = 1 << 24;

/// The `main` of a board's trainer binary: paints and guards the stack (an overflow is
/// logged and ends the run as failed), initializes the board crate `$board`
/// (`init() -> Option<Board>` with `serial`, `storage`, `led` and `button`; `exit`, `NAME`,
/// `CLOCK`, `LED_LIT`, `BUTTON_PRESSED`) and serves with checkpoint slots of `$slot_bytes`
/// from the start of its storage.
#[macro_export]
macro_rules! board_main {
    ($board:ident, $slot_bytes:expr) => {
        $crate::stack::on_overflow!(stack_overflow);

        extern "C" fn stack_overflow() -> ! {
            $crate::report_memory_fault($board::exit)
        }

        #[cortex_m_rt::entry]
        fn main() -> ! {
            $crate::stack::paint();
            $crate::stack::guard();
            let Some(b) = $board::init() else { $board::exit(false) };
            $crate::serve($crate::Board {
                name: $board::NAME,
                serial: b.serial,
                flash: b.storage,
                slot_bytes: $slot_bytes,
                exit: $board::exit,
                clock: $board::CLOCK,
                status_led: b.led,
                led_lit: $board::LED_LIT,
                start_button: b.button,
                button_pressed: $board::BUTTON_PRESSED,
            })
        }
    };
}

/// Logs the MemManage fault being handled (a stack overflow, or another) and ends the run
/// as failed: the handler [`board_main!`] installs calls it on a fresh stack.
#[doc(hidden)]
pub fn report_memory_fault(exit: fn(bool) -> !) -> ! {
    if stack::overflowed() {
        defmt::error!("stack overflow: the stack reached its guard above the statics");
    } else {
        defmt::error!("memory management fault");
    }
    exit(false)
}

/// Logs the deepest stack use so far when `always` or when it is deeper than `logged`, the
/// deepest logged before.
fn log_stack(logged: &mut usize, always: bool) {
    let peak = stack::peak();
    if always || peak > *logged {
        *logged = peak.max(*logged);
        defmt::info!("stack: {=usize} of {=usize} bytes used at most", peak, stack::size());
    }
}

/// Logs `error` and ends the run as failed.
fn fail(exit: fn(bool) -> !, what: &str, error: impl Display) -> ! {
    defmt::error!("{=str}: {}", what, defmt::Display2Format(&error));
    exit(false)
}

/// Decodes the embedded bundle, restores the newest checkpoint in flash, then serves the
/// host link forever, training [`BATCHES_PER_TURN`] batches between polls while a run
/// goes on.
pub fn serve<IO, F, L, B>(mut board: Board<IO, F, L, B>) -> !
where
    IO: Read + ReadReady + Write,
    F: NorFlash,
    L: OutputPin,
    B: InputPin,
{
    let exit = board.exit;
    let Some(m) = memory() else { fail(exit, "memory", "taken twice") };
    // Opaque to the optimizer: the image may carry another bundle than the build embedded.
    let partition: &[u8] = core::hint::black_box(&BUNDLE.0);
    let bytes = container::leading_frame(bundle::FRAMING, partition)
        .unwrap_or_else(|e| fail(exit, "bundle", e));
    let bundle: Bundle<'_, '_> =
        bundle::decode(bytes, &mut m.steps).unwrap_or_else(|e| fail(exit, "bundle", e));
    let rows = bundle.feature_bytes();
    let memory = TrainerMemory {
        state: &mut m.state,
        arena: &mut m.arena,
        best_state: &mut m.best_state,
        train: SampleCache::new(&mut m.train_features, &mut m.train_labels, rows),
        held_out: SampleCache::new(&mut m.held_out_features, &mut m.held_out_labels, rows),
    };
    let trainer = Trainer::new(&bundle, CortexM, memory, bundle.header.model_hash)
        .unwrap_or_else(|e| fail(exit, "trainer", e));
    let store = CheckpointStore::new(board.flash, 0, board.slot_bytes)
        .unwrap_or_else(|e| fail(exit, "flash", e));
    let mut app = DeviceTrainer::new(trainer, store, &mut m.checkpoint, &mut m.incoming)
        .unwrap_or_else(|e| fail(exit, "device", e));
    defmt::info!(
        "leaf-trainer on {=str}: bundle {=usize} bytes, arena {=usize} of {=usize} bytes, {=usize}+{=usize} cached samples of {=usize} bytes",
        board.name,
        bytes.len(),
        bundle.arena_bytes(),
        ARENA,
        TRAIN_SAMPLES,
        HELD_OUT_SAMPLES,
        rows
    );
    let mut light = StatusLight::new(board.status_led, board.led_lit);
    let mut button = StartButton::new(board.start_button, board.button_pressed, DEBOUNCE_READS);
    let mut session = DeviceSession::default();
    let mut training = false;
    // The last epoch of a streamed run logged (the trainer logs a stored run's).
    let mut logged_epoch = 0;
    let mut logged_stack = 0;
    // Clock ticks inside this run's training calls (a streamed run's: the link requests that
    // carried its samples), and the epochs they ended.
    let (mut ticks, mut epochs) = (0u64, 0u32);
    loop {
        let streaming = app.is_training() && app.is_streamed();
        let start = board.clock.filter(|_| streaming).map(|now| now());
        match session.poll(&mut board.serial, &mut app) {
            Ok(Polled::Answered) => log_stack(&mut logged_stack, false),
            Ok(_) => {}
            Err(e) => defmt::warn!("serial: {}", defmt::Debug2Format(&e)),
        }
        if let (Some(now), Some(start)) = (board.clock, start) {
            ticks += u64::from(now().wrapping_sub(start) % CLOCK_WRAP);
        }
        if let Some(report) = app.last_epoch().filter(|r| streaming && r.epoch > logged_epoch) {
            Defmt.epoch(&report);
            logged_epoch = report.epoch;
            epochs += 1;
        }
        // A pin that cannot be read or written leaves the button unpressed, the LED as is.
        if !training && button.pressed().unwrap_or(false) {
            let config = TrainingConfig { epochs: BUTTON_EPOCHS, learning_rate: None };
            match app.start_training(config) {
                Ok(()) => defmt::info!("start button: training {=u16} epochs", BUTTON_EPOCHS),
                Err(e) => defmt::warn!("start button: {}", defmt::Display2Format(&e)),
            }
        }
        if !training && app.is_training() {
            training = true;
            (ticks, epochs) = (0, 0);
            logged_epoch = app.trainer().epoch();
            let (train, held_out) = app.trainer().samples();
            match app.initial_accuracy() {
                Some(before) => defmt::info!(
                    "training on {=usize} samples, {=usize} held out; held-out accuracy before training {=f32}%",
                    train,
                    held_out,
                    100.0 * before
                ),
                None => defmt::info!("training on samples the host streams every epoch"),
            }
        }
        let _ = light.show(app.is_training());
        let start = board.clock.filter(|_| app.is_training()).map(|now| now());
        match app.train_batches(BATCHES_PER_TURN, &mut Defmt) {
            Some(Err(e)) => defmt::error!("training failed: {}", defmt::Display2Format(&e)),
            Some(Ok(Some(_))) => epochs += 1,
            _ => {}
        }
        if let (Some(now), Some(start)) = (board.clock, start) {
            ticks += u64::from(now().wrapping_sub(start) % CLOCK_WRAP);
        }
        if training && !app.is_training() {
            training = false;
            let best = app.trainer().best().map_or(0.0, |(info, _)| info.accuracy);
            defmt::info!("training ended; best held-out accuracy {=f32}%", 100.0 * best);
            if board.clock.is_some() {
                let (cached, _) = app.trainer().samples();
                let streamed = app.last_epoch().filter(|_| app.is_streamed());
                let train = streamed.map_or(cached, |r| r.samples as usize);
                defmt::info!(
                    "training took {=u64} clock ticks for {=u32} epochs of {=usize} samples",
                    ticks,
                    epochs,
                    train
                );
            }
            log_stack(&mut logged_stack, true);
        }
    }
}
