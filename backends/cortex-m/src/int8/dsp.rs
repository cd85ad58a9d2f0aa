//! The DSP-SIMD int8 path (Cortex-M4/M7, `thumbv7em`): the blocked product and the
//! depthwise kernel with inline-assembly loops built on `SXTB16`, `SMLAD` and `SMMULR`.
//!
//! Per group of four reduction indices the wide loop loads one word of four int8 weights,
//! unpacks it with two `SXTB16` into `[w0, w2]` and `[w1, w3]`, and for each of the four
//! columns loads that column's four prepared `i16` values with one `LDRD` (already in the
//! `[x0, x2] [x1, x3]` order, zero point removed) and adds both pairs with two `SMLAD`:
//! 15 instructions for 16 multiply-accumulates, plus 2 of loop control per 4 groups, so
//! 62 instructions per 64 MACs (0.97). `SMLAD` wraps like the reference's `i32`
//! accumulator, so results are bit-exact.
//!
//! Around it: reductions of two groups keep a row's weights in registers while columns
//! stream past (10 instructions per 8 MACs); pointwise panels are built with
//! `SXTB16`/`PKHBT`/`SSUB16` (41 instructions per 16 values); depthwise 3x3 windows take
//! 12 instructions per output at stride 1 (two outputs share each kernel row's word) and
//! 18 at stride 2; requantization takes 9.5 per output with activation bounds and 7.5
//! without, two at a time in the folded form (see [`super::requantize`]); short rows are
//! copied a word at a time. `cargo xtask bench cortex-m` counts LeafNet's int8
//! convolutions at 2.24 instructions per MAC (CMSIS-NN: 3.84).

use core::arch::asm;

use super::columns::WIDE;
use super::product::Engine;
use super::requantize::{ChannelQuant, CheapForm, FoldedForm};
use super::Int8Path;

/// `SXTB16` + `SMLAD` multiply-accumulates.
pub struct Dsp;

/// One group of four reduction indices against the four columns of a wide block.
macro_rules! wide_group {
    () => {
        concat!(
            "ldr {wa}, [{w}], #4\n",
            "sxtb16 {wb}, {wa}, ror #8\n",
            "sxtb16 {wa}, {wa}\n",
            "ldrd {x0}, {x1}, [{x}], #8\n",
            "smlad {a0}, {x0}, {wa}, {a0}\n",
            "smlad {a0}, {x1}, {wb}, {a0}\n",
            "ldrd {x0}, {x1}, [{x}], #8\n",
            "smlad {a1}, {x0}, {wa}, {a1}\n",
            "smlad {a1}, {x1}, {wb}, {a1}\n",
            "ldrd {x0}, {x1}, [{x}], #8\n",
            "smlad {a2}, {x0}, {wa}, {a2}\n",
            "smlad {a2}, {x1}, {wb}, {a2}\n",
            "ldrd {x0}, {x1}, [{x}], #8\n",
            "smlad {a3}, {x0}, {wa}, {a3}\n",
            "smlad {a3}, {x1}, {wb}, {a3}\n",
        )
    };
}

/// One group of four reduction indices against a one-column block.
macro_rules! one_group {
    () => {
        concat!(
            "ldr {wa}, [{w}], #4\n",
            "sxtb16 {wb}, {wa}, ror #8\n",
            "sxtb16 {wa}, {wa}\n",
            "ldrd {x0}, {x1}, [{x}], #8\n",
            "smlad {a}, {x0}, {wa}, {a}\n",
            "smlad {a}, {x1}, {wb}, {a}\n",
        )
    };
}

/// The stride-1 depthwise 3x3 loop over pairs of outputs at `{p}` (see [`sums_3x3`]):
/// `{count}` holds the pair count, running up from `−pairs` in its top half (the loop
/// ends when adding 2^16 carries out), and the last tap in its bottom half.
macro_rules! pairs_3x3 {
    () => {
        concat!(
            "ldr {x}, [{p}, {pitch}]\n",
            "sxtb16 {b}, {x}, ror #8\n",
            "sxtb16 {x}, {x}\n",
            "smuad {s0}, {x}, {w1}\n",
            "smuad {s1}, {b}, {w1}\n",
            "smlabt {s0}, {b}, {w_mid}, {s0}\n",
            "smlatt {s1}, {x}, {w_mid}, {s1}\n",
            "ldr {x}, [{p}, {pitch}, lsl #1]\n",
            "sxtb16 {b}, {x}, ror #8\n",
            "sxtb16 {x}, {x}\n",
            "smlad {s0}, {x}, {w2}, {s0}\n",
            "smlad {s1}, {b}, {w2}, {s1}\n",
            "smlabb {s0}, {b}, {count}, {s0}\n",
            "smlatb {s1}, {x}, {count}, {s1}\n",
            "ldr {x}, [{p}], #2\n",
            "sxtb16 {b}, {x}, ror #8\n",
            "sxtb16 {x}, {x}\n",
            "smlad {s0}, {x}, {w0}, {s0}\n",
            "smlad {s1}, {b}, {w0}, {s1}\n",
            "smlabb {s0}, {b}, {w_mid}, {s0}\n",
            "smlatb {s1}, {x}, {w_mid}, {s1}\n",
            "strd {s0}, {s1}, [{out}], #8\n",
            "adds {count}, {count}, #0x10000\n",
            "bcc 2b\n",
        )
    };
}

