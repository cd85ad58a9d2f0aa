//! `cargo xtask bench data`: the image pipeline on big photos. Generates (once, under
//! `target/bench-data/`) synthetic 2048x1536 JPEG photos in class folders, then trains one
//! head-only epoch of leafnet on them with the release `sprout` CLI as a child process and
//! reports images per second and the child's peak resident memory: first decoding every photo,
//! then again from the disk cache of resized images.

use std::fs;
use std::io::IsTerminal;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use image::codecs::jpeg::JpegEncoder;
use image::{ExtendedColorType, RgbImage};
use sprout_data::{decode_rgb, generate, resize, Domain, LeafConfig, Limits, ResizeMode};

use crate::bench;

/// Photo size.
const WIDTH: u32 = 2048;
const HEIGHT: u32 = 1536;
/// Training photos unless `--photos N` says otherwise.
const DEFAULT_PHOTOS: usize = 2000;
/// Validation photos per class (validation runs after the epoch, so it is kept small).
const VAL_PER_CLASS: usize = 8;
/// The leaf drawings are made at this size, then upscaled.
const LEAF_SIZE: u32 = 128;
/// Samples per training step.
const BATCH: usize = 32;
/// The goal for the child's peak resident memory.
const GOAL_MIB: f64 = 300.0;

/// `cargo xtask bench data [--photos N]`.
pub fn run(root: &Path, options: &[&str]) -> Result<()> {
    let photos = photo_count(options)?;
    let work = root.join("target/bench-data");
    let data = work.join(format!("photos-{photos}-{WIDTH}x{HEIGHT}"));
    make_photos(&work, &data, photos)?;
    let sprout = bench::release_sprout(root)?;

    let cache = work.join("cache");
    if cache.exists() {
        fs::remove_dir_all(&cache).with_context(|| format!("removing {}", cache.display()))?;
    }
    let label = format!("data epoch {photos} photos {WIDTH}x{HEIGHT}");
    let first = train_epoch(&sprout, &data, &work, &cache, "decoded")?;
    let cached = train_epoch(&sprout, &data, &work, &cache, "cached")?;
    println!("{label}: {:.1} img/s, peak RSS {:.0} MiB", photos as f64 / first.0, first.1);
    println!(
        "{label}, resized images cached on disk: {:.1} img/s, peak RSS {:.0} MiB",
        photos as f64 / cached.0,
        cached.1
    );
    let meets = if first.1.max(cached.1) < GOAL_MIB { "meets" } else { "misses" };
    println!("peak RSS {meets} the {GOAL_MIB:.0} MiB goal");
    // Decoding is the bottleneck when a cached epoch is much faster than a decoding one.
    println!(
        "decoding epoch at {:.0}% of the cached epoch's speed ({} threads)",
        100.0 * cached.0 / first.0,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    Ok(())
}

/// The number of training photos `options` ask for.
fn photo_count(options: &[&str]) -> Result<usize> {
    Ok(match options {
        [] => DEFAULT_PHOTOS,
        ["--photos", n] => n.parse().ok().filter(|&n| n >= BATCH).with_context(|| {
            format!("--photos takes a number of photos, at least a batch of {BATCH}, not `{n}`")
        })?,
        _ => bail!("usage: cargo xtask bench data [--photos N] (default {DEFAULT_PHOTOS})"),
    })
}

/// Writes `photos` training photos (a third per leafnet class) and a few validation photos
/// into `data/train/<class>` and `data/val/<class>`, unless a complete set is there.
fn make_photos(work: &Path, data: &Path, photos: usize) -> Result<()> {
    let done = data.join("complete");
    if done.exists() {
        println!("photos: {} (cached)", data.display());
        return Ok(());
    }
    if data.exists() {
        fs::remove_dir_all(data).with_context(|| format!("removing {}", data.display()))?;
    }
    let classes = LeafConfig::default().classes;
    let per_class = photos.div_ceil(classes.len()) + VAL_PER_CLASS;
    let leaves = work.join(format!("leaves-{per_class}"));
    let config = LeafConfig {
        per_class,
        size: LEAF_SIZE,
        seed: 12,
        domain: Domain::Target,
        val_fraction: 0.0,
        ..LeafConfig::default()
    };
    generate(&config, &leaves, |done, total| progress("leaf drawings", done, total))?;
    // (source drawing, destination photo, seed), the training photos shared out by class.
    let mut jobs = Vec::new();
    for (c, class) in classes.iter().enumerate() {
        let train = photos / classes.len() + usize::from(c < photos % classes.len());
        for i in 0..train + VAL_PER_CLASS {
            let (split, number) = if i < train { ("train", i) } else { ("val", i - train) };
            let folder = data.join(split).join(class);
            fs::create_dir_all(&folder)
                .with_context(|| format!("creating {}", folder.display()))?;
            let source = leaves.join("train").join(class).join(format!("{i:05}.png"));
            jobs.push((
                source,
                folder.join(format!("{number:05}.jpg")),
                (c * per_class + i) as u64,
            ));
        }
    }
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((source, photo, seed)) = jobs.get(i) else { return Ok(()) };
                        write_photo(source, photo, *seed)?;
                        progress("photos", i + 1, jobs.len());
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().expect("a photo thread panicked"))
    })?;
    fs::remove_dir_all(&leaves).with_context(|| format!("removing {}", leaves.display()))?;
    fs::write(&done, "").with_context(|| format!("writing {}", done.display()))?;
    Ok(())
}

