//! `cargo xtask bench fleet`: whether federating pays. Five boxes, each a `sprout serve`
//! with skewed photos of its own domain, fine-tune every layer of a pretrained leafnet on
//! Flower for ten rounds with FedAvg (batch-norm variances pooled across boxes, the learning
//! rate decaying from round to round on a cosine, batch norms fixed to the global running
//! statistics after the first rounds); after each round the global model is
//! evaluated on a held-out set from every domain, beside each box trained alone on its own
//! photos and one box trained on all of them pooled, both through the same service for the
//! same total epochs with the same trainable set, optimizer, batch and learning rate, decayed
//! on a cosine over the whole job.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::bench;
use crate::bench_serve::{finished_job, read_photos, Client};
use crate::cmd::Cmd;
use crate::fleet::{fresh, pretrain, venv, EdgeBox, Federation, CLASSES, MODEL, SIZE};

/// Each box's domain: two boxes see the source scenes (broad leaves on soil), three the
/// target scenes (narrow leaves on grass and grey benches).
const DOMAINS: [&str; 5] = ["source", "source", "target", "target", "target"];
const ROUNDS: u32 = 10;
/// A round's epochs on each box: 8 at half the rate of 2 lifted the federation more than
/// its pooled baseline of as many epochs gained (host-tools/fleet/README.md).
const LOCAL_EPOCHS: u32 = 8;
/// Photos of a box's own class and of each other class: box `i` mostly sees class `i % 3`.
const MAJOR: usize = 24;
const MINOR: usize = 6;
/// Held-out photos per class and domain: 144 in all, so one photo is 0.7 points.
const HELD_OUT: usize = 24;
/// What every box and baseline trains: every layer, batch norms included. With the batch
/// norms frozen, their statistics stay the source domain's and the target photos suffer;
/// trained, each box's statistics describe its own domain and main class, which the
/// ServerApp's pooled variances reconcile.
const TRAINABLE: &str = "all";
/// SGD (momentum 0.9): every layer trained at 0.01 swung the global accuracy by more than at
/// 0.005 from round to round; with 8 local epochs 0.005 was less steady across seeds.
const LR: f32 = 0.0025;
/// The learning rate over the rounds (the ServerApp's `lr-schedule`) and over a baseline's
/// job (`schedule`).
const SCHEDULE: &str = "cosine";
const BATCH: u32 = 8;
/// FixBN: rounds whose boxes train with batch statistics before they train with the global
/// model's running statistics (the ServerApp's `fix-batch-norm-after`); one round of 8
/// epochs moves the running statistics most of the way to a box's data. The baselines
/// train with batch statistics throughout: their batches are not one box's.
const FIX_BATCH_NORM_AFTER: u32 = 1;
/// The held-out data sets every box has, one per domain.
const HELD_OUT_SETS: [&str; 2] = ["held-out-source", "held-out-target"];
/// How long the federation and each baseline job may take.
const LIMIT: Duration = Duration::from_secs(3600);
/// How long the ServerApp waits for the boxes' replies in a round (a round takes about a
/// minute on an idle 2-core machine); a box that does not answer in time is left out.
const ROUND_TIMEOUT: Duration = Duration::from_secs(300);

