//! The leaf classifier fine-tuned on the emulated microcontroller, end to end, through the
//! `sprout` CLI: a pretrained LeafNet under a fresh target-domain head is quantized (int8
//! backbone, float head) and bundled; the `leaf-trainer` firmware embedding that bundle
//! runs under QEMU with UART0 on a TCP port; `sprout device train` streams the target
//! photos (training and held-out split) and trains there, `sprout device pull` fetches the
//! best checkpoint (its CRC-32 must be the device's), and `sprout eval` with the pulled
//! head must reproduce the accuracy the device recorded. The head starts fresh (random), so
//! the accuracy is the device's own learning; both it and the pulled head's accuracy on
//! target photos the device never saw must reach [`TARGET_ACCURACY`].
//!
//! `cargo xtask test` runs it on a small set made from scratch ([`prepare_ci`]): a short
//! pretraining on the source domain's photos of the three target classes, so the whole
//! stage stays within a few minutes. The same firmware then runs a short sparse update and
//! a short stem update (its samples streamed every epoch), each bundle written into the
//! image in place of the head-only one ([`crate::sparse_update`]). It then boots the board again and has `sprout serve` drive
//! it ([`through_service`]): registered by its port, trained on a data set, its checkpoint
//! pulled into the registry as a new version and pushed back; then the stem update's image,
//! which the service streams the data set to every epoch.
//! `cargo xtask demo` runs it with the demo's own backbone.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::cmd::Cmd;
use crate::demo::{draw, LeafSet, TARGET_CLASSES};
use crate::format_duration;
use crate::qemu::{self, Emulation};

/// Where `cargo xtask test` keeps its data, models and bundle.
const CI_DIR: &str = "target/sprout-qemu";

/// CI's source photos: the source domain's pictures of the three target classes only
/// (seven classes learn too slowly for CI's two minutes of pretraining). The device still starts
/// from a fresh head (`--fresh head`), so what it reaches is its own training's.
const CI_SOURCE: LeafSet = LeafSet {
    folder: "source",
    domain: "source",
    classes: TARGET_CLASSES,
    per_class: "200",
    seed: "1",
};

/// The photos sent to the device (in CI and in the demo): 21 to train on and 7 held out
/// per class, about a minute and a half of transfer under QEMU.
pub const DEVICE_TARGET: LeafSet = LeafSet {
    folder: "target-device",
    domain: "target",
    classes: TARGET_CLASSES,
    per_class: "28",
    seed: "3",
};

/// The photos of CI's sparse update, a few per class (6 to train on, 2 held out): its path
/// end to end within CI's time, not a comparison.
const SPARSE_TARGET: LeafSet = LeafSet {
    folder: "target-sparse",
    domain: "target",
    classes: TARGET_CLASSES,
    per_class: "8",
    seed: "5",
};

/// Epochs of CI's sparse update.
const SPARSE_EPOCHS: u32 = 3;
/// Epochs of CI's stem update (each streams its 24 photos again, about half a minute).
const STEM_EPOCHS: u32 = 2;

/// Target photos the device never sees (another seed): the host evaluates the pulled
/// checkpoint on their validation split, an accuracy that no choice of the device's
/// (such as the best epoch on its held-out photos) can flatter.
pub const UNSEEN_TARGET: LeafSet = LeafSet {
    folder: "target-unseen",
    domain: "target",
    classes: TARGET_CLASSES,
    per_class: "200",
    seed: "4",
};

/// How a backbone is pretrained, but for its epochs: every parameter, AdamW at 0.003 decaying
/// on a cosine, batch 16.
const PRETRAIN: &[&str] = &[
    "--trainable",
    "all",
    "--optimizer",
    "adamw",
    "--lr",
    "0.003",
    "--schedule",
    "cosine",
    "--batch-size",
    "16",
    "--seed",
    "1",
];

/// CI's short pretraining: 12 epochs (about 100 s in the dev build; 8 epochs on 120 photos
/// per class left a backbone under which a fresh head stayed below 90% on unseen target
/// photos).
const CI_PRETRAIN_EPOCHS: u32 = 12;

/// The int8 layers an update may train (`sprout quantize --trainable-int8`): LeafNet's last
/// three blocks (the sparse update's) and its first three (the stem update's).
pub const TRAINABLE_INT8: &str =
    "features.0.*,features.1.*,features.2.*,features.8.*,features.9.*,features.10.*";

