//! sprout's half of `cargo xtask bench cortex-m`'s side by side with CMSIS-NN: runs the
//! int8 convolutions of the layer file QEMU's loader placed at [`LAYERS_ADDRESS`] (layout
//! NCHW; format in xtask's `int8_layers.rs`) through sprout's Cortex-M kernels, counts
//! each call's executed instructions (run under `qemu-system-arm -icount shift=0`), and
//! writes `sprout.out` through semihosting in the folder QEMU runs in: per layer the
//! instructions (`u32`), the output length (`u32`) and the output bytes. A C program runs
//! the same file through CMSIS-NN; xtask compares the two byte for byte.
//!
//! Every field of the file is checked before use: a file this firmware did not make
//! ends the run with an error naming the layer, never a panic or a read out of bounds.
#![no_std]
#![no_main]

use qemu_mps2_an386 as board;
use qemu_mps2_an386::counter::InstructionCounter;
use sprout_core::geometry::{window_output, Conv2dGeometry};
use sprout_core::quant::{OutputQuant, QConv2dArgs, Requantize};
use sprout_cortex_m::int8::conv2d_s8;

/// Where the layer file lies: the machine's 16 MiB PSRAM.
const LAYERS_ADDRESS: usize = 0x2100_0000;
const LAYERS_MAX_BYTES: usize = 16 << 20;
const HEADER_BYTES: usize = 20;
const RECORD_WORDS: usize = 21;
/// Version 1, NCHW.
const VERSION: i32 = 1;
const NCHW: i32 = 0;
/// The largest output a layer may have (LeafNet's is 48 x 32 x 32).
const MAX_OUTPUT: usize = 64 * 1024;
/// Every dimension stays at most this, so no size computed from them overflows.
const MAX_DIM: usize = 4096;
const RESULTS: &str = "sprout.out\0";

/// Why the run stopped: what was wrong, and with which layer.
struct Bad {
    layer: usize,
    what: &'static str,
}

/// The layer file, as bytes.
struct Layers {
    bytes: &'static [u8],
}

impl Layers {
    fn word(&self, offset: usize) -> Option<i32> {
        let bytes = self.bytes.get(offset..offset.checked_add(4)?)?;
        Some(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// `len` bytes at `offset`, checked to lie in the file.
    fn section(&self, offset: i32, len: usize) -> Option<&'static [u8]> {
        let start = usize::try_from(offset).ok()?;
        self.bytes.get(start..start.checked_add(len)?)
    }

    /// `len` words at `offset` as `T` (`i32` or a pair of them), checked to be aligned
    /// and to lie in the file.
    fn words<T: Words>(&self, offset: i32, len: usize) -> Option<&'static [T]> {
        let bytes = self.section(offset, len.checked_mul(core::mem::size_of::<T>())?)?;
        if bytes.as_ptr().align_offset(core::mem::align_of::<T>()) != 0 {
            return None;
        }
        // SAFETY: `bytes` is in bounds and aligned for `T`, and every bit pattern is a
        // valid `T` (plain `i32`s, see `Words`); the file is never written while read.
        Some(unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast(), len) })
    }
}

/// Types made of `i32`s only, for which any bytes are a valid value.
trait Words {}
impl Words for i32 {}
impl Words for Requantize {}

/// One layer's record, checked: its geometry and arguments.
fn layer(layers: &Layers, index: usize) -> Result<QConv2dArgs<'static>, Bad> {
    let bad = |what| Bad { layer: index, what };
    let mut f = [0i32; RECORD_WORDS];
    for (i, field) in f.iter_mut().enumerate() {
        let offset = HEADER_BYTES + (index * RECORD_WORDS + i) * 4;
        *field = layers.word(offset).ok_or(bad("its record lies past the file's end"))?;
    }
    let mut dims = [0usize; 13];
    for (dim, &v) in dims.iter_mut().zip(&f) {
        *dim = usize::try_from(v)
            .ok()
            .filter(|&d| d <= MAX_DIM)
            .ok_or(bad("a dimension out of range"))?;
    }
    let [c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, groups, out_h, out_w] = dims;
    let g = Conv2dGeometry {
        n: 1,
        c_in,
        h,
        w,
        c_out,
        kh,
        kw,
        stride: (sh, sw),
        padding: (ph, pw),
        groups,
        out_h,
        out_w,
    };
    let grouped = groups > 0 && c_in % groups == 0 && c_out % groups == 0;
    let shaped = window_output(h, kh, sh, ph) == Some(out_h)
        && window_output(w, kw, sw, pw) == Some(out_w)
        && out_h > 0
        && out_w > 0
        && c_out > 0;
    if !(grouped && shaped) {
        return Err(bad("inconsistent geometry"));
    }
    if g.output_len() > MAX_OUTPUT {
        return Err(bad("its output is larger than the firmware's buffer"));
    }
    let in_i8 = |v: i32| i8::try_from(v).map_err(|_| bad("a zero point or bound out of int8"));
    let (x_zero_point, y_zero_point) = (in_i8(f[13])?, in_i8(f[14])?);
    let act = (in_i8(f[15])?, in_i8(f[16])?);
    if act.0 > act.1 {
        return Err(bad("clamp bounds in the wrong order"));
    }
    let as_i8 = |bytes: &'static [u8]| {
        // SAFETY: `i8` and `u8` have the same size and alignment, and any byte is both.
        unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast::<i8>(), bytes.len()) }
    };
    let x = layers.section(f[17], g.input_len()).ok_or(bad("its input lies outside the file"))?;
    let weights =
        layers.section(f[18], g.weight_len()).ok_or(bad("its weights lie outside the file"))?;
    let bias = layers.words::<i32>(f[19], c_out).ok_or(bad("its bias is misplaced"))?;
    let multipliers =
        layers.words::<Requantize>(f[20], c_out).ok_or(bad("its multipliers are misplaced"))?;
    Ok(QConv2dArgs {
        x: as_i8(x),
        x_zero_point: x_zero_point.into(),
        weights: as_i8(weights),
        bias: Some(bias),
        out: OutputQuant { multipliers, zero_point: y_zero_point.into(), act },
        shape: g,
    })
}

