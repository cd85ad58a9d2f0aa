//! The firmware's link app (`DeviceTrainer`) over a picture model's bundle: pushed RGB8
//! chunks land normalized in the backbone's input, training runs epoch by epoch to a
//! tested held-out accuracy, the best checkpoint is what a pull reads and what the flash
//! holds, a pushed checkpoint restores on another device, bad requests are refused, and a
//! later run on other samples keeps its own best checkpoint. A bundle that trains from its
//! input takes its samples streamed every epoch, stores none, and keeps its best checkpoint
//! the same way.

use embedded_storage::nor_flash::{
    check_erase, check_read, check_write, ErrorType, NorFlash, NorFlashErrorKind, ReadNorFlash,
};
use sprout_bundle::{build, BundleOptions};
use sprout_core::format::bundle::{decode, Bundle};
use sprout_core::link::{
    CheckpointInfo, DeviceApp, DeviceError, SampleChunk, Split, TrainingConfig, TrainingState,
    MAX_CHUNK,
};
use sprout_core::rng::SplitMix;
use sprout_core::{save_model, Reference, Step, TrainConfig};
use sprout_firmware::device::DeviceTrainer;
use sprout_firmware::storage::CheckpointStore;
use sprout_firmware::trainer::{SampleCache, Trainer, TrainerMemory};
use sprout_train::{quantize, DataSource, Model, QuantizeSettings, TensorSet};
use sprout_zoo::Architecture;

/// NOR flash in memory: erase to 0xFF, writes clear bits.
struct RamFlash(Vec<u8>);

impl ErrorType for RamFlash {
    type Error = NorFlashErrorKind;
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;
    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        check_read(self, offset, bytes.len())?;
        bytes.copy_from_slice(&self.0[offset as usize..offset as usize + bytes.len()]);
        Ok(())
    }
    fn capacity(&self) -> usize {
        self.0.len()
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 4096;
    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        check_erase(self, from, to)?;
        self.0[from as usize..to as usize].fill(0xFF);
        Ok(())
    }
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        check_write(self, offset, bytes.len())?;
        for (cell, byte) in self.0[offset as usize..].iter_mut().zip(bytes) {
            *cell &= byte;
        }
        Ok(())
    }
}

const TRAIN: usize = 24;
const HELD_OUT: usize = 12;
const SLOT: u32 = 32 * 1024;

/// Bytes of each checkpoint buffer: room to spare after a checkpoint of the bundle's model.
fn checkpoint_room(bundle: &Bundle<'_, '_>) -> usize {
    bundle.initial_state.len() + 64
}

/// Buffers for one device (what the firmware keeps in statics).
struct Buffers {
    state: Vec<u32>,
    best: Vec<u32>,
    arena: Vec<u32>,
    train: (Vec<u8>, Vec<i32>),
    held_out: (Vec<u8>, Vec<i32>),
    checkpoint: Vec<u8>,
    incoming: Vec<u8>,
}

impl Buffers {
    fn for_bundle(bundle: &Bundle<'_, '_>) -> Self {
        let words = |bytes: usize| vec![0u32; bytes.div_ceil(4)];
        let row = bundle.feature_bytes();
        let checkpoint = checkpoint_room(bundle);
        Self {
            state: words(bundle.initial_state.len()),
            best: words(bundle.initial_state.len()),
            arena: words(bundle.arena_bytes()),
            train: (vec![0; TRAIN * row], vec![0; TRAIN]),
            held_out: (vec![0; HELD_OUT * row], vec![0; HELD_OUT]),
            checkpoint: vec![0; checkpoint],
            incoming: vec![0; checkpoint],
        }
    }
}

