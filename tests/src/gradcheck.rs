//! Finite-difference gradient checking: compares every element of the gradients that
//! `differentiate` builds with central differences of the compiled loss, plus seeded random data.
//!
//! # Method
//!
//! [`GradCheck::run`] differentiates the loss with respect to the given parameters,
//! compiles the loss and the gradients into one plan (training mode) and runs it once for
//! the analytic gradients. A second, forward-only plan of the same differentiated graph
//! (where the parameters are trainable, so they live in the writable state region) computes
//! the numeric ones: for every element `p` of every parameter it evaluates the loss at
//! `p + h` and `p − h` and takes `(L⁺ − L⁻) / (p⁺ − p⁻)`, dividing by the step actually
//! taken after f32 rounding rather than by `2h`.
//!
//! # Step and tolerance
//!
//! Everything runs in f32, so the numeric derivative carries two errors: truncation,
//! about `h²·|L'''|/6`, and cancellation, about `ulp(L)/h`. [`STEP`] `= 1e-2` balances them
//! for losses of order one: truncation is ~2e-5·|L'''| and cancellation ~1e-5·|L|. The check
//! accepts an element when `|a − n| ≤ atol + rtol·max(|a|, |n|)` ([`TOLERANCE`]): `rtol`
//! covers truncation on large derivatives, `atol` covers cancellation on small ones. Both
//! are well above the errors measured on correct rules (see the test file) and well below
//! the size of the gradients checked: every checked tensor must have a numeric gradient of
//! at least [`MIN_SIGNAL`] somewhere, so a rule that returns zeros (or a tolerance that
//! swallows everything) fails instead of passing quietly.
//!
//! # Kinks
//!
//! Central differences are only meaningful where the loss is smooth between `p − h` and
//! `p + h`. Tests draw data away from kinks (relu at 0, relu6 at 0 and 6, max-pool ties),
//! and [`GradCheck::watch`] guards composites: a perturbation that moves any element of a
//! watched tensor across one of its kink points is skipped and counted, and
//! [`GradCheck::max_skipped`] bounds how many may be.

use sprout_core::rng::SplitMix;
use sprout_core::{
    compile_outputs, differentiate, Executor, Graph, HostMemory, Mode, Operand, Plan, Reference,
    Regions, Shape, TensorId,
};
use std::fmt::Write as _;

/// Finite-difference step.
pub const STEP: f32 = 1e-2;

/// Default acceptance for `|analytic − numeric|`.
pub const TOLERANCE: Tolerance = Tolerance { atol: 2e-4, rtol: 1e-2 };

/// The smallest largest-numeric-gradient a checked tensor may have (20 × the default atol).
pub const MIN_SIGNAL: f32 = 4e-3;

/// `|a − n| ≤ atol + rtol·max(|a|, |n|)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f32,
    pub rtol: f32,
}

impl Tolerance {
    /// The largest difference accepted between `analytic` and `numeric`.
    pub fn allowed(&self, analytic: f32, numeric: f32) -> f32 {
        self.atol + self.rtol * analytic.abs().max(numeric.abs())
    }

    pub fn accepts(&self, analytic: f32, numeric: f32) -> bool {
        (analytic - numeric).abs() <= self.allowed(analytic, numeric)
    }
}

/// A value fed to an input or label tensor before every run.
#[derive(Clone, Debug)]
pub enum Feed {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// What one check saw for one parameter.
#[derive(Clone, Debug)]
pub struct TensorReport {
    pub name: String,
    pub shape: Shape,
    /// Elements compared.
    pub checked: usize,
    /// Elements skipped because a perturbation crossed a watched kink.
    pub skipped: usize,
    /// Largest `|analytic − numeric|` over the compared elements.
    pub max_error: f32,
    /// Largest `|analytic − numeric| / allowed` over the compared elements (≤ 1 passes).
    pub max_error_ratio: f32,
    /// Largest `|numeric|`: how much signal the check had.
    pub max_numeric: f32,
}

/// What a passing check saw, parameter by parameter.
#[derive(Clone, Debug)]
pub struct Report {
    pub op: String,
    pub loss: f32,
    pub tensors: Vec<TensorReport>,
}

impl Report {
    /// The worst `|analytic − numeric| / allowed` of the check.
    pub fn worst_ratio(&self) -> f32 {
        self.tensors.iter().map(|t| t.max_error_ratio).fold(0.0, f32::max)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}: loss {:.5}", self.op, self.loss)?;
        for t in &self.tensors {
            writeln!(
                f,
                "  {:<16} {:<14} checked {:4} skipped {:3} max |a-n| {:.2e} (ratio {:.3}) max |n| {:.2e}",
                t.name,
                t.shape.to_string(),
                t.checked,
                t.skipped,
                t.max_error,
                t.max_error_ratio,
                t.max_numeric
            )?;
        }
        Ok(())
    }
}

