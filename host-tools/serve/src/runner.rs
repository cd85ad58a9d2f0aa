//! The runners: threads that take jobs from the queue in order and run each as a child
//! `sprout train` process (so a crash or an out-of-memory kill takes only the job), turn its
//! `--progress-json` lines into job events, kill it on cancel, and register its model as a
//! new version when it succeeds. A job interrupted by a restart resumes from its run
//! folder's last checkpoint.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::api::AppState;
use crate::boards::{self, BoardTask};
use crate::db::now;
use crate::jobs::{self, Backend, Base, BatchNorm, JobRequest, Optimizer, Schedule};
use crate::models;

/// How often a job's batch progress is stored at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// Standard-error lines kept to explain a failed job.
const TAIL_LINES: usize = 8;

/// A job a runner has taken.
#[derive(Default)]
struct Running {
    pid: Option<u32>,
    cancelled: bool,
}

/// The runners' shared state: the jobs running now and a bell for new ones.
#[derive(Default)]
pub struct Runners {
    running: Mutex<HashMap<i64, Running>>,
    bell: (Mutex<bool>, Condvar),
}

impl Runners {
    /// Wakes an idle runner: a job was queued.
    pub fn wake(&self) {
        let (rung, bell) = &self.bell;
        *rung.lock().unwrap_or_else(|p| p.into_inner()) = true;
        bell.notify_all();
    }

    /// Waits for [`Runners::wake`] or a second, whichever comes first.
    fn wait(&self) {
        let (rung, bell) = &self.bell;
        let guard = rung.lock().unwrap_or_else(|p| p.into_inner());
        let (mut guard, _) = bell
            .wait_timeout_while(guard, Duration::from_secs(1), |rung| !*rung)
            .unwrap_or_else(|p| p.into_inner());
        *guard = false;
    }

    /// Cancels running job `id`: kills its process, or marks it so that it is killed as
    /// soon as it starts.
    pub fn cancel(&self, id: i64) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let job = running.entry(id).or_default();
        job.cancelled = true;
        if let Some(pid) = job.pid {
            kill(pid);
        }
    }

    /// Records the process of job `id`, killing it at once when the job was cancelled
    /// meanwhile.
    fn started(&self, id: i64, pid: u32) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let job = running.entry(id).or_default();
        job.pid = Some(pid);
        if job.cancelled {
            kill(pid);
        }
    }

    /// Forgets job `id` before its process is reaped (so its pid is never killed once it
    /// could be reused); returns whether it was cancelled.
    fn finished(&self, id: i64) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.remove(&id).is_some_and(|job| job.cancelled)
    }
}

/// Sends SIGKILL to `pid`, a child not yet reaped.
fn kill(pid: u32) {
    // SAFETY: kill(2) takes any pid and signal; the pid is our unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Queues the jobs a stopped service left running, to resume from their checkpoints; returns
/// how many.
pub fn requeue_interrupted(state: &AppState) -> anyhow::Result<usize> {
    let ids: Vec<i64> = {
        let db = state.db.lock();
        let mut statement =
            db.prepare("SELECT id FROM jobs WHERE status = 'running' ORDER BY id")?;
        let rows = statement.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    for &id in &ids {
        state.db.lock().execute("UPDATE jobs SET status = 'queued' WHERE id = ?1", [id])?;
        state.hub.record(
            &state.db,
            id,
            "status",
            json!({"status": "queued", "interrupted": true}),
        )?;
    }
    Ok(ids.len())
}

/// Starts `count` runner threads.
pub fn start(state: &AppState, count: usize) {
    for index in 0..count.max(1) {
        let state = state.clone();
        // A thread of its own for each runner's whole life: the children die with the
        // thread that spawned them (PR_SET_PDEATHSIG), which must therefore live on.
        std::thread::Builder::new()
            .name(format!("runner-{index}"))
            .spawn(move || loop {
                match claim(&state) {
                    Ok(Some((id, task))) => run(&state, id, &task),
                    Ok(None) => state.runners.wait(),
                    Err(error) => {
                        eprintln!("runner {index}: {error:#}");
                        state.runners.wait();
                    }
                }
            })
            .expect("the runner thread starts");
    }
}

/// What a runner took from the queue.
enum Task {
    Train(JobRequest),
    /// A board's job: the board's name and what to do.
    Board(String, BoardTask),
}

/// Takes the oldest queued job, marking it running; a board's job waits while another job
/// of the same board runs (one conversation with a board at a time).
fn claim(state: &AppState) -> anyhow::Result<Option<(i64, Task)>> {
    let claimed = state.db.lock().query_row(
        "UPDATE jobs SET status = 'running', started = COALESCE(started, ?1) \
         WHERE id = (SELECT id FROM jobs WHERE status = 'queued' AND (board IS NULL OR board \
         NOT IN (SELECT board FROM jobs WHERE status = 'running' AND board IS NOT NULL)) \
         ORDER BY id LIMIT 1) \
         RETURNING id, request, board",
        [now()],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, Option<String>>(2)?)),
    );
    let (id, request, board) = match claimed {
        Ok(row) => row,
        Err(rusqlite::Error::QueryReturnedNoRows) => return Ok(None),
        Err(other) => return Err(other.into()),
    };
    state.hub.record(&state.db, id, "status", json!({"status": "running"}))?;
    let stored = || format!("job {id}: stored request");
    let task = match board {
        None => Task::Train(serde_json::from_str(&request).with_context(stored)?),
        Some(board) => Task::Board(board, serde_json::from_str(&request).with_context(stored)?),
    };
    Ok(Some((id, task)))
}