fn device<'b, 's, 'm>(
    bundle: &'b Bundle<'b, 's>,
    buffers: &'m mut Buffers,
    flash: &'m mut RamFlash,
) -> DeviceTrainer<'b, 's, 'm, Reference, &'m mut RamFlash> {
    let row = bundle.feature_bytes();
    let memory = TrainerMemory {
        state: bytemuck::cast_slice_mut(&mut buffers.state),
        arena: bytemuck::cast_slice_mut(&mut buffers.arena),
        best_state: bytemuck::cast_slice_mut(&mut buffers.best),
        train: SampleCache::new(&mut buffers.train.0, &mut buffers.train.1, row),
        held_out: SampleCache::new(&mut buffers.held_out.0, &mut buffers.held_out.1, row),
    };
    let trainer = Trainer::new(bundle, Reference, memory, 5).unwrap();
    let store = CheckpointStore::new(flash, 0, SLOT).unwrap();
    DeviceTrainer::new(trainer, store, &mut buffers.checkpoint, &mut buffers.incoming).unwrap()
}

/// A picture of class `class`: one colour channel bright, noise on all.
fn picture(class: usize, rng: &mut SplitMix, pixels: usize) -> Vec<u8> {
    (0..pixels * 3)
        .map(|i| {
            let base = if i % 3 == class { 200.0 } else { 40.0 };
            (base + rng.uniform(-30.0, 30.0)) as u8
        })
        .collect()
}