/// A gradient check of one loss with respect to some parameters of a graph.
pub struct GradCheck<'g> {
    op: String,
    graph: &'g Graph,
    loss: TensorId,
    params: Vec<TensorId>,
    feeds: Vec<(TensorId, Feed)>,
    watched: Vec<(TensorId, Vec<f32>)>,
    step: f32,
    tolerance: Tolerance,
    min_signal: f32,
    max_skipped: f32,
    mode: Mode,
}

/// Checks the gradients of `loss` with respect to `params` with the default step and
/// tolerance; `op` names the check in messages.
pub fn check_gradients(
    op: &str,
    graph: &Graph,
    loss: TensorId,
    params: &[TensorId],
) -> Result<Report, String> {
    GradCheck::new(op, graph, loss, params).run()
}

impl<'g> GradCheck<'g> {
    pub fn new(op: &str, graph: &'g Graph, loss: TensorId, params: &[TensorId]) -> Self {
        Self {
            op: op.to_string(),
            graph,
            loss,
            params: params.to_vec(),
            feeds: Vec::new(),
            watched: Vec::new(),
            step: STEP,
            tolerance: TOLERANCE,
            min_signal: MIN_SIGNAL,
            max_skipped: 0.0,
            mode: Mode::Train,
        }
    }

    /// The training mode both plans are compiled in (default [`Mode::Train`]).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Feeds an input or label tensor before every run.
    pub fn feed(mut self, tensor: TensorId, values: Feed) -> Self {
        self.feeds.push((tensor, values));
        self
    }

    /// Skips perturbations that move any element of `tensor` across one of `kinks`.
    pub fn watch(mut self, tensor: TensorId, kinks: &[f32]) -> Self {
        self.watched.push((tensor, kinks.to_vec()));
        self
    }

    /// The largest fraction of each parameter's elements that may be skipped (default 0).
    pub fn max_skipped(mut self, fraction: f32) -> Self {
        self.max_skipped = fraction;
        self
    }

    pub fn step(mut self, h: f32) -> Self {
        self.step = h;
        self
    }

    pub fn tolerance(mut self, tolerance: Tolerance) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The largest `|numeric|` each parameter must reach somewhere (default [`MIN_SIGNAL`]).
    pub fn min_signal(mut self, signal: f32) -> Self {
        self.min_signal = signal;
        self
    }

