//! The executor allocates nothing while it runs a plan.
//!
//! A counting `#[global_allocator]` wraps `std::alloc::System`. Counting is armed and
//! counted per thread (`thread_local!` flag and counters), so allocations by the test
//! harness's other threads, or by the other test of this file running beside, never count. Everything that may allocate (recording the graph, compiling the plans, the host
//! memory, the executors, the data) is done before arming; then training steps (batch norm,
//! dropout, a residual add, gradient accumulation, clipping, SGD with momentum) and
//! inference runs execute, with inputs written and outputs read through `Regions`, and the
//! allocation count must be exactly zero. A control allocation while armed must count one,
//! so the counter is shown to work. Mixed-precision training (f16 casts, loss scaling, a
//! skipped overflowing step) is measured the same way.

use sprout_core::hyperparams::{LossScaleConfig, SgdConfig};
use sprout_core::{
    compile_inference, compile_training_step, Executor, Optimizer, Reference, StepOutcome,
    TrainConfig,
};
use sprout_tests::models::{random_batch, residual_cnn, RES_BATCH, RES_CLASSES, RES_INPUT};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts allocations, reallocations and deallocations made by armed threads.
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static DEALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn armed() -> bool {
    ARMED.try_with(Cell::get).unwrap_or(false)
}

/// Adds one to this thread's `counter` when counting is armed.
fn count(counter: &'static std::thread::LocalKey<Cell<usize>>) {
    if armed() {
        let _ = counter.try_with(|c| c.set(c.get() + 1));
    }
}

fn counts() -> (usize, usize) {
    (ALLOCATIONS.with(Cell::get), DEALLOCATIONS.with(Cell::get))
}

// SAFETY: every call is forwarded unchanged to `System`; the counters have no effect on
// the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(&ALLOCATIONS);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(&ALLOCATIONS);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(&ALLOCATIONS);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(&DEALLOCATIONS);
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap calls (allocations, deallocations) made by this thread while `f` runs.
fn count_heap_calls<R>(f: impl FnOnce() -> R) -> ((usize, usize), R) {
    let before = counts();
    ARMED.with(|a| a.set(true));
    let result = f();
    ARMED.with(|a| a.set(false));
    let after = counts();
    ((after.0 - before.0, after.1 - before.1), result)
}