/// Epochs the device trains for.
const DEVICE_EPOCHS: u32 = 30;
/// How long the host waits for each answer before sending a request again (`sprout device
/// --timeout-ms`; 8 sends before it reconnects). QEMU on a loaded machine leaves requests
/// unanswered for a while: at the 500 ms default a sparse run's 84 samples took 150 resends
/// in 2,181 frames, and a stretch of 8 unanswered ones ended a run.
const LINK_TIMEOUT_MS: &str = "3000";
/// Stack bytes that must stay unused on the device.
const STACK_HEADROOM: usize = 4096;
/// The accuracy the device must reach on its held-out photos, and the pulled checkpoint
/// on photos the device never saw.
const TARGET_ACCURACY: f64 = 90.0;

/// The files of one on-device fine-tune.
#[derive(Clone)]
pub struct Leaf {
    /// The int8-backbone, float-head model the bundle was made from.
    pub model: PathBuf,
    pub bundle: PathBuf,
    /// The photos sent to the device (`train/` and `val/`).
    pub data: PathBuf,
    /// Target photos the device never sees ([`UNSEEN_TARGET`]).
    pub unseen: PathBuf,
    /// Where the pulled checkpoint goes.
    pub checkpoint: PathBuf,
    /// Epochs the device trains for.
    pub epochs: u32,
}

/// The sprout CLI `cargo xtask test` uses: the dev build that the workspace tests build
/// (`cargo test --workspace` unifies features differently from `cargo build`, so building
/// it the same way makes this a no-op after the tests stage instead of a full rebuild).
pub fn ci_sprout(root: &Path) -> Result<String> {
    Cmd::cargo(root).args(crate::test::WORKSPACE_TESTS).args(["--no-run"]).run()?;
    let sprout = root.join("target/debug/sprout");
    Ok(sprout.to_str().context("the workspace path is not UTF-8")?.to_owned())
}

/// Makes CI's photos and pretrained backbone (once per checkout; later runs reuse them)
/// and, every time, the head-only and sparse-update bundles from them; returns CI's files
/// (the head-only bundle's, which the boards stage embeds).
pub fn prepare_ci(root: &Path) -> Result<Leaf> {
    let work = root.join(CI_DIR);
    let sprout = ci_sprout(root)?;
    let backbone = pretrain(root, &sprout, &work, &CI_SOURCE, CI_PRETRAIN_EPOCHS)?;
    let leaf = bundle_for_device(root, &sprout, &backbone, &work)?;
    crate::sparse_update::sparse_bundle(root, &sprout, &leaf)?;
    crate::sparse_update::stem_bundle(root, &sprout, &leaf)?;
    Ok(leaf)
}

/// `work/backbone.sprout`: LeafNet trained as [`PRETRAIN`] says for `epochs` on the photos
/// of `source` (drawn in `work`), unless an earlier run left it there.
pub fn pretrain(
    root: &Path,
    sprout: &str,
    work: &Path,
    source: &LeafSet,
    epochs: u32,
) -> Result<PathBuf> {
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let backbone = work.join("backbone.sprout");
    if is_current_model(&backbone) {
        println!("reusing the pretrained backbone {}", backbone.display());
        return Ok(backbone);
    }
    let data = work.join(source.folder);
    draw(root, sprout, &data, source)?;
    Cmd::new(sprout, root)
        .args(["train", "--zoo", "leafnet", "--data", &data.to_string_lossy()])
        .args(PRETRAIN.iter().copied())
        .args(["--epochs", &epochs.to_string()])
        .args(["--out-dir", &fresh_run_folder(&work.join("pretrain-run"))?])
        .args(["-o", &backbone.to_string_lossy()])
        .run()?;
    Ok(backbone)
}

/// Whether `path` holds a model this sprout reads: a model saved by an older format version
/// (or damaged) is made again rather than reused.
pub fn is_current_model(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|bytes| sprout_core::load_model(&bytes).is_ok())
}

/// `dir` emptied for a new training run (`sprout train --out-dir` takes only a new or empty
/// folder, so a rerun must not find the last run's checkpoints there), as a string.
pub fn fresh_run_folder(dir: &Path) -> Result<String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(dir.to_str().context("the run folder's path is not UTF-8")?.to_owned())
}