    /// Runs the check: `Ok` with what it saw, or `Err` naming every element that failed
    /// (op, tensor, index, analytic, numeric).
    pub fn run(&self) -> Result<Report, String> {
        let op = &self.op;
        let d = differentiate(self.graph, self.loss, &self.params)
            .map_err(|e| format!("{op}: differentiate failed: {e}"))?;
        let graph = &d.graph;

        // Analytic gradients: loss and every gradient in one plan.
        let mut outputs = vec![d.loss];
        outputs.extend(d.gradients.iter().map(|&(_, g)| g));
        let grad_plan = compile_outputs(graph, &outputs, self.mode)
            .map_err(|e| format!("{op}: compiling the gradient plan failed: {e}"))?;
        let mut grad_run = Runner::new(op, graph, &grad_plan, &self.feeds)?;
        grad_run.run()?;
        let loss = grad_run.read(d.loss)?[0];
        let analytic: Vec<Vec<f32>> =
            d.gradients.iter().map(|&(_, g)| grad_run.read(g)).collect::<Result<_, _>>()?;

        // Numeric gradients: a forward-only plan of the same graph.
        let mut forward_outputs = vec![d.loss];
        forward_outputs.extend(self.watched.iter().map(|(t, _)| *t));
        let forward_plan = compile_outputs(graph, &forward_outputs, self.mode)
            .map_err(|e| format!("{op}: compiling the forward plan failed: {e}"))?;
        let mut forward = Runner::new(op, graph, &forward_plan, &self.feeds)?;
        let (base_loss, base_sides) = self.evaluate(&mut forward)?;
        if base_loss != loss {
            return Err(format!(
                "{op}: the forward plan's loss {base_loss} differs from the gradient plan's {loss}"
            ));
        }

        let mut failures = Vec::new();
        let mut tensors = Vec::new();
        for (&(param, _), analytic) in d.gradients.iter().zip(&analytic) {
            let info = graph.tensor(param);
            let operand = forward.operand(param)?;
            let values = forward.read(param)?;
            let mut report = TensorReport {
                name: info.name.clone(),
                shape: info.shape,
                checked: 0,
                skipped: 0,
                max_error: 0.0,
                max_error_ratio: 0.0,
                max_numeric: 0.0,
            };
            for (i, &a) in analytic.iter().enumerate() {
                let (up, down) = (values[i] + self.step, values[i] - self.step);
                let mut perturbed = values.clone();
                perturbed[i] = up;
                forward.write(&operand, &perturbed)?;
                let (loss_up, sides_up) = self.evaluate(&mut forward)?;
                perturbed[i] = down;
                forward.write(&operand, &perturbed)?;
                let (loss_down, sides_down) = self.evaluate(&mut forward)?;
                forward.write(&operand, &values)?;
                if sides_up != base_sides || sides_down != base_sides {
                    report.skipped += 1;
                    continue;
                }
                let n = (loss_up - loss_down) / (up - down);
                report.checked += 1;
                report.max_numeric = report.max_numeric.max(n.abs());
                let error = (a - n).abs();
                let allowed = self.tolerance.allowed(a, n);
                report.max_error = report.max_error.max(error);
                report.max_error_ratio = report.max_error_ratio.max(error / allowed);
                if !self.tolerance.accepts(a, n) || !a.is_finite() {
                    failures.push(format!(
                        "{op}: d(loss)/d({})[{i}] at {}: analytic {a:.6e}, numeric {n:.6e}, \
                         |diff| {error:.3e} > allowed {allowed:.3e}",
                        info.name,
                        coordinates(info.shape, i),
                    ));
                }
            }
            let numel = info.shape.numel();
            if report.skipped as f32 > self.max_skipped * numel as f32 {
                failures.push(format!(
                    "{op}: {} of {numel} elements of '{}' were skipped because a step of {} \
                     crossed a watched kink (at most {:.0}% may be)",
                    report.skipped,
                    info.name,
                    self.step,
                    100.0 * self.max_skipped
                ));
            }
            if report.max_numeric < self.min_signal {
                failures.push(format!(
                    "{op}: the numeric gradient of '{}' peaks at {:.3e}, below {:.3e}: too small \
                     for the tolerance to tell a right rule from a wrong one",
                    info.name, report.max_numeric, self.min_signal
                ));
            }
            tensors.push(report);
        }
        let report = Report { op: op.clone(), loss, tensors };
        if failures.is_empty() {
            Ok(report)
        } else {
            const SHOWN: usize = 40;
            let mut msg = format!("{op}: {} gradient check failures\n", failures.len());
            for f in failures.iter().take(SHOWN) {
                let _ = writeln!(msg, "  {f}");
            }
            if failures.len() > SHOWN {
                let _ = writeln!(msg, "  ... and {} more", failures.len() - SHOWN);
            }
            let _ = write!(msg, "{report}");
            Err(msg)
        }
    }

    /// The loss, and for each watched tensor and kink point which side each element is on.
    fn evaluate(&self, forward: &mut Runner<'_>) -> Result<(f32, Vec<bool>), String> {
        forward.run()?;
        let loss = forward.read(self.loss)?[0];
        let mut sides = Vec::new();
        for (tensor, kinks) in &self.watched {
            for v in forward.read(*tensor)? {
                sides.extend(kinks.iter().map(|&k| v > k));
            }
        }
        Ok((loss, sides))
    }
}

/// `index` of a tensor of `shape` as `[i, j, ...]`.
pub fn coordinates(shape: Shape, index: usize) -> String {
    let dims = shape.dims();
    let mut rest = index;
    let mut coords = vec![0; dims.len()];
    for (c, &d) in coords.iter_mut().zip(dims).rev() {
        *c = rest % d.max(1);
        rest /= d.max(1);
    }
    format!("{coords:?}")
}