/// Runs job `id` to its end and records how it ended.
fn run(state: &AppState, id: i64, task: &Task) {
    let ended = match task {
        Task::Train(request) => train(state, id, request),
        Task::Board(board, task) => boards::run(state, id, board, task),
    };
    let (status, error, version) = match ended {
        Ok(Ended::Done) => ("succeeded", None, None),
        Ok(Ended::Succeeded(version)) => ("succeeded", None, Some(version)),
        Ok(Ended::Cancelled) => ("cancelled", None, None),
        Err(error) => ("failed", Some(format!("{error:#}")), None),
    };
    let stored = state.db.lock().execute(
        "UPDATE jobs SET status = ?2, error = ?3, version = ?4, finished = ?5 WHERE id = ?1",
        rusqlite::params![id, status, error, version, now()],
    );
    let recorded = stored.and_then(|_| {
        state.hub.record(
            &state.db,
            id,
            "status",
            json!({"status": status, "error": error, "version": version}),
        )
    });
    if let Err(e) = recorded {
        eprintln!("job {id}: cannot record that it {status}: {e}");
    }
}

/// How a job's process ended, when it did not fail.
pub enum Ended {
    /// It registered this version.
    Succeeded(u32),
    /// It ended well without registering a version (a board's training or push).
    Done,
    Cancelled,
}

/// The job's snapshot of its data set: `jobs/<id>/data/<class>/<hash>.<ext>`, hard links
/// to the stored images (copies across file systems), made once, so a resumed job sees the
/// very same files even if the data set changed. With `hold_out` (a board's job, whose
/// device splits nothing itself), every fifth image of each class goes to `val/<class>/`,
/// the others to `train/<class>/`.
pub fn snapshot(
    state: &AppState,
    id: i64,
    dataset: &str,
    hold_out: bool,
) -> anyhow::Result<PathBuf> {
    let data = state.layout.job(id).join("data");
    if data.exists() {
        return Ok(data);
    }
    let partial = state.layout.job(id).join("data.partial");
    if partial.exists() {
        fs::remove_dir_all(&partial)
            .with_context(|| format!("cannot remove {}", partial.display()))?;
    }
    link_images(state, dataset, &partial, hold_out)?;
    fs::rename(&partial, &data).with_context(|| format!("cannot create {}", data.display()))?;
    Ok(data)
}

/// Links (copies across file systems) the images of data set `dataset` into
/// `folder/<class>/<hash>.<ext>`, or with `hold_out` every fifth image of a class into
/// `folder/val/<class>/` and the rest into `folder/train/<class>/`.
pub fn link_images(
    state: &AppState,
    dataset: &str,
    folder: &Path,
    hold_out: bool,
) -> anyhow::Result<()> {
    let images = crate::datasets::image_paths(state, dataset)
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (class, file, source) in images {
        let index = seen.entry(class.clone()).or_default();
        let class_folder = match hold_out {
            false => folder.join(&class),
            true if *index % 5 == 4 => folder.join("val").join(&class),
            true => folder.join("train").join(&class),
        };
        *index += 1;
        fs::create_dir_all(&class_folder)
            .with_context(|| format!("cannot create {}", class_folder.display()))?;
        let target = class_folder.join(file);
        if fs::hard_link(&source, &target).is_err() {
            fs::copy(&source, &target)
                .with_context(|| format!("cannot copy {}", source.display()))?;
        }
    }
    Ok(())
}

/// The newest `checkpoint-epoch-NNN.ckpt` of a run folder.
fn last_checkpoint(run: &Path) -> Option<PathBuf> {
    let entries = fs::read_dir(run).ok()?;
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("checkpoint-epoch-") && n.ends_with(".ckpt"))
        })
        .max()
}

