//! `sprout device`: talks to a device running sprout's firmware over a serial port or
//! `tcp:HOST:PORT`: `train` sends a data folder and trains on the device with progress bars
//! (once, or every epoch to a device that trains from its input: `--stream`),
//! `pull` saves its checkpoint (CRC-checked, size-limited, written atomically), `push` sends
//! one back; each within a deadline and a stall timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use sprout_core::format::{bundle, device_checkpoint};
use sprout_core::link::{Limits, LinkStats, RetryPolicy, Split, TrainingConfig, TrainingProgress};
use sprout_device::{checkpoint_for, ConnectOptions, Device, PortSpec, SampleSet, StreamEvent};
use sprout_train::{read_kind, FileKind};

use crate::duration::{parse_limit, TimeLimit};
use crate::progress::{self, decimal, Unit};
use crate::size::{format_size, parse_size};

#[derive(Args, Debug)]
pub struct DeviceArgs {
    #[command(subcommand)]
    command: DeviceCommand,
}

#[derive(Subcommand, Debug)]
enum DeviceCommand {
    /// Send the images of DIR (DIR/train and DIR/val, or DIR/<class>) to the device, train
    /// there, and show its progress.
    Train(TrainArgs),
    /// Save the device's checkpoint, checked against its CRC-32.
    Pull(PullArgs),
    /// Send a checkpoint of the device's model for the device to keep.
    Push(PushArgs),
}

/// Baud rate of a serial port without --baud.
const DEFAULT_BAUD: u32 = 115_200;

#[derive(Args, Debug)]
struct PortArgs {
    /// A serial device (/dev/ttyACM0, COM3) or tcp:HOST:PORT (QEMU's serial socket).
    #[arg(long, value_name = "PORT")]
    port: String,
    /// Baud rate of a serial port [default: 115200].
    #[arg(long, value_name = "BAUD")]
    baud: Option<u32>,
    /// Milliseconds to wait for an answer before asking again.
    #[arg(long, value_name = "MS", default_value_t = RetryPolicy::default().timeout_ms)]
    timeout_ms: u32,
    /// Milliseconds to wait for the answer to a sample's or checkpoint's last chunk, which
    /// the device gives after computing (a backbone pass, a flash write).
    #[arg(long, value_name = "MS", default_value_t = RetryPolicy::default().compute_timeout_ms)]
    compute_timeout_ms: u32,
    /// Times a request is sent before the link counts as failed.
    #[arg(long, value_name = "N", default_value_t = RetryPolicy::default().attempts)]
    attempts: u32,
    /// How long the whole command may take (500ms, 90s, 10m, 2h, or none)
    /// [default: 24h for train, 30m for pull and push].
    #[arg(long, value_name = "TIME", value_parser = parse_limit)]
    deadline: Option<TimeLimit>,
    /// How long the device may go without progress (a request carried out, a chunk taken,
    /// training moving on a step) before it counts as stalled (or none).
    #[arg(long, value_name = "TIME", value_parser = parse_limit, default_value = "2m")]
    stall_timeout: TimeLimit,
}

/// The deadline of `device train` without --deadline: a day.
const TRAIN_DEADLINE_MS: u32 = 24 * 3600 * 1000;
/// The deadline of `device pull` and `push` without --deadline: half an hour (a 16 MiB
/// checkpoint at 115200 baud takes about 25 minutes).
const TRANSFER_DEADLINE_MS: u32 = 30 * 60 * 1000;

#[derive(Args, Debug)]
struct TrainArgs {
    #[command(flatten)]
    port: PortArgs,
    /// The data folder.
    #[arg(long, value_name = "DIR")]
    data: PathBuf,
    /// Epochs to train.
    #[arg(long, value_name = "N", default_value_t = 10)]
    epochs: u16,
    /// Learning rate of the first epoch (it decays along a half cosine over the epochs);
    /// the device's own when absent.
    #[arg(long, value_name = "LR", alias = "learning-rate")]
    lr: Option<f32>,
    /// Add to the samples already on the device instead of replacing them.
    #[arg(long, conflicts_with = "stream")]
    keep_samples: bool,
    /// Stream the samples every epoch (the device trains on each as it arrives and stores
    /// none) instead of sending them once; what a device whose bundle trains from its input
    /// (e.g. the stem's biases) takes, and chosen for it without this flag.
    #[arg(long)]
    stream: bool,
    /// Seed of the training order of a streamed run's epochs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Also print progress as JSON lines on standard error (as `sprout train
    /// --progress-json`): {"event":"start",first,epochs,batches,batch_size}, then whenever
    /// a poll sees a later epoch finished {"event":"batch",epoch,batch,loss} and
    /// {"event":"epoch",epoch,train_loss,val_accuracy} (an epoch counts as one batch of the
    /// whole training split).
    #[arg(long)]
    progress_json: bool,
}

