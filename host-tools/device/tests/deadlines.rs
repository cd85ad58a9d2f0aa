//! Devices that would keep the host waiting forever are given up on, with an error naming
//! the request, the limit and its length: training that stays "running" at one step (stall
//! timeout) or moves on forever (deadline), a device that stops answering mid-pull or only
//! trickles bytes that never make a frame (stall timeout, long before the retry policy's
//! attempts run out), and a checkpoint announced larger than the pull takes (refused before
//! any of it is buffered).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sprout_core::link::frame::{decode, encode};
use sprout_core::link::{
    CheckpointInfo, ClientError, DeviceInfo, Limit, Limits, Request, RequestKind, Response,
    RetryPolicy, SampleShape, TrainingConfig, TrainingProgress, TrainingState, MAX_FRAME,
    PROTOCOL_VERSION,
};
use sprout_device::{ConnectOptions, Device, LinkError, PortSpec};

const INFO: DeviceInfo = DeviceInfo {
    model_hash: 7,
    classes: 2,
    sample: SampleShape { width: 4, height: 4 },
    samples: 1,
    checkpoint: Some(CheckpointInfo { len: u32::MAX, crc: 0 }),
    streams: false,
};

static CHUNK: [u8; 512] = [7; 512];

/// What a scripted device does with a request after the hello.
enum Act {
    Answer(Response<'static>),
    /// Nothing, ever.
    Silence,
    /// One byte that is never a frame delimiter every 10 ms, until the host hangs up.
    Trickle,
}

/// A device on a free TCP port (returned) that answers hellos and acts on every other
/// request as `script` says.
fn scripted(mut script: impl FnMut(&Request<'_>) -> Act + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else { return };
        let mut frame = Vec::new();
        let mut byte = [0];
        while let Ok(1) = stream.read(&mut byte) {
            if byte[0] != 0 {
                frame.push(byte[0]);
                continue;
            }
            let Ok((seq, request)) = decode::<Request<'_>>(&mut frame) else { return };
            let act = match request {
                Request::Hello { .. } => {
                    Act::Answer(Response::Hello { protocol: PROTOCOL_VERSION, device: INFO })
                }
                other => script(&other),
            };
            match act {
                Act::Answer(answer) => {
                    let mut buf = [0; MAX_FRAME];
                    let bytes = encode(seq, &answer, &mut buf).unwrap();
                    if stream.write_all(bytes).is_err() {
                        return;
                    }
                }
                Act::Silence => {}
                Act::Trickle => {
                    while stream.write_all(&[0x55]).is_ok() {
                        thread::sleep(Duration::from_millis(10));
                    }
                    return;
                }
            }
            frame.clear();
        }
    });
    port
}

/// Patient retries (5 s per answer, 8 attempts: 40 s before `NoAnswer`) held to `limits`.
fn connect(port: u16, limits: Limits) -> Device {
    let policy = RetryPolicy { timeout_ms: 5_000, compute_timeout_ms: 5_000, attempts: 8 };
    let options = ConnectOptions { policy, reconnects: 2, limits };
    Device::connect(PortSpec::parse(&format!("tcp:127.0.0.1:{port}"), 0), options).unwrap()
}

fn running(step: u32) -> Act {
    Act::Answer(Response::Progress(TrainingProgress {
        state: TrainingState::Running,
        epoch: 0,
        epochs: 5,
        step,
        loss: 1.0,
        accuracy: None,
    }))
}

fn train(device: &mut Device) -> LinkError {
    let config = TrainingConfig { epochs: 5, learning_rate: None };
    device.train(config, Duration::from_millis(20), |_| {}).unwrap_err()
}

/// `error` is the link's `TimedOut` for `request` and `limit`, its message naming both.
fn assert_timed_out(error: &LinkError, request: RequestKind, limit: Limit, needle: &str) {
    assert!(
        matches!(error, LinkError::Link { source: ClientError::TimedOut { request: r, limit: l, .. }, .. } if *r == request && *l == limit),
        "{error}"
    );
    assert!(error.to_string().contains(needle), "'{needle}' not in: {error}");
}

#[test]
fn training_stuck_at_one_step_is_a_stall() {
    let port = scripted(|request| match request {
        Request::StartTraining(_) => Act::Answer(Response::Ack),
        _ => running(3),
    });
    let mut device = connect(port, Limits { deadline_ms: None, stall_ms: Some(300) });
    let started = Instant::now();
    let error = train(&mut device);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let needle = "gave up on query progress: no progress for 0.3 s (stall timeout)";
    assert_timed_out(&error, RequestKind::QueryProgress, Limit::Stall, needle);
}

#[test]
fn training_that_never_ends_meets_the_deadline_and_is_stopped() {
    let mut step = 0;
    let stopped = Arc::new(AtomicBool::new(false));
    let told = stopped.clone();
    let port = scripted(move |request| match request {
        Request::StartTraining(_) => Act::Answer(Response::Ack),
        Request::StopTraining => {
            told.store(true, Ordering::SeqCst);
            Act::Answer(Response::Ack)
        }
        _ => {
            step += 1;
            running(step)
        }
    });
    let mut device = connect(port, Limits { deadline_ms: Some(400), stall_ms: Some(300) });
    let error = train(&mut device);
    let needle = "the deadline of 0.4 s passed";
    assert_timed_out(&error, RequestKind::QueryProgress, Limit::Deadline, needle);
    assert!(stopped.load(Ordering::SeqCst), "the host gave up without stopping the device");
}

#[test]
fn a_device_that_falls_silent_or_trickles_is_given_up_on_in_the_stall_timeout() {
    for act in [|| Act::Silence, || Act::Trickle] {
        let port = scripted(move |_| act());
        let mut device = connect(port, Limits { deadline_ms: None, stall_ms: Some(250) });
        let started = Instant::now();
        let error = device.pull_checkpoint(u32::MAX, |_, _| {}).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        let needle = "no progress for 0.25 s (stall timeout)";
        assert_timed_out(&error, RequestKind::PullCheckpoint, Limit::Stall, needle);
    }
}

#[test]
fn a_pull_refuses_a_checkpoint_larger_than_its_limit_before_buffering() {
    let port = scripted(|request| match *request {
        Request::PullCheckpoint { offset } => Act::Answer(Response::Checkpoint {
            checkpoint: CheckpointInfo { len: u32::MAX, crc: 0 },
            offset,
            bytes: &CHUNK,
        }),
        _ => Act::Silence,
    });
    let mut device = connect(port, Limits::default());
    let mut received = 0;
    let error = device.pull_checkpoint(1 << 20, |bytes, _| received = bytes).unwrap_err();
    assert_eq!(received, 0, "bytes of a refused checkpoint were taken");
    assert!(
        matches!(
            error,
            LinkError::Link {
                source: ClientError::CheckpointTooLarge { len: u32::MAX, limit: 1_048_576 },
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("a 4294967295-byte checkpoint, more than the 1048576 bytes"),
        "{message}"
    );
}
