//! `cargo xtask bench cpu`: LeafNet training steps (batch 1, 8 and 32; head-only and all) and
//! inference (batch 1 and 32) on the desktop CPU, the release `sprout` CLI against PyTorch
//! eager in the same run, with peak RSS and sprout's one-thread against all-threads speed.
//!
//! PyTorch runs `xtask/bench/leafnet.py`, LeafNet rebuilt under sprout's parameter names: it
//! loads sprout's safetensors export and must reproduce `sprout run`'s logits before any
//! ratio is reported. Both sides train with AdamW at the same learning rate and weight
//! decay, with the same trainable split (a frozen backbone's batch norms use their running
//! statistics on both), PyTorch on as many threads as sprout uses.
//!
//! Sprout's steady-state speed is the difference of two `sprout train` (or `sprout run`)
//! processes that differ only in the number of samples, so start-up, graph compilation,
//! validation and writing the model cancel out; PyTorch's is timed in-process after warm-up
//! steps. One repetition times sprout (all cores, then one), then PyTorch, back to back, so
//! a change in the machine's load between repetitions falls on both sides: each ratio is
//! the median of the repetitions' ratios, each speed the median of its side's speeds. Peak
//! RSS is the largest over the processes of a configuration (PyTorch's includes its import).
//!
//! f16 storage is measured against f32 within sprout: LeafNet trained in mixed precision
//! (`--mixed-precision`: weights and activations stored as f16 between kernels) and the same
//! training in f32, back to back in each repetition, with both peaks.
//!
//! Beside sprout's speedup from threads, each repetition also runs one one-thread sprout
//! process per core at once: what the cores deliver together against one alone is the most
//! any thread pool could get from them at that moment (on a shared virtual machine two cores
//! may share one physical core's arithmetic units, or a neighbour's load). It also times a
//! cache line's round trip between the first two cores ([`core_distance`]): where that is
//! slow, what one thread writes and the other reads next is too, which the processes,
//! sharing no memory, do not feel.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use safetensors::{tensor::TensorView, Dtype};
use sprout_train::encode_npy;
use sprout_zoo::leafnet::{CHANNELS, CLASS_NAMES, SIZE};

use crate::bench;
use crate::bench_data::{spawn_measured, wait_measured};
use crate::core_distance;

/// The PyTorch side, relative to the workspace root.
const SCRIPT: &str = "xtask/bench/leafnet.py";
/// How to get what the script imports.
const INSTALL: &str = "pip install torch numpy safetensors";
/// Repetitions unless `--reps N` says otherwise.
const DEFAULT_REPS: usize = 3;
/// Images per timed span: the number of timed steps is this over the batch size. Long
/// enough that sprout's span (a difference of two process times) is seconds, not the
/// jitter of starting a process.
const IMAGES: usize = 1024;
/// The fewest timed steps at any batch size.
const MIN_STEPS: usize = 4;
/// Untimed steps before the timed ones (PyTorch), and the steps of sprout's shorter run.
const WARMUP_STEPS: usize = 2;
/// Round trips of a cache line between the first two cores timed in each repetition.
const ROUND_TRIPS: u64 = 100_000;
/// AdamW's learning rate and weight decay, on both sides.
const LR: &str = "0.001";
const WEIGHT_DECAY: &str = "0.01";
/// The largest relative difference of PyTorch's logits to sprout's that still counts as the
/// same model: max |a - b| over the largest deviation of sprout's logits from their mean
/// over the samples (stricter than over the logits' size, which the head's bias can set).
const TOLERANCE: f64 = 1e-4;
/// Samples of the logits check.
const CHECK_SAMPLES: usize = 4;
/// Steps at batch 8, all parameters trained, that make the checked model: enough for batch
/// norm's running statistics (momentum 0.1) to leave their initial values, so activations
/// keep their scale and the logits depend on the input.
const MODEL_STEPS: usize = 32;

