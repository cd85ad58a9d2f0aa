//! Executed instructions per multiply-accumulate of the Cortex-M kernels, DSP against
//! scalar (int8) and FPU against the reference kernels (f32), on the same emulated
//! Cortex-M4. Run under `qemu-system-arm -icount shift=0` (`cargo xtask bench cortex-m`).
//!
//! Method: with `-icount shift=0` QEMU's virtual clock advances exactly 1 ns per executed
//! instruction, and SysTick counts core-clock ticks of that clock. The counter is first
//! calibrated on a loop of known length (instructions per tick) and the cost of an empty
//! measurement is subtracted (see `qemu_mps2_an386::counter`). Each kernel call is then
//! counted whole: column building, requantization and loop overheads included; the figure
//! is that count over the call's multiply-accumulates. The `hot loop` line counts the
//! DSP multiply-accumulate loop alone, on a long reduction. Shapes:
//! conv 3x3: 16 → 32 channels, 16x16, padding 1; pointwise: 32 → 64 channels, 16x16;
//! depthwise 3x3: 32 channels, 16x16; linear: batch 8, 256 → 32, and batch 1 (the
//! device's dense layers: one column, so no weight is reused).
//!
//! The `f32 <activation>` lines count a pointwise activation and its gradient per element
//! over 8192 values, the backend's loops against the reference's.
//!
//! The `leafnet backbone` line runs every int8 convolution of one LeafNet sample (64x64
//! RGB; stem, the inverted residuals' expand, depthwise and project convolutions, the last
//! 1x1) on random data and prints their total in millions of instructions: the kernel
//! share of one backbone pass (adds, pooling and the link are not counted).
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, Ordering};

use qemu_mps2_an386 as board;
use qemu_mps2_an386::counter::InstructionCounter;
use sprout_core::geometry::{Conv2dGeometry, LinearDims};
use sprout_core::quant::{OutputQuant, QConv2dArgs, QLinearArgs, Requantize};
use sprout_core::reference::{Activation, HardSigmoidParams, LeakyReluParams};
use sprout_core::{Host, Kernels, Reference};
use sprout_cortex_m::int8::{dsp, scalar};
use sprout_cortex_m::int8::{ConvS8, LinearS8};
use sprout_cortex_m::CortexM;

/// The largest LeafNet activations (48 x 32 x 32) fit `MAX_X` and `MAX_Y`.
const MAX_X: usize = 48 * 1024;
const MAX_W: usize = 16 * 1024;
const MAX_Y: usize = 48 * 1024;

/// Operands, in `.bss`.
struct Buffers {
    xq: [i8; MAX_X],
    wq: [i8; MAX_W],
    yq: [i8; MAX_Y],
    x: [f32; F32_LEN],
    w: [f32; F32_LEN],
    y: [f32; F32_LEN],
}

/// Elements of each f32 operand.
const F32_LEN: usize = 8 * 1024;

fn buffers() -> &'static mut Buffers {
    static TAKEN: AtomicBool = AtomicBool::new(false);
    static mut BUFFERS: Buffers = Buffers {
        xq: [0; MAX_X],
        wq: [0; MAX_W],
        yq: [0; MAX_Y],
        x: [0.0; F32_LEN],
        w: [0.0; F32_LEN],
        y: [0.0; F32_LEN],
    };
    if TAKEN.swap(true, Ordering::AcqRel) {
        board::exit(false);
    }
    let place = &raw mut BUFFERS;
    // SAFETY: `TAKEN` lets this line run once, so the reference is unique.
    unsafe { &mut *place }
}

const fn conv(c_in: usize, c_out: usize, k: usize, groups: usize) -> Conv2dGeometry {
    conv_at(16, c_in, c_out, k, 1, groups)
}

/// A `k x k` convolution of a `size x size` input, padding `k / 2`.
const fn conv_at(
    size: usize,
    c_in: usize,
    c_out: usize,
    k: usize,
    stride: usize,
    groups: usize,
) -> Conv2dGeometry {
    let pad = k / 2;
    let out = (size + 2 * pad - k) / stride + 1;
    Conv2dGeometry {
        n: 1,
        c_in,
        h: size,
        w: size,
        c_out,
        kh: k,
        kw: k,
        stride: (stride, stride),
        padding: (pad, pad),
        groups,
        out_h: out,
        out_w: out,
    }
}

