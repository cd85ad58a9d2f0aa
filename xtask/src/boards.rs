//! The `boards/` workspace in `cargo xtask test` and `cargo xtask bench cortex-m`: builds
//! every board (release, `--locked`; the leaf trainers with a device bundle embedded), runs
//! the QEMU board's `board-check`, `stack-guard` and `conformance` binaries under
//! `qemu-system-arm`, compares each binary's flash and static RAM with the snapshot
//! `boards/sizes.expected`, and runs the instruction-count bench.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SectionKind};

use crate::cmd::Cmd;
use crate::qemu::{self, Options};

/// Every board binary: (board crate, binary).
pub const BINARIES: &[(&str, &str)] = &[
    ("qemu-mps2-an386", "board-check"),
    ("qemu-mps2-an386", "stack-guard"),
    ("qemu-mps2-an386", "conformance"),
    ("qemu-mps2-an386", "bench"),
    ("qemu-mps2-an386", "side-by-side"),
    ("qemu-mps2-an386", "leaf-trainer"),
    ("stm32f746g-disco", "hello-stm32f746g-disco"),
    ("stm32f746g-disco", "leaf-trainer-stm32f746g-disco"),
    ("nrf52840-dk", "hello-nrf52840-dk"),
    ("nrf52840-dk", "leaf-trainer-nrf52840-dk"),
];

/// Setting this to 1 rewrites the size snapshot instead of comparing with it.
pub const BLESS_VAR: &str = "SPROUT_BLESS";
const SNAPSHOT: &str = "sizes.expected";
/// Where every board's RAM starts (all three map SRAM at 0x2000_0000).
const RAM_START: u64 = 0x2000_0000;
/// The line `board-check` sends and the echo it must answer with.
const UART_LINE: &[u8] = b"sprout\n";
const UART_ECHO: &str = "echo: SPROUT";

fn boards_dir(root: &Path) -> PathBuf {
    root.join("boards")
}

/// The features that build every board's leaf trainer, and the variable naming the bundle
/// they embed.
const TRAINER_FEATURE: &str =
    "qemu-mps2-an386/leaf-trainer,stm32f746g-disco/leaf-trainer,nrf52840-dk/leaf-trainer";
const BUNDLE_VAR: &str = "SPROUT_LEAF_BUNDLE";

pub fn elf(root: &Path, binary: &str) -> PathBuf {
    boards_dir(root).join("target/thumbv7em-none-eabihf/release").join(binary)
}

/// Builds every board in release with `--locked`, with a bundle the leaf trainers too.
/// Source paths are remapped so the panic messages compiled into the images, and so the
/// sizes, do not depend on where the checkout or the cargo home lies.
pub fn build(root: &Path, bundle: Option<&Path>) -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .unwrap_or_default();
    let remap = format!(
        "target.thumbv7em-none-eabihf.rustflags=[\"--remap-path-prefix={}=/sprout\", \
         \"--remap-path-prefix={}=/cargo\"]",
        root.display(),
        home.display()
    );
    let build = Cmd::cargo(&boards_dir(root)).args(["build", "--release", "--locked"]);
    match bundle {
        Some(bundle) => build.args(["--features", TRAINER_FEATURE]).env(BUNDLE_VAR, bundle),
        None => build,
    }
    .args(["--config", &remap])
    .run()
}

/// rustfmt and clippy over the boards workspace (the root workspace excludes it), the
/// leaf trainer included (embedding `bundle`).
pub fn lint(root: &Path, bundle: &Path) -> Result<()> {
    let dir = boards_dir(root);
    Cmd::cargo(&dir).args(["fmt", "--all", "--", "--check"]).run()?;
    Cmd::cargo(&dir)
        .args(["clippy", "--release", "--locked", "--features", TRAINER_FEATURE])
        .args(["--", "-D", "warnings"])
        .env(BUNDLE_VAR, bundle)
        .run()
}