/// CI's bundle, made when missing.
pub fn ci_bundle(root: &Path) -> Result<PathBuf> {
    let leaf = leaf_files(&root.join(CI_DIR));
    match leaf.bundle.exists() {
        true => Ok(leaf.bundle),
        false => Ok(prepare_ci(root)?.bundle),
    }
}

fn leaf_files(work: &Path) -> Leaf {
    Leaf {
        model: work.join("leaf-int8.sprout"),
        bundle: work.join("leaf.bundle"),
        data: work.join(DEVICE_TARGET.folder),
        unseen: work.join(UNSEEN_TARGET.folder),
        checkpoint: work.join("device.ckpt"),
        epochs: DEVICE_EPOCHS,
    }
}

/// From a pretrained `backbone`: the device's photos, a fresh 3-class head over the
/// backbone, the int8 model (calibrated on the device's training photos, head kept float,
/// [`TRAINABLE_INT8`] kept trainable for a sparse update) and its head-only bundle, all in
/// `work`.
pub fn bundle_for_device(root: &Path, sprout: &str, backbone: &Path, work: &Path) -> Result<Leaf> {
    let leaf = leaf_files(work);
    let path = |name: &str| work.join(name).to_string_lossy().into_owned();
    let data = leaf.data.to_string_lossy().into_owned();
    draw(root, sprout, &leaf.data, &DEVICE_TARGET)?;
    draw(root, sprout, &leaf.unseen, &UNSEEN_TARGET)?;
    Cmd::new(sprout, root)
        .args(["train", "--zoo", "leafnet", "--init-from", &backbone.to_string_lossy()])
        .args(["--fresh", "head", "--data", &data, "--trainable", "head"])
        .args(["--epochs", "0", "--seed", "2"])
        .args(["--out-dir", &fresh_run_folder(&work.join("fresh-head-run"))?])
        .args(["-o", &path("fresh-head.sprout")])
        .run()?;
    let model = leaf.model.to_string_lossy().into_owned();
    Cmd::new(sprout, root)
        .args(["quantize", &path("fresh-head.sprout"), "--calib", &data])
        .args(["--keep-float", "head", "--trainable-int8", TRAINABLE_INT8, "-o", &model])
        .run()?;
    Cmd::new(sprout, root).args(["bundle", &model, "-o", &leaf.bundle.to_string_lossy()]).run()?;
    Ok(leaf)
}

/// `cargo xtask test`'s stage: CI's head-only fine-tune on the firmware the boards stage
/// built, then a short sparse and stem update on the same firmware with their bundles
/// written in ([`crate::sparse_update::compare`]), then the head-only firmware driven by
/// the service.
pub fn test(root: &Path) -> Result<()> {
    let work = root.join(CI_DIR);
    let leaf = leaf_files(&work);
    let sprout = ci_sprout(root)?;
    let elf = crate::boards::elf(root, "leaf-trainer");
    let outcome = fine_tune(root, &sprout, &elf, &leaf)?;
    let sparse = Leaf {
        data: work.join(SPARSE_TARGET.folder),
        epochs: SPARSE_EPOCHS,
        ..crate::sparse_update::sparse_files(&leaf)
    };
    draw(root, &sprout, &sparse.data, &SPARSE_TARGET)?;
    println!(
        "a short sparse update: {} photos per class, {SPARSE_EPOCHS} epochs (`cargo xtask bench \
         cortex-m` compares both on the same photos)",
        SPARSE_TARGET.per_class
    );
    let stem = Leaf {
        data: sparse.data.clone(),
        epochs: STEM_EPOCHS,
        ..crate::sparse_update::stem_files(&leaf)
    };
    println!("a short stem update: the same photos streamed every epoch, {STEM_EPOCHS} epochs");
    let updates =
        [(crate::sparse_update::SPARSE_NAME, &sparse), (crate::sparse_update::STEM_NAME, &stem)];
    crate::sparse_update::compare(root, &sprout, &elf, (&leaf, outcome), &updates)?;
    let stem_elf = stem.bundle.with_extension("elf");
    through_service(root, &sprout, (&elf, &stem_elf), &leaf)
}

/// Runs `talk` with the board `elf` under QEMU on the port it gets, showing the board's log
/// when it fails.
fn with_board<T>(elf: &Path, talk: impl FnOnce(&str) -> Result<T>) -> Result<T> {
    let emulation = Emulation::start(elf)?;
    let result = talk(&emulation.port_spec());
    let log = emulation.stop()?;
    if result.is_err() {
        println!("--- device log ---");
        for line in &log {
            println!("  {line}");
        }
    }
    result
}