/// The stride-2 depthwise 3x3 loop over single outputs at `{p}` (see [`sums_3x3`]), with
/// `{count}` as in [`pairs_3x3`] (outputs instead of pairs), summing in `{s0}`.
macro_rules! singles_3x3 {
    () => {
        concat!(
            "ldr {x}, [{p}, {pitch}]\n",
            "sxtb16 {b}, {x}, ror #8\n",
            "sxtb16 {x}, {x}\n",
            "smuad {s0}, {x}, {w1}\n",
            "smlabt {s0}, {b}, {w_mid}, {s0}\n",
            "ldr {x}, [{p}, {pitch}, lsl #1]\n",
            "sxtb16 {b}, {x}, ror #8\n",
            "sxtb16 {x}, {x}\n",
            "smlad {s0}, {x}, {w2}, {s0}\n",
            "smlabb {s0}, {b}, {count}, {s0}\n",
            "ldr {x}, [{p}], #2\n",
            "sxtb16 {b}, {x}, ror #8\n",
            "sxtb16 {x}, {x}\n",
            "smlad {s0}, {x}, {w0}, {s0}\n",
            "smlabb {s0}, {b}, {w_mid}, {s0}\n",
            "str {s0}, [{out}], #4\n",
            "adds {count}, {count}, #0x10000\n",
            "bcc 2b\n",
        )
    };
}

/// The depthwise 3x3 loop at one stride: per output, each kernel row is one word load
/// (the window's three inputs and one more), two `SXTB16` and two multiplies.
macro_rules! sums_3x3_loop {
    ($stride:literal, $p:ident, $pitch:ident, $out:ident, $n:ident, $w0:ident, $w1:ident, $w2:ident, $w_mid:ident, $w_last:ident) => {
        // SAFETY: see `sums_3x3`: every word read lies in `rows`, every word written in
        // `sums`; only the named registers and the flags change.
        unsafe {
            asm!(
                "2:",
                "ldr {x}, [{p}, {pitch}]",
                "sxtb16 {b}, {x}, ror #8",
                "sxtb16 {x}, {x}",
                "smuad {s}, {x}, {w1}",
                "smlabt {s}, {b}, {w_mid}, {s}",
                "ldr {x}, [{p}, {pitch}, lsl #1]",
                "sxtb16 {b}, {x}, ror #8",
                "sxtb16 {x}, {x}",
                "smlad {s}, {x}, {w2}, {s}",
                "smlabb {s}, {b}, {w_last}, {s}",
                concat!("ldr {x}, [{p}], #", $stride),
                "sxtb16 {b}, {x}, ror #8",
                "sxtb16 {x}, {x}",
                "smlad {s}, {x}, {w0}, {s}",
                "smlabb {s}, {b}, {w_mid}, {s}",
                "str {s}, [{out}], #4",
                "subs {n}, {n}, #1",
                "bne 2b",
                p = inout(reg) $p => _,
                pitch = in(reg) $pitch,
                out = inout(reg) $out => _,
                n = inout(reg) $n => _,
                w0 = in(reg) $w0,
                w1 = in(reg) $w1,
                w2 = in(reg) $w2,
                w_mid = in(reg) $w_mid,
                w_last = in(reg) $w_last,
                x = out(reg) _,
                b = out(reg) _,
                s = out(reg) _,
                options(nostack),
            )
        }
    };
}

