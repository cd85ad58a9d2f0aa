//! sprout's int8 kernels side by side with Arm's CMSIS-NN, in `cargo xtask bench cortex-m`
//! and the `cmsis-nn` test stage: the convolutions of sprout's quantized LeafNet
//! ([`crate::int8_layers`]) run on the emulated Cortex-M4 through sprout's kernels (the
//! QEMU board's `side-by-side` firmware) and through CMSIS-NN's s8 wrappers (a C harness,
//! `xtask/cmsis-nn/`, built here with arm-none-eabi-gcc from a CMSIS-NN checkout that is
//! never linked into sprout), both counted under `-icount shift=0`. Every output must
//! match byte for byte: sprout's firmware, CMSIS-NN and the host's run of the same graph.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::cmd::Cmd;
use crate::debian::{self, Tool};
use crate::int8_layers::{self, hwc_to_chw, Layer, Layout};
use crate::qemu::{self, Options};

/// Names a CMSIS-NN checkout other than `../shared/peers/cmsis-nn` beside the repository.
pub const PEER_VAR: &str = "SPROUT_CMSIS_NN";
const GCC: &str = "arm-none-eabi-gcc";
/// The Cortex-M4F of the QEMU board, optimized as CMSIS-NN's own builds are; the inline
/// assembly requantization is CMSIS-NN's fastest on this core.
const CPU_FLAGS: [&str; 4] =
    ["-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"];
const BUILD_FLAGS: [&str; 7] = [
    "-O3",
    "-DCMSIS_NN_USE_REQUANTIZE_INLINE_ASSEMBLY",
    "-ffunction-sections",
    "-fdata-sections",
    "-nostartfiles",
    "-Wl,--gc-sections",
    "-Wall",
];
/// CMSIS-NN's folders the s8 convolutions need (its float variants are left out).
const SOURCE_FOLDERS: [&str; 2] = ["ConvolutionFunctions", "NNSupportFunctions"];
/// Where both programs find the layer file (the machine's PSRAM).
const LAYERS_ADDRESS: u32 = 0x2100_0000;

/// The CMSIS-NN checkout: `$SPROUT_CMSIS_NN`, else `../shared/peers/cmsis-nn`.
fn peer_dir(root: &Path) -> Result<PathBuf> {
    let dir = std::env::var_os(PEER_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/peers/cmsis-nn"));
    if !dir.join("Include/arm_nnfunctions.h").is_file() {
        bail!(
            "no CMSIS-NN checkout at {} (no Include/arm_nnfunctions.h): clone \
             ARM-software/CMSIS-NN there, or name one with {PEER_VAR}=PATH",
            dir.display()
        );
    }
    Ok(dir)
}

/// Whether newlib's C library is there for the harness's target (gcc prints the bare
/// name when it finds no such file).
fn newlib_found() -> bool {
    Command::new(GCC)
        .args(CPU_FLAGS)
        .arg("-print-file-name=libc.a")
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() != "libc.a")
}

/// arm-none-eabi-gcc and newlib, installed with apt-get when missing.
fn ensure_toolchain(root: &Path) -> Result<()> {
    debian::ensure(root, &[Tool { program: GCC, package: "gcc-arm-none-eabi" }])?;
    if !newlib_found() {
        debian::install(root, &["libnewlib-arm-none-eabi"], "newlib for arm-none-eabi-gcc")?;
        if !newlib_found() {
            bail!("libnewlib-arm-none-eabi is installed but {GCC} finds no libc.a");
        }
    }
    Ok(())
}