/// Epochs the board trains for when the service drives it.
const SERVICE_EPOCHS: u32 = 3;

/// Epochs the stem update's board trains for when the service drives it (each streams the
/// data set's 21 photos).
const SERVICE_STEM_EPOCHS: u32 = 1;

/// `sprout serve` around the boards `elfs` (head-only, stem update) in turn: the int8 model
/// becomes version 1 of `leaf`, the head-only board is registered on its port (the service
/// checks it runs that version's bundle), trains for [`SERVICE_EPOCHS`] on the device
/// photos' validation split (21 photos, every fifth of a class held out again), and a pull
/// must register version 2 with the device's record, whose checkpoint a push then sends
/// back; then the stem update's board, registered with its bundle's options, is streamed
/// the photos for [`SERVICE_STEM_EPOCHS`] and pulled into version 3.
fn through_service(
    root: &Path,
    sprout: &str,
    (elf, stem_elf): (&Path, &Path),
    leaf: &Leaf,
) -> Result<()> {
    use crate::bench_serve::{finished_job, multipart, read_photos, Client, Service};
    let started = Instant::now();
    let work = root.join(CI_DIR).join("serve");
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    let data = work.join("data");
    let token = Cmd::new(sprout, root)
        .args(["serve", "token", "create", "--scope", "admin", "--data-dir"])
        .args([data.to_string_lossy().into_owned()])
        .read()?
        .trim()
        .to_string();
    let service = Service::start(Path::new(sprout), &data, &work.join("serve.log"))?;
    let client = Client { base: service.base.clone(), token };
    let agent = Client::agent();
    let json =
        |value: serde_json::Value| Some(("application/json", value.to_string().into_bytes()));
    let post = |path: &str, value: serde_json::Value, status: u16| -> Result<serde_json::Value> {
        Ok(serde_json::from_str(&client.expect(&agent, "POST", path, json(value), status)?)?)
    };
    let model =
        std::fs::read(&leaf.model).with_context(|| format!("reading {}", leaf.model.display()))?;
    let body = Some(("application/octet-stream", model));
    client.expect(&agent, "POST", "/api/v1/models/leaf/versions", body, 201)?;
    let classes: Vec<&str> = TARGET_CLASSES.split(',').collect();
    post("/api/v1/datasets", serde_json::json!({"name": "device", "classes": classes}), 201)?;
    let (kind, body) = multipart(&read_photos(&leaf.data, &["val"])?);
    client.expect(&agent, "POST", "/api/v1/datasets/device/images", Some((&kind, body)), 200)?;
    let minutes = std::time::Duration::from_secs(300);
    with_board(elf, |port| {
        let board = serde_json::json!({"name": "qemu", "port": port, "model": "leaf"});
        let board = post("/api/v1/boards", board, 201)?;
        println!("the service registered the board: {board}");
        let request = serde_json::json!({"dataset": "device", "epochs": SERVICE_EPOCHS});
        let trained = post("/api/v1/boards/qemu/train", request, 201)?;
        finished_job(&client, &agent, &trained, minutes)?;
        let events = format!("/api/v1/jobs/{}/events", trained["id"]);
        let accuracies = epoch_accuracies(&client.expect(&agent, "GET", &events, None, 200)?)?;
        let pulled = post("/api/v1/boards/qemu/pull", serde_json::json!({}), 201)?;
        let pulled = finished_job(&client, &agent, &pulled, minutes)?;
        if pulled["version"] != 2 {
            bail!("the pull registered no version 2: {pulled}");
        }
        let leaf_model: serde_json::Value = serde_json::from_str(&client.expect(
            &agent,
            "GET",
            "/api/v1/models/leaf",
            None,
            200,
        )?)?;
        let metrics = &leaf_model["versions"][1]["metrics"];
        // The board keeps the checkpoint of the first epoch that reached its best held-out
        // accuracy (later epochs that only tie it do not replace it), so "epoch 1" after three
        // is what a board whose first epoch is already its best should say.
        let epoch = metrics["device_epoch"].as_u64().unwrap_or(0);
        if metrics["board"] != "qemu" || !(1..=u64::from(SERVICE_EPOCHS)).contains(&epoch) {
            bail!("version 2 does not record the board's training: {leaf_model}");
        }
        let best = accuracies.iter().map(|a| a.1).fold(f64::NEG_INFINITY, f64::max);
        let first_best = accuracies.iter().find(|a| a.1 == best).map(|a| a.0);
        let every_epoch = accuracies.len() == SERVICE_EPOCHS as usize;
        if every_epoch && first_best != Some(epoch) {
            bail!(
                "the board's held-out accuracies per epoch were {accuracies:?}, so its checkpoint \
                 should be epoch {first_best:?}'s, but version 2 records epoch {epoch}"
            );
        }
        let pushed = post(
            "/api/v1/boards/qemu/push",
            serde_json::json!({"model": "leaf", "version": 2}),
            201,
        )?;
        finished_job(&client, &agent, &pushed, minutes)?;
        let per_epoch: Vec<String> =
            accuracies.iter().map(|(e, a)| format!("{e}: {:.1}%", 100.0 * a)).collect();
        println!(
            "the service trained the board {SERVICE_EPOCHS} epochs (held-out accuracy per epoch \
             {}), pulled version 2 (the checkpoint of epoch {epoch}, the first at the best \
             accuracy {}) and pushed it back in {}",
            per_epoch.join(", "),
            metrics["device_accuracy"],
            format_duration(started.elapsed())
        );
        Ok(())
    })?;
    with_board(stem_elf, |port| {
        let options = serde_json::json!({"trainable": crate::sparse_update::STEM,
            "batch_size": 1, "momentum": 0.0});
        let board = serde_json::json!({"name": "stem", "port": port, "model": "leaf",
            "version": 1, "bundle_options": options});
        let board = post("/api/v1/boards", board, 201)?;
        if board["streams"] != true {
            bail!("the stem update's board does not train from its input: {board}");
        }
        let started = Instant::now();
        let request = serde_json::json!({"dataset": "device", "epochs": SERVICE_STEM_EPOCHS});
        let trained = post("/api/v1/boards/stem/train", request, 201)?;
        finished_job(&client, &agent, &trained, minutes)?;
        let events = format!("/api/v1/jobs/{}/events", trained["id"]);
        let accuracies = epoch_accuracies(&client.expect(&agent, "GET", &events, None, 200)?)?;
        if accuracies.len() != SERVICE_STEM_EPOCHS as usize {
            bail!("the streamed job reported epochs {accuracies:?}");
        }
        let pulled = post("/api/v1/boards/stem/pull", serde_json::json!({}), 201)?;
        let pulled = finished_job(&client, &agent, &pulled, minutes)?;
        if pulled["version"] != 3 {
            bail!("the stem board's pull registered no version 3: {pulled}");
        }
        println!(
            "the service streamed the photos to the stem update's board for \
             {SERVICE_STEM_EPOCHS} epoch (held-out accuracy {:.1}%) and pulled version 3 in {}",
            100.0 * accuracies[0].1,
            format_duration(started.elapsed())
        );
        Ok(())
    })
}

