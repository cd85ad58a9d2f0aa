//! Writes the seed corpora: small real files of every kind the fuzz targets read, made by
//! sprout's own writers, into `fuzz/corpus/<target>/seed-*` (run
//! `cargo run -p sprout-fuzz --example seeds`, then minimise with `cargo fuzz cmin`).

use std::fs;
use std::io::{Cursor, Write};
use std::path::Path;

use image::{ImageFormat, RgbImage};
use sprout_bundle::{build, BundleOptions};
use sprout_core::executor::Progress;
use sprout_core::format::container::{CHECKSUM_BYTES, HEADER_BYTES};
use sprout_core::format::device_checkpoint::{self, CheckpointInfo};
use sprout_core::format::host_checkpoint::Checkpoint;
use sprout_core::format::{Metadata, Preprocessing};
use sprout_core::graph::Graph;
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::shape::Shape;
use sprout_core::{nn, save_model, ModelFile};
use sprout_train::{encode_npy, Model};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    };
    let body = |file: &[u8]| file[HEADER_BYTES..file.len() - CHECKSUM_BYTES].to_vec();

    let model = tiny_cnn();
    write("model", "cnn.sprout", &model);
    write("graph", "cnn", &body(&model));
    let cnn = Model::from_bytes(&model, Path::new("cnn.sprout")).unwrap();
    let bundle = build(&cnn, &BundleOptions { batch: 2, ..BundleOptions::default() }).unwrap();
    write("bundle", "cnn", &body(&bundle.bytes));

    let checkpoint = Checkpoint {
        epoch: 2,
        updates: 30,
        micro_batches: 30,
        pending: 0,
        seed: 1,
        best_accuracy: Some(0.5),
        graph_hash: 7,
        state_size: 16,
        state: vec![1; 16],
        history: Vec::new(),
        model: model.clone(),
    };
    write("host_checkpoint", "cnn", &body(&checkpoint.encode()));

    let info = CheckpointInfo {
        model_hash: 0x5eed,
        epoch: 3,
        progress: Progress { updates: 12, micro_batches: 12, pending: 0 },
        accuracy: 0.75,
    };
    let mut out = [0; 128];
    let n = device_checkpoint::encode(&info, &[3; 40], &mut out).unwrap();
    write("device_checkpoint", "small", &out[..n]);

    let graph = &cnn.zoo.graph;
    let weights = sprout_onnx::graph_weights(graph);
    write("onnx", "cnn.onnx", &sprout_onnx::export_onnx(graph, &weights).unwrap());

    let (x, y) = ((0..2 * 3 * 2 * 2).map(|i| i as f32 / 8.0).collect::<Vec<_>>(), [1i64, 0]);
    let npy_x = encode_npy(&[2, 3, 2, 2], &x);
    write("tensors", "x.npy", &[[0].as_slice(), &npy_x].concat());
    let npy_y = npy_i64(&y);
    let npz = {
        let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        for (name, bytes) in [("x", &npy_x), ("y", &npy_y)] {
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap().into_inner()
    };
    write("tensors", "xy.npz", &[[1].as_slice(), &npz].concat());
    let x_bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let y_bytes: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = [
        (
            "x",
            safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                vec![2, 3, 2, 2],
                &x_bytes,
            )
            .unwrap(),
        ),
        (
            "y",
            safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![2], &y_bytes)
                .unwrap(),
        ),
    ];
    write(
        "tensors",
        "xy.safetensors",
        &[[1].as_slice(), &safetensors::serialize(views, None).unwrap()].concat(),
    );

    let photo = RgbImage::from_fn(12, 9, |x, y| image::Rgb([(x * 20) as u8, (y * 25) as u8, 90]));
    for (name, format) in [("leaf.png", ImageFormat::Png), ("leaf.jpg", ImageFormat::Jpeg)] {
        let mut bytes = Cursor::new(Vec::new());
        photo.write_to(&mut bytes, format).unwrap();
        write("image", name, &bytes.into_inner());
    }

    let (sent, answered) = sprout_fuzz::conversation();
    write("link_device", "conversation", &sent);
    write("link_host", "conversation", &answered);
}

/// A `.sprout` file of a convolutional classifier small enough for fast fuzzing (a few
/// hundred weights), with every common op: convolution, batch norm, ReLU, pooling, a
/// linear head and the loss.
fn tiny_cnn() -> Vec<u8> {
    let mut g = Graph::new(1);
    let x = g.input("input", Shape::d4(2, 3, 6, 6)).unwrap();
    let conv = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let x = nn::conv2d(&mut g, "features.0", x, 4, 3, conv, false).unwrap();
    let x = nn::batch_norm2d(&mut g, "features.1", x).unwrap();
    let x = g.relu("features.2", x).unwrap();
    let pool =
        PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: false };
    let x = g.max_pool2d("features.3", x, pool).unwrap();
    let x = g.global_avg_pool("pool", x).unwrap();
    let logits = nn::linear(&mut g, "classifier", x, 3).unwrap();
    let labels = g.labels("labels", 2).unwrap();
    g.cross_entropy("loss", logits, labels).unwrap();
    let metadata = Metadata {
        class_names: ["healthy", "rust", "scab"].map(String::from).to_vec(),
        input_shape: Shape::d4(2, 3, 6, 6),
        preprocessing: Preprocessing::default(),
        provenance: "sprout fuzz seeds".into(),
    };
    save_model(&ModelFile::from_graph(&g, metadata)).unwrap()
}

/// An int64 `.npy` of `values` (numpy's format 1.0 header, as `np.save` writes).
fn npy_i64(values: &[i64]) -> Vec<u8> {
    let header =
        format!("{{'descr': '<i8', 'fortran_order': False, 'shape': ({},), }}", values.len());
    let padded = (10 + header.len() + 1).div_ceil(64) * 64 - 10;
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend((padded as u16).to_le_bytes());
    bytes.extend(format!("{header:<width$}\n", width = padded - 1).bytes());
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    bytes
}
