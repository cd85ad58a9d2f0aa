//! Each way talking to a device fails says what failed: a silent peer names the request and
//! the attempts, another protocol version names both versions, a refusal carries the
//! device's reason, and a checkpoint for another model is stopped before it is sent.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;

use sprout_core::format::device_checkpoint::{self as checkpoint, CheckpointInfo};
use sprout_core::link::frame::{decode, encode};
use sprout_core::link::{
    ClientError, DeviceError, DeviceInfo, Limits, Request, Response, RetryPolicy, MAX_FRAME,
};
use sprout_device::{
    checkpoint_for, write_checkpoint_file, ConnectOptions, Device, LinkError, PortSpec,
};
use support::fake_app::{spawn_tcp_device, FakeApp, MODEL_HASH, SHAPE};

const QUICK: ConnectOptions = ConnectOptions {
    policy: RetryPolicy { timeout_ms: 30, compute_timeout_ms: 30, attempts: 3 },
    reconnects: 0,
    limits: Limits { deadline_ms: None, stall_ms: None },
};

fn tcp(port: u16) -> PortSpec {
    PortSpec::parse(&format!("tcp:127.0.0.1:{port}"), 0)
}

/// A peer that answers the first request's frame with `answer(seq)`, then stays silent.
fn answer_once(answer: impl FnOnce(u16) -> Vec<u8> + Send + 'static) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut frame = Vec::new();
        let mut byte = [0];
        while stream.read(&mut byte).unwrap() == 1 && byte[0] != 0 {
            frame.push(byte[0]);
        }
        let (seq, _) = decode::<Request<'_>>(&mut frame).unwrap();
        stream.write_all(&answer(seq)).unwrap();
        // Keep the connection open, silent, until the host gives up.
        let _ = stream.read(&mut byte);
    });
    port
}

#[test]
fn a_silent_peer_is_reported_with_the_request_and_the_attempts() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let error = Device::connect(tcp(port), QUICK).err().unwrap();
    assert!(matches!(
        &error,
        LinkError::Link { source: ClientError::NoAnswer { attempts: 3, .. }, .. }
    ));
    assert_eq!(
        error.to_string(),
        format!("tcp:127.0.0.1:{port}: the device did not answer hello after 3 attempts")
    );
    drop(listener);
}

#[test]
fn another_protocol_version_is_named_whether_or_not_its_hello_parses() {
    let device = DeviceInfo {
        model_hash: 1,
        classes: 2,
        sample: SHAPE,
        samples: 0,
        checkpoint: None,
        streams: false,
    };
    let port = answer_once(move |seq| {
        let mut buf = [0; MAX_FRAME];
        encode(seq, &Response::Hello { protocol: 99, device }, &mut buf).unwrap().to_vec()
    });
    let error = Device::connect(tcp(port), QUICK).err().unwrap();
    assert!(
        error.to_string().contains("protocol version mismatch: this host speaks 2, the device 99"),
        "{error}"
    );

    // A future version whose device record no longer parses as this version's.
    let port = answer_once(|seq| {
        let mut buf = [0; MAX_FRAME];
        encode(seq, &(0u32, 3u16, [0xffu8; 3]), &mut buf).unwrap().to_vec()
    });
    let error = Device::connect(tcp(port), QUICK).err().unwrap();
    assert!(
        matches!(
            &error,
            LinkError::Link { source: ClientError::ProtocolMismatch { host: 2, device: 3 }, .. }
        ),
        "{error}"
    );
}

#[test]
fn a_refusal_carries_the_device_reason() {
    let app = Arc::new(Mutex::new(FakeApp::new(Vec::new())));
    let port = spawn_tcp_device(app, |_| false);
    let mut device = Device::connect(tcp(port), QUICK).unwrap();
    let error = device.pull_checkpoint(u32::MAX, |_, _| {}).err().unwrap();
    assert!(matches!(
        &error,
        LinkError::Link {
            source: ClientError::Device { error: DeviceError::NoCheckpoint, .. },
            ..
        }
    ));
    assert!(
        error
            .to_string()
            .ends_with("the device refused pull checkpoint: the device has no checkpoint yet"),
        "{error}"
    );
}

/// A device checkpoint (the firmware trainer's bytes) of the model `model_hash`.
fn device_checkpoint(model_hash: u64) -> Vec<u8> {
    let info = CheckpointInfo {
        model_hash,
        epoch: 1,
        progress: sprout_core::Progress { updates: 2, micro_batches: 2, pending: 0 },
        accuracy: 0.5,
    };
    let mut bytes = vec![0; checkpoint::CHECKPOINT_HEADER_BYTES + 4];
    checkpoint::encode(&info, &[1, 2, 3, 4], &mut bytes).unwrap();
    bytes
}

#[test]
fn only_a_checkpoint_of_the_device_model_is_pushed() {
    let folder = tempfile::tempdir().unwrap();
    let device = FakeApp::new(Vec::new());
    let info = sprout_core::link::DeviceApp::info(&device);

    let right = folder.path().join("right.ckpt");
    write_checkpoint_file(&right, &device_checkpoint(MODEL_HASH)).unwrap();
    assert_eq!(checkpoint_for(&right, &info).unwrap(), device_checkpoint(MODEL_HASH));

    let wrong = folder.path().join("wrong.ckpt");
    write_checkpoint_file(&wrong, &device_checkpoint(7)).unwrap();
    let error = checkpoint_for(&wrong, &info).err().unwrap();
    assert!(
        matches!(error, LinkError::ModelMismatch { device: MODEL_HASH, checkpoint: 7 }),
        "{error}"
    );

    let whole = device_checkpoint(MODEL_HASH);
    for damaged in [&whole[..whole.len() - 1], &[whole.as_slice(), &[0]].concat()] {
        write_checkpoint_file(&wrong, damaged).unwrap();
        let error = checkpoint_for(&wrong, &info).err().unwrap();
        assert!(matches!(error, LinkError::NotACheckpoint { .. }), "{error}");
        assert!(error.to_string().contains("truncated"), "{error}");
    }
    // The file's own framing: a flipped bit, a cut file, and the bare bytes unsealed.
    let sealed = std::fs::read(&right).unwrap();
    let mut flipped = sealed.clone();
    flipped[sealed.len() / 2] ^= 1;
    let cases: [(&[u8], &str); 2] =
        [(&flipped, "checksum mismatch"), (&sealed[..sealed.len() - 3], "truncated")];
    for (bytes, needle) in cases {
        std::fs::write(&wrong, bytes).unwrap();
        let error = checkpoint_for(&wrong, &info).err().unwrap();
        assert!(matches!(error, LinkError::CheckpointFile { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains(needle) && message.contains("wrong.ckpt"), "{message}");
    }
    // Unsealed checkpoint bytes are no file sprout knows.
    std::fs::write(&wrong, &whole).unwrap();
    let message = checkpoint_for(&wrong, &info).err().unwrap().to_string();
    let expected = "is a file of unknown kind, not a device checkpoint (from `sprout device pull`)";
    assert!(message.ends_with(expected) && message.contains("wrong.ckpt"), "{message}");
}
