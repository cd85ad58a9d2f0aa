//! `sprout data`: makes data sets; `sprout data leaves` writes the synthetic plant-leaf set
//! (PNG train/val folders per class) with a progress bar and a summary.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sprout_data::{generate, Domain, LeafConfig};

use crate::progress::{self, Unit};
use crate::size::format_size;

#[derive(Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    command: DataCommand,
}

#[derive(Subcommand, Debug)]
enum DataCommand {
    /// Generate synthetic leaf photos: DIR/train/CLASS/NNNNN.png and DIR/val/CLASS/NNNNN.png.
    Leaves(LeavesArgs),
}

#[derive(Args, Debug)]
struct LeavesArgs {
    /// Folder to write into; it must be empty or absent unless --force is given.
    #[arg(short, long, value_name = "DIR", alias = "out")]
    output: PathBuf,
    /// Comma-separated class names. Every domain knows healthy, leaf_spot and rust; the
    /// source and soil domains also powdery_mildew, blight, mosaic and scorch.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "healthy,leaf_spot,rust"
    )]
    classes: Vec<String>,
    /// Images per class, train and validation together.
    #[arg(long, value_name = "N", default_value_t = 100)]
    per_class: usize,
    /// Width and height of the images in pixels.
    #[arg(long, value_name = "PIXELS", default_value_t = 64)]
    size: u32,
    /// Seed of every random choice: the same arguments write the same bytes.
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// The look of the scenes: source (every leaf shape on soil, wood and field backgrounds,
    /// seven classes), target (narrow leaves on grass and grey benches, three classes) or
    /// soil (a narrow source: broad dark leaves on brown soil and wood only, seven classes).
    #[arg(long, value_name = "DOMAIN", default_value = "source")]
    domain: Domain,
    /// Share of each class's images that go to val/.
    #[arg(long, value_name = "F", default_value_t = 0.2)]
    val_fraction: f32,
    /// Write into a non-empty DIR, replacing its train/ and val/ folders (nothing else in
    /// it is touched).
    #[arg(long)]
    force: bool,
}

pub fn run(args: &DataArgs) -> Result<()> {
    match &args.command {
        DataCommand::Leaves(leaves) => run_leaves(leaves),
    }
}

fn run_leaves(args: &LeavesArgs) -> Result<()> {
    let config = LeafConfig {
        classes: args.classes.clone(),
        per_class: args.per_class,
        size: args.size,
        seed: args.seed,
        domain: args.domain,
        val_fraction: args.val_fraction,
    };
    prepare(&args.output, args.force)?;
    let started = Instant::now();
    let bar = progress::bar("generate", (args.classes.len() * args.per_class) as u64, Unit::Images);
    let summary = generate(&config, &args.output, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .with_context(|| format!("cannot generate the leaf data set in {}", args.output.display()))?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();

    println!(
        "{} domain, {}x{} PNG, seed {}, in {}",
        args.domain,
        args.size,
        args.size,
        args.seed,
        args.output.display()
    );
    println!("{:<16} {:>7} {:>7}", "class", "train", "val");
    for class in &summary.classes {
        println!("{class:<16} {:>7} {:>7}", summary.train_per_class, summary.val_per_class);
    }
    let images = summary.images();
    println!(
        "{images} images, {} in {seconds:.2} s ({:.0} images/s)",
        format_size(summary.bytes as usize),
        images as f64 / seconds.max(1e-9)
    );
    Ok(())
}

/// Makes sure generating into `out` overwrites nothing the user did not ask to replace.
fn prepare(out: &Path, force: bool) -> Result<()> {
    let mut entries = match fs::read_dir(out) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", out.display())),
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if !force {
        bail!("{} exists and is not empty; pick another --output or pass --force to replace its train/ and val/ folders", out.display());
    }
    for split in ["train", "val"] {
        let folder = out.join(split);
        if folder.exists() {
            fs::remove_dir_all(&folder)
                .with_context(|| format!("cannot remove {}", folder.display()))?;
        }
    }
    Ok(())
}
