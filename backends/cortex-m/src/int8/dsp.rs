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
//! 18 instructions per output; requantization takes 18 per output in its cheap form (see
//! [`super::requantize`]); short rows are copied a word at a time. Whole kernels, as
//! `cargo xtask bench cortex-m` counts them: about 2.1 instructions per MAC for a 3x3
//! convolution, 1.9 for a pointwise one, 5.0 for a depthwise one, 1.6 for a dense layer at
//! batch 8; LeafNet's convolutions average 2.9.

use core::arch::asm;

use super::columns::WIDE;
use super::product::Engine;
use super::requantize::{ChannelQuant, CheapForm};
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

/// [`finish_run`] where every `|start + accs[i]|` is below `2^30`: the same loop without
/// the range check, 16 instructions per output.
fn finish_small(quant: &ChannelQuant, start: i32, accs: &[i32], out: &mut [i8]) {
    let Some(cheap) = quant.cheap() else {
        return quant.finish_run(start, accs, out);
    };
    let n = accs.len().min(out.len());
    if n == 0 {
        return;
    }
    // SAFETY: the loop reads `accs[..n]` and writes `out[..n]`, one element per
    // iteration; only the named registers and the flags change. (No doubling overflows:
    // the caller bounds every `|start + acc|` below 2^30.)
    unsafe {
        requantize_loop!("add {t}, {x}, {x}", accs.as_ptr(), out.as_mut_ptr(), n => _, start, cheap);
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
/// and `SMLABB`/`SMLABT` for the middle taps: 18 instructions per output. Strides other
/// than 1 and 2, and rows without a readable word past the last window, take the portable
/// loop.
pub fn sums_3x3(rows: &[i8], pitch: usize, taps: &[i8; 9], stride: usize, sums: &mut [i32]) {
    let n = sums.len();
    let words_fit = n > 0 && rows.len() >= 2 * pitch + (n - 1) * stride + 4;
    if !(words_fit && (stride == 1 || stride == 2)) {
        return super::depthwise::sums_3x3(rows, pitch, taps, stride, sums);
    }
    let t = taps.map(i32::from);
    let pair = |lo: i32, hi: i32| (lo & 0xffff) | (hi << 16);
    let (w0, w1, w2) = (pair(t[0], t[2]), pair(t[3], t[5]), pair(t[6], t[8]));
    let (w_mid, w_last) = (pair(t[1], t[4]), t[7]);
    let (p, out) = (rows.as_ptr(), sums.as_mut_ptr());
    // SAFETY (of both loops): output `i` reads the words at `i · stride`,
    // `pitch + i · stride` and `2 · pitch + i · stride` of `rows` (unaligned `LDR` is
    // allowed on v7-M), all within `rows` by `words_fit`, and writes `sums[i]`.
    match stride {
        1 => sums_3x3_loop!(1, p, pitch, out, n, w0, w1, w2, w_mid, w_last),
        _ => sums_3x3_loop!(2, p, pitch, out, n, w0, w1, w2, w_mid, w_last),
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