/// Runs the QEMU board's checks: UART, flash emulation and user controls, the stack guard
/// (an overflow must end in the guard's fault), then the kernel conformance.
pub fn run_on_qemu(root: &Path) -> Result<()> {
    qemu::ensure_installed(root)?;
    let board_check = elf(root, "board-check");
    let options = Options { uart_input: UART_LINE.to_vec(), ..Options::default() };
    let run = qemu::run(&board_check, &options)?;
    print_log(&run.log);
    run.expect_success(&board_check)?;
    let uart = String::from_utf8_lossy(&run.uart);
    if !uart.contains(UART_ECHO) {
        bail!("board-check answered {uart:?} on UART0, expected a line `{UART_ECHO}`");
    }
    let stack_guard = elf(root, "stack-guard");
    let run = qemu::run(&stack_guard, &Options::default())?;
    print_log(&run.log);
    run.expect_success(&stack_guard)?;
    let conformance = elf(root, "conformance");
    let run = qemu::run(&conformance, &Options::default())?;
    print_log(&run.log);
    run.expect_success(&conformance)
}

/// `cargo xtask bench cortex-m`: builds the boards and prints the bench's insn/MAC lines,
/// counted under `-icount shift=0`, then LeafNet's convolutions side by side with CMSIS-NN,
/// then head-only against a sparse update on the board ([`crate::sparse_update::bench`]).
pub fn bench(root: &Path) -> Result<()> {
    qemu::ensure_installed(root)?;
    build(root, None)?;
    let bench = elf(root, "bench");
    let options = Options { icount: true, timeout: Duration::from_secs(600), ..Options::default() };
    let run = qemu::run(&bench, &options)?;
    print_log(&run.log);
    run.expect_success(&bench)?;
    println!("\nleafnet's int8 convolutions, sprout against CMSIS-NN on the same data:");
    crate::cmsis::side_by_side(root)?;
    println!("\nleafnet fine-tuned on the board, head-only against a sparse update:");
    crate::sparse_update::bench(root)
}

fn print_log(log: &[String]) {
    for line in log {
        println!("  {line}");
    }
}

/// The symbol of a leaf trainer's bundle partition (`boards/common/leaf-trainer`).
const BUNDLE_SYMBOL: &str = "SPROUT_LEAF_BUNDLE";

/// Writes a copy of the leaf trainer `elf` to `out` with `bundle` in its bundle partition in
/// place of the one it was built with (the rest erased, as the build pads it): the same
/// firmware with another bundle, without a build.
pub fn with_bundle(elf: &Path, bundle: &Path, out: &Path) -> Result<()> {
    let mut image = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let bundle = std::fs::read(bundle).with_context(|| format!("reading {}", bundle.display()))?;
    let partition = bundle_partition(&image)
        .with_context(|| format!("finding the bundle partition of {}", elf.display()))?;
    let Some(partition) = image.get_mut(partition) else {
        bail!("{}'s bundle partition lies outside the file", elf.display());
    };
    if bundle.len() > partition.len() {
        bail!("a {}-byte bundle does not fit the {}-byte partition", bundle.len(), partition.len());
    }
    partition.fill(0xFF);
    partition[..bundle.len()].copy_from_slice(&bundle);
    std::fs::write(out, &image).with_context(|| format!("writing {}", out.display()))
}

/// The file bytes of [`BUNDLE_SYMBOL`] in an ELF image.
fn bundle_partition(image: &[u8]) -> Result<std::ops::Range<usize>> {
    let file = object::File::parse(image).context("parsing the ELF")?;
    let symbol = file
        .symbols()
        .find(|s| s.name() == Ok(BUNDLE_SYMBOL))
        .with_context(|| format!("no symbol {BUNDLE_SYMBOL}"))?;
    let index = symbol.section_index().context("the symbol is in no section")?;
    let section = file.section_by_index(index)?;
    let (offset, size) = section.file_range().context("the section has no file bytes")?;
    let start = symbol.address().checked_sub(section.address()).context("symbol before section")?;
    if start + symbol.size() > size {
        bail!("the symbol runs past its section");
    }
    let start = usize::try_from(offset + start)?;
    Ok(start..start + usize::try_from(symbol.size())?)
}

