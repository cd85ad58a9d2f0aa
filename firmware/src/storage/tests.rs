//! The store against a simulated NOR flash: power cut after every elementary operation of a
//! save (each sector erase, each byte programmed, the interrupted one left half done), for
//! several flash geometries, both slots and up to three earlier generations, always recovers
//! the last good checkpoint or the new one, bit for bit. The count of cut points is printed
//! (`cargo test -p sprout-firmware power_cut -- --nocapture`).

use super::sim::{SimError, SimFlash};
use super::*;
use sprout_core::rng::SplitMix;
use std::vec;
use std::vec::Vec;

/// Slots start one sector into the flash, so a base offset is exercised.
const SECTORS_BEFORE: usize = 1;

fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SplitMix::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn open<const W: usize, const E: usize>(
    flash: &mut SimFlash<W, E>,
    slot: u32,
) -> CheckpointStore<&mut SimFlash<W, E>> {
    CheckpointStore::new(flash, (SECTORS_BEFORE * E) as u32, slot).unwrap()
}

/// Power comes back and the device reads what survived.
fn recover<const W: usize, const E: usize>(
    flash: &mut SimFlash<W, E>,
    slot: u32,
) -> Option<Vec<u8>> {
    flash.restore_power();
    let mut store = open(flash, slot);
    let mut buf = vec![0u8; store.capacity()];
    store.load(&mut buf).unwrap().map(|s| buf[..s.len].to_vec())
}

/// Cut points tried and how many of them recovered a good checkpoint.
#[derive(Default)]
struct Tally {
    saves: usize,
    points: usize,
    recovered: usize,
}

/// Saves `history`, then saves `new` with power cut after every possible number of
/// elementary operations; each time recovery must give the last of `history` or `new`
/// (`new` whenever the save reported success), and the store must keep working. Counts
/// the cut points into `tally`.
fn cut_everywhere<const W: usize, const E: usize>(
    tally: &mut Tally,
    slot_sectors: usize,
    history: &[Vec<u8>],
    new: &[u8],
) {
    let slot = (slot_sectors * E) as u32;
    let mut before = SimFlash::<W, E>::new(SECTORS_BEFORE + 2 * slot_sectors + 1);
    for old in history {
        open(&mut before, slot).save(old).unwrap();
    }
    let previous = history.last().map(Vec::as_slice);

    let mut clean = before.clone();
    clean.operations = 0;
    open(&mut clean, slot).save(new).unwrap();
    let total = clean.operations;
    assert!(total > new.len(), "every payload byte is one operation");

    let (mut kept_previous, mut got_new) = (0, 0);
    tally.saves += 1;
    for cut in 0..=total {
        tally.points += 1;
        let mut flash = before.clone();
        flash.power = Some(cut);
        let saved = open(&mut flash, slot).save(new);
        match &saved {
            Ok(_) => assert_eq!(cut, total),
            Err(e) => assert_eq!(*e, StoreError::Flash(SimError::PowerCut), "cut {cut}"),
        }
        let recovered = recover(&mut flash, slot);
        if recovered.as_deref() == Some(new) {
            got_new += 1;
        } else {
            assert!(saved.is_err(), "cut {cut}: a reported save was lost");
            assert_eq!(recovered.as_deref(), previous, "cut {cut} of {total}");
            kept_previous += 1;
        }
        // The store is usable after the cut, and the next save wins.
        let next = payload(cut as u64 + 1000, new.len() / 2 + 1);
        open(&mut flash, slot).save(&next).unwrap();
        assert_eq!(recover(&mut flash, slot).as_deref(), Some(next.as_slice()), "cut {cut}");
        tally.recovered += 1;
    }
    // The new checkpoint counts from the moment its whole commit marker is programmed: a
    // cut inside the marker loses it; a cut in the erased padding after the marker (wider
    // writes) does not, though the save reported failure.
    let padding = header::COMMITTED.len().next_multiple_of(W) - header::COMMITTED.len();
    assert_eq!(got_new, 1 + padding, "{W}-byte writes");
    assert_eq!(kept_previous + got_new, total + 1);
}

fn histories(len: usize) -> [Vec<Vec<u8>>; 4] {
    [
        vec![],
        vec![payload(1, len)],
        vec![payload(1, len), payload(2, len + 3)],
        vec![payload(1, len), payload(2, len + 3), payload(3, 1)],
    ]
}

/// A device checkpoint as the firmware trainer writes it (header, then head weights and
/// optimizer state) of generation `epoch`, `len` bytes in all.
fn device_checkpoint(epoch: u32, len: usize) -> Vec<u8> {
    use sprout_core::format::device_checkpoint::{encode, CheckpointInfo, CHECKPOINT_HEADER_BYTES};
    let info = CheckpointInfo {
        model_hash: 0x5eed_cafe_f00d_0001,
        epoch,
        progress: sprout_core::Progress {
            updates: 10 * epoch,
            micro_batches: 10 * u64::from(epoch),
            pending: 0,
        },
        accuracy: 0.5,
    };
    let state = payload(u64::from(epoch), len - CHECKPOINT_HEADER_BYTES);
    let mut bytes = vec![0; len];
    encode(&info, &state, &mut bytes).unwrap();
    bytes
}