/// What a configuration times.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// Training steps with this `--trainable` choice (`head` or `all`).
    Train(&'static str),
    Infer,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Config {
    mode: Mode,
    batch: usize,
    /// Training in mixed precision, measured against the same training in f32.
    mixed_precision: bool,
}

impl Config {
    /// The start of every line about this configuration.
    fn label(&self) -> String {
        let precision = if self.mixed_precision { " mixed precision" } else { "" };
        match self.mode {
            Mode::Train(trainable) => {
                format!("cpu leafnet train batch {} {trainable}{precision}", self.batch)
            }
            Mode::Infer => format!("cpu leafnet infer batch {}", self.batch),
        }
    }

    /// The same configuration in f32.
    fn in_f32(self) -> Config {
        Config { mixed_precision: false, ..self }
    }

    /// Timed steps per repetition.
    fn steps(&self) -> usize {
        (IMAGES / self.batch).max(MIN_STEPS)
    }

    /// The script's `--mode`.
    fn script_mode(&self) -> &'static str {
        match self.mode {
            Mode::Train(trainable) => trainable,
            Mode::Infer => "infer",
        }
    }
}

/// The configurations measured: all of them (mixed precision training every layer at batch
/// 32 last), or with `--quick` one training step each way and one inference.
fn configs(quick: bool) -> Vec<Config> {
    let (train, infer): (&[usize], &[usize]) =
        if quick { (&[8], &[32]) } else { (&[1, 8, 32], &[1, 32]) };
    let f32 = |mode, batch| Config { mode, batch, mixed_precision: false };
    let mut configs = Vec::new();
    for &batch in train {
        for trainable in ["head", "all"] {
            configs.push(f32(Mode::Train(trainable), batch));
        }
    }
    configs.extend(infer.iter().map(|&batch| f32(Mode::Infer, batch)));
    if !quick {
        configs.push(Config { mixed_precision: true, ..f32(Mode::Train("all"), 32) });
    }
    configs
}

#[derive(Debug, PartialEq)]
struct Options {
    reps: usize,
    quick: bool,
}

const USAGE: &str = "usage: cargo xtask bench cpu [--reps N] [--quick]";

fn parse_options(options: &[&str]) -> Result<Options> {
    let mut parsed = Options { reps: DEFAULT_REPS, quick: false };
    let mut rest = options.iter();
    while let Some(&option) = rest.next() {
        match option {
            "--quick" => parsed.quick = true,
            "--reps" => {
                let n = rest.next().context(USAGE)?;
                parsed.reps = n.parse().ok().filter(|&n| n >= 1).with_context(|| {
                    format!("--reps takes a number of repetitions, at least 1, not `{n}`")
                })?;
            }
            other => bail!("unknown option `{other}`\n{USAGE} (default {DEFAULT_REPS} reps)"),
        }
    }
    Ok(parsed)
}

/// The median of `values` (the upper one of an even count).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `cpu leafnet train batch 32 all: sprout 114.0 img/s, pytorch 264.0 img/s, ratio 0.43x`
/// (sprout / PyTorch: `ratio`, the median of the repetitions' ratios), or sprout's speed
/// alone.
fn speed_line(label: &str, sprout: f64, pytorch: Option<(f64, f64)>) -> String {
    match pytorch {
        Some((p, ratio)) => {
            format!("{label}: sprout {sprout:.1} img/s, pytorch {p:.1} img/s, ratio {ratio:.2}x")
        }
        None => format!("{label}: sprout {sprout:.1} img/s"),
    }
}

/// `cpu leafnet train batch 32 all peak RSS: sprout 103 MiB, pytorch 848 MiB`.
fn memory_line(label: &str, sprout: f64, pytorch: Option<f64>) -> String {
    match pytorch {
        Some(p) => format!("{label} peak RSS: sprout {sprout:.0} MiB, pytorch {p:.0} MiB"),
        None => format!("{label} peak RSS: sprout {sprout:.0} MiB"),
    }
}

/// `cpu leafnet train batch 32 all mixed precision: sprout 80.0 img/s, f32 100.0 img/s,
/// ratio 0.80x; peak RSS 60 MiB, f32 80 MiB` (mixed precision / f32: `ratio`, the median of
/// the repetitions' ratios).
fn precision_line(label: &str, mixed: f64, f32: f64, ratio: f64, peaks: (f64, f64)) -> String {
    format!(
        "{label}: sprout {mixed:.1} img/s, f32 {f32:.1} img/s, ratio {ratio:.2}x; peak RSS \
         {:.0} MiB, f32 {:.0} MiB",
        peaks.0, peaks.1
    )
}