/// Builds the CMSIS-NN harness into `dir` and returns its ELF.
fn build_harness(root: &Path, dir: &Path) -> Result<PathBuf> {
    let peer = peer_dir(root)?;
    let mut sources = Vec::new();
    for folder in SOURCE_FOLDERS {
        let folder = peer.join("Source").join(folder);
        let entries =
            std::fs::read_dir(&folder).with_context(|| format!("listing {}", folder.display()))?;
        for entry in entries {
            let path = entry?.path();
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            let float = stem.ends_with("_f16") || stem.ends_with("_f32");
            if path.extension().is_some_and(|e| e == "c") && !float {
                sources.push(path);
            }
        }
    }
    sources.sort();
    // A response file keeps the printed command line short.
    let list = dir.join("sources.txt");
    let quoted: Vec<String> = sources.iter().map(|p| format!("\"{}\"", p.display())).collect();
    std::fs::write(&list, quoted.join("\n"))
        .with_context(|| format!("writing {}", list.display()))?;
    let harness = root.join("xtask/cmsis-nn");
    let elf = dir.join("cmsis-nn-harness.elf");
    let path = |p: &Path| p.display().to_string();
    Cmd::new(GCC, dir)
        .args(CPU_FLAGS)
        .args(BUILD_FLAGS)
        .args([
            "-T".into(),
            path(&harness.join("link.ld")),
            "-I".into(),
            path(&peer.join("Include")),
        ])
        .args([path(&harness.join("harness.c")), format!("@{}", path(&list))])
        .args(["-o".into(), path(&elf)])
        .run()?;
    Ok(elf)
}

/// One program's results: per layer the instructions and the output.
type Results = Vec<(u32, Vec<i8>)>;

/// Runs `elf` with `layers` loaded and reads the results file it writes into `dir`.
fn run_side(
    elf: &Path,
    layers: &Path,
    dir: &Path,
    results: &str,
    text_log: bool,
) -> Result<Results> {
    let path = dir.join(results);
    let _ = std::fs::remove_file(&path);
    let options = Options {
        icount: true,
        timeout: Duration::from_secs(300),
        load: Some((layers.to_path_buf(), LAYERS_ADDRESS)),
        dir: Some(dir.to_path_buf()),
        text_log,
        ..Options::default()
    };
    let run = qemu::run(elf, &options)?;
    run.expect_success(elf)?;
    let bytes = std::fs::read(&path)
        .with_context(|| format!("{} wrote no {}", elf.display(), path.display()))?;
    parse_results(&bytes).with_context(|| format!("reading {}", path.display()))
}

/// Decodes a results file: per layer `u32` instructions, `u32` length, the output.
fn parse_results(mut bytes: &[u8]) -> Result<Results> {
    let mut results = Vec::new();
    while !bytes.is_empty() {
        let Some((head, rest)) = bytes.split_first_chunk::<8>() else {
            bail!("{} stray bytes after layer {}", bytes.len(), results.len());
        };
        let instructions = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if len > rest.len() {
            bail!("layer {} claims {len} output bytes, {} remain", results.len(), rest.len());
        }
        let (output, rest) = rest.split_at(len);
        results.push((instructions, output.iter().map(|&b| b as i8).collect()));
        bytes = rest;
    }
    Ok(results)
}

/// The first index where `a` and `b` differ, with both values.
fn first_difference(a: &[i8], b: &[i8]) -> Option<(usize, i8, i8)> {
    if a.len() != b.len() {
        return Some((a.len().min(b.len()), 0, 0));
    }
    a.iter().zip(b).position(|(x, y)| x != y).map(|i| (i, a[i], b[i]))
}

/// Millions, one decimal.
fn millions(instructions: u64) -> String {
    format!("{:.1} M", instructions as f64 / 1e6)
}

/// Builds the harness, runs both programs on the quantized LeafNet's convolutions and
/// prints one line per layer and the backbone's total; fails on any byte that differs.
/// The boards must be built (`boards::build`).
pub fn side_by_side(root: &Path) -> Result<()> {
    qemu::ensure_installed(root)?;
    ensure_toolchain(root)?;
    let dir = root.join("target/cmsis-nn");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let harness = build_harness(root, &dir)?;
    println!("quantizing leafnet and running it on the host for the layers' data");
    let layers = int8_layers::leafnet()?;
    let mut files = Vec::new();
    for (layout, name) in [(Layout::Nchw, "layers-nchw.bin"), (Layout::Nhwc, "layers-nhwc.bin")] {
        let path = dir.join(name);
        sprout_train::write_atomic(&path, &int8_layers::encode(&layers, layout))?;
        files.push(path);
    }
    let sprout =
        run_side(&crate::boards::elf(root, "side-by-side"), &files[0], &dir, "sprout.out", false)?;
    let cmsis = run_side(&harness, &files[1], &dir, "cmsis.out", true)?;
    for (who, results) in [("sprout", &sprout), ("cmsis-nn", &cmsis)] {
        if results.len() != layers.len() {
            bail!("{who} ran {} of the {} layers", results.len(), layers.len());
        }
    }
    compare(&layers, &sprout, &cmsis)
}