impl Engine for Dsp {
    fn dot_wide(w: &[i8], values: &[i16], acc: &mut [i32; WIDE]) {
        dot_wide(w, values, acc)
    }
    fn dot_one(w: &[i8], values: &[i16], acc: &mut i32) {
        dot_one(w, values, acc)
    }
    fn dot_panels(w: &[i8], start: i32, values: &[i16], acc: &mut [i32]) {
        dot_panels(w, start, values, acc)
    }
    fn dot_columns_8(w: &[i8; 8], start: i32, values: &[i16], acc: &mut [i32]) {
        dot_columns_8(w, start, values, acc)
    }
    fn sums_3x3(rows: &[i8], pitch: usize, taps: &[i8; 9], stride: usize, sums: &mut [i32]) {
        sums_3x3(rows, pitch, taps, stride, sums)
    }
    fn sums_3x3_rows(
        rows: &[i8],
        steps: (usize, usize),
        taps: &[i8; 9],
        shape: (usize, usize),
        sums: &mut [i32],
    ) {
        sums_3x3_rows(rows, steps, taps, shape, sums)
    }
    fn finish_run(quant: &ChannelQuant, start: i32, accs: &[i32], out: &mut [i8], most: u64) {
        match most < 1 << 30 {
            true => finish_small(quant, start, accs, out),
            false => finish_run(quant, start, accs, out),
        }
    }
    fn copy_row(dst: &mut [i8], src: &[i8]) {
        copy_row(dst, src)
    }
    fn pointwise_groups(x: &[i8], plane: usize, zero_point: i32, lanes: &mut [i16]) {
        pointwise_groups(x, plane, zero_point, lanes)
    }
}

/// One step of [`pointwise_groups`]: the 4 pixels of channels `c` and `c + 2` (the words at
/// `{p}` and `{p} + 2·plane`), sign-extended, paired into lane order, zero point removed,
/// stored at byte offsets `$first`, `$first + 8`, `$first + 16` and `$first + 24` of the
/// group (each pixel's lanes are 8 bytes apart; the other two channels go 4 bytes further).
macro_rules! widen_channel_pair {
    ($first:literal) => {
        concat!(
            "ldr {t0}, [{p}]\n",
            "ldr {t2}, [{p}, {plane}, lsl #1]\n",
            "sxtb16 {a0}, {t0}\n",
            "sxtb16 {b0}, {t0}, ror #8\n",
            "sxtb16 {a2}, {t2}\n",
            "sxtb16 {b2}, {t2}, ror #8\n",
            "pkhbt {t0}, {a0}, {a2}, lsl #16\n",
            "pkhtb {t2}, {a2}, {a0}, asr #16\n",
            "ssub16 {t0}, {t0}, {zp}\n",
            "ssub16 {t2}, {t2}, {zp}\n",
            "str {t0}, [{out}, #",
            $first,
            "]\n",
            "str {t2}, [{out}, #",
            $first,
            " + 16]\n",
            "pkhbt {t0}, {b0}, {b2}, lsl #16\n",
            "pkhtb {t2}, {b2}, {b0}, asr #16\n",
            "ssub16 {t0}, {t0}, {zp}\n",
            "ssub16 {t2}, {t2}, {zp}\n",
            "str {t0}, [{out}, #",
            $first,
            " + 8]\n",
            "str {t2}, [{out}, #",
            $first,
            " + 24]\n",
        )
    };
}

/// `Engine::pointwise_groups` per group of four channels: one word of four inputs per
/// channel, two `SXTB16` each, `PKHBT`/`PKHTB` to pair channels `k, k + 2` per column,
/// `SSUB16` for the zero point (modulo 2^16, as the portable `as i16` is) and one store
/// per pair: 41 instructions per 16 values.
///
/// # Panics
/// When `lanes` is not whole groups or `x` too short for them.
fn pointwise_groups(x: &[i8], plane: usize, zero_point: i32, lanes: &mut [i16]) {
    let groups = lanes.len() / (4 * WIDE);
    assert!(lanes.len() == groups * 4 * WIDE && lanes.as_ptr().align_offset(4) == 0);
    if groups == 0 {
        return;
    }
    assert!(x.len() >= (4 * groups - 1) * plane + WIDE);
    let zero_points = (zero_point as u32 & 0xffff) * 0x1_0001;
    // SAFETY: group `g` reads the words at `(4g + i) · plane` of `x` for `i` in 0..4
    // (in bounds by the assert; `LDR` may be unaligned on v7-M) and writes the 8 words of
    // its 16 lanes (word-aligned, in bounds by the assert); only the named registers and
    // the flags change.
    unsafe {
        asm!(
            "2:",
            widen_channel_pair!("0"),
            "add {p}, {p}, {plane}",
            widen_channel_pair!("4"),
            "add {p}, {p}, {plane}",
            "add {p}, {p}, {plane}, lsl #1",
            "add {out}, {out}, #32",
            "subs {n}, {n}, #1",
            "bne 2b",
            p = inout(reg) x.as_ptr() => _,
            plane = in(reg) plane,
            out = inout(reg) lanes.as_mut_ptr() => _,
            n = inout(reg) groups => _,
            zp = in(reg) zero_points,
            t0 = out(reg) _,
            t2 = out(reg) _,
            a0 = out(reg) _,
            b0 = out(reg) _,
            a2 = out(reg) _,
            b2 = out(reg) _,
            options(nostack),
        );
    }
}