/// Progress on stderr: one line rewritten in place on a terminal, else a line per tenth.
fn progress(what: &str, done: usize, total: usize) {
    if std::io::stderr().is_terminal() {
        if done == total || done.is_multiple_of(50) {
            eprint!("\r{what}: {done}/{total}");
            if done == total {
                eprintln!();
            }
        }
    } else if done == total || done.is_multiple_of(total.div_ceil(10).max(1)) {
        eprintln!("{what}: {done}/{total}");
    }
}

/// A photo from a leaf drawing: upscaled to 2048x1536, with grain and a fine texture so that
/// the JPEG holds as much detail (and costs as much to decode) as a camera's.
fn write_photo(source: &Path, photo: &Path, seed: u64) -> Result<()> {
    let leaf = decode_rgb(source, 0, &Limits::default())?;
    let mut picture: RgbImage = resize(&leaf, WIDTH, HEIGHT, ResizeMode::Crop);
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for (x, y, pixel) in picture.enumerate_pixels_mut() {
        // xorshift64 grain of +-12, plus a texture of +-10 at a few pixels' period.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let grain = (state % 25) as i32 - 12;
        let texture = ((x as f32 * 0.9).sin() * (y as f32 * 0.7).cos() * 10.0) as i32;
        for c in &mut pixel.0 {
            *c = (i32::from(*c) + grain + texture).clamp(0, 255) as u8;
        }
    }
    let mut bytes = Vec::new();
    JpegEncoder::new_with_quality(&mut bytes, 90)
        .encode(picture.as_raw(), WIDTH, HEIGHT, ExtendedColorType::Rgb8)
        .with_context(|| format!("encoding {}", photo.display()))?;
    let partial = photo.with_extension("jpg.partial");
    fs::write(&partial, &bytes)
        .and_then(|()| fs::rename(&partial, photo))
        .with_context(|| format!("writing {}", photo.display()))
}

/// Trains one head-only leafnet epoch on `data` with a disk cache at `cache`; returns the
/// child's wall time in seconds and its peak resident memory in MiB. Its output goes to
/// `work/train-<name>.log`.
fn train_epoch(
    sprout: &Path,
    data: &Path,
    work: &Path,
    cache: &Path,
    name: &str,
) -> Result<(f64, f64)> {
    let log = work.join(format!("train-{name}.log"));
    let out = work.join(format!("run-{name}"));
    let output = work.join(format!("leafnet-{name}.sprout"));
    let path = |p: &Path| p.display().to_string();
    let mut args: Vec<String> = "train --zoo leafnet --trainable head --epochs 1 --cache disk"
        .split(' ')
        .map(String::from)
        .collect();
    for (flag, value) in [
        ("--batch-size", BATCH.to_string()),
        ("--data", path(data)),
        ("--cache-dir", path(cache)),
        ("--out-dir", path(&out)),
        ("-o", path(&output)),
    ] {
        args.extend([flag.to_string(), value]);
    }
    println!("$ {} {}", sprout.display(), args.join(" "));
    let file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let started = Instant::now();
    let mut command = Command::new(sprout);
    command.args(&args).stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file);
    let child =
        spawn_measured(&mut command).with_context(|| format!("running {}", sprout.display()))?;
    let (success, rss_mib) = wait_measured(child)?;
    let seconds = started.elapsed().as_secs_f64();
    if !success {
        let text = fs::read_to_string(&log).unwrap_or_default();
        bail!("sprout train failed (log {}):\n{text}", log.display());
    }
    Ok((seconds, rss_mib))
}