#[derive(Args, Debug)]
struct PullArgs {
    #[command(flatten)]
    port: PortArgs,
    /// Where to write the checkpoint (sealed with a CRC-32; written whole or not at all).
    #[arg(short, long, value_name = "CKPT", alias = "out")]
    output: PathBuf,
    /// The bundle the device runs: the pull takes a checkpoint of exactly its state's size
    /// and refuses a larger one, and the device's model must be the bundle's.
    #[arg(long, value_name = "FILE", conflicts_with = "max_size")]
    bundle: Option<PathBuf>,
    /// The largest checkpoint the pull takes without --bundle (a device announcing more is
    /// refused before anything is buffered).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "16MiB")]
    max_size: usize,
}

#[derive(Args, Debug)]
struct PushArgs {
    #[command(flatten)]
    port: PortArgs,
    /// The checkpoint file.
    #[arg(value_name = "CKPT")]
    checkpoint: PathBuf,
}

pub fn run(args: &DeviceArgs) -> Result<()> {
    match &args.command {
        DeviceCommand::Train(args) => train(args),
        DeviceCommand::Pull(args) => pull(args),
        DeviceCommand::Push(args) => push(args),
    }
}

/// Connects to the device on `port`, holding everything to the port's limits
/// (`default_deadline_ms` without --deadline).
fn connect(port: &PortArgs, default_deadline_ms: u32) -> Result<Device> {
    let policy = RetryPolicy {
        timeout_ms: port.timeout_ms,
        compute_timeout_ms: port.compute_timeout_ms,
        attempts: port.attempts,
    };
    let limits = Limits {
        deadline_ms: port.deadline.map_or(Some(default_deadline_ms), |d| d.0),
        stall_ms: port.stall_timeout.0,
    };
    let options = ConnectOptions { policy, limits, ..ConnectOptions::default() };
    let spec = PortSpec::parse(&port.port, port.baud.unwrap_or(DEFAULT_BAUD));
    if let (PortSpec::Tcp(_), Some(_)) = (&spec, port.baud) {
        bail!("--baud applies to serial ports, not to {}", port.port);
    }
    let device = Device::connect(spec, options)?;
    let info = device.info();
    eprintln!(
        "{}: model {:#018x}, {} classes, {}x{} samples, {} stored",
        port.port,
        info.model_hash,
        info.classes,
        info.sample.width,
        info.sample.height,
        info.samples
    );
    Ok(device)
}

fn train(args: &TrainArgs) -> Result<()> {
    let mut device = connect(&args.port, TRAIN_DEADLINE_MS)?;
    let classes = device.class_names()?;
    let samples = SampleSet::open(&args.data, &classes, device.info().sample)?;
    eprintln!(
        "sending {} samples ({} to train on, {} to validate with)",
        samples.len(),
        samples.count(Split::Train),
        samples.count(Split::Validation)
    );
    if let Some(run) = device.stop_running_training()? {
        eprintln!(
            "the device was still training (epoch {} of {}) for a host that went away: \
             that run is stopped",
            run.epoch, run.epochs
        );
    }
    if args.stream || device.info().streams {
        if args.keep_samples {
            bail!("the device trains from its input and stores no sample: --keep-samples does not apply");
        }
        return train_streamed(args, &mut device, &samples);
    }
    if !args.keep_samples {
        device.clear_samples()?;
    }
    let bar = progress::bar("send", samples.len() as u64, Unit::Images);
    for index in 0..samples.len() {
        let pixels = samples.pixels(index)?;
        device.push_sample(index as u32, samples.label(index), samples.split(index), &pixels)?;
        bar.inc(1);
    }
    bar.finish_and_clear();

    let config = TrainingConfig { epochs: args.epochs, learning_rate: args.lr };
    let progress_line = |line: serde_json::Value| {
        if args.progress_json {
            eprintln!("{line}");
        }
    };
    progress_line(serde_json::json!({"event": "start", "first": 0, "epochs": args.epochs,
        "batches": 1, "batch_size": samples.count(Split::Train)}));
    let bar = progress::bar("train", u64::from(args.epochs), Unit::Epochs);
    let mut reported = 0;
    let last = device.train(config, Duration::from_millis(500), |progress| {
        // Told once per epoch reached (a slow poll may see several epochs pass at once).
        if progress.epoch > reported {
            reported = progress.epoch;
            progress_line(serde_json::json!({"event": "batch", "epoch": reported, "batch": 0,
                "loss": progress.loss}));
            progress_line(serde_json::json!({"event": "epoch", "epoch": reported,
                "train_loss": progress.loss, "val_accuracy": progress.accuracy}));
        }
        bar.set_position(u64::from(progress.epoch));
        bar.set_message(match progress.accuracy {
            Some(a) => format!("acc {:.1}%", 100.0 * a),
            None => format!("loss {}", decimal(f64::from(progress.loss))),
        });
    })?;
    bar.finish_and_clear();
    report_run(&last, &device);
    Ok(())
}