/// `Engine::copy_row` a word at a time (v7-M loads and stores words at any alignment):
/// `memcpy` spends more on a short, misaligned row than the copy itself.
///
/// # Panics
/// When the lengths differ.
fn copy_row(dst: &mut [i8], src: &[i8]) {
    assert_eq!(dst.len(), src.len());
    let words = src.len() / 4;
    if words > 0 {
        // SAFETY: reads the first `4 · words` bytes of `src` and writes as many of `dst`,
        // both in bounds; only the named registers and the flags change.
        unsafe {
            asm!(
                "2:",
                "ldr {t}, [{s}], #4",
                "str {t}, [{d}], #4",
                "subs {n}, {n}, #1",
                "bne 2b",
                s = inout(reg) src.as_ptr() => _,
                d = inout(reg) dst.as_mut_ptr() => _,
                n = inout(reg) words => _,
                t = out(reg) _,
                options(nostack),
            );
        }
    }
    for (d, &s) in dst[words * 4..].iter_mut().zip(&src[words * 4..]) {
        *d = s;
    }
}

/// The cheap-form requantization loop over `$left` accumulators from `$acc` into `$out`
/// (the count left over goes to `$left_out`), with the doubling given as `$double`: after
/// it `SMMULR`, an add-and-shift for the rounded division, `QADD` and two conditional moves
/// for the zero point and bounds. A `$double` that branches to `3f` leaves the loop early.
macro_rules! requantize_loop {
    ($double:literal, $acc:expr, $out:expr, $left:expr => $left_out:tt, $start:expr, $cheap:expr) => {{
        let CheapForm { multiplier, right, half, zero_point, lo, hi } = $cheap;
        asm!(
            "2:",
            "ldr {x}, [{acc}], #4",
            "add {x}, {x}, {start}",
            $double,
            "smmulr {t}, {t}, {m}",
            "add {x}, {t}, {half}",
            "add {x}, {x}, {t}, asr #31",
            "asr {x}, {x}, {right}",
            "qadd {x}, {x}, {zp}",
            "cmp {x}, {lo}",
            "it lt",
            "movlt {x}, {lo}",
            "cmp {x}, {hi}",
            "it gt",
            "movgt {x}, {hi}",
            "strb {x}, [{out}], #1",
            "subs {left}, {left}, #1",
            "bne 2b",
            "3:",
            acc = inout(reg) $acc => _,
            out = inout(reg) $out => _,
            left = inout(reg) $left => $left_out,
            start = in(reg) $start,
            m = in(reg) multiplier,
            right = in(reg) right,
            half = in(reg) half,
            zp = in(reg) zero_point,
            lo = in(reg) lo,
            hi = in(reg) hi,
            x = out(reg) _,
            t = out(reg) _,
            options(nostack),
        )
    }};
}

/// One output of [`finish_small`]'s pair loop: `{v}` (the accumulator) doubled with the start,
/// `SMMLAR` for the rounded high product plus the folded constant, the sign correction,
/// the shift and `SSAT` to int8.
macro_rules! requantize_one {
    ($v:literal) => {
        concat!(
            "add {",
            $v,
            "}, {s2}, {",
            $v,
            "}, lsl #1\n",
            "smmlar {t}, {",
            $v,
            "}, {m}, {c}\n",
            "add {t}, {t}, {",
            $v,
            "}, asr #31\n",
            "asr {",
            $v,
            "}, {t}, {right}\n",
            "ssat {",
            $v,
            "}, #8, {",
            $v,
            "}\n",
        )
    };
}

/// [`finish_small`]'s pair loop, two outputs per turn, with the bounds applied by `$clamp`
/// (instructions on the two packed bytes in `{a0}`, or nothing).
macro_rules! requantize_pairs_loop {
    ($clamp:expr, $acc:expr, $out:expr, $n:expr, $form:expr, $($bounds:tt)*) => {
        asm!(
            "2:",
            "ldrd {a0}, {a1}, [{acc}], #8",
            requantize_one!("a0"),
            requantize_one!("a1"),
            "bfi {a0}, {a1}, #8, #8",
            $clamp,
            "strh {a0}, [{out}], #2",
            "subs {n}, {n}, #1",
            "bne 2b",
            acc = inout(reg) $acc => _,
            out = inout(reg) $out => _,
            n = inout(reg) $n => _,
            s2 = in(reg) $form.start2,
            m = in(reg) $form.multiplier,
            c = in(reg) $form.constant,
            right = in(reg) $form.right,
            a0 = out(reg) _,
            a1 = out(reg) _,
            t = out(reg) _,
            $($bounds)*
            options(nostack),
        )
    };
}