/// `cpu leafnet train batch 32 all threads: sprout 1 thread 60.0 img/s, 2 threads 114.0
/// img/s, speedup 1.90x; 2 one-thread processes at once 1.95x; cores 0 and 1 pass a cache
/// line and back in 65 ns` (medians of the repetitions' own ratios to the one-thread speed,
/// and of the round trips measured in each).
fn threads_line(label: &str, one: f64, all: f64, threads: usize, speedups: Speedups) -> String {
    format!(
        "{label} threads: sprout 1 thread {one:.1} img/s, {threads} threads {all:.1} img/s, \
         speedup {:.2}x; {threads} one-thread processes at once {:.2}x; cores 0 and 1 pass a \
         cache line and back in {:.0} ns",
        speedups.threads, speedups.processes, speedups.round_trip_ns
    )
}

/// Medians of a configuration's speedups over one thread.
#[derive(Clone, Copy, Debug)]
struct Speedups {
    /// sprout on every core.
    threads: f64,
    /// One one-thread sprout per core, all at once: their speeds summed.
    processes: f64,
    /// A cache line's round trip between the first two cores ([`core_distance`]).
    round_trip_ns: f64,
}

/// The number after `key` on the line of `output` that starts with it.
fn value(output: &str, key: &str) -> Result<f64> {
    output
        .lines()
        .find_map(|line| line.strip_prefix(key)?.trim().parse().ok())
        .with_context(|| format!("no `{key} NUMBER` line in:\n{output}"))
}

/// One process's (or process pair's) images/s and peak RSS in MiB.
struct Measured {
    img_per_s: f64,
    peak_mib: f64,
}

/// A configuration's repetitions, one side's speeds beside another's.
#[derive(Default)]
struct Paired {
    ours: Vec<f64>,
    theirs: Vec<f64>,
    ratios: Vec<f64>,
    peak_mib: (f64, f64),
}

impl Paired {
    /// Adds one repetition: `ours` and `theirs` timed back to back.
    fn push(&mut self, ours: &Measured, theirs: &Measured) {
        self.ours.push(ours.img_per_s);
        self.theirs.push(theirs.img_per_s);
        self.ratios.push(ours.img_per_s / theirs.img_per_s);
        self.peak_mib = (self.peak_mib.0.max(ours.peak_mib), self.peak_mib.1.max(theirs.peak_mib));
    }

    /// Median speeds of both sides and the median ratio.
    fn medians(&mut self) -> (f64, f64, f64) {
        (median(&mut self.ours), median(&mut self.theirs), median(&mut self.ratios))
    }
}

