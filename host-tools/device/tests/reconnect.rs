//! A `Device` whose connection drops in the middle of a transfer reconnects under the same
//! session and resumes at the last acknowledged byte: nothing is sent or stored twice. A
//! device that goes silent on an open connection is reached again on a new one, the old
//! one closed first (QEMU's serial socket serves one client at a time).

mod support;

use std::sync::{Arc, Mutex};

use sprout_core::link::{Limits, RetryPolicy, MAX_CHUNK};
use sprout_core::rng::SplitMix;
use sprout_device::{ConnectOptions, Device, PortSpec};
use support::fake_app::{spawn_tcp_device, spawn_tcp_device_going_deaf, FakeApp};

const OPTIONS: ConnectOptions = ConnectOptions {
    policy: RetryPolicy { timeout_ms: 2000, compute_timeout_ms: 2000, attempts: 5 },
    reconnects: 2,
    limits: Limits { deadline_ms: None, stall_ms: None },
};

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix::new(seed);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn connect(port: u16) -> Device {
    Device::connect(PortSpec::parse(&format!("tcp:127.0.0.1:{port}"), 0), OPTIONS).unwrap()
}

#[test]
fn a_pull_cut_off_midway_resumes_at_the_last_acknowledged_chunk() {
    let checkpoint = random_bytes(20 * MAX_CHUNK + 100, 1);
    let app = Arc::new(Mutex::new(FakeApp::new(checkpoint.clone())));
    let port = spawn_tcp_device(app.clone(), |app| app.reads.len() >= 8);
    let mut device = connect(port);

    let (pulled, info) = device.pull_checkpoint(u32::MAX, |_, _| {}).unwrap();
    assert!(pulled == checkpoint, "pulled bytes differ");
    assert_eq!(info.len as usize, checkpoint.len());
    assert_eq!(device.reconnects(), 1);
    // No chunk was asked for twice: the second connection went on where the first stopped.
    let reads = app.lock().unwrap().reads.clone();
    let expected: Vec<u32> = (0..21).map(|i| i * MAX_CHUNK as u32).collect();
    assert_eq!(reads, expected);
}

#[test]
fn a_push_cut_off_midway_resumes_where_the_device_stands() {
    let checkpoint = random_bytes(20 * MAX_CHUNK + 100, 2);
    let app = Arc::new(Mutex::new(FakeApp::new(Vec::new())));
    let port = spawn_tcp_device(app.clone(), |app| app.incoming.len() >= 8 * MAX_CHUNK);
    let mut device = connect(port);

    device.push_checkpoint(&checkpoint, |_| {}).unwrap();
    assert_eq!(device.reconnects(), 1);
    assert!(app.lock().unwrap().checkpoint == checkpoint, "stored bytes differ");
    // 21 chunks and two hellos; after the reconnect, one chunk to learn where the device
    // stands (and at most one more whose answer the cut swallowed).
    let stats = device.stats();
    assert!(stats.frames_sent <= 21 + 2 + 2, "{stats:?}");
    assert_eq!(stats.payload_bytes, checkpoint.len() as u64);
}

#[test]
fn a_device_silent_on_its_connection_is_reached_again_after_closing_it() {
    let checkpoint = random_bytes(20 * MAX_CHUNK + 100, 3);
    let app = Arc::new(Mutex::new(FakeApp::new(Vec::new())));
    let port = spawn_tcp_device_going_deaf(app.clone(), |app| app.incoming.len() >= 8 * MAX_CHUNK);
    let options = ConnectOptions {
        policy: RetryPolicy { timeout_ms: 200, compute_timeout_ms: 200, attempts: 3 },
        ..OPTIONS
    };
    let spec = PortSpec::parse(&format!("tcp:127.0.0.1:{port}"), 0);
    let mut device = Device::connect(spec, options).unwrap();

    // The first connection stops answering after 8 chunks and is only let go when the host
    // closes it: a host holding it open while it says hello on a new one is never answered.
    device.push_checkpoint(&checkpoint, |_| {}).unwrap();
    assert_eq!(device.reconnects(), 1);
    assert!(app.lock().unwrap().checkpoint == checkpoint, "stored bytes differ");
}