/// The `sprout train` arguments of job `id`.
fn arguments(
    state: &AppState,
    id: i64,
    request: &JobRequest,
    data: &Path,
    run: &Path,
    resume: Option<&Path>,
) -> anyhow::Result<Vec<String>> {
    let folder = state.layout.job(id);
    let mut args: Vec<String> = vec!["train".into()];
    match &request.base {
        Base::Zoo(name) => args.extend(["--zoo".into(), name.clone()]),
        Base::Model { name, version } => {
            let version = version.context("the job's base version was not fixed")?;
            let hash = models::version_hash(state, name, version)
                .map_err(|e| anyhow::anyhow!("{}", e.message))?;
            args.extend(["--model".into(), state.layout.model(&hash).display().to_string()]);
            if request.new_head {
                args.push("--new-head".into());
            }
        }
    }
    args.extend(["--data".into(), data.display().to_string()]);
    args.extend(["--trainable".into(), request.trainable.clone()]);
    let optimizer = match request.optimizer {
        Optimizer::Sgd => "sgd",
        Optimizer::Adamw => "adamw",
    };
    args.extend(["--optimizer".into(), optimizer.into()]);
    let backend = match request.backend {
        Backend::Auto => "auto",
        Backend::Cpu => "cpu",
    };
    args.extend(["--backend".into(), backend.into()]);
    if let Some(lr) = request.lr {
        args.extend(["--lr".into(), lr.to_string()]);
    }
    let schedule = match request.schedule {
        Schedule::Constant => "constant",
        Schedule::Step => "step",
        Schedule::Cosine => "cosine",
        Schedule::Plateau => "plateau",
    };
    args.extend(["--schedule".into(), schedule.into()]);
    if let Some(batch) = request.batch_size {
        args.extend(["--batch-size".into(), batch.to_string()]);
    }
    if request.proximal_mu > 0.0 {
        args.extend(["--proximal-mu".into(), request.proximal_mu.to_string()]);
    }
    let offset = folder.join(jobs::GRADIENT_OFFSET_FILE);
    if offset.is_file() {
        args.extend(["--gradient-offset".into(), offset.display().to_string()]);
    }
    if request.batch_norm == BatchNorm::Running {
        args.extend(["--batch-norm".into(), "running".into()]);
    }
    if request.logit_adjust > 0.0 {
        args.extend(["--logit-adjust".into(), request.logit_adjust.to_string()]);
    }
    args.extend([
        "--epochs".into(),
        request.epochs.to_string(),
        "--seed".into(),
        request.seed.to_string(),
    ]);
    args.extend(["--out-dir".into(), run.display().to_string()]);
    if let Some(checkpoint) = resume {
        args.extend(["--resume".into(), checkpoint.display().to_string()]);
    }
    args.extend(["-o".into(), folder.join("model.sprout").display().to_string()]);
    args.extend(["--json".into(), "--progress-json".into()]);
    Ok(args)
}

/// Prepares and runs job `id`'s process; registers its model when it succeeds.
fn train(state: &AppState, id: i64, request: &JobRequest) -> anyhow::Result<Ended> {
    let data = snapshot(state, id, &request.dataset, false)?;
    let run = state.layout.job(id).join("run");
    let resume = last_checkpoint(&run);
    if resume.is_none() && run.exists() {
        // Interrupted before its first checkpoint: start again.
        fs::remove_dir_all(&run).with_context(|| format!("cannot empty {}", run.display()))?;
    }
    if let Some(checkpoint) = &resume {
        state.hub.record(
            &state.db,
            id,
            "log",
            json!({"line": format!("resuming from {}", checkpoint.display())}),
        )?;
    }
    let args = arguments(state, id, request, &data, &run, resume.as_deref())?;
    let Some(summary) = run_child(state, id, &args)? else {
        return Ok(Ended::Cancelled);
    };
    let summary: Value =
        serde_json::from_str(&summary).context("sprout train printed no JSON summary")?;
    let metrics = json!({
        "best_accuracy": summary["best_accuracy"],
        "final_accuracy": summary["final_accuracy"],
        "final_loss": summary["final_loss"],
        "epochs_run": summary["epochs_run"],
        "samples": summary["samples"],
        "seconds": summary["seconds"],
    });
    let model_name = request.model.clone().unwrap_or_else(|| request.dataset.clone());
    let output = state.layout.job(id).join("model.sprout");
    let version =
        models::register(state, &model_name, &output, Some(id), &metrics, request.promote)
            .map_err(|e| anyhow::anyhow!("cannot register the model: {}", e.message))?;
    Ok(Ended::Succeeded(version))
}