/// LeafNet's int8 convolutions for one 64x64 sample, in order (see the zoo's `leafnet`):
/// `(input size, c_in, c_out, kernel, stride, groups)`.
#[rustfmt::skip]
const LEAFNET: [(usize, usize, usize, usize, usize, usize); 28] = [
    (64, 3, 16, 3, 2, 1),
    (32, 16, 16, 3, 1, 16), (32, 16, 8, 1, 1, 1),
    (32, 8, 48, 1, 1, 1), (32, 48, 48, 3, 2, 48), (16, 48, 16, 1, 1, 1),
    (16, 16, 96, 1, 1, 1), (16, 96, 96, 3, 1, 96), (16, 96, 16, 1, 1, 1),
    (16, 16, 96, 1, 1, 1), (16, 96, 96, 3, 2, 96), (8, 96, 24, 1, 1, 1),
    (8, 24, 144, 1, 1, 1), (8, 144, 144, 3, 1, 144), (8, 144, 24, 1, 1, 1),
    (8, 24, 144, 1, 1, 1), (8, 144, 144, 3, 2, 144), (4, 144, 32, 1, 1, 1),
    (4, 32, 192, 1, 1, 1), (4, 192, 192, 3, 1, 192), (4, 192, 32, 1, 1, 1),
    (4, 32, 192, 1, 1, 1), (4, 192, 192, 3, 1, 192), (4, 192, 48, 1, 1, 1),
    (4, 48, 288, 1, 1, 1), (4, 288, 288, 3, 1, 288), (4, 288, 48, 1, 1, 1),
    (4, 48, 192, 1, 1, 1),
];

const CONV: Conv2dGeometry = conv(16, 32, 3, 1);
const POINTWISE: Conv2dGeometry = conv(32, 64, 1, 1);
const DEPTHWISE: Conv2dGeometry = conv(32, 32, 3, 32);
const LINEAR: LinearDims = LinearDims { n: 8, k: 256, m: 32 };
const LINEAR_1: LinearDims = LinearDims { n: 1, ..LINEAR };

/// Prints `NAME: X.XX insn/MAC`.
fn report(name: &str, instructions: f32, macs: usize) {
    let hundredths = (instructions * 100.0 / macs as f32 + 0.5) as u32;
    defmt::println!("{=str}: {=u32}.{=u32:02} insn/MAC", name, hundredths / 100, hundredths % 100);
}

/// Pseudo-random int8 and f32 data (the figures do not depend on the values).
fn fill(b: &mut Buffers) {
    let mut state = 0x1234_5678u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    b.xq.iter_mut().for_each(|q| *q = next() as i8);
    b.wq.iter_mut().for_each(|q| *q = (next() as i8).max(-127));
    b.x.iter_mut().for_each(|v| *v = (next() >> 8) as f32 / 16_777_216.0 - 0.5);
    b.w.iter_mut().for_each(|v| *v = (next() >> 8) as f32 / 16_777_216.0 - 0.5);
}

fn int8_conv(
    c: &mut InstructionCounter,
    b: &mut Buffers,
    name: &str,
    k: ConvS8,
    g: &Conv2dGeometry,
) {
    let multipliers =
        [Requantize::new(0.004).unwrap_or(Requantize { multiplier: 0, shift: 0 }); 64];
    let out = OutputQuant { multipliers: &multipliers[..g.c_out], zero_point: 3, act: (-128, 127) };
    let (x, w, y) = (&b.xq[..g.input_len()], &b.wq[..g.weight_len()], &mut b.yq[..g.output_len()]);
    let a = QConv2dArgs { x, x_zero_point: -5, weights: w, bias: None, out, shape: *g };
    let n = c.instructions(|| k(&a, y));
    report(name, n, g.macs());
}