/// `cargo xtask bench cpu [--reps N] [--quick]`.
pub fn run(root: &Path, options: &[&str]) -> Result<()> {
    let options = parse_options(options)?;
    let sprout = bench::release_sprout(root)?;
    let work = root.join("target/bench-cpu");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let bench = Bench { sprout, script: root.join(SCRIPT), work };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());

    // The model to check and to run inference on.
    let model = bench.work.join("model.sprout");
    let config = Config { mode: Mode::Train("all"), batch: 8, mixed_precision: false };
    bench.start_train(config, MODEL_STEPS * config.batch, Cores::All, &model)?.finish()?;
    let weights = bench.work.join("model.safetensors");
    let export =
        [path(&model), "--format".into(), "safetensors".into(), "-o".into(), path(&weights)];
    bench.sprout("export", &export, Cores::All)?;

    let checked =
        find_python().and_then(|python| bench.check(&python, &model, &weights).map(|()| python));
    let python = match checked {
        Ok(python) => Some(python),
        Err(e) => {
            println!("{e:#}\nprinting sprout's numbers only, without ratios");
            None
        }
    };
    println!(
        "{threads} threads (sprout: the cores it may use; PyTorch: as many), AdamW lr {LR} \
         weight decay {WEIGHT_DECAY}, medians of {} reps",
        options.reps
    );
    for config in configs(options.quick) {
        let label = config.label();
        if config.mixed_precision {
            let mut against_f32 = Paired::default();
            for _ in 0..options.reps {
                let mixed = bench.sprout_speed(config, &model, Cores::All)?;
                against_f32.push(&mixed, &bench.sprout_speed(config.in_f32(), &model, Cores::All)?);
            }
            let (mixed, f32, ratio) = against_f32.medians();
            println!("{}", precision_line(&label, mixed, f32, ratio, against_f32.peak_mib));
            continue;
        }
        let (mut against_pytorch, mut against_one) = (Paired::default(), Paired::default());
        let (mut at_once, mut round_trips) = (Vec::new(), Vec::new());
        let mut sprout_peak_mib = 0f64;
        let one_per_core: Vec<Cores> = (0..threads).map(Cores::One).collect();
        for _ in 0..options.reps {
            let all = bench.sprout_speed(config, &model, Cores::All)?;
            sprout_peak_mib = sprout_peak_mib.max(all.peak_mib);
            if threads > 1 {
                let one = bench.sprout_speed(config, &model, Cores::One(0))?;
                against_one.push(&all, &one);
                let together = bench.sprout_speeds(config, &model, &one_per_core)?;
                at_once.push(together.iter().map(|m| m.img_per_s).sum::<f64>() / one.img_per_s);
                round_trips.push(core_distance::round_trip_ns(0, 1, ROUND_TRIPS)?);
            }
            if let Some(python) = python.as_deref() {
                against_pytorch
                    .push(&all, &bench.pytorch_speed(python, config, &weights, threads)?);
            } else {
                against_pytorch.ours.push(all.img_per_s);
            }
        }
        let pytorch_peak_mib = python.is_some().then_some(against_pytorch.peak_mib.1);
        let (sprout, pytorch, ratio) = against_pytorch.medians();
        let pytorch = python.is_some().then_some((pytorch, ratio));
        println!("{}", speed_line(&label, sprout, pytorch));
        println!("{}", memory_line(&label, sprout_peak_mib, pytorch_peak_mib));
        if threads > 1 {
            let (all, one, speedup) = against_one.medians();
            let speedups = Speedups {
                threads: speedup,
                processes: median(&mut at_once),
                round_trip_ns: median(&mut round_trips),
            };
            println!("{}", threads_line(&label, one, all, threads, speedups));
        }
    }
    Ok(())
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The Python from `SPROUT_BENCH_PYTHON`, else `python3`, if it imports what the script needs.
fn find_python() -> Result<String> {
    let python = std::env::var("SPROUT_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let found = Command::new(&python)
        .args(["-c", "import torch, numpy, safetensors"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ensure!(
        found,
        "PyTorch not found: `{python}` cannot import torch, numpy and safetensors. Install \
         them (`{INSTALL}`) or set SPROUT_BENCH_PYTHON to a Python that has them"
    );
    Ok(python)
}

/// Where a sprout process runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cores {
    /// On every core this process may use: sprout's pool takes them all.
    All,
    /// On the `k`-th of them alone: sprout's pool has one thread.
    One(usize),
}

impl Cores {
    /// Names the files of one of several processes that run at once.
    fn slot(self) -> String {
        match self {
            Cores::All => "all".into(),
            Cores::One(k) => format!("core{k}"),
        }
    }
}

/// A sprout process on its way.
struct Started {
    child: Child,
    started: Instant,
    log: PathBuf,
    what: String,
}

impl Started {
    /// Waits for the process: its wall time in seconds and its peak RSS in MiB.
    fn finish(self) -> Result<(f64, f64)> {
        let (success, peak_mib) = wait_measured(self.child)?;
        let seconds = self.started.elapsed().as_secs_f64();
        if !success {
            let text = fs::read_to_string(&self.log).unwrap_or_default();
            bail!("{} failed:\n{text}", self.what);
        }
        Ok((seconds, peak_mib))
    }
}

/// Waits for processes that run at once, each on a thread of its own, so that each one's
/// wall time ends when it exits, not when the ones before it are reaped.
fn finish_all(started: Vec<Started>) -> Result<Vec<(f64, f64)>> {
    std::thread::scope(|scope| {
        let waiting: Vec<_> = started.into_iter().map(|s| scope.spawn(|| s.finish())).collect();
        waiting
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| bail!("waiting for a sprout process panicked")))
            .collect()
    })
}

struct Bench {
    sprout: PathBuf,
    script: PathBuf,
    work: PathBuf,
}

impl Bench {
    /// Runs `sprout SUBCOMMAND ARGS` on `cores`, its output in a log file; returns the wall
    /// time in seconds and the peak RSS in MiB.
    fn sprout(&self, subcommand: &str, args: &[String], cores: Cores) -> Result<(f64, f64)> {
        self.start(subcommand, args, cores)?.finish()
    }

    /// Starts `sprout SUBCOMMAND ARGS` on `cores`, its output in a log file of its own.
    fn start(&self, subcommand: &str, args: &[String], cores: Cores) -> Result<Started> {
        let log = self.work.join(format!("sprout-{subcommand}-{}.log", cores.slot()));
        let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(&self.sprout);
        command.arg(subcommand).args(args).stdin(Stdio::null());
        command.stdout(file.try_clone()?).stderr(file);
        if let Cores::One(k) = cores {
            pin_to_core(&mut command, k)?;
        }
        let started = Instant::now();
        let child = spawn_measured(&mut command)
            .with_context(|| format!("running {}", self.sprout.display()))?;
        let what = format!("sprout {subcommand} {}", args.join(" "));
        Ok(Started { child, started, log, what })
    }