/// [`finish_run`] where every `|start + accs[i]|` is below `2^30`: two outputs per turn in
/// 19 instructions (15 for the full int8 range) in the folded form ([`FoldedForm`]:
/// `SMMLAR` adds the rounding half and the zero point, `SSAT` clamps to int8 and
/// `SSUB8`/`SEL` to the activation bounds), else one per turn in 16.
fn finish_small(quant: &ChannelQuant, start: i32, accs: &[i32], out: &mut [i8]) {
    let Some(cheap) = quant.cheap() else {
        return quant.finish_run(start, accs, out);
    };
    let n = accs.len().min(out.len());
    if n == 0 {
        return;
    }
    let Some(form) = FoldedForm::new(&cheap, start) else {
        // SAFETY: the loop reads `accs[..n]` and writes `out[..n]`, one element per
        // iteration; only the named registers and the flags change. (No doubling
        // overflows: the caller bounds every `|start + acc|` below 2^30.)
        return unsafe {
            requantize_loop!("add {t}, {x}, {x}", accs.as_ptr(), out.as_mut_ptr(), n => _, start, cheap);
        };
    };
    let pairs = n / 2;
    if pairs > 0 {
        let (acc, y) = (accs.as_ptr(), out.as_mut_ptr());
        // SAFETY: each turn reads two words of `accs` (aligned, as `i32`s are) and writes
        // two bytes of `out` (`STRH` may be unaligned on v7-M): `2 · pairs ≤ n` of each;
        // only the named registers and the flags (GE included) change. No doubling
        // overflows (the caller bounds every `|start + acc|` below 2^30) and no sum does
        // (the high product and the constant are both below 2^30 in magnitude).
        unsafe {
            let bytes = |v: i32| (v as u8 as u32) * 0x0101_0101;
            match form.bounds {
                None => requantize_pairs_loop!("", acc, y, pairs, form,),
                Some((lo, hi)) => requantize_pairs_loop!(
                    concat!(
                        "ssub8 {t}, {a0}, {lo}\n",
                        "sel {a0}, {a0}, {lo}\n",
                        "ssub8 {t}, {hi}, {a0}\n",
                        "sel {a0}, {a0}, {hi}\n",
                    ),
                    acc,
                    y,
                    pairs,
                    form,
                    lo = in(reg) bytes(lo),
                    hi = in(reg) bytes(hi),
                ),
            }
        }
    }
    if n % 2 == 1 {
        out[n - 1] = quant.finish(start.wrapping_add(accs[n - 1]));
    }
}

/// `Engine::finish_run` in the cheap form ([`CheapForm`]) where the channel allows it:
/// `SMMULR` for the rounding doubling high product, an add-and-shift for the rounded
/// division, `QADD` and two conditional moves for the zero point and bounds — 18
/// instructions per output. An accumulator of `2^30` or more in magnitude (the doubling
/// overflows) leaves the loop and is finished in Rust.
fn finish_run(quant: &ChannelQuant, start: i32, accs: &[i32], out: &mut [i8]) {
    let Some(cheap) = quant.cheap() else {
        return quant.finish_run(start, accs, out);
    };
    let n = accs.len().min(out.len());
    let mut done = 0;
    while done < n {
        let mut left = n - done;
        // SAFETY: the loop reads `accs[done..n]` and writes `out[done..n]`, one element
        // per iteration while `left` counts down from `n − done` (leaving early at most);
        // only the named registers and the flags change.
        unsafe {
            requantize_loop!(
                "adds {t}, {x}, {x}\nbvs 3f",
                accs[done..].as_ptr(),
                out[done..].as_mut_ptr(),
                left => left,
                start,
                cheap
            );
        }
        done = n - left;
        if left > 0 {
            out[done] = quant.finish(start.wrapping_add(accs[done]));
            done += 1;
        }
    }
}

/// `Engine::dot_panels`: [`wide_panel`] once per panel, with the bounds checked
/// once for all of them.
///
/// # Panics
/// When `w.len()` is not a multiple of 4 or `values` is too short for `acc.len() / 4`
/// panels or not word-aligned.
fn dot_panels(w: &[i8], start: i32, values: &[i16], acc: &mut [i32]) {
    let (groups, panels) = (w.len() / 4, acc.len() / WIDE);
    assert!(w.len() == groups * 4 && values.len() >= panels * groups * 4 * WIDE);
    assert!(values.as_ptr().align_offset(4) == 0);
    if groups == 0 {
        return acc.fill(start);
    }
    let mut x = values.as_ptr();
    for acc in acc.as_chunks_mut::<WIDE>().0 {
        // SAFETY: per panel the loop reads the `groups` words of `w` and the panel's
        // `4 · WIDE · groups` halfwords from `x` on, in bounds and aligned by the asserts,
        // and leaves `x` at the next panel.
        *acc = unsafe { wide_panel(w.as_ptr(), groups, &mut x, [start; WIDE]) };
    }
}