fn int8_linear(
    c: &mut InstructionCounter,
    b: &mut Buffers,
    name: &str,
    k: LinearS8,
    d: &LinearDims,
) {
    let multipliers =
        [Requantize::new(0.004).unwrap_or(Requantize { multiplier: 0, shift: 0 }); 64];
    let out = OutputQuant { multipliers: &multipliers[..d.m], zero_point: 3, act: (-128, 127) };
    let (x, w, y) = (&b.xq[..d.n * d.k], &b.wq[..d.m * d.k], &mut b.yq[..d.n * d.m]);
    let a = QLinearArgs { x, x_zero_point: -5, weights: w, bias: None, out, shape: *d };
    let n = c.instructions(|| k(&a, y));
    report(name, n, d.n * d.k * d.m);
}

fn f32_conv(
    c: &mut InstructionCounter,
    b: &mut Buffers,
    name: &str,
    k: &mut impl Kernels<Memory = Host>,
    g: &Conv2dGeometry,
) {
    let (x, w, y) = (&b.x[..g.input_len()], &b.w[..g.weight_len()], &mut b.y[..g.output_len()]);
    let n = c.instructions(|| k.conv2d(x, w, None, y, g));
    report(name, n, g.macs());
}

fn f32_linear(
    c: &mut InstructionCounter,
    b: &mut Buffers,
    name: &str,
    k: &mut impl Kernels<Memory = Host>,
    d: LinearDims,
) {
    let (x, w, y) = (&b.x[..d.n * d.k], &b.w[..d.m * d.k], &mut b.y[..d.n * d.m]);
    let n = c.instructions(|| k.linear(x, w, None, y, d));
    report(name, n, d.n * d.k * d.m);
}

/// One pointwise activation over the whole f32 buffer, forward then backward (the
/// gradient reading `x` as its saved tensor: the cost does not depend on which).
fn f32_activation(
    c: &mut InstructionCounter,
    b: &mut Buffers,
    name: &str,
    backend: &str,
    k: &mut impl Kernels<Memory = Host>,
    f: Activation,
) {
    let (x, w, y) = (&b.x[..], &b.w[..], &mut b.y[..]);
    let n = c.instructions(|| k.activation(f, x, y));
    defmt::println!("f32 {=str} {=str}: {=u32} insn/element", name, backend, per(n, x.len()));
    let n = c.instructions(|| k.activation_grad(f, x, w, y));
    let per_element = per(n, x.len());
    defmt::println!("f32 {=str} grad {=str}: {=u32} insn/element", name, backend, per_element);
}

/// `instructions / count`, rounded.
fn per(instructions: f32, count: usize) -> u32 {
    (instructions / count as f32 + 0.5) as u32
}

/// Every LeafNet convolution once, with ReLU6-like bounds: prints the total instructions
/// (millions) and instructions per MAC.
fn leafnet(c: &mut InstructionCounter, b: &mut Buffers, name: &str, k: ConvS8) {
    let multipliers =
        [Requantize::new(0.004).unwrap_or(Requantize { multiplier: 0, shift: 0 }); 288];
    let (mut instructions, mut macs) = (0.0, 0);
    for (size, c_in, c_out, kernel, stride, groups) in LEAFNET {
        let g = conv_at(size, c_in, c_out, kernel, stride, groups);
        let out =
            OutputQuant { multipliers: &multipliers[..c_out], zero_point: -20, act: (-20, 100) };
        let (x, w, y) =
            (&b.xq[..g.input_len()], &b.wq[..g.weight_len()], &mut b.yq[..g.output_len()]);
        let a = QConv2dArgs { x, x_zero_point: -5, weights: w, bias: None, out, shape: g };
        instructions += c.instructions(|| k(&a, y));
        macs += g.macs();
    }
    let tenths = (instructions / 100_000.0 + 0.5) as u32;
    let hundredths = (instructions * 100.0 / macs as f32 + 0.5) as u32;
    defmt::println!(
        "{=str}: {=u32}.{=u32} M insn for {=usize} MACs ({=u32}.{=u32:02} insn/MAC)",
        name,
        tenths / 10,
        tenths % 10,
        macs,
        hundredths / 100,
        hundredths % 100
    );
}

