//! Mixed-precision training with dynamic loss scaling: an overflowing step changes no
//! parameter, optimizer state or update count, halves the scale and zeroes the gradient
//! accumulators; the scale doubles after `growth_interval` good steps; gradients through the
//! f16 casts agree with f32 ones to f16 precision; and a small classifier trained in mixed
//! precision reaches the accuracy of its f32 twin.

use sprout_core::hyperparams::{AdamWConfig, LossScaleConfig, SgdConfig};
use sprout_core::optim::{LOSS_SCALE, LOSS_SCALE_GOOD_STEPS};
use sprout_core::rng::SplitMix;
use sprout_core::{
    compile_inference, compile_outputs, compile_training_step, differentiate, nn, to_f16_storage,
    Executor, F16Storage, Graph, HostMemory, Mode, Optimizer, Reference, Role, Shape, StepOutcome,
    TensorId, TrainConfig, Training,
};
use sprout_tests::models::{random_batch, residual_cnn, RES_BATCH, RES_CLASSES, RES_INPUT};

/// A scale far beyond what f16 gradients can carry: the first step must overflow.
const HUGE: f32 = 1099511627776.0; // 2^40

fn mixed(optimizer: Optimizer, accumulation: u32, init_scale: f32) -> TrainConfig {
    let scaling = LossScaleConfig { init_scale, growth_interval: 2, ..LossScaleConfig::default() };
    TrainConfig {
        optimizer,
        clip_grad_norm: Some(5.0),
        accumulation,
        mixed_precision: Some(scaling),
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    }
}

fn adamw() -> Optimizer {
    Optimizer::AdamW(AdamWConfig::default())
}

/// A tensor's name and bytes.
type Named = (String, Vec<u8>);

/// The bytes of every trainable parameter and optimizer-state tensor but the loss scaler's.
fn optimizer_view(t: &Training, memory: &HostMemory) -> Vec<Named> {
    let kept = |role| matches!(role, Role::TrainableParam | Role::OptimizerState);
    t.plan
        .bindings
        .iter()
        .filter(|b| kept(b.role) && !b.name.starts_with(LOSS_SCALE))
        .map(|b| {
            let bytes = &memory.region(b.operand.region)[b.operand.offset..b.operand.end()];
            (b.name.clone(), bytes.to_vec())
        })
        .collect()
}

fn scaler(t: &Training, memory: &mut HostMemory) -> (f32, f32) {
    let regions = memory.regions();
    let read = |name| regions.read::<f32>(&t.plan.operand(name).unwrap()).unwrap()[0];
    (read(LOSS_SCALE), read(LOSS_SCALE_GOOD_STEPS))
}

#[test]
fn an_overflowing_step_is_skipped_and_the_scale_backs_off_then_grows() {
    let model = residual_cnn().unwrap();
    let t = compile_training_step(
        &model.graph,
        model.loss,
        &model.parameters,
        &mixed(adamw(), 1, HUGE),
    )
    .unwrap();
    let mut memory = t.plan.initial_memory(&t.graph);
    let mut exec = Executor::new(t.plan.view(), Reference).unwrap();
    let (x, y) = random_batch(3, RES_INPUT.numel(), RES_BATCH, RES_CLASSES);
    let step = |exec: &mut Executor<'_, Reference>, memory: &mut HostMemory| {
        let mut regions = memory.regions();
        regions.write(&t.plan.operand("image").unwrap(), &x).unwrap();
        regions.write(&t.plan.operand("label").unwrap(), &y).unwrap();
        exec.train_step(&mut regions, 0.01).unwrap()
    };

    let before = optimizer_view(&t, &memory);
    assert_eq!(step(&mut exec, &mut memory), StepOutcome::Skipped { updates: 0 });
    assert_eq!(optimizer_view(&t, &memory), before, "a skipped step changes nothing");
    assert_eq!(exec.updates(), 0, "AdamW's step count stays where it was");
    assert_eq!(scaler(&t, &mut memory), (HUGE / 2.0, 0.0));

    // A scale the gradients fit under: two good steps, and the scale doubles.
    memory.regions().write(&t.plan.operand(LOSS_SCALE).unwrap(), &[1024.0f32]).unwrap();
    assert_eq!(step(&mut exec, &mut memory), StepOutcome::Updated { update: 1 });
    assert_ne!(optimizer_view(&t, &memory), before, "a good step updates");
    assert_eq!(scaler(&t, &mut memory), (1024.0, 1.0));
    assert_eq!(step(&mut exec, &mut memory), StepOutcome::Updated { update: 2 });
    assert_eq!(scaler(&t, &mut memory), (2048.0, 0.0));
}