#[test]
fn power_cut_at_every_flash_operation_recovers_the_last_good_checkpoint() {
    let mut tally = Tally::default();
    // Byte writes, one-sector slots.
    for history in histories(33) {
        cut_everywhere::<1, 64>(&mut tally, 1, &history, &payload(9, 30));
    }
    // 8-byte writes, two sectors per slot, a 301-byte payload with an unaligned tail.
    for history in histories(300) {
        cut_everywhere::<8, 256>(&mut tally, 2, &history, &payload(9, 301));
    }
    // 16-byte writes (header padded to 32 bytes, the marker to 16) and a full slot.
    const E: usize = 128;
    let capacity = E - 32 - 16;
    for history in histories(capacity - 3) {
        cut_everywhere::<16, E>(&mut tally, 1, &history, &payload(9, capacity));
    }
    // The nRF52840-DK's layout (4-byte words, 4 KiB pages, two 8 KiB slots) and real
    // device checkpoints nearly filling a slot: the new one goes to either slot after zero
    // to three earlier generations.
    let len = 2 * 4096 - 24 - 4 - 3;
    let earlier: Vec<Vec<u8>> =
        (1..=3).map(|epoch| device_checkpoint(epoch, len - epoch as usize)).collect();
    // The four cases on threads: each takes seconds in a debug build.
    let cases = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..=earlier.len())
            .map(|generations| {
                let history = &earlier[..generations];
                scope.spawn(move || {
                    let mut tally = Tally::default();
                    cut_everywhere::<4, 4096>(&mut tally, 2, history, &device_checkpoint(9, len));
                    tally
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect::<Vec<_>>()
    });
    for case in cases {
        tally.saves += case.saves;
        tally.points += case.points;
        tally.recovered += case.recovered;
    }
    std::println!(
        "power cuts: {} cut points in {} checkpoint saves, {} recovered the last good checkpoint ({:.0}%)",
        tally.points,
        tally.saves,
        tally.recovered,
        100.0 * tally.recovered as f64 / tally.points as f64
    );
    assert_eq!(tally.recovered, tally.points);
}

#[test]
fn saves_alternate_slots_and_count_generations() {
    let mut flash = SimFlash::<4, 64>::new(SECTORS_BEFORE + 2);
    let mut store = open(&mut flash, 64);
    assert_eq!(store.latest().unwrap(), None);
    for generation in 1..=5u32 {
        let data = payload(u64::from(generation), 10 + generation as usize);
        assert_eq!(store.save(&data).unwrap(), Stored { generation, len: data.len() });
        assert_eq!(store.latest().unwrap(), Some(Stored { generation, len: data.len() }));
    }
    let flash = store.release();
    // Generation 5 went to the first slot (1, 3, 5 there; 2, 4 in the second).
    let first = &flash.bytes[64..64 + header::HEADER_BYTES];
    assert_eq!(u32::from_le_bytes([first[8], first[9], first[10], first[11]]), 5);
}

#[test]
fn damage_to_the_newest_checkpoint_falls_back_to_the_older_one() {
    let mut flash = SimFlash::<4, 64>::new(SECTORS_BEFORE + 2);
    let (a, b) = (payload(1, 20), payload(2, 20));
    open(&mut flash, 64).save(&a).unwrap();
    open(&mut flash, 64).save(&b).unwrap();
    // b lives in the second slot; flip one payload bit (program can only clear bits, as
    // retention loss would).
    let payload_at = 64 + 64 + 24 + 4 + 5;
    flash.bytes[payload_at] ^= 0x01;
    assert_eq!(recover(&mut flash, 64), Some(a.clone()));
    // The next save goes over the damaged slot, not over the good one.
    let c = payload(3, 20);
    open(&mut flash, 64).save(&c).unwrap();
    assert_eq!(recover(&mut flash, 64), Some(c));
    assert_eq!(&flash.bytes[64 + 28..64 + 48], a.as_slice());
}

#[test]
fn garbage_flash_holds_no_checkpoint_and_takes_a_new_one() {
    for seed in 0..50 {
        let mut flash = SimFlash::<4, 64>::new(SECTORS_BEFORE + 2);
        flash.bytes = payload(seed, flash.bytes.len());
        assert_eq!(recover(&mut flash, 64), None, "seed {seed}");
        let data = payload(seed + 100, 33);
        open(&mut flash, 64).save(&data).unwrap();
        assert_eq!(recover(&mut flash, 64), Some(data));
    }
}

#[test]
fn a_header_announcing_more_than_a_slot_is_not_trusted() {
    let mut flash = SimFlash::<4, 64>::new(SECTORS_BEFORE + 2);
    let header = header::Header { generation: 1, len: 1 << 30, payload_crc: 0 };
    flash.bytes[64..64 + 24].copy_from_slice(&header.encode());
    flash.bytes[64 + 24..64 + 28].copy_from_slice(&header::COMMITTED);
    assert_eq!(recover(&mut flash, 64), None);
}

#[test]
fn bad_layouts_and_sizes_are_typed_errors() {
    let mut flash = SimFlash::<4, 64>::new(4);
    let misaligned = CheckpointStore::new(&mut flash, 32, 64).err();
    assert_eq!(
        misaligned,
        Some(StoreError::Misaligned { base: 32, slot_bytes: 64, erase_size: 64 })
    );
    let past_end = CheckpointStore::new(&mut flash, 128, 128).err();
    assert_eq!(past_end, Some(StoreError::OutOfFlash { end: 384, capacity: 256 }));
    let mut store = CheckpointStore::new(&mut flash, 0, 64).unwrap();
    assert_eq!(store.capacity(), 64 - 28);
    assert_eq!(store.save(&[0; 37]), Err(StoreError::TooLarge { len: 37, capacity: 36 }));
    store.save(&[7; 36]).unwrap();
    let mut small = [0u8; 10];
    assert_eq!(
        store.load(&mut small),
        Err(StoreError::BufferTooSmall { needed: 36, available: 10 })
    );
    let message = std::format!("{}", StoreError::<SimError>::TooLarge { len: 37, capacity: 36 });
    assert!(message.contains("37-byte"), "{message}");
}