    /// Starts one epoch of `samples` samples of `config`'s training on `cores`, writing the
    /// model to `output`.
    fn start_train(
        &self,
        config: Config,
        samples: usize,
        cores: Cores,
        output: &Path,
    ) -> Result<Started> {
        let data = self.tensor_file(samples)?;
        // Validation on the shortest file costs every run the same.
        let val = self.tensor_file(WARMUP_STEPS * config.batch)?;
        let out_dir = self.work.join(format!("run-{}", cores.slot()));
        if out_dir.exists() {
            fs::remove_dir_all(&out_dir)?;
        }
        let mut args: Vec<String> =
            "--zoo leafnet --epochs 1 --optimizer adamw".split(' ').map(String::from).collect();
        if config.mixed_precision {
            args.push("--mixed-precision".into());
        }
        for (flag, value) in [
            ("--trainable", config.script_mode().to_string()),
            ("--lr", LR.into()),
            ("--weight-decay", WEIGHT_DECAY.into()),
            ("--batch-size", config.batch.to_string()),
            ("--data", path(&data)),
            ("--val", path(&val)),
            ("--out-dir", path(&out_dir)),
            ("-o", path(output)),
        ] {
            args.extend([flag.to_string(), value]);
        }
        self.start("train", &args, cores)
    }

    /// Starts the process of one timed span: `samples` samples of `config` on `cores`.
    fn start_span(
        &self,
        config: Config,
        model: &Path,
        samples: usize,
        cores: Cores,
    ) -> Result<Started> {
        let slot = cores.slot();
        match config.mode {
            Mode::Train(_) => {
                let output = self.work.join(format!("out-{slot}.sprout"));
                self.start_train(config, samples, cores, &output)
            }
            Mode::Infer => {
                let input = self.npy_file(samples)?;
                let args = [
                    path(model),
                    "--input".into(),
                    path(&input),
                    "-o".into(),
                    path(&self.work.join(format!("logits-{slot}.npy"))),
                    "--batch-size".into(),
                    config.batch.to_string(),
                ];
                self.start("run", &args, cores)
            }
        }
    }

    /// Sprout's steady-state speed in one repetition: the images of the longer run over the
    /// extra seconds it took.
    fn sprout_speed(&self, config: Config, model: &Path, cores: Cores) -> Result<Measured> {
        let mut speeds = self.sprout_speeds(config, model, &[cores])?;
        Ok(speeds.remove(0))
    }

    /// The steady-state speeds of one sprout process per entry of `cores`, all running at
    /// once: each one's images of the longer run over the extra seconds it took.
    fn sprout_speeds(
        &self,
        config: Config,
        model: &Path,
        cores: &[Cores],
    ) -> Result<Vec<Measured>> {
        let (short, long) =
            (WARMUP_STEPS * config.batch, (WARMUP_STEPS + config.steps()) * config.batch);
        let spans = |samples: usize| {
            let started: Vec<Started> = cores
                .iter()
                .map(|&c| self.start_span(config, model, samples, c))
                .collect::<Result<_>>()?;
            finish_all(started)
        };
        let (shorts, longs) = (spans(short)?, spans(long)?);
        let speed = |(&(t_short, m_short), &(t_long, m_long)): (&(f64, f64), &(f64, f64))| {
            ensure!(
                t_long > t_short,
                "{}: the longer sprout run ({t_long:.2} s) was not slower than the shorter one \
                 ({t_short:.2} s): the machine is too busy to measure",
                config.label()
            );
            let img_per_s = (long - short) as f64 / (t_long - t_short);
            Ok(Measured { img_per_s, peak_mib: m_short.max(m_long) })
        };
        shorts.iter().zip(&longs).map(speed).collect()
    }