/// Hands `bytes` to `take` (the app's `receive_sample` or `stream_sample`) as the link
/// would: chunks of at most `MAX_CHUNK`, in order.
fn chunked<A: DeviceApp>(
    app: &mut A,
    (label, split): (u16, Split),
    bytes: &[u8],
    take: fn(&mut A, SampleChunk<'_>) -> Result<(), DeviceError>,
) -> Result<(), DeviceError> {
    for (i, chunk) in bytes.chunks(MAX_CHUNK).enumerate() {
        let offset = (i * MAX_CHUNK) as u32;
        let total = bytes.len() as u32;
        take(app, SampleChunk { label, split, offset, total, bytes: chunk })?;
    }
    Ok(())
}

/// Pushes a sample for the app to store.
fn push<A: DeviceApp>(
    app: &mut A,
    label: u16,
    split: Split,
    bytes: &[u8],
) -> Result<(), DeviceError> {
    chunked(app, (label, split), bytes, A::receive_sample)
}

/// Streams a sample for the app to train on or score.
fn stream<A: DeviceApp>(
    app: &mut A,
    label: u16,
    split: Split,
    bytes: &[u8],
) -> Result<(), DeviceError> {
    chunked(app, (label, split), bytes, A::stream_sample)
}

/// A bundle file in 16-byte aligned memory, as the firmware embeds it.
fn aligned(bytes: &[u8]) -> Vec<u128> {
    let mut words = vec![0u128; bytes.len().div_ceil(16)];
    bytemuck::cast_slice_mut::<u128, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

/// The zoo ResNet in int8 with a float head and every layer kept trainable in integer units,
/// calibrated on pictures of the three classes.
fn int8_resnet() -> Model {
    let model = Model::from_zoo_for(Architecture::ResNet, 8, 3, 1).unwrap();
    let (pixels, mut rng) = (32 * 32, SplitMix::new(2));
    let mut x = Vec::new();
    for i in 0..24 {
        // Channel planes, scaled to about the unit range as the pixel normalization does.
        let rgb = picture(i % 3, &mut rng, pixels);
        x.extend((0..3 * pixels).map(|at| f32::from(rgb[(at % pixels) * 3 + at / pixels]) / 255.0));
    }
    let y = (0..24).map(|i| i % 3).collect();
    let set = TensorSet { x, y, sample_dims: vec![3, 32, 32], path: "calibration".into() };
    let settings = QuantizeSettings {
        keep_float: Some("head".into()),
        trainable: Some("all".into()),
        ..QuantizeSettings::default()
    };
    let int8 = quantize(&model, &mut DataSource::tensors(set, 8, 1, false), &settings).unwrap();
    Model::from_bytes(&save_model(&int8.file).unwrap(), "resnet-int8.sprout".as_ref()).unwrap()
}

#[test]
fn a_bundle_that_trains_from_its_input_takes_streamed_samples_and_stores_none() {
    let model = int8_resnet();
    let options = BundleOptions {
        trainable: "head,conv1.bias".into(),
        batch: 1,
        config: TrainConfig::sgd(0.9),
        learning_rate: 0.05,
    };
    let host = build(&model, &options).unwrap();
    let words = aligned(&host.bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..host.bytes.len()];
    let mut steps = Box::new(heapless::Vec::<Step, 256>::new());
    let bundle = decode(file, &mut steps).unwrap();
    assert!(bundle.streams(), "features of {} values", bundle.feature_len());

    let mut flash = RamFlash(vec![0xFF; 2 * SLOT as usize]);
    let mut buffers = Buffers::for_bundle(&bundle);
    let mut app = device(&bundle, &mut buffers, &mut flash);
    assert!(app.info().streams);
    let (pixels, mut rng) = (32 * 32, SplitMix::new(11));
    let pictures: Vec<(u16, Vec<u8>)> =
        (0..TRAIN + HELD_OUT).map(|i| ((i % 3) as u16, picture(i % 3, &mut rng, pixels))).collect();
    let (train, held_out) = pictures.split_at(TRAIN);
    let config = TrainingConfig { epochs: 4, learning_rate: None };

    // Stored samples and stored-sample runs are refused, and so is streaming outside a run.
    let (label, first) = (&train[0].0, &train[0].1);
    assert_eq!(push(&mut app, *label, Split::Train, first), Err(DeviceError::StreamsSamples));
    assert_eq!(app.start_training(config), Err(DeviceError::StreamsSamples));
    assert_eq!(stream(&mut app, *label, Split::Train, first), Err(DeviceError::NoStream));
    assert_eq!(app.end_epoch(0), Err(DeviceError::NoStream));

    app.start_stream(config).unwrap();
    assert_eq!(app.start_stream(config), Err(DeviceError::Busy));
    // Training before the start was scored, a pass that scored nothing, a pass ahead.
    assert_eq!(
        stream(&mut app, *label, Split::Train, first),
        Err(DeviceError::WrongEpoch { device: 0, host: 1 })
    );
    assert_eq!(app.end_epoch(0), Err(DeviceError::NoSamples));
    assert_eq!(app.end_epoch(2), Err(DeviceError::WrongEpoch { device: 0, host: 2 }));

    for (label, bytes) in held_out {
        stream(&mut app, *label, Split::Validation, bytes).unwrap();
    }
    let start = app.end_epoch(0).unwrap();
    let initial = start.accuracy.unwrap();
    assert_eq!((start.state, start.epoch, start.step), (TrainingState::Running, 0, 0));
    assert_eq!(app.end_epoch(0), Ok(start), "a pass that ended is reported again");
    assert_eq!(app.initial_accuracy(), Some(initial));

    let mut order: Vec<usize> = (0..TRAIN).collect();
    for epoch in 1..=4u16 {
        order.rotate_left(5);
        for &i in &order {
            stream(&mut app, train[i].0, Split::Train, &train[i].1).unwrap();
        }
        assert_eq!(app.progress().step, u32::from(epoch) * TRAIN as u32);
        for (label, bytes) in held_out {
            stream(&mut app, *label, Split::Validation, bytes).unwrap();
        }
        let progress = app.end_epoch(epoch).unwrap();
        assert_eq!(progress.epoch, epoch);
        assert!(progress.loss.is_finite() && progress.loss > 0.0, "epoch {epoch}");
        let report = app.last_epoch().unwrap();
        assert_eq!((report.samples, report.accuracy), (TRAIN as u32, progress.accuracy.unwrap()));
    }
    let end = app.progress();
    assert_eq!((end.state, end.epoch, end.epochs), (TrainingState::Finished, 4, 4));
    assert_eq!(app.info().samples, 0, "nothing was stored");
    let (best, _) = app.trainer().best().unwrap();
    assert!(best.accuracy >= 0.9, "held-out accuracy {} (from {initial})", best.accuracy);
    assert!(initial < 0.7, "the untrained model already scores {initial}");
    assert_eq!(stream(&mut app, 0, Split::Validation, first), Err(DeviceError::NoStream));
    assert_eq!(app.end_epoch(4), Ok(end), "the last pass is reported again");
    assert_eq!(app.end_epoch(5), Err(DeviceError::NoStream));

    // The best checkpoint is what a pull reads and what the flash holds.
    let announced = app.info().checkpoint.unwrap();
    let mut pulled = vec![0; announced.len as usize];
    app.read_checkpoint(0, &mut pulled).unwrap();
    let mut stored = vec![0; pulled.len()];
    CheckpointStore::new(&mut flash, 0, SLOT).unwrap().load(&mut stored).unwrap().unwrap();
    assert_eq!(stored, pulled);
}

#[test]
fn a_device_that_stores_its_samples_refuses_to_stream() {
    let model = Model::from_zoo_for(Architecture::ResNet, 4, 3, 1).unwrap();
    let host = build(&model, &BundleOptions { batch: 4, ..BundleOptions::default() }).unwrap();
    let words = aligned(&host.bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..host.bytes.len()];
    let mut steps = Box::new(heapless::Vec::<Step, 256>::new());
    let bundle = decode(file, &mut steps).unwrap();
    assert!(!bundle.streams());
    let mut flash = RamFlash(vec![0xFF; 2 * SLOT as usize]);
    let mut buffers = Buffers::for_bundle(&bundle);
    let mut app = device(&bundle, &mut buffers, &mut flash);
    assert!(!app.info().streams);
    let config = TrainingConfig { epochs: 1, learning_rate: None };
    assert_eq!(app.start_stream(config), Err(DeviceError::NotStreamed));
    let bytes = picture(0, &mut SplitMix::new(1), 32 * 32);
    assert_eq!(stream(&mut app, 0, Split::Validation, &bytes), Err(DeviceError::NoStream));
    assert_eq!(app.end_epoch(0), Err(DeviceError::NoStream));
}

#[test]
fn the_device_app_trains_from_pushed_pictures_and_keeps_its_best_checkpoint() {
    let model = Model::from_zoo_for(Architecture::ResNet, 4, 3, 1).unwrap();
    let options = BundleOptions { batch: 4, learning_rate: 0.1, ..BundleOptions::default() };
    let host = build(&model, &options).unwrap();
    let words = aligned(&host.bytes);
    let file = &bytemuck::cast_slice::<u128, u8>(&words)[..host.bytes.len()];
    let mut steps = Box::new(heapless::Vec::<Step, 256>::new());
    let bundle = decode(file, &mut steps).unwrap();

    let mut flash = RamFlash(vec![0xFF; 2 * SLOT as usize]);
    let mut buffers = Buffers::for_bundle(&bundle);
    let mut app = device(&bundle, &mut buffers, &mut flash);
    let info = app.info();
    assert_eq!((info.classes, info.sample.width, info.sample.height), (3, 32, 32));
    assert_eq!((info.samples, info.checkpoint), (0, None));
    let pixels = 32 * 32;

    // Interleaved RGB8 lands in channel planes, normalized as the model's metadata says.
    let mut rng = SplitMix::new(3);
    let first = picture(0, &mut rng, pixels);
    let chunk = SampleChunk {
        label: 0,
        split: Split::Train,
        offset: 0,
        total: first.len() as u32,
        bytes: &first[..MAX_CHUNK],
    };
    app.receive_sample(chunk).unwrap();
    let p = bundle.header.pixels;
    let input = app.trainer().sample_input().unwrap();
    for (at, &byte) in first[..MAX_CHUNK].iter().enumerate() {
        let (pixel, channel) = (at / 3, at % 3);
        let want = (f32::from(byte) / 255.0 - p.mean[channel]) / p.std[channel];
        assert_eq!(input[channel * pixels + pixel], want, "byte {at}");
    }
    assert_eq!(app.info().samples, 0, "an unfinished picture is not a sample");
    assert_eq!(
        app.start_training(TrainingConfig { epochs: 1, learning_rate: None }),
        Err(DeviceError::NoSamples)
    );

    for i in 0..TRAIN + HELD_OUT {
        let split = if i < TRAIN { Split::Train } else { Split::Validation };
        push(&mut app, (i % 3) as u16, split, &picture(i % 3, &mut rng, pixels)).unwrap();
    }
    assert_eq!(app.info().samples, (TRAIN + HELD_OUT) as u32);
    assert_eq!(
        push(&mut app, 0, Split::Validation, &picture(0, &mut rng, pixels)),
        Err(DeviceError::SamplesFull { capacity: HELD_OUT as u32 })
    );

    app.start_training(TrainingConfig { epochs: 10, learning_rate: None }).unwrap();
    assert_eq!(app.clear_samples(), Err(DeviceError::Busy));
    assert_eq!(push(&mut app, 0, Split::Train, &first), Err(DeviceError::Busy));
    // Before the first epoch, progress reports the untrained head's held-out accuracy.
    let initial = app.initial_accuracy().unwrap();
    assert_eq!(initial, app.trainer().evaluate().unwrap());
    let progress = app.progress();
    assert_eq!((progress.epoch, progress.accuracy), (0, Some(initial)));
    // Training goes a bounded number of batches per main-loop turn, so the link is served
    // between them: an epoch is 6 training and 3 held-out batches of 4, five turns of two,
    // and polls between turns hear "running" with the updates so far.
    for turn in 1..=4u32 {
        assert!(matches!(app.train_batches(2, &mut ()), Some(Ok(None))), "turn {turn}");
        let progress = app.progress();
        assert_eq!((progress.state, progress.epoch), (TrainingState::Running, 0));
        assert_eq!(progress.step, (2 * turn).min(6), "turn {turn}");
        assert!(progress.loss > 0.0 && progress.loss.is_finite(), "turn {turn}");
    }
    assert_eq!(app.info().samples, (TRAIN + HELD_OUT) as u32);
    let report = app.train_batches(2, &mut ()).unwrap().unwrap().unwrap();
    assert_eq!((report.epoch, report.step), (1, 6));
    assert!((app.trainer().learning_rate() - 0.1).abs() < 1e-6, "the first epoch's rate");
    assert_eq!(app.progress().epoch, 1);
    // Into the second epoch, progress hears its loss so far, not the first epoch's.
    assert!(matches!(app.train_batches(2, &mut ()), Some(Ok(None))));
    let running = app.trainer().epoch_loss().unwrap();
    assert_eq!(app.progress().loss, running);
    assert_ne!(running, report.loss);
    // The learning rate falls along a half cosine over the run's 10 epochs.
    let mut epochs = 1;
    while let Some(turn) = app.train_batches(3, &mut ()) {
        if turn.unwrap().is_none() {
            continue;
        }
        epochs += 1;
        let phase = core::f32::consts::PI * (epochs - 1) as f32 / 10.0;
        let want = 0.1 * 0.5 * (1.0 + phase.cos());
        let rate = app.trainer().learning_rate();
        assert!((rate - want).abs() < 1e-6, "epoch {epochs}: rate {rate}, want {want}");
    }
    let progress = app.progress();
    assert_eq!(
        (epochs, progress.state, progress.epoch, progress.epochs),
        (10, TrainingState::Finished, 10, 10)
    );
    assert_eq!(progress.step, 10 * (TRAIN / 4) as u32);
    let (best, _) = app.trainer().best().unwrap();
    assert!(best.accuracy >= 0.9, "held-out accuracy {}", best.accuracy);
    assert!(initial < 0.7, "the untrained head already scores {initial}");

    // A pull reads the best checkpoint, which the flash holds too.
    let announced = app.info().checkpoint.unwrap();
    let mut pulled = vec![0; announced.len as usize];
    app.read_checkpoint(0, &mut pulled).unwrap();
    assert_eq!(CheckpointInfo::of(&pulled), Some(announced));
    assert_eq!(app.read_checkpoint(announced.len, &mut [0; 4]), Err(DeviceError::NoCheckpoint));
    let mut stored = vec![0; pulled.len()];
    CheckpointStore::new(&mut flash, 0, SLOT).unwrap().load(&mut stored).unwrap().unwrap();
    assert_eq!(stored, pulled);

    // A fresh device restores the flash's checkpoint at start, and takes a pushed one.
    let mut blank = RamFlash(vec![0xFF; 2 * SLOT as usize]);
    let mut other_buffers = Buffers::for_bundle(&bundle);
    let mut other = device(&bundle, &mut other_buffers, &mut blank);
    assert_eq!(other.info().checkpoint, None);
    let mut damaged = pulled.clone();
    damaged[0] ^= 1;
    other.begin_checkpoint(announced).unwrap();
    other.write_checkpoint(0, &damaged).unwrap();
    assert_eq!(other.commit_checkpoint(), Err(DeviceError::CheckpointRejected));
    assert_eq!(other.info().checkpoint, None, "a refused checkpoint changes nothing");
    assert_eq!(
        other.begin_checkpoint(CheckpointInfo { len: 1 << 20, crc: 0 }),
        Err(DeviceError::CheckpointTooLarge { capacity: checkpoint_room(&bundle) as u32 })
    );
    other.begin_checkpoint(announced).unwrap();
    assert!(matches!(
        other.write_checkpoint(announced.len, &[1]),
        Err(DeviceError::OutOfRange { .. })
    ));
    other.write_checkpoint(0, &pulled).unwrap();
    other.commit_checkpoint().unwrap();
    assert_eq!(other.info().checkpoint, Some(announced));
    assert_eq!(other.trainer().best().map(|(info, _)| info), Some(best));
    let mut restarted_buffers = Buffers::for_bundle(&bundle);
    let restarted = device(&bundle, &mut restarted_buffers, &mut blank);
    assert_eq!(restarted.info().checkpoint, Some(announced), "restored from flash at start");

    // A second run on other held-out samples (every class relabelled, so the first run's head
    // scores badly on them) keeps its own best: the first run's score, measured on samples
    // this run never saw, does not outrank the new run's checkpoints.
    let mut second_buffers = Buffers::for_bundle(&bundle);
    let mut second = device(&bundle, &mut second_buffers, &mut flash);
    assert_eq!(second.info().checkpoint, Some(announced));
    for i in 0..TRAIN + HELD_OUT {
        let split = if i < TRAIN { Split::Train } else { Split::Validation };
        let relabelled = ((i + 1) % 3) as u16;
        push(&mut second, relabelled, split, &picture(i % 3, &mut rng, pixels)).unwrap();
    }
    second.start_training(TrainingConfig { epochs: 1, learning_rate: Some(0.01) }).unwrap();
    let start = second.initial_accuracy().unwrap();
    let report = second.train_batches(usize::MAX, &mut ()).unwrap().unwrap().unwrap();
    let run_best = report.accuracy.max(start);
    assert!(run_best < best.accuracy, "the relabelled run scores {run_best}, the first {best:?}");
    let (kept, _) = second.trainer().best().unwrap();
    assert_eq!(kept.accuracy, run_best, "the second run's best is its own");
    let epoch = if report.accuracy > start { best.epoch + 1 } else { best.epoch };
    assert_eq!(kept.epoch, epoch);
    // What a pull reads and what the flash holds is that checkpoint.
    let now = second.info().checkpoint.unwrap();
    assert_ne!(now, announced, "the first run's checkpoint is still announced");
    let mut pulled = vec![0; now.len as usize];
    second.read_checkpoint(0, &mut pulled).unwrap();
    let mut encoded = vec![0; checkpoint_room(&bundle)];
    let len = second.trainer().encode_best(&mut encoded).unwrap();
    assert_eq!(pulled, encoded[..len]);
    let mut stored = vec![0; pulled.len()];
    CheckpointStore::new(&mut flash, 0, SLOT).unwrap().load(&mut stored).unwrap().unwrap();
    assert_eq!(stored, pulled);
}