/// The DSP multiply-accumulate loop alone: 4 columns × 1024 reduction indices, 16 rows.
fn hot_loop(c: &mut InstructionCounter, b: &mut Buffers) {
    #[repr(C, align(8))]
    struct Columns([i16; 4 * 1024]);
    let columns = Columns(core::array::from_fn(|i| i as i16 % 255));
    let rows = 16;
    let w = &b.wq[..rows * 1024];
    let mut acc = [0i32; 4];
    let n = c.instructions(|| {
        for row in w.chunks_exact(1024) {
            dsp::dot_wide(row, &columns.0, &mut acc);
        }
    });
    report("int8 dsp hot loop", n, rows * 1024 * 4);
    defmt::debug!("checksum {=i32}", acc[0]);
}

#[cortex_m_rt::entry]
fn main() -> ! {
    let Some(board) = board::init() else { board::exit(false) };
    let mut c = board.counter;
    let per_tick = c.calibrate();
    if !(39.0..=41.0).contains(&per_tick) {
        defmt::warn!(
            "{=f32} instructions per SysTick tick: not running under -icount shift=0?",
            per_tick
        );
    }
    let b = buffers();
    fill(b);
    int8_conv(&mut c, b, "int8 conv dsp", dsp::KERNELS.conv2d_s8, &CONV);
    int8_conv(&mut c, b, "int8 conv scalar", scalar::KERNELS.conv2d_s8, &CONV);
    int8_conv(&mut c, b, "int8 pointwise conv dsp", dsp::KERNELS.conv2d_s8, &POINTWISE);
    int8_conv(&mut c, b, "int8 pointwise conv scalar", scalar::KERNELS.conv2d_s8, &POINTWISE);
    int8_conv(&mut c, b, "int8 depthwise conv dsp", dsp::KERNELS.conv2d_s8, &DEPTHWISE);
    int8_conv(&mut c, b, "int8 depthwise conv scalar", scalar::KERNELS.conv2d_s8, &DEPTHWISE);
    int8_linear(&mut c, b, "int8 linear dsp", dsp::KERNELS.linear_s8, &LINEAR);
    int8_linear(&mut c, b, "int8 linear scalar", scalar::KERNELS.linear_s8, &LINEAR);
    int8_linear(&mut c, b, "int8 linear batch 1 dsp", dsp::KERNELS.linear_s8, &LINEAR_1);
    int8_linear(&mut c, b, "int8 linear batch 1 scalar", scalar::KERNELS.linear_s8, &LINEAR_1);
    hot_loop(&mut c, b);
    leafnet(&mut c, b, "int8 leafnet backbone dsp", dsp::KERNELS.conv2d_s8);
    leafnet(&mut c, b, "int8 leafnet backbone scalar", scalar::KERNELS.conv2d_s8);
    f32_conv(&mut c, b, "f32 conv fpu", &mut CortexM, &CONV);
    f32_conv(&mut c, b, "f32 conv reference", &mut Reference, &CONV);
    f32_conv(&mut c, b, "f32 depthwise conv fpu", &mut CortexM, &DEPTHWISE);
    f32_conv(&mut c, b, "f32 depthwise conv reference", &mut Reference, &DEPTHWISE);
    f32_linear(&mut c, b, "f32 linear fpu", &mut CortexM, LINEAR);
    f32_linear(&mut c, b, "f32 linear reference", &mut Reference, LINEAR);
    let leaky = Activation::LeakyRelu(LeakyReluParams { alpha: 0.01 });
    for (name, f) in [
        ("sigmoid", Activation::Sigmoid),
        ("hard swish", Activation::HardSwish),
        ("hard sigmoid", Activation::HardSigmoid(HardSigmoidParams::PYTORCH)),
        ("leaky relu", leaky),
    ] {
        f32_activation(&mut c, b, name, "fpu", &mut CortexM, f);
        f32_activation(&mut c, b, name, "reference", &mut Reference, f);
    }
    board::exit(true)
}