/// `(epoch, held-out accuracy)` of each `epoch` event in a job's finished SSE stream.
fn epoch_accuracies(stream: &str) -> Result<Vec<(u64, f64)>> {
    let mut accuracies = Vec::new();
    for data in stream.lines().filter_map(|line| line.strip_prefix("data: ")) {
        let event: serde_json::Value = serde_json::from_str(data)
            .with_context(|| format!("an event that is not JSON: {data}"))?;
        if event["kind"] == "epoch" {
            let epoch = event["data"]["epoch"].as_u64();
            let accuracy = event["data"]["val_accuracy"].as_f64();
            match epoch.zip(accuracy) {
                Some(pair) => accuracies.push(pair),
                None => bail!("an epoch event without epoch and val_accuracy: {event}"),
            }
        }
    }
    Ok(accuracies)
}

/// What a fine-tune on the device reached.
pub struct Outcome {
    /// Held-out accuracy the device recorded with its best checkpoint, in percent.
    pub device_accuracy: f64,
    /// The host's accuracy with the pulled checkpoint on the same photos, in percent.
    pub host_accuracy: f64,
    /// The host's accuracy with the pulled checkpoint on photos the device never saw.
    pub unseen_accuracy: f64,
}

/// Runs the fine-tune on `elf` under QEMU and checks it (see the module documentation).
pub fn fine_tune(root: &Path, sprout: &str, elf: &Path, leaf: &Leaf) -> Result<Outcome> {
    let (outcome, _) = run_on_board(root, sprout, elf, leaf)?;
    if outcome.device_accuracy < TARGET_ACCURACY {
        bail!(
            "the device reached {:.1}% held-out accuracy, below the {TARGET_ACCURACY}% target",
            outcome.device_accuracy
        );
    }
    if outcome.unseen_accuracy < TARGET_ACCURACY {
        bail!(
            "the pulled checkpoint scores {:.1}% on target photos the device never saw, below \
             the {TARGET_ACCURACY}% target",
            outcome.unseen_accuracy
        );
    }
    Ok(outcome)
}

