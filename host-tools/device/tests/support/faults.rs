//! `Faulty`: a stream whose written frames are damaged at a given rate, from a seeded
//! generator: dropped, a bit flipped, cut short or sent twice, in equal shares.

use std::sync::{Arc, Mutex};

use embedded_io::{ErrorType, Read, ReadReady, Write};
use sprout_core::rng::SplitMix;

/// Damage done so far, shared by the streams of one test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Damage {
    pub frames: u64,
    pub dropped: u64,
    pub flipped: u64,
    pub truncated: u64,
    pub duplicated: u64,
}

impl Damage {
    pub fn faults(&self) -> u64 {
        self.dropped + self.flipped + self.truncated + self.duplicated
    }
}

pub struct Faulty<IO> {
    inner: IO,
    rate: f32,
    rng: SplitMix,
    frame: Vec<u8>,
    damage: Arc<Mutex<Damage>>,
}

impl<IO> Faulty<IO> {
    /// Damages `rate` of the frames written to `inner`; reads pass through.
    pub fn new(inner: IO, rate: f32, seed: u64, damage: Arc<Mutex<Damage>>) -> Self {
        Self { inner, rate, rng: SplitMix::new(seed), frame: Vec::new(), damage }
    }

    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n as u64) as usize
    }
}

impl<IO: Write> Faulty<IO> {
    /// Writes one whole frame (delimiter included), maybe damaged.
    fn send(&mut self) -> Result<(), IO::Error> {
        let mut frame = std::mem::take(&mut self.frame);
        let mut damage = *self.damage.lock().unwrap();
        damage.frames += 1;
        let mut copies = 1;
        if self.rng.next_f32() < self.rate {
            match self.below(4) {
                0 => {
                    damage.dropped += 1;
                    copies = 0;
                }
                1 => {
                    damage.flipped += 1;
                    let bit = self.below(frame.len() * 8);
                    frame[bit / 8] ^= 1 << (bit % 8);
                }
                2 => {
                    damage.truncated += 1;
                    let keep = self.below(frame.len() - 1);
                    frame.truncate(keep);
                    frame.push(0);
                }
                _ => {
                    damage.duplicated += 1;
                    copies = 2;
                }
            }
        }
        *self.damage.lock().unwrap() = damage;
        for _ in 0..copies {
            self.inner.write_all(&frame)?;
        }
        Ok(())
    }
}

impl<IO: ErrorType> ErrorType for Faulty<IO> {
    type Error = IO::Error;
}

impl<IO: Read> Read for Faulty<IO> {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, IO::Error> {
        self.inner.read(out)
    }
}

impl<IO: ReadReady> ReadReady for Faulty<IO> {
    fn read_ready(&mut self) -> Result<bool, IO::Error> {
        self.inner.read_ready()
    }
}

impl<IO: Write> Write for Faulty<IO> {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, IO::Error> {
        for &byte in bytes {
            self.frame.push(byte);
            if byte == 0 {
                self.send()?;
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> Result<(), IO::Error> {
        self.inner.flush()
    }
}