/// One compiled plan with its memory and executor.
struct Runner<'p> {
    op: &'p str,
    plan: &'p Plan,
    memory: HostMemory,
    executor: Executor<'p, Reference>,
    feeds: Vec<(Operand, &'p Feed)>,
}

impl<'p> Runner<'p> {
    fn new(
        op: &'p str,
        graph: &Graph,
        plan: &'p Plan,
        feeds: &'p [(TensorId, Feed)],
    ) -> Result<Self, String> {
        let memory = plan.initial_memory(graph);
        let executor = Executor::new(plan.view(), Reference)
            .map_err(|e| format!("{op}: the plan does not validate: {e}"))?;
        let mut placed = Vec::new();
        for (t, feed) in feeds {
            // A fed tensor the plan never reads needs no value.
            if let Some(b) = plan.binding_of(*t) {
                placed.push((b.operand, feed));
            }
        }
        Ok(Self { op, plan, memory, executor, feeds: placed })
    }

    fn operand(&self, t: TensorId) -> Result<Operand, String> {
        self.plan
            .binding_of(t)
            .map(|b| b.operand)
            .ok_or_else(|| format!("{}: tensor #{} is not in the plan", self.op, t.0))
    }

    fn run(&mut self) -> Result<(), String> {
        let op = self.op;
        let mut regions: Regions<'_> = self.memory.regions();
        for (operand, feed) in &self.feeds {
            let written = match feed {
                Feed::F32(v) => regions.write(operand, v),
                Feed::I32(v) => regions.write(operand, v),
            };
            written.map_err(|e| format!("{op}: feeding an input failed: {e}"))?;
        }
        self.executor.run(&mut regions).map_err(|e| format!("{op}: running the plan failed: {e}"))
    }

    fn read(&mut self, t: TensorId) -> Result<Vec<f32>, String> {
        let operand = self.operand(t)?;
        let regions = self.memory.regions();
        regions
            .read::<f32>(&operand)
            .map(<[f32]>::to_vec)
            .map_err(|e| format!("{}: reading tensor #{} failed: {e}", self.op, t.0))
    }

    fn write(&mut self, operand: &Operand, values: &[f32]) -> Result<(), String> {
        let mut regions = self.memory.regions();
        regions
            .write(operand, values)
            .map_err(|e| format!("{}: writing a parameter failed: {e}", self.op))
    }
}

/// Seeded random test data (SplitMix64), so every "random" case is reproducible.
pub struct Rand(SplitMix);

impl Rand {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix::new(seed))
    }

    /// Uniform in `[low, high)`.
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        self.0.uniform(low, high)
    }

    /// An integer in `low..=high`.
    pub fn int(&mut self, low: usize, high: usize) -> usize {
        low + (self.0.next_u64() % (high - low + 1) as u64) as usize
    }

    /// `n` values uniform in `[low, high)`.
    pub fn values(&mut self, n: usize, low: f32, high: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(low, high)).collect()
    }

    /// `n` values uniform in `[low, high)`, each more than `margin` away from every kink.
    pub fn away_from(
        &mut self,
        n: usize,
        low: f32,
        high: f32,
        kinks: &[f32],
        margin: f32,
    ) -> Vec<f32> {
        (0..n)
            .map(|_| loop {
                let v = self.uniform(low, high);
                if kinks.iter().all(|k| (v - k).abs() > margin) {
                    break v;
                }
            })
            .collect()
    }

    /// `n` distinct values at least `gap` apart: `±(i + ½)·gap` for `i < n`, random signs,
    /// shuffled. Max-pool windows over them have a unique maximum, and moving one value by
    /// less than `gap` cannot change which element it is.
    pub fn distinct(&mut self, n: usize, gap: f32) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n)
            .map(|i| {
                let sign = if self.0.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
                sign * (i as f32 + 0.5) * gap
            })
            .collect();
        self.shuffle(&mut v);
        v
    }

    /// Class labels in `0..classes`.
    pub fn labels(&mut self, n: usize, classes: usize) -> Vec<i32> {
        (0..n).map(|_| self.int(0, classes - 1) as i32).collect()
    }

    /// Fisher–Yates.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.int(0, i));
        }
    }
}
