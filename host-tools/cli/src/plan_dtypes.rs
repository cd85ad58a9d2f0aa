//! `sprout plan --dtypes`: one training step compiled with f32, f16 and int8 storage side by
//! side, so what each storage type saves is one table. The int8 model keeps the trained
//! layers in float (a float head on an int8 backbone) and is calibrated on random inputs:
//! sizes do not depend on the ranges.

use anyhow::{anyhow, Context, Result};
use sprout_core::{
    compile_training_step_with, F16Storage, Graph, MemoryOptions, RegionSizes, TensorId,
    TrainConfig,
};
use sprout_train::{
    quantize, Calibration, DataSource, Model, QuantizeSettings, RangeMethod, TensorSet,
};

use crate::size::format_size;

/// Samples the size-only calibration runs.
const CALIBRATION_SAMPLES: usize = 2;

/// The region sizes of `graph`'s training step for the named trainable parameters.
fn step_sizes(
    graph: &Graph,
    loss: TensorId,
    trainable: &[String],
    memory: &MemoryOptions,
) -> Result<RegionSizes> {
    let ids = trainable
        .iter()
        .map(|name| graph.find(name).ok_or_else(|| anyhow!("no parameter named '{name}'")))
        .collect::<Result<Vec<_>>>()?;
    let training = compile_training_step_with(graph, loss, &ids, &TrainConfig::sgd(0.9), memory)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(training.plan.sizes)
}

/// The int8 model of `model`: every layer but the trained ones in int8.
fn int8_graph(model: &Model, trainable: &str) -> Result<Graph> {
    let per_sample: usize = model.sample_dims().iter().product();
    let set = TensorSet {
        x: (0..CALIBRATION_SAMPLES * per_sample).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect(),
        y: vec![0; CALIBRATION_SAMPLES],
        sample_dims: model.sample_dims(),
        path: "random calibration inputs".into(),
    };
    let mut data = DataSource::tensors(set, model.batch(), 0, false);
    // A plan's sizes do not depend on the ranges: one reading of min/max is enough.
    let settings = QuantizeSettings {
        calibration: Calibration::Fixed(RangeMethod::MinMax),
        keep_float: Some(trainable.to_string()),
        ..QuantizeSettings::default()
    };
    Ok(quantize(model, &mut data, &settings)?.file.to_graph()?)
}

/// The comparison table for the float `model` (called `name`), training `trainable` with
/// `memory`'s options.
pub fn compare(
    model: &Model,
    name: &str,
    trainable: &str,
    memory: &MemoryOptions,
) -> Result<String> {
    let batch = model.batch();
    let zoo = &model.zoo;
    let ids = sprout_zoo::select_trainable(zoo, trainable).map_err(|e| anyhow!("{e}"))?;
    let names: Vec<String> = ids.iter().map(|&id| zoo.graph.tensor(id).name.clone()).collect();
    let f16 = MemoryOptions {
        f16_storage: Some(F16Storage {
            frozen_weights: true,
            activations: true,
            trainable_weights: false,
        }),
        ..*memory
    };
    let int8 = int8_graph(model, trainable).context("quantizing the model to int8")?;
    let int8_loss = int8.find("loss").ok_or_else(|| anyhow!("the int8 model has no loss"))?;
    let rows = [
        ("f32", step_sizes(&zoo.graph, zoo.loss, &names, memory)?),
        ("f16", step_sizes(&zoo.graph, zoo.loss, &names, &f16)?),
        ("int8", step_sizes(&int8, int8_loss, &names, memory)?),
    ];
    let mut out = format!(
        "{name}, batch {batch}, trainable {trainable}: one training step by storage type\n\
         (f16: frozen weights and activations in f16, f32 compute; int8: every layer but the \
         trained ones in int8)\n\n  {:<6} {:>22} {:>22} {:>22} {:>22}\n",
        "", "arena", "state", "frozen weights", "RAM (arena + state)"
    );
    let ram_f32 = rows[0].1.arena + rows[0].1.state;
    for (name, s) in &rows {
        let ram = s.arena + s.state;
        let cell = |b: usize| format!("{b} B ({})", format_size(b));
        out.push_str(&format!(
            "  {name:<6} {:>22} {:>22} {:>22} {:>22}  {:.2}x f32 RAM\n",
            cell(s.arena),
            cell(s.state),
            cell(s.frozen),
            cell(ram),
            ram as f64 / ram_f32.max(1) as f64
        ));
    }
    Ok(out)
}