/// Flash (everything loaded: vector table, code, read-only data, `.data`'s initial values)
/// and static RAM (`.data`, `.bss`, `.uninit`) of one ELF, in bytes.
pub fn sizes(image: &[u8]) -> Result<(u64, u64)> {
    let file = object::File::parse(image).context("parsing the ELF")?;
    let (mut flash, mut ram) = (0, 0);
    for section in file.sections() {
        let SectionFlags::Elf { sh_flags } = section.flags() else { continue };
        if sh_flags & u64::from(object::elf::SHF_ALLOC) == 0 || section.size() == 0 {
            continue;
        }
        let in_ram = section.address() >= RAM_START;
        match section.kind() {
            SectionKind::UninitializedData | SectionKind::UninitializedTls => ram += section.size(),
            _ if in_ram => {
                ram += section.size();
                flash += section.size();
            }
            _ => flash += section.size(),
        }
    }
    Ok((flash, ram))
}

/// The snapshot text for the current binaries.
fn snapshot(root: &Path) -> Result<String> {
    let mut text = String::from(
        "# Flash and static RAM in bytes of every board binary (release build), checked by\n\
         # `cargo xtask test`. After an intended change: SPROUT_BLESS=1 cargo xtask test\n",
    );
    for (board, binary) in BINARIES {
        let path = elf(root, binary);
        let image = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let (flash, ram) = sizes(&image).with_context(|| format!("sizing {}", path.display()))?;
        writeln!(text, "{board} {binary}: flash {flash} ram {ram}")?;
    }
    Ok(text)
}

/// The stack every leaf trainer must keep above its guard: the deepest a stem update took
/// it under QEMU (`boards/README.md`) with the on-device stage's headroom, rounded up to the
/// guard's 4 KiB grid.
const LEAF_TRAINER_STACK: u64 = 24 * 1024;
/// Where `common/cortex-stack` puts the guard: `GUARD_BYTES` at the first multiple of them
/// at least `LANDING_BYTES` past the statics.
const GUARD_BYTES: u64 = 4096;
const LANDING_BYTES: u64 = 128;

/// Bytes of stack above the MPU guard of an ELF image (`common/cortex-stack`).
pub fn stack_above_guard(image: &[u8]) -> Result<u64> {
    let file = object::File::parse(image).context("parsing the ELF")?;
    let symbol = |name: &str| {
        let found = file.symbols().find(|s| s.name() == Ok(name));
        found.map(|s| s.address()).with_context(|| format!("no symbol {name}"))
    };
    let (statics_end, top) = (symbol("_stack_end")?, symbol("_stack_start")?);
    let guard = (statics_end + LANDING_BYTES).next_multiple_of(GUARD_BYTES);
    top.checked_sub(guard + GUARD_BYTES).context("the stack guard lies above the top of RAM")
}

/// Checks that every leaf trainer keeps [`LEAF_TRAINER_STACK`] above its guard.
fn check_stacks(root: &Path) -> Result<()> {
    for (_, binary) in BINARIES.iter().filter(|(_, b)| b.starts_with("leaf-trainer")) {
        let path = elf(root, binary);
        let image = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let stack = stack_above_guard(&image).with_context(|| format!("{}", path.display()))?;
        println!("{binary}: stack {stack} B above its guard");
        if stack < LEAF_TRAINER_STACK {
            bail!(
                "{binary} keeps {stack} B of stack above its guard, under the \
                 {LEAF_TRAINER_STACK} B a stem update needs: its statics grew past a 4 KiB \
                 boundary (shrink the leaf trainer's sample caches)"
            );
        }
    }
    Ok(())
}