/// Runs `sprout ARGS` as job `id`'s process, its standard error turned into events, until
/// it exits: its standard output when it succeeded, `None` when the job was cancelled.
pub fn run_child(state: &AppState, id: i64, args: &[String]) -> anyhow::Result<Option<String>> {
    let mut command = Command::new(&state.sprout);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    die_with_parent(&mut command);
    let mut child =
        command.spawn().with_context(|| format!("cannot start {}", state.sprout.display()))?;
    let mut stdout = child.stdout.take().context("no standard output")?;
    let stderr = child.stderr.take().context("no standard error")?;
    state.runners.started(id, child.id());
    let summary = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let mut progress = Progress::new(state, id);
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        progress.line(&line)?;
    }
    let cancelled = state.runners.finished(id);
    let status = child.wait().context("cannot wait for the job's process")?;
    let summary = summary.join().unwrap_or_default();
    if cancelled {
        return Ok(None);
    }
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        let why = match status.signal() {
            Some(libc::SIGKILL) => "killed (out of memory?)".to_string(),
            Some(signal) => format!("killed by signal {signal}"),
            None => format!("exited with {status}"),
        };
        anyhow::bail!("sprout {} {why}: {}", args[0], progress.tail.join(" | "));
    }
    Ok(Some(summary))
}

/// Makes the child die with the runner thread that started it (Linux), so a killed service
/// leaves no training process behind.
fn die_with_parent(command: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// Turns a job's progress lines into events: throttled batch progress with images/s and an
/// ETA, every epoch, and other lines as logs.
struct Progress<'a> {
    state: &'a AppState,
    id: i64,
    started: Instant,
    /// Steps this process will run, and has run.
    steps: u64,
    done: u64,
    batch_size: u64,
    batches: u64,
    last_stored: Option<Instant>,
    tail: Vec<String>,
}

impl<'a> Progress<'a> {
    fn new(state: &'a AppState, id: i64) -> Self {
        Self {
            state,
            id,
            started: Instant::now(),
            steps: 0,
            done: 0,
            batch_size: 0,
            batches: 0,
            last_stored: None,
            tail: Vec::new(),
        }
    }

    /// Images per second and seconds to go, from this process's steps so far.
    fn rates(&self) -> (f64, f64) {
        let seconds = self.started.elapsed().as_secs_f64().max(1e-6);
        let per_second = self.done as f64 / seconds;
        let eta = if self.done == 0 {
            f64::NAN
        } else {
            self.steps.saturating_sub(self.done) as f64 / per_second
        };
        (per_second * self.batch_size as f64, eta)
    }

    fn line(&mut self, line: &str) -> anyhow::Result<()> {
        let event: Option<Value> =
            line.starts_with('{').then(|| serde_json::from_str(line).ok()).flatten();
        let Some(mut event) = event else {
            self.tail.push(line.to_string());
            if self.tail.len() > TAIL_LINES {
                self.tail.remove(0);
            }
            return Ok(self.state.hub.record(
                &self.state.db,
                self.id,
                "log",
                json!({"line": line}),
            )?);
        };
        let number = |v: &Value, key: &str| v[key].as_u64().unwrap_or(0);
        match event["event"].as_str() {
            Some("start") => {
                let (first, epochs) = (number(&event, "first"), number(&event, "epochs"));
                self.batches = number(&event, "batches");
                self.batch_size = number(&event, "batch_size");
                self.steps = epochs.saturating_sub(first) * self.batches;
                self.started = Instant::now();
                self.store("start", event)?;
            }
            Some("batch") => {
                self.done += 1;
                let last = number(&event, "batch") + 1 == self.batches;
                if last || self.last_stored.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
                    let (images_per_second, eta) = self.rates();
                    let step = (number(&event, "epoch").saturating_sub(1)) * self.batches
                        + number(&event, "batch")
                        + 1;
                    event["step"] = json!(step);
                    event["steps_per_epoch"] = json!(self.batches);
                    event["images_per_second"] = json!(images_per_second);
                    event["eta_seconds"] = json!(eta.is_finite().then_some(eta));
                    self.last_stored = Some(Instant::now());
                    self.store("progress", event)?;
                }
            }
            Some("epoch") => {
                let (_, eta) = self.rates();
                event["eta_seconds"] = json!(eta.is_finite().then_some(eta));
                self.store("epoch", event)?;
            }
            _ => self.store("log", json!({"line": line}))?,
        }
        Ok(())
    }

    fn store(&self, kind: &str, mut data: Value) -> anyhow::Result<()> {
        if let Some(object) = data.as_object_mut() {
            object.remove("event");
        }
        Ok(self.state.hub.record(&self.state.db, self.id, kind, data)?)
    }
}

#[cfg(test)]
mod tests {
    use super::last_checkpoint;

    #[test]
    fn the_newest_checkpoint_is_resumed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last_checkpoint(dir.path()), None);
        for name in [
            "checkpoint-epoch-002.ckpt",
            "checkpoint-epoch-010.ckpt",
            "metrics.csv",
            "checkpoint-epoch-009.ckpt",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        assert_eq!(last_checkpoint(dir.path()), Some(dir.path().join("checkpoint-epoch-010.ckpt")));
    }
}