/// `acc[c] + Σ_k w[k] · column_c[k]` over `groups` groups of four reduction indices for
/// the four columns of one panel at `*x` (`[x0, x2, x1, x3]` lanes per column and group),
/// leaving `*x` after the panel: four groups per turn of the loop, then single groups.
///
/// # Safety
/// `w` must point to `4 · groups` readable bytes (any alignment: `LDR` may be unaligned on
/// v7-M) and `*x` to `4 · WIDE · groups` readable, word-aligned halfwords.
unsafe fn wide_panel(
    w: *const i8,
    groups: usize,
    x: &mut *const i16,
    acc: [i32; WIDE],
) -> [i32; WIDE] {
    let [mut a0, mut a1, mut a2, mut a3] = acc;
    // SAFETY: the caller vouches for the reads; only the named registers and the flags
    // change.
    unsafe {
        asm!(
            "subs {n}, {n}, #4",
            "blt 3f",
            "2:",
            wide_group!(),
            wide_group!(),
            wide_group!(),
            wide_group!(),
            "subs {n}, {n}, #4",
            "bge 2b",
            "3:",
            "adds {n}, {n}, #4",
            "beq 5f",
            "4:",
            wide_group!(),
            "subs {n}, {n}, #1",
            "bne 4b",
            "5:",
            n = inout(reg) groups => _,
            w = inout(reg) w => _,
            x = inout(reg) *x,
            a0 = inout(reg) a0,
            a1 = inout(reg) a1,
            a2 = inout(reg) a2,
            a3 = inout(reg) a3,
            wa = out(reg) _,
            wb = out(reg) _,
            x0 = out(reg) _,
            x1 = out(reg) _,
            options(nostack, readonly),
        );
    }
    [a0, a1, a2, a3]
}

/// `Engine::dot_columns_8` with the row's eight weights unpacked once into four
/// registers: per column two `LDRD` and four `SMLAD` (the first adding `start`), 10
/// instructions for 8 multiply-accumulates.
///
/// # Panics
/// When `values` holds fewer than `8 · acc.len()` values or is not word-aligned.
fn dot_columns_8(w: &[i8; 8], start: i32, values: &[i16], acc: &mut [i32]) {
    let n = acc.len();
    assert!(values.len() >= 8 * n && values.as_ptr().align_offset(4) == 0);
    if n == 0 {
        return;
    }
    let word =
        |k: usize| i32::from_le_bytes([w[k] as u8, w[k + 1] as u8, w[k + 2] as u8, w[k + 3] as u8]);
    let (lo, hi) = (word(0), word(4));
    // SAFETY: reads `8 · n` halfwords of `values` (in bounds and word-aligned by the
    // assert) and writes the `n` words of `acc`; only the named registers and the flags
    // change.
    unsafe {
        asm!(
            "sxtb16 {w0b}, {w0a}, ror #8",
            "sxtb16 {w0a}, {w0a}",
            "sxtb16 {w1b}, {w1a}, ror #8",
            "sxtb16 {w1a}, {w1a}",
            "2:",
            "ldrd {x0}, {x1}, [{x}], #8",
            "smlad {a}, {x0}, {w0a}, {start}",
            "smlad {a}, {x1}, {w0b}, {a}",
            "ldrd {x0}, {x1}, [{x}], #8",
            "smlad {a}, {x0}, {w1a}, {a}",
            "smlad {a}, {x1}, {w1b}, {a}",
            "str {a}, [{out}], #4",
            "subs {n}, {n}, #1",
            "bne 2b",
            w0a = inout(reg) lo => _,
            w1a = inout(reg) hi => _,
            w0b = out(reg) _,
            w1b = out(reg) _,
            start = in(reg) start,
            x = inout(reg) values.as_ptr() => _,
            out = inout(reg) acc.as_mut_ptr() => _,
            n = inout(reg) n => _,
            x0 = out(reg) _,
            x1 = out(reg) _,
            a = out(reg) _,
            options(nostack),
        );
    }
}

