//! The link through a transport that drops, corrupts, truncates and duplicates 10% of the
//! frames in both directions: checkpoints move bit-exact both ways and every sample
//! arrives exactly once. Each run prints its link statistics (the numbers are reported,
//! not asserted: timing is not tested here).

mod support;

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use sprout_core::checksum::CRC32;
use sprout_core::link::{Client, LinkStats, Pull, RetryPolicy, Split, MAX_CHUNK};
use sprout_core::rng::SplitMix;
use sprout_device::StdClock;
use support::fake_app::{spawn_device, FakeApp, CLASSES, SHAPE};
use support::faults::{Damage, Faulty};
use support::pipe::{pipe, PipeEnd};

/// Short timeouts keep dropped frames cheap; many attempts make a give-up at 10% faults
/// vanishingly rare (each attempt fails with about 20% chance).
const POLICY: RetryPolicy = RetryPolicy { timeout_ms: 50, compute_timeout_ms: 50, attempts: 12 };

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// A device on a thread and a client to it, both writing through faults.
struct Rig {
    client: Client<Faulty<PipeEnd>, StdClock>,
    app: Arc<Mutex<FakeApp>>,
    damage: Arc<Mutex<Damage>>,
    device: JoinHandle<()>,
}

impl Rig {
    /// A device holding `checkpoint`, frames damaged at `rate`, after the hello.
    fn new(checkpoint: Vec<u8>, rate: f32, seed: u64) -> Self {
        let (host, device) = pipe();
        let damage = Arc::new(Mutex::new(Damage::default()));
        let app = Arc::new(Mutex::new(FakeApp::new(checkpoint)));
        let device = spawn_device(app.clone(), Faulty::new(device, rate, seed, damage.clone()));
        let host = Faulty::new(host, rate, seed ^ 0xffff, damage.clone());
        let mut client = Client::new(host, StdClock::default(), POLICY);
        client.hello(7).unwrap();
        Self { client, app, damage, device }
    }

    fn damage(&self) -> Damage {
        *self.damage.lock().unwrap()
    }

    /// Hangs up, waits for the device to stop and hands over its app.
    fn finish(self) -> FakeApp {
        drop(self.client);
        self.device.join().unwrap();
        Arc::into_inner(self.app).unwrap().into_inner().unwrap()
    }
}

fn report(what: &str, stats: LinkStats, damage: Damage, bytes: usize, started: Instant) {
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{what}: {bytes} bytes in {:.3} s = {:.0} bytes/s; {} frames sent, {} retries, {} damaged \
         frames received; {} of {} frames damaged ({} dropped, {} flipped, {} truncated, {} duplicated)",
        seconds,
        bytes as f64 / seconds,
        stats.frames_sent,
        stats.retries,
        stats.damaged_frames,
        damage.faults(),
        damage.frames,
        damage.dropped,
        damage.flipped,
        damage.truncated,
        damage.duplicated,
    );
}

fn pull_is_bit_exact(rate: f32, seed: u64) {
    let checkpoint = random_bytes(40 * 1024 + 123, seed);
    let mut rig = Rig::new(checkpoint.clone(), rate, seed);
    let started = Instant::now();
    let mut pulled = Vec::new();
    let mut pull = Pull::default();
    let info =
        rig.client.pull_checkpoint(&mut pull, |_, chunk| pulled.extend_from_slice(chunk)).unwrap();
    let stats = rig.client.stats();
    let what = format!("pull at {:.0}% faults", rate * 100.0);
    report(&what, stats, rig.damage(), pulled.len(), started);

    assert_eq!(info.crc, CRC32.checksum(&checkpoint));
    assert_eq!(CRC32.checksum(&pulled), info.crc);
    assert!(pulled == checkpoint, "pulled bytes differ");
    let chunks = checkpoint.len().div_ceil(MAX_CHUNK) as u32;
    if rate > 0.0 {
        assert!(rig.damage().faults() > 0 && stats.retries > 0, "no faults, or none mattered");
    } else {
        assert_eq!((stats.retries, stats.frames_sent), (0, u64::from(chunks) + 1));
    }
    // Repeated requests were answered from the kept reply: each chunk was read once.
    let expected: Vec<u32> = (0..chunks).map(|i| i * MAX_CHUNK as u32).collect();
    assert_eq!(rig.finish().reads, expected);
}

#[test]
fn a_checkpoint_pull_without_faults_is_bit_exact_and_needs_no_retry() {
    pull_is_bit_exact(0.0, 11);
}

#[test]
fn a_checkpoint_pull_through_ten_percent_faults_is_bit_exact() {
    pull_is_bit_exact(0.1, 12);
}

#[test]
fn a_checkpoint_push_through_ten_percent_faults_is_bit_exact() {
    let checkpoint = random_bytes(30 * 1024 + 7, 21);
    let mut rig = Rig::new(Vec::new(), 0.1, 21);
    let started = Instant::now();
    let mut acknowledged = Vec::new();
    rig.client.push_checkpoint(&checkpoint, |sent| acknowledged.push(sent)).unwrap();
    report("push at 10% faults", rig.client.stats(), rig.damage(), checkpoint.len(), started);

    assert_eq!(acknowledged.last(), Some(&(checkpoint.len() as u32)));
    assert!(acknowledged.windows(2).all(|w| w[0] <= w[1]), "acknowledged offsets went back");
    assert!(rig.damage().faults() > 0);
    let app = rig.finish();
    assert_eq!(CRC32.checksum(&app.checkpoint), CRC32.checksum(&checkpoint));
    assert!(app.checkpoint == checkpoint, "stored bytes differ");
}

#[test]
fn samples_through_ten_percent_faults_arrive_exactly_once_in_order() {
    let mut rig = Rig::new(Vec::new(), 0.1, 31);
    let sample_bytes = SHAPE.bytes() as usize;
    let sent: Vec<(u16, Split, Vec<u8>)> = (0..40u64)
        .map(|i| {
            let split = if i % 5 == 4 { Split::Validation } else { Split::Train };
            ((i % CLASSES.len() as u64) as u16, split, random_bytes(sample_bytes, 100 + i))
        })
        .collect();
    rig.client.clear_samples().unwrap();
    for (id, (label, split, pixels)) in sent.iter().enumerate() {
        rig.client.push_sample(id as u32, *label, *split, pixels).unwrap();
    }
    assert!(rig.damage().faults() > 0 && rig.client.stats().retries > 0);
    let app = rig.finish();
    assert_eq!(app.samples.len(), sent.len(), "samples lost or stored twice");
    assert!(app.samples == sent, "samples differ");
}