/// A host file open for writing through semihosting.
struct HostFile(usize);

impl HostFile {
    /// Creates (or truncates) `name`, which ends in a NUL.
    fn create(name: &str) -> Option<Self> {
        use cortex_m_semihosting::{nr, syscall};
        // SAFETY: SYS_OPEN reads `name.len() - 1` bytes of a live string.
        let fd = unsafe { syscall!(OPEN, name.as_ptr(), nr::open::W_TRUNC_BINARY, name.len() - 1) };
        (fd as isize >= 0).then_some(Self(fd))
    }

    fn write(&mut self, bytes: &[u8]) -> Option<()> {
        use cortex_m_semihosting::syscall;
        // SAFETY: SYS_WRITE reads `bytes.len()` bytes of a live slice; it returns how many
        // it did not write.
        let left = unsafe { syscall!(WRITE, self.0, bytes.as_ptr(), bytes.len()) };
        (left == 0).then_some(())
    }
}

impl Drop for HostFile {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor SYS_OPEN returned, once.
        unsafe { cortex_m_semihosting::syscall!(CLOSE, self.0) };
    }
}

/// Runs every layer, writing each one's count and output; returns how many ran.
fn run(layers: &Layers, counter: &mut InstructionCounter, y: &mut [i8]) -> Result<usize, Bad> {
    let header = |i: usize, what| layers.word(i * 4).ok_or(Bad { layer: 0, what });
    if layers.bytes.get(..4) != Some(b"SPCB".as_slice())
        || header(1, "no header")? != VERSION
        || header(2, "no header")? != NCHW
    {
        return Err(Bad { layer: 0, what: "no NCHW layer file (version 1) at 0x2100_0000" });
    }
    let count = usize::try_from(header(3, "no header")?).unwrap_or(usize::MAX);
    let mut results =
        HostFile::create(RESULTS).ok_or(Bad { layer: 0, what: "cannot create sprout.out" })?;
    for index in 0..count {
        let args = layer(layers, index)?;
        let y = &mut y[..args.shape.output_len()];
        let instructions = counter.instructions(|| conv2d_s8(&args, y)) + 0.5;
        let len = y.len() as u32;
        // SAFETY: as in `as_i8`, the other way.
        let bytes = unsafe { core::slice::from_raw_parts(y.as_ptr().cast::<u8>(), y.len()) };
        [&(instructions as u32).to_le_bytes()[..], &len.to_le_bytes(), bytes]
            .iter()
            .try_for_each(|part| results.write(part))
            .ok_or(Bad { layer: index, what: "writing sprout.out failed" })?;
    }
    Ok(count)
}

#[cortex_m_rt::entry]
fn main() -> ! {
    static mut OUTPUT: [i8; MAX_OUTPUT] = [0; MAX_OUTPUT];
    let Some(board) = board::init() else { board::exit(false) };
    let mut counter = board.counter;
    counter.calibrate();
    // SAFETY: the machine maps 16 MiB of RAM (PSRAM) here, which QEMU's loader filled
    // before reset and nothing writes afterwards; the file's own length bounds every read.
    let psram =
        unsafe { core::slice::from_raw_parts(LAYERS_ADDRESS as *const u8, LAYERS_MAX_BYTES) };
    let total = psram.get(16..20).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let layers = Layers { bytes: &psram[..(total as usize).min(LAYERS_MAX_BYTES)] };
    match run(&layers, &mut counter, OUTPUT) {
        Ok(count) => {
            defmt::info!("side by side: {=usize} layers through sprout's kernels", count);
            board::exit(true)
        }
        Err(Bad { layer, what }) => {
            defmt::error!("side by side: layer {=usize}: {=str}", layer, what);
            board::exit(false)
        }
    }
}