    /// PyTorch's speed for `config`: one timed span, in one process of the script.
    fn pytorch_speed(
        &self,
        python: &str,
        config: Config,
        weights: &Path,
        threads: usize,
    ) -> Result<Measured> {
        let mut args = vec!["time".to_string(), "--weights".into(), path(weights)];
        for (flag, n) in [
            ("--batch", config.batch),
            ("--steps", config.steps()),
            ("--warmup", WARMUP_STEPS),
            ("--reps", 1),
            ("--threads", threads),
        ] {
            args.extend([flag.to_string(), n.to_string()]);
        }
        args.extend(
            ["--mode", config.script_mode(), "--lr", LR, "--weight-decay", WEIGHT_DECAY]
                .map(String::from),
        );
        let (output, peak_mib) = self.python(python, &args)?;
        Ok(Measured { img_per_s: value(&output, "img_per_s")?, peak_mib })
    }

    /// Checks that PyTorch's LeafNet with `weights` gives sprout's logits for `model`.
    fn check(&self, python: &str, model: &Path, weights: &Path) -> Result<()> {
        let input = self.npy_file(CHECK_SAMPLES)?;
        let logits = self.work.join("check-logits.npy");
        let args = [path(model), "--input".into(), path(&input), "-o".into(), path(&logits)];
        self.sprout("run", &args, Cores::All)?;
        let args = [
            "check",
            "--weights",
            &path(weights),
            "--input",
            &path(&input),
            "--logits",
            &path(&logits),
        ]
        .map(String::from);
        let difference = value(&self.python(python, &args)?.0, "max_rel_diff")?;
        ensure!(
            difference <= TOLERANCE,
            "PyTorch's LeafNet ({SCRIPT}) is not sprout's: logits differ by {difference:.1e} \
             relative, over {TOLERANCE:.0e}"
        );
        println!("PyTorch's LeafNet matches sprout's: logits differ by {difference:.1e} relative");
        Ok(())
    }

    /// Runs the script with `args`: its standard output and peak RSS in MiB.
    fn python(&self, python: &str, args: &[String]) -> Result<(String, f64)> {
        let script = &self.script;
        let log = self.work.join("pytorch.log");
        let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(python);
        command.arg(script).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(file);
        let mut child = spawn_measured(&mut command)
            .with_context(|| format!("running {python} {}", script.display()))?;
        let mut output = String::new();
        child.stdout.take().context("no pipe")?.read_to_string(&mut output)?;
        let (success, peak_mib) = wait_measured(child)?;
        if !success {
            let text = fs::read_to_string(&log).unwrap_or_default();
            bail!("{python} {SCRIPT} {} failed:\n{text}", args.join(" "));
        }
        Ok((output, peak_mib))
    }

    /// `train-N.safetensors`: N samples x (float32 [N, 3, 64, 64]) and y (int64 [N]),
    /// written once.
    fn tensor_file(&self, samples: usize) -> Result<PathBuf> {
        let file = self.work.join(format!("train-{samples}.safetensors"));
        if !file.exists() {
            let x: Vec<u8> = samples_x(samples).iter().flat_map(|v| v.to_le_bytes()).collect();
            let y: Vec<u8> =
                (0..samples).flat_map(|i| ((i % CLASS_NAMES.len()) as i64).to_le_bytes()).collect();
            let tensors = [
                ("x", TensorView::new(Dtype::F32, vec![samples, CHANNELS, SIZE, SIZE], &x)?),
                ("y", TensorView::new(Dtype::I64, vec![samples], &y)?),
            ];
            let bytes = safetensors::serialize(tensors, None)?;
            fs::write(&file, bytes).with_context(|| format!("writing {}", file.display()))?;
        }
        Ok(file)
    }

    /// `x-N.npy`: N input samples, written once.
    fn npy_file(&self, samples: usize) -> Result<PathBuf> {
        let file = self.work.join(format!("x-{samples}.npy"));
        if !file.exists() {
            let bytes = encode_npy(&[samples, CHANNELS, SIZE, SIZE], &samples_x(samples));
            fs::write(&file, bytes).with_context(|| format!("writing {}", file.display()))?;
        }
        Ok(file)
    }
}