#[test]
fn a_skipped_update_zeroes_the_gradient_accumulators() {
    let model = residual_cnn().unwrap();
    let sgd = Optimizer::Sgd(SgdConfig { momentum: 0.9, weight_decay: 0.0, nesterov: false });
    let t =
        compile_training_step(&model.graph, model.loss, &model.parameters, &mixed(sgd, 2, HUGE))
            .unwrap();
    let mut memory = t.plan.initial_memory(&t.graph);
    let mut exec = Executor::new(t.plan.view(), Reference).unwrap();
    let accumulators: Vec<_> =
        t.plan.bindings.iter().filter(|b| b.name.ends_with(".grad_accumulator")).collect();
    assert_eq!(accumulators.len(), model.parameters.len());
    let before = optimizer_view(&t, &memory);
    let mut outcomes = Vec::new();
    for k in 0..2 {
        let (x, y) = random_batch(10 + k, RES_INPUT.numel(), RES_BATCH, RES_CLASSES);
        let mut regions = memory.regions();
        regions.write(&t.plan.operand("image").unwrap(), &x).unwrap();
        regions.write(&t.plan.operand("label").unwrap(), &y).unwrap();
        outcomes.push(exec.train_step(&mut regions, 0.1).unwrap());
        if k == 0 {
            let first = &accumulators[0].operand;
            let acc = regions.read::<f32>(first).unwrap();
            assert!(acc.iter().any(|v| !v.is_finite()), "the scaled gradients overflowed");
        }
    }
    assert_eq!(
        outcomes,
        [StepOutcome::Accumulated { remaining: 1 }, StepOutcome::Skipped { updates: 0 }]
    );
    for b in &accumulators {
        let values = memory.regions().read::<f32>(&b.operand).unwrap().to_vec();
        assert!(values.iter().all(|&v| v == 0.0), "{}", b.name);
    }
    let after = optimizer_view(&t, &memory);
    let unchanged = |(a, b): (&Named, &Named)| a.0.ends_with(".grad_accumulator") || a == b;
    assert!(before.iter().zip(&after).all(unchanged), "parameters and momentum are untouched");
}

/// The gradient of every parameter, from one run of a plan of `outputs`.
fn gradients(graph: &Graph, grads: &[TensorId], x: &[f32], y: &[i32]) -> Vec<Vec<f32>> {
    let plan = compile_outputs(graph, grads, Mode::Train).unwrap();
    let mut memory = plan.initial_memory(graph);
    let mut exec = Executor::new(plan.view(), Reference).unwrap();
    let mut regions = memory.regions();
    regions.write(&plan.operand("image").unwrap(), x).unwrap();
    regions.write(&plan.operand("label").unwrap(), y).unwrap();
    exec.run(&mut regions).unwrap();
    grads
        .iter()
        .map(|&g| regions.read::<f32>(&plan.binding_of(g).unwrap().operand).unwrap().to_vec())
        .collect()
}

#[test]
fn gradients_through_f16_casts_match_f32_gradients_to_f16_precision() {
    let model = residual_cnn().unwrap();
    let (x, y) = random_batch(21, RES_INPUT.numel(), RES_BATCH, RES_CLASSES);
    let exact = differentiate(&model.graph, model.loss, &model.parameters).unwrap();
    let half =
        to_f16_storage(&model.graph, &model.parameters, F16Storage::MIXED_PRECISION).unwrap();
    let rounded = differentiate(&half, model.loss, &model.parameters).unwrap();
    let ids = |d: &sprout_core::Differentiated| d.gradients.iter().map(|g| g.1).collect::<Vec<_>>();
    let g32 = gradients(&exact.graph, &ids(&exact), &x, &y);
    let g16 = gradients(&rounded.graph, &ids(&rounded), &x, &y);
    let mut differs = false;
    for ((a, b), &p) in g16.iter().zip(&g32).zip(&model.parameters) {
        let name = &model.graph.tensor(p).name;
        let norm = b.iter().map(|v| v * v).sum::<f32>().sqrt();
        let error = a.iter().zip(b).map(|(a, b)| (a - b) * (a - b)).sum::<f32>().sqrt();
        // f16 keeps 11 significant bits (relative rounding 2^-11 ≈ 5e-4) at every cast. The
        // absolute term covers conv2.bias, whose gradient batch norm makes zero in exact
        // arithmetic (about 5e-7 here): rounding noise dominates it.
        assert!(error <= 1e-2 * norm + 1e-4, "{name}: error {error} against norm {norm}");
        differs |= error > 0.0;
    }
    assert!(differs, "the f16 rounding must show in the gradients");
}