/// Spawns `command` (also for `bench cpu`) so that [`wait_measured`] sees its own peak memory:
/// by fork and exec. A `posix_spawn` child shares this process's memory until it execs, and
/// Linux then counts this process's peak as the child's; a forked one starts from this
/// process's current memory, which holds no benchmark data between runs.
#[cfg(unix)]
pub(crate) fn spawn_measured(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook does nothing, so it is safe to run between fork and exec. Having one
    // makes the standard library fork instead of calling posix_spawn.
    unsafe { command.pre_exec(|| Ok(())) };
    command.spawn()
}

#[cfg(not(unix))]
pub(crate) fn spawn_measured(command: &mut Command) -> std::io::Result<Child> {
    command.spawn()
}

/// Waits for `child` (also for `bench cpu`; spawned by [`spawn_measured`]): whether it
/// succeeded, and its peak resident memory in MiB (from the kernel's accounting of that one
/// process, not of earlier children such as cargo's).
#[cfg(unix)]
pub(crate) fn wait_measured(child: Child) -> Result<(bool, f64)> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: `rusage` is plain data, zero is a valid value of it, and wait4 writes into the
    // two locals it is given for the child we spawned (std never waits for it: we reap it).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        return Err(std::io::Error::last_os_error()).context("waiting for a benchmarked process");
    }
    let success = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    // Linux reports kibibytes, macOS bytes.
    let unit = if cfg!(target_os = "macos") { 1024.0 * 1024.0 } else { 1024.0 };
    Ok((success, usage.ru_maxrss as f64 / unit))
}

#[cfg(not(unix))]
pub(crate) fn wait_measured(_child: Child) -> Result<(bool, f64)> {
    bail!("the benchmarks measure peak memory with wait4, on Unix only")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_photo_count_is_a_number_of_at_least_one_batch() {
        assert_eq!(photo_count(&[]).unwrap(), DEFAULT_PHOTOS);
        assert_eq!(photo_count(&["--photos", "200"]).unwrap(), 200);
        for bad in [&["--photos", "31"][..], &["--photos", "many"], &["--fast"]] {
            assert!(photo_count(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_leaf_drawing_becomes_a_big_jpeg_photo() {
        let dir = std::env::temp_dir().join(format!("sprout-bench-data-{}", std::process::id()));
        let config =
            LeafConfig { per_class: 1, size: 32, val_fraction: 0.0, ..LeafConfig::default() };
        generate(&config, &dir, |_, _| {}).unwrap();
        let photo = dir.join("photo.jpg");
        write_photo(&dir.join("train/rust/00000.png"), &photo, 7).unwrap();
        let decoded = decode_rgb(&photo, 0, &Limits::default()).unwrap();
        assert_eq!(decoded.dimensions(), (WIDTH, HEIGHT));
        // Grain and texture make it as heavy as a camera's JPEG: over 300 kB.
        assert!(fs::metadata(&photo).unwrap().len() > 300_000);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The child's peak is its own, not this process's: 512 MiB touched and freed here
    /// before the spawn does not show.
    #[cfg(unix)]
    #[test]
    fn waiting_reports_the_exit_status_and_the_peak_memory() {
        let mut big = vec![0u8; 512 << 20];
        big.iter_mut().step_by(4096).for_each(|b| *b = 1);
        assert_eq!(big.iter().step_by(4096).map(|&b| b as usize).sum::<usize>(), 512 << 8);
        drop(big);
        let run = |program: &str| {
            wait_measured(spawn_measured(&mut Command::new(program)).unwrap()).unwrap()
        };
        let (success, mib) = run("true");
        assert!(success && mib > 0.0 && mib < 100.0, "{mib}");
        assert!(!run("false").0);
    }
}
