//! `sprout flash`: writes a firmware ELF to a supported board through the first debug probe
//! found (ST-LINK, J-Link, CMSIS-DAP), with the probe-rs library, then resets the board.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use probe_rs::flashing::{download_file, ElfLoader, ElfOptions};
use probe_rs::probe::list::Lister;
use probe_rs::Permissions;
use sprout_train::{read_kind, FileKind};

#[derive(Args, Debug)]
pub struct FlashArgs {
    /// The board: stm32f746g-disco or nrf52840-dk.
    #[arg(long, value_name = "NAME")]
    board: String,
    /// The firmware image (an ARM ELF file, as cargo builds it).
    #[arg(value_name = "FIRMWARE.elf")]
    firmware: PathBuf,
}

/// A board `sprout flash` knows: its name and the chip probe-rs flashes on it.
struct Board {
    name: &'static str,
    chip: &'static str,
}

const BOARDS: &[Board] = &[
    Board { name: "stm32f746g-disco", chip: "STM32F746NGHx" },
    Board { name: "nrf52840-dk", chip: "nRF52840_xxAA" },
];

/// `EM_ARM` in an ELF header's machine field.
const ELF_MACHINE_ARM: u16 = 40;

pub fn run(args: &FlashArgs) -> Result<()> {
    let board = board(&args.board)?;
    check_elf(&args.firmware)?;
    let probes = Lister::new().list_all();
    let Some(info) = probes.first() else {
        bail!(
            "no debug probe found: connect the {}'s debug USB port (its on-board probe) and \
             check that this user may access USB devices",
            board.name
        );
    };
    let probe = info.open().with_context(|| format!("cannot open the debug probe {info}"))?;
    let mut session = probe
        .attach(board.chip, Permissions::default())
        .with_context(|| format!("cannot attach to the {} ({})", board.name, board.chip))?;
    download_file(&mut session, &args.firmware, ElfLoader(ElfOptions::default()))
        .with_context(|| format!("cannot flash {}", args.firmware.display()))?;
    session.core(0).and_then(|mut core| core.reset()).context("cannot reset the board")?;
    println!("flashed {} to the {} and reset it", args.firmware.display(), board.name);
    Ok(())
}

fn board(name: &str) -> Result<&'static Board> {
    BOARDS.iter().find(|b| b.name == name).ok_or_else(|| {
        let known: Vec<&str> = BOARDS.iter().map(|b| b.name).collect();
        anyhow::anyhow!("unknown board '{name}'; known boards: {}", known.join(", "))
    })
}

/// Refuses files that are not 32-bit little-endian ARM ELF images before any probe work.
fn check_elf(path: &Path) -> Result<()> {
    let bytes = read_kind(path, FileKind::Elf, "an ELF firmware image")?;
    let Some(header) = bytes.get(..20) else {
        bail!("{} is a truncated ELF file ({} bytes)", path.display(), bytes.len());
    };
    let machine = u16::from_le_bytes([header[18], header[19]]);
    // EI_CLASS 1: 32-bit; EI_DATA 1: little-endian.
    if header[4] != 1 || header[5] != 1 || machine != ELF_MACHINE_ARM {
        bail!(
            "{} is not a 32-bit little-endian ARM ELF image (class {}, data {}, machine {machine})",
            path.display(),
            header[4],
            header[5]
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_board_names_a_chip_probe_rs_knows() {
        let registry = probe_rs::config::Registry::from_builtin_families();
        for board in BOARDS {
            assert!(registry.get_target_by_name(board.chip).is_ok(), "{}", board.chip);
        }
    }
}
