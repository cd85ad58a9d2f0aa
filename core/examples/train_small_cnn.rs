//! `cargo xtask demo`: records a small CNN, compiles its training step, trains it on a
//! generated task (which way do the strokes in a noisy 12x12 image run?) and reports the
//! loss falling and the validation accuracy of the compiled evaluation plan.

use sprout_core::hyperparams::DropoutConfig;
use sprout_core::nn;
use sprout_core::op::{ConvParams, PoolParams};
use sprout_core::rng::SplitMix;
use sprout_core::{
    compile_inference, compile_training_step, Executor, Graph, Reference, Shape, TrainConfig,
};
use std::time::Instant;

const SIZE: usize = 12;
const CLASSES: usize = 3;
const BATCH: usize = 16;
const CLASS_NAMES: [&str; CLASSES] = ["horizontal", "vertical", "diagonal"];

/// One noisy image holding a stroke of the given class at a random place.
fn sample(rng: &mut SplitMix, class: usize) -> Vec<f32> {
    let mut img: Vec<f32> = (0..SIZE * SIZE).map(|_| rng.uniform(-0.6, 0.6)).collect();
    let len = 5 + (rng.next_u64() % 4) as usize;
    let r0 = (rng.next_u64() as usize) % (SIZE - len);
    let c0 = (rng.next_u64() as usize) % (SIZE - len);
    let brightness = rng.uniform(0.8, 1.6);
    for i in 0..len {
        let (r, c) = match class {
            0 => (r0 + len / 2, c0 + i),
            1 => (r0 + i, c0 + len / 2),
            _ => (r0 + i, c0 + i),
        };
        img[r * SIZE + c] += brightness;
    }
    img
}

fn dataset(rng: &mut SplitMix, count: usize) -> (Vec<f32>, Vec<i32>) {
    let mut x = Vec::with_capacity(count * SIZE * SIZE);
    let mut y = Vec::with_capacity(count);
    for i in 0..count {
        let class = i % CLASSES;
        x.extend(sample(rng, class));
        y.push(class as i32);
    }
    (x, y)
}

/// conv-bn-relu-pool, a depthwise + pointwise block, global pooling, dropout, linear head.
fn model(
    g: &mut Graph,
    x: sprout_core::TensorId,
) -> Result<sprout_core::TensorId, sprout_core::GraphError> {
    let same3 = ConvParams { stride: (1, 1), padding: (1, 1), groups: 1 };
    let h = nn::conv2d(g, "conv1", x, 8, 3, same3, false)?;
    let h = nn::batch_norm2d(g, "bn1", h)?;
    let h = g.relu("relu1", h)?;
    let pool =
        PoolParams { kernel: (2, 2), stride: (2, 2), padding: (0, 0), count_include_pad: true };
    let h = g.max_pool2d("pool1", h, pool)?;
    let h = nn::conv2d(g, "dw2", h, 8, 3, ConvParams { groups: 8, ..same3 }, true)?;
    let h = g.relu6("relu2", h)?;
    let h = nn::conv2d(g, "pw2", h, 16, 1, ConvParams { padding: (0, 0), ..same3 }, true)?;
    let h = g.relu("relu3", h)?;
    let h = g.global_avg_pool("gap", h)?;
    let h = g.dropout("drop", h, DropoutConfig { p: 0.1, seed: 7 })?;
    nn::linear(g, "fc", h, CLASSES)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let mut rng = SplitMix::new(2024);
    let (train_x, train_y) = dataset(&mut rng, 480);
    let (val_x, val_y) = dataset(&mut rng, 240);

    let mut g = Graph::new(42);
    let x = g.input("image", Shape::d4(BATCH, 1, SIZE, SIZE))?;
    let labels = g.labels("label", BATCH)?;
    let logits = model(&mut g, x)?;
    let loss = g.cross_entropy("loss", logits, labels)?;
    let trainable: Vec<_> = g.parameters().collect();

    let training = compile_training_step(&g, loss, &trainable, &TrainConfig::sgd(0.9))?;
    let eval_plan = compile_inference(&g, &[logits])?;
    let plan = &training.plan;
    println!(
        "sprout demo: {} trainable tensors, training step = {} kernels, arena {} B, state {} B",
        trainable.len(),
        plan.steps.len(),
        plan.sizes.arena,
        plan.sizes.state
    );

    let mut memory = plan.initial_memory(&training.graph);
    let mut exec = Executor::new(plan.view(), Reference)?;
    let (x_op, y_op, loss_op) =
        (plan.operand("image")?, plan.operand("label")?, plan.operand("loss")?);
    let per_image = SIZE * SIZE;
    let batches = train_y.len() / BATCH;
    let mut order: Vec<usize> = (0..train_y.len()).collect();
    for epoch in 1..=12 {
        // Fisher-Yates shuffle, seeded.
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        let lr = if epoch <= 8 { 0.05 } else { 0.01 };
        let mut total = 0.0;
        for b in 0..batches {
            let idx = &order[b * BATCH..(b + 1) * BATCH];
            let xb: Vec<f32> = idx
                .iter()
                .flat_map(|&i| &train_x[i * per_image..(i + 1) * per_image])
                .copied()
                .collect();
            let yb: Vec<i32> = idx.iter().map(|&i| train_y[i]).collect();
            let mut regions = memory.regions();
            regions.write(&x_op, &xb)?;
            regions.write(&y_op, &yb)?;
            exec.train_step(&mut regions, lr)?;
            total += regions.read::<f32>(&loss_op)?[0];
        }
        println!("epoch {epoch:2}  lr {lr:.3}  mean loss {:.4}", total / batches as f32);
    }

    let mut eval_memory = eval_plan.initial_memory(&g);
    plan.copy_weights(&memory, &eval_plan, &mut eval_memory);
    let mut eval = Executor::new(eval_plan.view(), Reference)?;
    let (ex, elogits) = (eval_plan.operand("image")?, eval_plan.operand("fc")?);
    let mut correct = [0usize; CLASSES];
    let mut seen = [0usize; CLASSES];
    for b in 0..val_y.len() / BATCH {
        let mut regions = eval_memory.regions();
        regions.write(&ex, &val_x[b * BATCH * per_image..(b + 1) * BATCH * per_image])?;
        eval.run(&mut regions)?;
        let out = regions.read::<f32>(&elogits)?;
        for (row, &label) in out.chunks(CLASSES).zip(&val_y[b * BATCH..(b + 1) * BATCH]) {
            let predicted = (0..CLASSES).max_by(|&a, &c| row[a].total_cmp(&row[c])).unwrap_or(0);
            seen[label as usize] += 1;
            correct[label as usize] += (predicted == label as usize) as usize;
        }
    }
    let accuracy = 100.0 * correct.iter().sum::<usize>() as f32 / seen.iter().sum::<usize>() as f32;
    for c in 0..CLASSES {
        println!("  {:<10} {:5.1}%", CLASS_NAMES[c], 100.0 * correct[c] as f32 / seen[c] as f32);
    }
    println!(
        "validation accuracy: {accuracy:.1}% ({} images), {:.1} s",
        seen.iter().sum::<usize>(),
        started.elapsed().as_secs_f32()
    );
    Ok(())
}