/// `Engine::sums_3x3` with `SMUAD`/`SMLAD` on the pairs `[w0, w2]` of each kernel row
/// and `SMLABB`/`SMLABT` for the middle taps. At stride 1 two neighbouring outputs share
/// each kernel row's word: its `SXTB16` halves `[x0, x2]` and `[x1, x3]` are the first
/// output's outer pair and the second's, and the middle taps are `x1` and `x2`, so a pair
/// takes 24 instructions; a single output takes 18. Strides other than 1 and 2, and rows
/// without a readable word past the last window, take the portable loop.
pub fn sums_3x3(rows: &[i8], pitch: usize, taps: &[i8; 9], stride: usize, sums: &mut [i32]) {
    let n = sums.len();
    let words_fit = n > 0 && rows.len() >= 2 * pitch + (n - 1) * stride + 4;
    if !(words_fit && (stride == 1 || stride == 2)) {
        return super::depthwise::sums_3x3(rows, pitch, taps, stride, sums);
    }
    let [w0, w1, w2, w_mid, w_last] = packed_3x3(taps);
    let (mut p, mut out) = (rows.as_ptr(), sums.as_mut_ptr());
    let mut single = n;
    // The pair count must fit the top half of a word.
    if stride == 1 && (2..1 << 17).contains(&n) {
        let pairs = n / 2;
        let count = count_and_tap(pairs, w_last);
        // SAFETY: the pair at output `i` reads the words at `i`, `pitch + i` and
        // `2 · pitch + i` of `rows` (unaligned `LDR` is allowed on v7-M), within `rows` by
        // `words_fit` as `i + 1 < n`, and writes `sums[i..i + 2]` (aligned, as `i32`s
        // are); only the named registers and the flags change.
        unsafe {
            asm!(
                "2:",
                pairs_3x3!(),
                p = inout(reg) p,
                pitch = in(reg) pitch,
                out = inout(reg) out,
                count = inout(reg) count => _,
                w0 = in(reg) w0,
                w1 = in(reg) w1,
                w2 = in(reg) w2,
                w_mid = in(reg) w_mid,
                x = out(reg) _,
                b = out(reg) _,
                s0 = out(reg) _,
                s1 = out(reg) _,
                options(nostack),
            )
        }
        single = n % 2;
        if single == 0 {
            return;
        }
    }
    // SAFETY (of both loops): output `i` reads the words at `i · stride`,
    // `pitch + i · stride` and `2 · pitch + i · stride` of `rows` (unaligned `LDR` is
    // allowed on v7-M), all within `rows` by `words_fit`, and writes `sums[i]`; `p` and
    // `out` stand at the first output the pairs left.
    match stride {
        1 => sums_3x3_loop!(1, p, pitch, out, single, w0, w1, w2, w_mid, w_last),
        _ => sums_3x3_loop!(2, p, pitch, out, single, w0, w1, w2, w_mid, w_last),
    }
}

/// A 3x3 filter as the DSP loops hold it: the pairs `[w0, w2]` of each kernel row, the
/// middle taps of the first two rows as a pair, and the last row's middle tap.
fn packed_3x3(taps: &[i8; 9]) -> [i32; 5] {
    let t = taps.map(i32::from);
    let pair = |lo: i32, hi: i32| (lo & 0xffff) | (hi << 16);
    [pair(t[0], t[2]), pair(t[3], t[5]), pair(t[6], t[8]), pair(t[1], t[4]), t[7]]
}

/// The `{count}` register of [`pairs_3x3`] and [`singles_3x3`]: `−n` (the pairs or outputs
/// of a row) in the top half, the last tap in the bottom half.
fn count_and_tap(n: usize, w_last: i32) -> u32 {
    ((n as u32).wrapping_neg() << 16) | (w_last as u32 & 0xffff)
}

/// [`sums_3x3_rows`]' loop: `$row` (the loop over one output row, which leaves `{p}` after
/// its last window), then a few instructions that reload the rows left, the count and the
/// step to the next row's first window from three stack words.
macro_rules! rows_3x3 {
    ($row:expr, $rows:expr, $pitch:expr, $sums:expr, $reset:expr, $count:expr, $step:expr, $taps:expr, $($extra:tt)*) => {{
        let [w0, w1, w2, w_mid, _] = $taps;
        asm!(
            "sub sp, sp, #16",
            "str {x}, [sp]",
            "str {b}, [sp, #4]",
            "str {s0}, [sp, #8]",
            "2:",
            $row,
            "ldr {x}, [sp]",
            "subs {x}, {x}, #1",
            "beq 3f",
            "str {x}, [sp]",
            "ldr {x}, [sp, #8]",
            "add {p}, {p}, {x}",
            "ldr {count}, [sp, #4]",
            "b 2b",
            "3:",
            "add sp, sp, #16",
            p = inout(reg) $rows => _,
            pitch = in(reg) $pitch,
            out = inout(reg) $sums => _,
            count = inout(reg) $reset => _,
            w0 = in(reg) w0,
            w1 = in(reg) w1,
            w2 = in(reg) w2,
            w_mid = in(reg) w_mid,
            x = inout(reg) $count => _,
            b = inout(reg) $reset => _,
            s0 = inout(reg) $step => _,
            $($extra)*
        )
    }};
}