/// `device train` streaming the samples every epoch (see [`Device::train_streamed`]), with
/// a bar over every sample sent and the same JSON lines as a stored run.
fn train_streamed(args: &TrainArgs, device: &mut Device, samples: &SampleSet) -> Result<()> {
    let (train, held_out) = (samples.count(Split::Train), samples.count(Split::Validation));
    eprintln!(
        "streaming the samples every epoch: the device trains from its input and stores none"
    );
    let progress_line = |line: serde_json::Value| {
        if args.progress_json {
            eprintln!("{line}");
        }
    };
    progress_line(serde_json::json!({"event": "start", "first": 0, "epochs": args.epochs,
        "batches": 1, "batch_size": train}));
    let sends = held_out + usize::from(args.epochs) * (train + held_out);
    let bar = progress::bar("stream", sends as u64, Unit::Images);
    let config = TrainingConfig { epochs: args.epochs, learning_rate: args.lr };
    let last = device.train_streamed(samples, config, args.seed, |event| match event {
        StreamEvent::Sample => bar.inc(1),
        StreamEvent::Pass(progress) => {
            if progress.epoch > 0 {
                progress_line(serde_json::json!({"event": "batch", "epoch": progress.epoch,
                    "batch": 0, "loss": progress.loss}));
                progress_line(serde_json::json!({"event": "epoch", "epoch": progress.epoch,
                    "train_loss": progress.loss, "val_accuracy": progress.accuracy}));
            }
            if let Some(a) = progress.accuracy {
                bar.set_message(format!("epoch {} acc {:.1}%", progress.epoch, 100.0 * a));
            }
        }
    })?;
    bar.finish_and_clear();
    report_run(&last, device);
    Ok(())
}

/// Prints where a run ended and what crossed the link.
fn report_run(last: &TrainingProgress, device: &Device) {
    println!(
        "trained {} of {} epochs ({} steps, {:?}): loss {:.4}{}",
        last.epoch,
        last.epochs,
        last.step,
        last.state,
        last.loss,
        accuracy(last.accuracy)
    );
    report_link(device.stats());
}

/// The checkpoint size a pull takes: a checkpoint of the bundle's state when one is given
/// (with the bundle's model hash to match), else --max-size.
fn pull_limit(args: &PullArgs) -> Result<(u32, Option<(u64, &Path)>)> {
    let Some(path) = &args.bundle else {
        let limit = u32::try_from(args.max_size)
            .map_err(|_| anyhow::anyhow!("--max-size: the link announces at most 4 GiB"))?;
        return Ok((limit, None));
    };
    let bytes = read_kind(path, FileKind::Bundle, "a device bundle")?;
    let (header, _) = bundle::read_header(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not a usable bundle: {e}", path.display()))?;
    let len = device_checkpoint::CHECKPOINT_HEADER_BYTES + header.state.len as usize;
    let limit = u32::try_from(len).map_err(|_| {
        anyhow::anyhow!("{}: a {len}-byte checkpoint exceeds the link's 4 GiB", path.display())
    })?;
    Ok((limit, Some((header.model_hash, path.as_path()))))
}

fn pull(args: &PullArgs) -> Result<()> {
    sprout_train::check_output(&args.output, &[])?;
    let (limit, bundle) = pull_limit(args)?;
    let mut device = connect(&args.port, TRANSFER_DEADLINE_MS)?;
    let device_model = device.info().model_hash;
    if let Some((model, path)) = bundle.filter(|(model, _)| *model != device_model) {
        bail!(
            "the device runs model {device_model:#018x}, the bundle {} is for model \
             {model:#018x}",
            path.display()
        );
    }
    let length = device.info().checkpoint.map_or(0, |c| u64::from(c.len));
    let bar = progress::bar("pull", length.min(u64::from(limit)), Unit::Bytes);
    let (bytes, checkpoint) = device.pull_checkpoint(limit, |received, total| {
        bar.set_length(u64::from(total));
        bar.set_position(u64::from(received));
    })?;
    bar.finish_and_clear();
    sprout_device::write_checkpoint_file(&args.output, &bytes)?;
    println!(
        "pulled {} ({} bytes, CRC-32 {:#010x}) to {}",
        format_size(bytes.len()),
        bytes.len(),
        checkpoint.crc,
        args.output.display()
    );
    report_link(device.stats());
    Ok(())
}

fn push(args: &PushArgs) -> Result<()> {
    let mut device = connect(&args.port, TRANSFER_DEADLINE_MS)?;
    let bytes = checkpoint_for(&args.checkpoint, device.info())?;
    let bar = progress::bar("push", bytes.len() as u64, Unit::Bytes);
    device.push_checkpoint(&bytes, |sent| bar.set_position(u64::from(sent)))?;
    bar.finish_and_clear();
    println!("pushed {} ({} bytes) to the device", args.checkpoint.display(), bytes.len());
    report_link(device.stats());
    Ok(())
}

fn accuracy(accuracy: Option<f32>) -> String {
    accuracy.map(|a| format!(", validation accuracy {:.1}%", a * 100.0)).unwrap_or_default()
}

fn report_link(stats: LinkStats) {
    eprintln!(
        "link: {} frames sent, {} retries, {} damaged frames received",
        stats.frames_sent, stats.retries, stats.damaged_frames
    );
}