#[test]
fn training_and_inference_plans_run_without_heap_allocation() {
    // The counter works: one allocation and one deallocation while armed.
    let (control, ()) =
        count_heap_calls(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(1))));
    assert_eq!(control, (1, 1), "the counting allocator must see a control allocation");

    let model = residual_cnn().expect("the model records");
    let cfg = TrainConfig {
        optimizer: Optimizer::Sgd(SgdConfig { momentum: 0.9, weight_decay: 1e-4, nesterov: false }),
        clip_grad_norm: Some(1.0),
        accumulation: 2,
        mixed_precision: None,
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    };
    let training = compile_training_step(&model.graph, model.loss, &model.parameters, &cfg)
        .expect("the training step compiles");
    let eval_plan = compile_inference(&model.graph, &[model.logits]).expect("compiles");
    let plan = &training.plan;
    assert!(!plan.update_steps.is_empty(), "accumulation puts the update in its own steps");

    let mut memory = plan.initial_memory(&training.graph);
    let mut eval_memory = eval_plan.initial_memory(&model.graph);
    let mut trainer = Executor::new(plan.view(), Reference).expect("valid plan");
    let mut evaluator = Executor::new(eval_plan.view(), Reference).expect("valid plan");
    let (image, label, loss) = (
        plan.operand("image").expect("bound"),
        plan.operand("label").expect("bound"),
        plan.operand("loss").expect("bound"),
    );
    let (eval_image, eval_logits) =
        (eval_plan.operand("image").expect("bound"), eval_plan.operand("fc").expect("bound"));
    let batches: Vec<_> =
        (0..4).map(|k| random_batch(50 + k, RES_INPUT.numel(), RES_BATCH, RES_CLASSES)).collect();
    let mut losses = [0.0f32; 4];
    let mut outcomes = [StepOutcome::Accumulated { remaining: 0 }; 4];
    let mut logits = [0.0f32; RES_BATCH * RES_CLASSES];

    let (training_calls, ()) = count_heap_calls(|| {
        for (k, (x, y)) in batches.iter().enumerate() {
            let mut regions = memory.regions();
            regions.write(&image, x).expect("image fits");
            regions.write(&label, y).expect("labels fit");
            outcomes[k] = trainer.train_step(&mut regions, 0.05).expect("the step runs");
            losses[k] = regions.read::<f32>(&loss).expect("loss")[0];
        }
    });
    // Moving the weights to the evaluation plan is host-side work, outside the measurement.
    plan.copy_weights(&memory, &eval_plan, &mut eval_memory);
    let (inference_calls, ()) = count_heap_calls(|| {
        for (x, _) in &batches[..2] {
            let mut regions = eval_memory.regions();
            regions.write(&eval_image, x).expect("image fits");
            evaluator.run(&mut regions).expect("inference runs");
            logits.copy_from_slice(regions.read::<f32>(&eval_logits).expect("logits"));
        }
    });

    assert_eq!(training_calls, (0, 0), "(allocations, deallocations) while training");
    assert_eq!(inference_calls, (0, 0), "(allocations, deallocations) while running inference");
    // The measured region did the work: two updates, finite losses and logits.
    assert_eq!(outcomes[3], StepOutcome::Updated { update: 2 });
    assert_eq!(trainer.updates(), 2);
    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0), "losses {losses:?}");
    assert!(logits.iter().all(|v| v.is_finite()) && logits.iter().any(|&v| v != 0.0));
}

#[test]
fn mixed_precision_training_runs_without_heap_allocation() {
    let model = residual_cnn().expect("the model records");
    // A first scale (2^24) so large that the first steps overflow and are skipped.
    let scaling = LossScaleConfig { init_scale: 16777216.0, ..LossScaleConfig::default() };
    let cfg = TrainConfig {
        optimizer: Optimizer::Sgd(SgdConfig { momentum: 0.9, weight_decay: 0.0, nesterov: false }),
        clip_grad_norm: Some(1.0),
        accumulation: 1,
        mixed_precision: Some(scaling),
        batch_norm: sprout_core::hyperparams::BatchNormStats::Batch,
    };
    let training = compile_training_step(&model.graph, model.loss, &model.parameters, &cfg)
        .expect("the training step compiles");
    let plan = &training.plan;
    let mut memory = plan.initial_memory(&training.graph);
    let mut trainer = Executor::new(plan.view(), Reference).expect("valid plan");
    let (image, label) =
        (plan.operand("image").expect("bound"), plan.operand("label").expect("bound"));
    let batches: Vec<_> =
        (0..30).map(|k| random_batch(80 + k, RES_INPUT.numel(), RES_BATCH, RES_CLASSES)).collect();
    let mut outcomes = [StepOutcome::Accumulated { remaining: 0 }; 30];

    let (calls, ()) = count_heap_calls(|| {
        for (k, (x, y)) in batches.iter().enumerate() {
            let mut regions = memory.regions();
            regions.write(&image, x).expect("image fits");
            regions.write(&label, y).expect("labels fit");
            outcomes[k] = trainer.train_step(&mut regions, 0.05).expect("the step runs");
        }
    });

    assert_eq!(calls, (0, 0), "(allocations, deallocations) while training in mixed precision");
    // The measured steps include skipped ones (the scale backs off from 2^24) and updates.
    assert_eq!(outcomes[0], StepOutcome::Skipped { updates: 0 });
    assert!(matches!(outcomes[29], StepOutcome::Updated { .. }), "{outcomes:?}");
}