/// Compares the binaries' sizes with `boards/sizes.expected`, or rewrites it when
/// `SPROUT_BLESS=1`; checks every leaf trainer's stack either way.
pub fn check_sizes(root: &Path) -> Result<()> {
    check_stacks(root)?;
    let path = boards_dir(root).join(SNAPSHOT);
    let actual = snapshot(root)?;
    if std::env::var(BLESS_VAR).is_ok_and(|v| v == "1") {
        let temp = path.with_extension("expected.tmp");
        std::fs::write(&temp, &actual).with_context(|| format!("writing {}", temp.display()))?;
        std::fs::rename(&temp, &path).with_context(|| format!("replacing {}", path.display()))?;
        println!("updated {}", path.display());
        return Ok(());
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    print!("{actual}");
    let diff = size_diff(&expected, &actual);
    if !diff.is_empty() {
        bail!(
            "board binary sizes differ from {}:\n{}\nIf the change is intended, update the \
             snapshot with `{BLESS_VAR}=1 cargo xtask test` and commit it",
            path.display(),
            diff
        );
    }
    Ok(())
}

/// Flash bytes a binary may move by without a new snapshot: the embedded leaf bundle's
/// path (which differs between checkouts) shifts alignment padding by a few bytes.
const FLASH_SLACK: i64 = 64;

/// `(binary, flash, ram)` of one snapshot line.
fn parse_line(line: &str) -> Option<(&str, i64, i64)> {
    let (key, rest) = line.split_once(':')?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    match words[..] {
        ["flash", flash, "ram", ram] => Some((key, flash.parse().ok()?, ram.parse().ok()?)),
        _ => None,
    }
}

/// Whether `actual` matches `expected`: the same binary and static RAM, flash within
/// [`FLASH_SLACK`].
fn same_size(expected: &str, actual: &str) -> bool {
    match (parse_line(expected), parse_line(actual)) {
        (Some((k1, f1, r1)), Some((k2, f2, r2))) => {
            k1 == k2 && r1 == r2 && (f1 - f2).abs() <= FLASH_SLACK
        }
        _ => expected == actual,
    }
}

/// The lines of `actual` that `expected` lacks, with the expected line they replace.
fn size_diff(expected: &str, actual: &str) -> String {
    let mut diff = String::new();
    for line in actual.lines().filter(|line| !line.starts_with('#')) {
        if !expected.lines().any(|e| same_size(e, line)) {
            let key = line.split(':').next().unwrap_or(line);
            let old = expected.lines().find(|e| e.split(':').next() == Some(key));
            let _ = writeln!(diff, "  expected {}\n  actual   {line}", old.unwrap_or("(none)"));
        }
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_names_the_changed_binary_with_both_sizes() {
        let expected = "# c\nqemu a: flash 10 ram 2\nqemu b: flash 5 ram 1\n";
        let actual = "# c\nqemu a: flash 10 ram 4\nqemu b: flash 5 ram 1\n";
        assert_eq!(
            size_diff(expected, actual),
            "  expected qemu a: flash 10 ram 2\n  actual   qemu a: flash 10 ram 4\n"
        );
    }

    #[test]
    fn flash_may_move_a_few_bytes_but_ram_may_not() {
        let expected = "qemu a: flash 1000 ram 2\n";
        assert_eq!(size_diff(expected, "qemu a: flash 1004 ram 2\n"), "");
        assert_ne!(size_diff(expected, "qemu a: flash 1100 ram 2\n"), "");
        assert_ne!(size_diff(expected, "qemu a: flash 1000 ram 3\n"), "");
    }

    #[test]
    fn every_board_has_a_binary() {
        for board in ["qemu-mps2-an386", "stm32f746g-disco", "nrf52840-dk"] {
            assert!(BINARIES.iter().any(|(b, _)| *b == board), "{board}");
        }
    }
}