/// Prints the per-layer and total lines; fails when an output differs.
fn compare(layers: &[Layer], sprout: &Results, cmsis: &Results) -> Result<()> {
    println!(
        "{:<34} {:<24} {:>11} {:>11} {:>6} {:>6} {:>7}  bit-exact",
        "layer", "shape", "sprout", "cmsis-nn", "/MAC", "/MAC", "ratio"
    );
    let (mut ours, mut theirs, mut macs) = (0u64, 0u64, 0u64);
    let mut mismatches = Vec::new();
    for ((layer, (s_insn, s_y)), (c_insn, c_y)) in layers.iter().zip(sprout).zip(cmsis) {
        let g = &layer.g;
        let c_y = hwc_to_chw(c_y, g.c_out, g.out_h, g.out_w);
        let verdict = match (first_difference(&layer.expected, s_y), first_difference(s_y, &c_y)) {
            (None, None) => "yes".to_string(),
            (Some((i, host, firmware)), _) => {
                format!("no: sprout's firmware {firmware} against the host's {host} at {i}")
            }
            (None, Some((i, ours, theirs))) => {
                format!("no: cmsis-nn {theirs} against sprout's {ours} at {i}")
            }
        };
        if verdict != "yes" {
            mismatches.push(format!("{}: {verdict}", layer.name));
        }
        let m = g.macs() as u64;
        println!(
            "{:<34} {:<24} {:>11} {:>11} {:>6.2} {:>6.2} {:>6.2}x  {verdict}",
            layer.name,
            layer.describe(),
            s_insn,
            c_insn,
            f64::from(*s_insn) / m as f64,
            f64::from(*c_insn) / m as f64,
            f64::from(*s_insn) / f64::from(*c_insn).max(1.0)
        );
        (ours, theirs, macs) = (ours + u64::from(*s_insn), theirs + u64::from(*c_insn), macs + m);
    }
    println!(
        "{} convolutions, {macs} MACs: sprout {:.2} insn/MAC, cmsis-nn {:.2} insn/MAC",
        layers.len(),
        ours as f64 / macs as f64,
        theirs as f64 / macs as f64
    );
    println!(
        "int8 leafnet backbone vs cmsis-nn: sprout {} insn, cmsis-nn {} insn, ratio {:.2}x, \
         bit-exact {}",
        millions(ours),
        millions(theirs),
        ours as f64 / theirs.max(1) as f64,
        if mismatches.is_empty() { "yes" } else { "no" }
    );
    if !mismatches.is_empty() {
        bail!("outputs differ in {} layers:\n  {}", mismatches.len(), mismatches.join("\n  "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_decode_layer_by_layer_and_refuse_short_files() {
        let mut bytes = Vec::new();
        for (insn, out) in [(7u32, vec![1u8, 255]), (9, vec![])] {
            bytes.extend_from_slice(&insn.to_le_bytes());
            bytes.extend_from_slice(&(out.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&out);
        }
        assert_eq!(parse_results(&bytes).unwrap(), vec![(7, vec![1, -1]), (9, vec![])]);
        assert!(parse_results(&bytes[..9]).is_err());
        assert!(parse_results(&bytes[..3]).is_err());
    }

    #[test]
    fn the_first_difference_names_both_values() {
        assert_eq!(first_difference(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(&[1, 2, 3], &[1, 5, 3]), Some((1, 2, 5)));
        assert_eq!(first_difference(&[1, 2], &[1, 2, 3]), Some((2, 0, 0)));
    }
}
