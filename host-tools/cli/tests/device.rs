//! `sprout device train / pull / push` against a device session served in this process on
//! a TCP listener (a fake app behind the real link), and the errors a person meets: a
//! missing serial port, a device without a checkpoint; never a partial output file.

mod common;
#[path = "../../device/tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{fails, ok};
use sprout_core::checksum::CRC32;
use sprout_core::format::device_checkpoint::{self as checkpoint, CheckpointInfo};
use sprout_core::link::{DeviceApp, Split, TrainingState};
use sprout_device::write_checkpoint_file;
use support::fake_app::{spawn_tcp_device, FakeApp, CLASSES, MODEL_HASH, SHAPE};

fn device(checkpoint: Vec<u8>) -> (Arc<Mutex<FakeApp>>, String) {
    let app = Arc::new(Mutex::new(FakeApp::new(checkpoint)));
    let port = spawn_tcp_device(app.clone(), |_| false);
    (app, format!("tcp:127.0.0.1:{port}"))
}

fn files_in(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn pull_writes_the_device_checkpoint_bit_exact() {
    let checkpoint: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 300) as u8).collect();
    let (_, port) = device(checkpoint.clone());
    let folder = tempfile::tempdir().unwrap();
    let out = folder.path().join("device.ckpt");

    let stdout = ok(&["device", "pull", "--port", &port, "-o", out.to_str().unwrap()]);
    let written = sprout_device::read_checkpoint_file(&out).unwrap();
    assert!(written == checkpoint, "the file differs from the device's checkpoint");
    let crc = format!("CRC-32 {:#010x}", CRC32.checksum(&checkpoint));
    assert!(stdout.contains("5000 bytes") && stdout.contains(&crc), "{stdout}");
    assert_eq!(files_in(folder.path()), ["device.ckpt"]);
}

#[test]
fn a_failed_pull_leaves_no_file() {
    let (_, port) = device(Vec::new());
    let folder = tempfile::tempdir().unwrap();
    let out = folder.path().join("device.ckpt");
    fails(
        &["device", "pull", "--port", &port, "-o", out.to_str().unwrap()],
        "the device refused pull checkpoint: the device has no checkpoint yet",
    );
    assert!(files_in(folder.path()).is_empty());
}

#[test]
fn a_missing_serial_port_is_named() {
    let folder = tempfile::tempdir().unwrap();
    let out = folder.path().join("device.ckpt");
    fails(
        &["device", "pull", "--port", "/dev/sprout-no-such-port", "-o", out.to_str().unwrap()],
        "serial port /dev/sprout-no-such-port not found",
    );
    assert!(files_in(folder.path()).is_empty());
}

#[test]
fn push_sends_a_checkpoint_of_the_device_model() {
    // A device checkpoint (as `sprout device pull` saves it) of `model_hash`.
    let device_checkpoint = |model_hash| {
        let info = CheckpointInfo {
            model_hash,
            epoch: 3,
            progress: sprout_core::Progress { updates: 30, micro_batches: 30, pending: 0 },
            accuracy: 0.9,
        };
        let state: Vec<u8> = (0..2048u32).map(|i| i as u8).collect();
        let mut bytes = vec![0; checkpoint::CHECKPOINT_HEADER_BYTES + state.len()];
        checkpoint::encode(&info, &state, &mut bytes).unwrap();
        bytes
    };
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("device.ckpt");
    write_checkpoint_file(&file, &device_checkpoint(MODEL_HASH)).unwrap();
    let (app, port) = device(Vec::new());

    ok(&["device", "push", "--port", &port, file.to_str().unwrap()]);
    assert!(app.lock().unwrap().checkpoint == device_checkpoint(MODEL_HASH));

    // A bit flipped in the file's state is caught by its CRC-32 before anything is sent.
    let mut damaged = std::fs::read(&file).unwrap();
    damaged[100] ^= 0x10;
    std::fs::write(&file, &damaged).unwrap();
    fails(&["device", "push", "--port", &port, file.to_str().unwrap()], "checksum mismatch");

    write_checkpoint_file(&file, &device_checkpoint(1)).unwrap();
    fails(&["device", "push", "--port", &port, file.to_str().unwrap()], "belongs to model");
}

#[test]
fn train_sends_the_data_folder_and_reports_the_device_progress() {
    let folder = tempfile::tempdir().unwrap();
    let data = leaves(folder.path());
    let (app, port) = device(Vec::new());

    let stdout = ok(&[
        "device",
        "train",
        "--port",
        &port,
        "--data",
        data.to_str().unwrap(),
        "--epochs",
        "3",
    ]);
    assert!(stdout.contains("trained 3 of 3 epochs"), "{stdout}");
    let app = app.lock().unwrap();
    assert_eq!(app.samples.len(), 15);
    let validation = app.samples.iter().filter(|(_, split, _)| *split == Split::Validation).count();
    assert!(validation > 0 && validation < 15, "{validation} validation samples");
    for label in 0..3 {
        assert_eq!(app.samples.iter().filter(|(l, _, _)| *l == label).count(), 5);
    }
    assert!(app.samples.iter().all(|(_, _, pixels)| pixels.len() == SHAPE.bytes() as usize));
}