/// Runs the fine-tune on `elf` under QEMU and checks what does not depend on how well it
/// learns: the pulled checkpoint is the device's and scores what the device recorded, the
/// stack kept its headroom. Returns the outcome and the device's log.
pub fn run_on_board(
    root: &Path,
    sprout: &str,
    elf: &Path,
    leaf: &Leaf,
) -> Result<(Outcome, Vec<String>)> {
    qemu::ensure_installed(root)?;
    let emulation = Emulation::start(elf)?;
    let port = emulation.port_spec();
    let result = converse(root, sprout, &port, leaf);
    let log = emulation.stop()?;
    println!("--- device log ---");
    for line in &log {
        println!("  {line}");
    }
    let outcome = result?;
    check_stack(&log)?;
    Ok((outcome, log))
}

/// Train, pull and evaluate over `port`.
fn converse(root: &Path, sprout: &str, port: &str, leaf: &Leaf) -> Result<Outcome> {
    let started = Instant::now();
    let data = leaf.data.to_string_lossy().into_owned();
    Cmd::new(sprout, root)
        .args(["device", "train", "--port", port, "--data", &data])
        .args(["--epochs", &leaf.epochs.to_string(), "--timeout-ms", LINK_TIMEOUT_MS])
        .run()?;
    println!(
        "device training (transfer, backbone, head) took {}",
        format_duration(started.elapsed())
    );

    let checkpoint = leaf.checkpoint.to_string_lossy().into_owned();
    let pulled = Cmd::new(sprout, root)
        .args(["device", "pull", "--port", port, "-o", &checkpoint])
        .args(["--timeout-ms", LINK_TIMEOUT_MS])
        .read()?;
    print!("{pulled}");
    let device_crc = field(&pulled, "CRC-32 ", ")")
        .and_then(|crc| u32::from_str_radix(crc.trim_start_matches("0x"), 16).ok())
        .context("`sprout device pull` printed no CRC-32")?;
    let bytes = sprout_device::read_checkpoint_file(&leaf.checkpoint)?;
    let file_crc = sprout_core::format::container::CRC32.checksum(&bytes);
    if file_crc != device_crc {
        bail!("the pulled checkpoint's CRC-32 {file_crc:#010x} is not the device's {device_crc:#010x}");
    }
    println!("the pulled checkpoint's CRC-32 {file_crc:#010x} is the device's");

    let evaluate = |data: &str| {
        Cmd::new(sprout, root)
            .args(["eval", &leaf.model.to_string_lossy(), "--data", data])
            .args(["--device-checkpoint", &checkpoint, "--bundle", &leaf.bundle.to_string_lossy()])
            .read()
    };
    let evaluated = evaluate(&data)?;
    print!("{evaluated}");
    let device_accuracy = percent(&evaluated, "device held-out accuracy ")?;
    let host_accuracy = percent(&evaluated, "\naccuracy ")?;
    let samples = sample_count(&evaluated)?;
    // The device's f32 head adds in another order than the host's: a sample on the
    // decision boundary may flip, no more.
    if (device_accuracy - host_accuracy).abs() > 100.0 / samples + 0.05 {
        bail!(
            "the host evaluates the pulled checkpoint at {host_accuracy:.1}%, the device \
             recorded {device_accuracy:.1}%"
        );
    }
    let unseen = leaf.unseen.join("val");
    let evaluated = evaluate(&unseen.to_string_lossy())?;
    let unseen_accuracy = percent(&evaluated, "\naccuracy ")?;
    let unseen_samples = sample_count(&evaluated)?;
    println!(
        "on-device fine-tune: device held-out accuracy {device_accuracy:.1}%, host evaluation \
         of the pulled checkpoint {host_accuracy:.1}% ({samples} samples), on {unseen_samples} \
         photos the device never saw {unseen_accuracy:.1}%"
    );
    Ok(Outcome { device_accuracy, host_accuracy, unseen_accuracy })
}