/// `cargo xtask bench fleet [--sprout PATH]`.
pub fn run(root: &Path, options: &[&str]) -> Result<()> {
    let sprout = match options {
        [] => bench::release_sprout(root)?,
        // Absolute, for the boxes and Flower's processes run in folders of their own.
        ["--sprout", path] => std::fs::canonicalize(path)
            .with_context(|| format!("--sprout {path}: no such program"))?,
        _ => bail!("usage: cargo xtask bench fleet [--sprout PATH]"),
    };
    let python = venv(root)?;
    let work = fresh(&root.join("target/bench-fleet"))?;
    let started = Instant::now();
    let base = pretrain(root, &sprout, &work)?;
    let classes: Vec<&str> = CLASSES.split(',').collect();
    let mut held_out = Vec::new();
    for (d, domain) in ["source", "target"].into_iter().enumerate() {
        let dir = work.join(format!("held-out-{domain}"));
        leaves(root, &sprout, &dir, domain, CLASSES, HELD_OUT, 900 + d as u64)?;
        held_out.push(read_photos(&dir, &["train", "val"])?);
    }
    let mut own = Vec::new();
    for (i, domain) in DOMAINS.iter().enumerate() {
        let mut photos = Vec::new();
        for (c, class) in classes.iter().enumerate() {
            let count = if c == i % classes.len() { MAJOR } else { MINOR };
            let dir = work.join(format!("box-{i}/photos/{class}"));
            leaves(root, &sprout, &dir, domain, class, count, (10 * i + c) as u64)?;
            let read = read_photos(&dir, &["train", "val"])?;
            photos
                .extend(read.into_iter().map(|(k, name, bytes)| (k, format!("{i}-{name}"), bytes)));
        }
        own.push(photos);
    }
    let pooled: Vec<_> = own.iter().flatten().cloned().collect();
    let boxes: Vec<EdgeBox> = own
        .iter()
        .enumerate()
        .map(|(i, photos)| {
            let mut datasets = vec![("train", photos.clone())];
            datasets.extend(HELD_OUT_SETS.into_iter().zip(held_out.iter().cloned()));
            if i == 0 {
                datasets.push(("pooled", pooled.clone()));
            }
            EdgeBox::start(&sprout, &work.join(format!("box-{i}")), &base, &datasets)
        })
        .collect::<Result<_>>()?;
    println!(
        "{} boxes ({} photos each, {} pooled), {} held-out photos; setup {:.0} s",
        DOMAINS.len(),
        own[0].len(),
        pooled.len(),
        held_out.iter().map(Vec::len).sum::<usize>(),
        started.elapsed().as_secs_f64()
    );

    let mut fleet = Federation::start(root, &python, &work, boxes, &HELD_OUT_SETS.join(","))?;
    let config = format!(
        "num-server-rounds={ROUNDS} min-nodes={} local-epochs={LOCAL_EPOCHS} lr={LR} \
         batch-size={BATCH} trainable='{TRAINABLE}' lr-schedule='{SCHEDULE}' \
         fix-batch-norm-after={FIX_BATCH_NORM_AFTER}",
        DOMAINS.len()
    );
    let federated = Instant::now();
    let lines = fleet.run(root, &config, LIMIT, ROUND_TIMEOUT, &mut |_, _| Ok(()))?;
    let rounds: Vec<&Value> = lines.iter().filter(|l| l["round"].is_u64()).collect();
    if rounds.len() != ROUNDS as usize {
        bail!("{} of {ROUNDS} rounds were evaluated\n{}", rounds.len(), fleet.log_tail());
    }
    let global = rounds
        .iter()
        .map(|l| {
            let domains = HELD_OUT_SETS.map(|set| l["datasets"][set].as_f64());
            match (l["accuracy"].as_f64(), domains) {
                (Some(all), [Some(source), Some(target)]) => Ok(Accuracy { all, source, target }),
                _ => bail!("a round without its accuracy on every held-out set: {l}"),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let federated = federated.elapsed().as_secs_f64();

    // The baselines, each box's service training for the federation's total epochs.
    let baselines = Instant::now();
    let agent = Client::agent();
    let epochs = ROUNDS * LOCAL_EPOCHS;
    let mut jobs = Vec::new();
    for (i, edge) in fleet.boxes.iter().enumerate() {
        jobs.push((format!("box {i} alone"), edge, start_job(edge, &agent, "train", epochs)?));
    }
    let pooled = start_job(&fleet.boxes[0], &agent, "pooled", epochs)?;
    jobs.push(("pooled".into(), &fleet.boxes[0], pooled));
    let mut accuracy = Vec::new();
    for (name, edge, created) in &jobs {
        let job = finished_job(&edge.client, &agent, created, LIMIT)?;
        accuracy.push((name.clone(), held_out_accuracy(edge, &agent, &job["version"])?));
    }
    let (pooled, singles) = accuracy.split_last().context("no baselines")?;
    let pooled = &pooled.1;
    let best = singles.iter().map(|(_, a)| a.all).fold(f64::NAN, f64::max);
    for (round, g) in global.iter().enumerate() {
        println!(
            "fleet round {}: global {:.1}%, best single box {:.1}%, pooled {:.1}%",
            round + 1,
            100.0 * g.all,
            100.0 * best,
            100.0 * pooled.all
        );
    }
    println!("per held-out domain (source / target):");
    for (round, g) in global.iter().enumerate() {
        println!("  global after round {}: {g}", round + 1);
    }
    for (name, a) in singles {
        println!("  {name}: {a}");
    }
    println!("  pooled: {pooled}");
    let last = global[global.len() - 1].all;
    println!(
        "goal (global within 2 points of pooled, 10 above the best single box): {:+.1} points \
         from pooled, {:+.1} over the best single box; federation {federated:.0} s, baselines \
         {:.0} s ({epochs} epochs each)",
        100.0 * (last - pooled.all),
        100.0 * (last - best),
        baselines.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A model's accuracy on all the held-out photos and on each domain's.
struct Accuracy {
    all: f64,
    source: f64,
    target: f64,
}

impl std::fmt::Display for Accuracy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (all, source, target) = (100.0 * self.all, 100.0 * self.source, 100.0 * self.target);
        write!(f, "{all:.1}% ({source:.1}% / {target:.1}%)")
    }
}

/// The accuracy of `version` of the box's model on the held-out sets, evaluated by its service.
fn held_out_accuracy(edge: &EdgeBox, agent: &ureq::Agent, version: &Value) -> Result<Accuracy> {
    let mut measured = Vec::new();
    for set in HELD_OUT_SETS {
        let path = format!("/api/v1/models/{MODEL}/versions/{version}/evaluate?dataset={set}");
        let answer: Value =
            serde_json::from_str(&edge.client.expect(agent, "POST", &path, None, 200)?)?;
        match (answer["accuracy"].as_f64(), answer["samples"].as_f64()) {
            (Some(accuracy), Some(samples)) => measured.push((accuracy, samples)),
            _ => bail!("an evaluation without accuracy and samples: {answer}"),
        }
    }
    let samples: f64 = measured.iter().map(|(_, n)| n).sum();
    Ok(Accuracy {
        all: measured.iter().map(|(a, n)| a * n).sum::<f64>() / samples,
        source: measured[0].0,
        target: measured[1].0,
    })
}

/// `count` photos per class of `classes` in `domain` (size [`SIZE`], seed `seed`) in `dir`.
fn leaves(
    root: &Path,
    sprout: &Path,
    dir: &Path,
    domain: &str,
    classes: &str,
    count: usize,
    seed: u64,
) -> Result<()> {
    Cmd::new(&sprout.display().to_string(), root)
        .args(["data", "leaves", "--domain", domain, "--classes", classes, "--size", SIZE])
        .args(["--per-class", &count.to_string(), "--seed", &seed.to_string(), "-o"])
        .args([dir.display().to_string()])
        .run()
}

/// Starts the baselines' fine-tuning job from the box's base version on its data set
/// `dataset`.
fn start_job(edge: &EdgeBox, agent: &ureq::Agent, dataset: &str, epochs: u32) -> Result<Value> {
    let request = json!({
        "dataset": dataset,
        "base": {"model": {"name": MODEL, "version": 1}},
        "model": MODEL,
        "trainable": TRAINABLE,
        "lr": LR,
        "schedule": SCHEDULE,
        "epochs": epochs,
        "batch_size": BATCH,
        "seed": 1,
    });
    let body = Some(("application/json", request.to_string().into_bytes()));
    Ok(serde_json::from_str(&edge.client.expect(agent, "POST", "/api/v1/jobs", body, 201)?)?)
}