#[test]
fn train_streams_every_epoch_to_a_device_that_trains_from_its_input() {
    let folder = tempfile::tempdir().unwrap();
    let data = leaves(folder.path());
    let (app, port) = device(Vec::new());
    let train = ["device", "train", "--port", &port, "--data", data.to_str().unwrap()];
    // A device that stores its samples takes no streamed run.
    fails(&[&train[..], &["--stream"]].concat(), "trains from stored samples");
    app.lock().unwrap().streams = true;
    fails(&[&train[..], &["--keep-samples"]].concat(), "--keep-samples does not apply");

    // Its hello says it streams: the held-out samples score the start, then every epoch
    // streams all 15 (training ones first).
    let stdout = ok(&[&train[..], &["--epochs", "3"]].concat());
    assert!(stdout.contains("trained 3 of 3 epochs"), "{stdout}");
    let app = app.lock().unwrap();
    let held_out = app.streamed.iter().take_while(|(_, split)| *split == Split::Validation).count();
    assert!(held_out > 0 && held_out < 15, "{held_out} held out");
    assert_eq!((app.samples.len(), app.streamed.len()), (0, held_out + 3 * 15));
    let first_epoch = &app.streamed[held_out..held_out + 15];
    let trained = first_epoch.iter().take_while(|(_, split)| *split == Split::Train).count();
    assert_eq!(trained, 15 - held_out);
}

/// A data folder of the fake device's classes and sample size, 5 images per class.
fn leaves(folder: &Path) -> std::path::PathBuf {
    let data = folder.join("leaves");
    let size = SHAPE.width.to_string();
    let classes = CLASSES.join(",");
    let d = data.to_str().unwrap();
    ok(&["data", "leaves", "-o", d, "--classes", &classes, "--per-class", "5", "--size", &size]);
    data
}

#[test]
fn train_gives_up_on_a_hung_device_and_at_the_deadline() {
    let folder = tempfile::tempdir().unwrap();
    let data = leaves(folder.path());
    let (app, port) = device(Vec::new());
    app.lock().unwrap().hung = true;
    let train = ["device", "train", "--port", &port, "--data", data.to_str().unwrap()];
    let started = std::time::Instant::now();
    fails(
        &[&train[..], &["--stall-timeout", "300ms"]].concat(),
        "gave up on query progress: no progress for 0.3 s (stall timeout)",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    // Giving up, the host told the device to stop.
    assert_eq!(app.lock().unwrap().progress().state, TrainingState::Stopped);
    fails(
        &[&train[..], &["--deadline", "0.4s", "--stall-timeout", "none", "--keep-samples"]]
            .concat(),
        "the deadline of 0.4 s passed",
    );
    fails(&[&train[..], &["--deadline", "5d"]].concat(), "unknown unit 'd'");
}

#[test]
fn train_decodes_images_within_max_memory() {
    let folder = tempfile::tempdir().unwrap();
    let data = leaves(folder.path());
    let (app, port) = device(Vec::new());
    let train = ["device", "train", "--port", &port, "--data", data.to_str().unwrap()];
    // A 16x16 photo needs 768 bytes of RGB, and its decoder more.
    fails(&[&["--max-memory", "700"][..], &train].concat(), "over the memory limit of 700 bytes");
    assert!(app.lock().unwrap().samples.is_empty());
    ok(&[&["--max-memory", "64K"][..], &train, &["--epochs", "1"]].concat());
    assert_eq!(app.lock().unwrap().samples.len(), 15);
}

#[test]
fn pull_refuses_a_checkpoint_over_its_size_limit_or_of_another_bundle() {
    let (_, port) = device(vec![3; 5000]);
    let folder = tempfile::tempdir().unwrap();
    let out = folder.path().join("device.ckpt");
    let pull = ["device", "pull", "--port", &port, "-o", out.to_str().unwrap()];
    fails(
        &[&pull[..], &["--max-size", "1KiB"]].concat(),
        "the device announced a 5000-byte checkpoint, more than the 1024 bytes this pull takes",
    );
    assert!(files_in(folder.path()).is_empty());

    // A bundle of another model than the device's.
    let model = folder.path().join("m.sprout");
    common::tiny_model(&model);
    let bundle = folder.path().join("m.bundle");
    ok(&["bundle", model.to_str().unwrap(), "-o", bundle.to_str().unwrap()]);
    fails(&[&pull[..], &["--bundle", bundle.to_str().unwrap()]].concat(), "is for model");
    assert!(!out.exists());
}