/// `Engine::sums_3x3_rows` for a whole run of rows in one call: at stride 1 the pair loop
/// (24 instructions per pair), at stride 2 a one-output loop (18 per output), and 8
/// instructions between rows. Other strides, odd widths at stride 1 and rows without a
/// readable word past the last window take a call per row.
pub fn sums_3x3_rows(
    rows: &[i8],
    (pitch, row_step): (usize, usize),
    taps: &[i8; 9],
    (stride, width): (usize, usize),
    sums: &mut [i32],
) {
    let count = sums.len().checked_div(width).unwrap_or(0);
    let last = (count.max(1) - 1) * row_step + 2 * pitch + (width.max(1) - 1) * stride + 4;
    let fits = count > 0 && count * width == sums.len() && rows.len() >= last;
    let per_row = match stride {
        1 if width.is_multiple_of(2) => width / 2,
        2 => width,
        _ => 0,
    };
    if !(fits && per_row > 0 && per_row < 1 << 15 && row_step >= width * stride) {
        for (row, sums) in sums.chunks_mut(width.max(1)).enumerate() {
            sums_3x3(&rows[row * row_step..], pitch, taps, stride, sums);
        }
        return;
    }
    let taps = packed_3x3(taps);
    let reset = count_and_tap(per_row, taps[4]);
    let (p, out, step) = (rows.as_ptr(), sums.as_mut_ptr(), row_step - width * stride);
    // SAFETY: output `i` of row `r` reads the words at `r · row_step + i · stride` and
    // `pitch` and `2 · pitch` further of `rows` (unaligned `LDR` is allowed on v7-M),
    // within `rows` by `fits` (`last` is the end of the last row's last word), and writes
    // `sums[r · width + i]` (two at a time at stride 1, word-aligned as `i32`s are),
    // within `sums` as `count · width = sums.len()`. The loop keeps three words below the
    // stack pointer, which it restores; only the named registers and the flags change.
    unsafe {
        match stride {
            1 => rows_3x3!(pairs_3x3!(), p, pitch, out, reset, count, step, taps, s1 = out(reg) _),
            _ => rows_3x3!(singles_3x3!(), p, pitch, out, reset, count, step, taps,),
        }
    }
}

/// The multiply-accumulate loop on its own (what the benchmark's hot-loop figure
/// measures): `acc[c] += Σ_k w[k] · column_c[k]` for `w.len() / 4` groups, where `values`
/// holds, per group, four columns of four `i16` in `[x0, x2, x1, x3]` order.
///
/// # Panics
/// When `w.len()` is not a multiple of 4, `values` is too short or not word-aligned.
pub fn dot_wide(w: &[i8], values: &[i16], acc: &mut [i32; WIDE]) {
    let groups = w.len() / 4;
    assert!(values.len() >= groups * 4 * WIDE && w.len() == groups * 4);
    assert!(values.as_ptr().align_offset(4) == 0);
    let mut x = values.as_ptr();
    // SAFETY: `w` holds `4 · groups` bytes and `values` at least `4 · WIDE · groups`
    // word-aligned halfwords, by the asserts.
    *acc = unsafe { wide_panel(w.as_ptr(), groups, &mut x, *acc) };
}

/// [`dot_wide`] for a single column (four `i16` per group).
///
/// # Panics
/// As [`dot_wide`].
pub fn dot_one(w: &[i8], values: &[i16], acc: &mut i32) {
    let groups = w.len() / 4;
    assert!(values.len() >= groups * 4 && w.len() == groups * 4);
    assert!(values.as_ptr().align_offset(4) == 0);
    let mut a = *acc;
    let (mut wp, mut xp) = (w.as_ptr(), values.as_ptr());
    let quads = groups / 4;
    if quads > 0 {
        // SAFETY: reads `4 · quads` words of `w` (unaligned `LDR` is allowed on v7-M)
        // and `8 · quads` aligned words of `values`, in bounds by the assert; only the
        // named registers and the flags change.
        unsafe {
            asm!(
                "2:",
                one_group!(),
                one_group!(),
                one_group!(),
                one_group!(),
                "subs {n}, {n}, #1",
                "bne 2b",
                n = inout(reg) quads => _,
                w = inout(reg) wp,
                x = inout(reg) xp,
                a = inout(reg) a,
                wa = out(reg) _,
                wb = out(reg) _,
                x0 = out(reg) _,
                x1 = out(reg) _,
                options(nostack, readonly),
            );
        }
    }
    for _ in 0..groups % 4 {
        // SAFETY: one more group: 1 word of `w`, 2 aligned words of `values`, in bounds.
        unsafe {
            asm!(
                one_group!(),
                w = inout(reg) wp,
                x = inout(reg) xp,
                a = inout(reg) a,
                wa = out(reg) _,
                wb = out(reg) _,
                x0 = out(reg) _,
                x1 = out(reg) _,
                options(nostack, readonly, preserves_flags),
            );
        }
    }
    *acc = a;
}

/// The int8 kernels on the DSP path.
pub const KERNELS: Int8Path = Int8Path::on::<Dsp>();
