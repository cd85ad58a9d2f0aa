//! A device that computes before it answers a sample's last chunk (its backbone pass) is
//! waited for with the compute timeout, so no request goes twice; with only the short
//! timeout the host asks again, and the device still stores each sample once.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sprout_core::link::{RetryPolicy, Split};
use sprout_device::{ConnectOptions, Device, PortSpec};
use support::fake_app::{spawn_tcp_device, FakeApp};

/// Pushes three two-chunk samples to a device that computes 300 ms per sample; returns
/// the retries the host needed and the samples the device stored.
fn push_to_slow_device(compute_timeout_ms: u32) -> (u64, usize) {
    let app = Arc::new(Mutex::new(FakeApp::new(Vec::new())));
    app.lock().unwrap().compute = Duration::from_millis(300);
    let port = spawn_tcp_device(app.clone(), |_| false);
    let policy = RetryPolicy { timeout_ms: 100, compute_timeout_ms, attempts: 8 };
    let spec = PortSpec::parse(&format!("tcp:127.0.0.1:{port}"), 0);
    let mut device = Device::connect(
        spec,
        ConnectOptions { policy, reconnects: 0, ..ConnectOptions::default() },
    )
    .unwrap();
    for id in 0..3 {
        device.push_sample(id, 1, Split::Train, &[id as u8; 768]).unwrap();
    }
    let stored = app.lock().unwrap().samples.len();
    (device.stats().retries, stored)
}

#[test]
fn the_last_chunk_of_a_sample_waits_for_the_device_to_compute() {
    assert_eq!(push_to_slow_device(2_000), (0, 3));
    let (retries, stored) = push_to_slow_device(100);
    assert!(retries >= 3, "{retries} retries");
    assert_eq!(stored, 3, "a repeated last chunk stored a sample twice");
}