/// Gaussian blobs: `n` samples of `FEATURES` values around one of `CLASSES` centres.
const FEATURES: usize = 16;
const CLASSES: usize = 4;
const BATCH: usize = 32;

fn blobs(n: usize, seed: u64) -> (Vec<f32>, Vec<i32>) {
    let mut centres = SplitMix::new(99);
    let centres: Vec<f32> = (0..CLASSES * FEATURES).map(|_| centres.uniform(-1.0, 1.0)).collect();
    let mut rng = SplitMix::new(seed);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let class = (rng.next_u64() % CLASSES as u64) as usize;
        for f in 0..FEATURES {
            let noise = rng.uniform(-1.0, 1.0) + rng.uniform(-1.0, 1.0);
            x.push(centres[class * FEATURES + f] + 0.6 * noise);
        }
        y.push(class as i32);
    }
    (x, y)
}

/// A frozen random hidden layer under a trained linear head: the head fine-tune in small.
fn head_model() -> (Graph, TensorId, TensorId, Vec<TensorId>) {
    let mut g = Graph::new(12);
    let x = g.input("x", Shape::d2(BATCH, FEATURES)).unwrap();
    let labels = g.labels("y", BATCH).unwrap();
    let h = nn::linear(&mut g, "hidden", x, 32).unwrap();
    let h = g.relu6("act", h).unwrap();
    let logits = nn::linear(&mut g, "head", h, CLASSES).unwrap();
    let loss = g.cross_entropy("loss", logits, labels).unwrap();
    let head = ["head.weight", "head.bias"].iter().map(|n| g.find(n).unwrap()).collect();
    (g, logits, loss, head)
}

fn head_accuracy(mixed_precision: Option<LossScaleConfig>) -> (f64, u32) {
    let (g, logits, loss, head) = head_model();
    let cfg = TrainConfig { mixed_precision, ..TrainConfig::sgd(0.9) };
    let t = compile_training_step(&g, loss, &head, &cfg).unwrap();
    let mut memory = t.plan.initial_memory(&t.graph);
    let mut exec = Executor::new(t.plan.view(), Reference).unwrap();
    let (x, y) = blobs(BATCH * 20, 1);
    let mut skipped = 0;
    for epoch in 0..5 {
        for (xb, yb) in x.chunks(BATCH * FEATURES).zip(y.chunks(BATCH)) {
            let mut regions = memory.regions();
            regions.write(&t.plan.operand("x").unwrap(), xb).unwrap();
            regions.write(&t.plan.operand("y").unwrap(), yb).unwrap();
            let lr = 0.05 / (1 + epoch) as f32;
            if let StepOutcome::Skipped { .. } = exec.train_step(&mut regions, lr).unwrap() {
                skipped += 1;
            }
        }
    }
    let eval = compile_inference(&g, &[logits]).unwrap();
    let mut eval_memory = eval.initial_memory(&g);
    t.plan.copy_weights(&memory, &eval, &mut eval_memory);
    let mut evaluator = Executor::new(eval.view(), Reference).unwrap();
    let (vx, vy) = blobs(BATCH * 32, 2);
    let mut correct = 0;
    for (xb, yb) in vx.chunks(BATCH * FEATURES).zip(vy.chunks(BATCH)) {
        let mut regions = eval_memory.regions();
        regions.write(&eval.operand("x").unwrap(), xb).unwrap();
        evaluator.run(&mut regions).unwrap();
        let out = regions.read::<f32>(&eval.binding_of(logits).unwrap().operand).unwrap();
        for (row, &label) in out.chunks(CLASSES).zip(yb) {
            let best = (0..CLASSES).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap();
            correct += usize::from(best as i32 == label);
        }
    }
    (100.0 * correct as f64 / vy.len() as f64, skipped)
}

#[test]
fn a_head_trained_in_mixed_precision_matches_the_f32_head_within_one_point() {
    let (fp32, _) = head_accuracy(None);
    let (mixed, skipped) = head_accuracy(Some(LossScaleConfig::default()));
    println!("validation accuracy: f32 {fp32:.2}%, mixed precision {mixed:.2}% ({skipped} skipped steps)");
    assert!(fp32 > 80.0, "the task is learnable: {fp32:.2}%");
    assert!((fp32 - mixed).abs() <= 1.0, "f32 {fp32:.2}% against mixed precision {mixed:.2}%");
}