/// `samples` LeafNet inputs of deterministic noise in [-1, 1).
fn samples_x(samples: usize) -> Vec<f32> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..samples * CHANNELS * SIZE * SIZE)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Restricts the child to the `k`-th core this process may use: the CPU backend sizes its
/// thread pool by the cores it is allowed (`available_parallelism`), so it runs one thread.
#[cfg(target_os = "linux")]
fn pin_to_core(command: &mut Command, k: usize) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let one = core_distance::only(core_distance::allowed_cpu(k)?);
    let size = std::mem::size_of_val(&one);
    // SAFETY: between fork and exec the closure only calls sched_setaffinity, which is
    // async-signal-safe, on the child itself.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, size, &one) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn pin_to_core(_command: &mut Command, _k: usize) -> Result<()> {
    bail!("the one-thread measurement pins sprout to a core with sched_setaffinity, on Linux only")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_the_way_scripts_expect() {
        assert_eq!(
            speed_line("cpu leafnet train batch 32 all", 114.0, Some((264.0, 0.4312))),
            "cpu leafnet train batch 32 all: sprout 114.0 img/s, pytorch 264.0 img/s, ratio 0.43x"
        );
        assert_eq!(
            speed_line("cpu leafnet infer batch 1", 99.04, None),
            "cpu leafnet infer batch 1: sprout 99.0 img/s"
        );
        assert_eq!(
            memory_line("cpu leafnet train batch 8 head", 44.2, Some(848.0)),
            "cpu leafnet train batch 8 head peak RSS: sprout 44 MiB, pytorch 848 MiB"
        );
        assert_eq!(
            precision_line(
                "cpu leafnet train batch 32 all mixed precision",
                80.0,
                100.0,
                0.8,
                (60.2, 80.0)
            ),
            "cpu leafnet train batch 32 all mixed precision: sprout 80.0 img/s, f32 100.0 img/s, \
             ratio 0.80x; peak RSS 60 MiB, f32 80 MiB"
        );
        assert_eq!(
            threads_line(
                "cpu leafnet infer batch 32",
                50.0,
                95.0,
                2,
                Speedups { threads: 1.9, processes: 1.954, round_trip_ns: 64.6 }
            ),
            "cpu leafnet infer batch 32 threads: sprout 1 thread 50.0 img/s, 2 threads 95.0 \
             img/s, speedup 1.90x; 2 one-thread processes at once 1.95x; cores 0 and 1 pass a \
             cache line and back in 65 ns"
        );
    }

    /// Ratios are taken within a repetition: a load that slows both sides of one
    /// repetition leaves its ratio as it was.
    #[test]
    fn ratios_pair_each_repetition() {
        let speed = |img_per_s: f64| Measured { img_per_s, peak_mib: img_per_s / 10.0 };
        let mut paired = Paired::default();
        for (ours, theirs) in [(200.0, 100.0), (60.0, 50.0), (90.0, 40.0)] {
            paired.push(&speed(ours), &speed(theirs));
        }
        assert_eq!(paired.medians(), (90.0, 50.0, 2.0));
        assert_eq!(paired.peak_mib, (20.0, 10.0));
    }

    #[test]
    fn configurations_cover_the_issue_and_quick_is_a_subset() {
        let all = configs(false);
        let labels: Vec<String> = all.iter().map(Config::label).collect();
        assert_eq!(labels.len(), 9);
        assert!(labels.contains(&"cpu leafnet train batch 32 all".to_string()));
        let mixed = "cpu leafnet train batch 32 all mixed precision";
        assert!(all.iter().any(|c| c.label() == mixed && c.in_f32().label() == labels[5]));
        assert!(labels.contains(&"cpu leafnet infer batch 1".to_string()));
        assert!(configs(true).iter().all(|c| all.contains(c)));
        assert!(all.iter().all(|c| c.steps() * c.batch >= IMAGES.min(MIN_STEPS * c.batch)));
    }

    #[test]
    fn options_medians_and_script_values() {
        assert_eq!(parse_options(&[]).unwrap(), Options { reps: DEFAULT_REPS, quick: false });
        assert_eq!(
            parse_options(&["--quick", "--reps", "5"]).unwrap(),
            Options { reps: 5, quick: true }
        );
        for bad in [&["--reps"][..], &["--reps", "0"], &["--fast"]] {
            assert!(parse_options(bad).is_err(), "{bad:?}");
        }
        assert_eq!(median(&mut [9.0, 1.0, 2.0, 3.0, 100.0]), 3.0);
        assert_eq!(value("torch 2\nimg_per_s 12.5\n", "img_per_s").unwrap(), 12.5);
        assert!(value("img_per_s many", "img_per_s").is_err());
    }

    #[test]
    fn generated_inputs_are_deterministic_and_in_range() {
        let x = samples_x(2);
        assert_eq!(x.len(), 2 * CHANNELS * SIZE * SIZE);
        assert_eq!(x, samples_x(2));
        assert!(x.iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