/// The percentage `sprout eval` printed after `label`.
fn percent(evaluated: &str, label: &str) -> Result<f64> {
    field(evaluated, label, "%")
        .and_then(|t| t.trim().parse().ok())
        .with_context(|| format!("`sprout eval` printed no `{}`", label.trim()))
}

/// The sample count `sprout eval` printed after its accuracy.
fn sample_count(evaluated: &str) -> Result<f64> {
    field(evaluated, "% (", " samples")
        .and_then(|n| n.parse::<f64>().ok())
        .context("`sprout eval` printed no sample count")
}

/// Checks the deepest stack use the device logged (it logs whenever the stack reached
/// deeper, through training, pushes and pulls) against its stack region: the firmware fits
/// its RAM only if the stack never reached the statics, with [`STACK_HEADROOM`] spare.
fn check_stack(log: &[String]) -> Result<()> {
    let (peak, size) = log
        .iter()
        .filter_map(|line| {
            let used = field(line, "stack: ", " of ")?.parse::<usize>().ok()?;
            let size = field(line, " of ", " bytes used")?.parse::<usize>().ok()?;
            Some((used, size))
        })
        .max()
        .context("the device logged no stack use")?;
    println!("device stack: at most {peak} of {size} bytes used");
    if peak + STACK_HEADROOM > size {
        bail!(
            "the device's stack reached {peak} of its {size} bytes, less than \
             {STACK_HEADROOM} bytes from the statics"
        );
    }
    Ok(())
}

/// The text between the first `start` in `text` and the next `end`.
pub fn field<'t>(text: &'t str, start: &str, end: &str) -> Option<&'t str> {
    let from = text.find(start)? + start.len();
    let len = text[from..].find(end)?;
    Some(&text[from..from + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_accuracies_come_from_the_epoch_events_of_a_stream() {
        let stream = "id: 4\nevent: start\ndata: {\"kind\":\"start\",\"data\":{\"epochs\":2}}\n\n\
             id: 5\nevent: epoch\ndata: {\"kind\":\"epoch\",\"data\":{\"epoch\":1,\"val_accuracy\":0.5}}\n\n\
             id: 6\nevent: epoch\ndata: {\"kind\":\"epoch\",\"data\":{\"epoch\":2,\"val_accuracy\":0.75}}\n\n";
        assert_eq!(epoch_accuracies(stream).unwrap(), [(1, 0.5), (2, 0.75)]);
        let broken = "data: {\"kind\":\"epoch\",\"data\":{\"epoch\":1}}\n";
        assert!(epoch_accuracies(broken).unwrap_err().to_string().contains("without"));
    }

    #[test]
    fn fields_are_found_between_their_markers() {
        let text =
            "pulled 4.6 KiB (4672 bytes, CRC-32 0x1c418e31) to x\naccuracy 96.7% (30 samples)";
        assert_eq!(field(text, "CRC-32 ", ")"), Some("0x1c418e31"));
        assert_eq!(field(text, "\naccuracy ", "%"), Some("96.7"));
        assert_eq!(field(text, "% (", " samples"), Some("30"));
        assert_eq!(field(text, "missing", ")"), None);
    }

    #[test]
    fn the_stack_check_wants_headroom_and_a_log_line() {
        let log = |line: &str| vec!["INFO training ended".to_string(), line.to_string()];
        assert!(check_stack(&log("INFO stack: 12000 of 38240 bytes used at most")).is_ok());
        let error = check_stack(&log("INFO stack: 36000 of 38240 bytes used at most"));
        assert!(error.unwrap_err().to_string().contains("36000 of its 38240"));
        assert!(check_stack(&log("INFO nothing")).is_err());
        let deeper_later = [
            "INFO stack: 12000 of 38240 bytes used at most".to_string(),
            "INFO stack: 37000 of 38240 bytes used at most".to_string(),
        ];
        assert!(check_stack(&deeper_later).unwrap_err().to_string().contains("37000"));
    }
}
