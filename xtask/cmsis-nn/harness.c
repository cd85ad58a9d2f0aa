/* CMSIS-NN's half of `cargo xtask bench cortex-m`'s side by side: runs the int8
 * convolutions of the layer file that QEMU's loader placed at LAYERS_ADDRESS (layout
 * NHWC, see xtask/src/int8_layers.rs) through CMSIS-NN's public s8 wrappers, counts each
 * call's executed instructions with SysTick under `-icount shift=0` exactly as sprout's
 * `side-by-side` firmware does, and writes `cmsis.out` in the folder QEMU runs in through
 * semihosting: per layer the instructions (u32), the output length (u32), the output.
 *
 * Built by xtask with arm-none-eabi-gcc against a CMSIS-NN checkout it is never part of
 * sprout's firmware. Bare metal: no C runtime start-up, newlib only for memcpy/memset. */
#include <stdint.h>
#include <string.h>

#include "arm_nnfunctions.h"

#define LAYERS_ADDRESS 0x21000000u
#define LAYERS_MAX_BYTES (16u << 20)
#define HEADER_BYTES 20u
#define RECORD_WORDS 21u
#define MAX_OUTPUT (64 * 1024)
#define MAX_CHANNELS 1024
#define SCRATCH_BYTES (64 * 1024)

static int8_t output[MAX_OUTPUT] __attribute__((aligned(8)));
static int8_t scratch[SCRATCH_BYTES] __attribute__((aligned(8)));
static int32_t multipliers[MAX_CHANNELS];
static int32_t shifts[MAX_CHANNELS];

/* Semihosting (ARM's bkpt 0xab convention). */
static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static void say(const char *text) { semihost(0x04, text); }

__attribute__((noreturn)) static void finish(int success)
{
    /* SYS_EXIT: ADP_Stopped_ApplicationExit or ADP_Stopped_RunTimeErrorUnknown. */
    semihost(0x18, (const void *)(success ? 0x20026 : 0x20023));
    for (;;)
    {
    }
}

__attribute__((noreturn)) static void fail(const char *why)
{
    say("cmsis-nn side by side: ");
    say(why);
    say("\n");
    finish(0);
}

static int open_for_writing(const char *name)
{
    const uint32_t args[3] = {(uint32_t)name, 5 /* "wb" */, (uint32_t)strlen(name)};
    return semihost(0x01, args);
}

static void write_all(int fd, const void *data, uint32_t len)
{
    const uint32_t args[3] = {(uint32_t)fd, (uint32_t)data, len};
    if (semihost(0x05, args) != 0)
    {
        fail("writing cmsis.out failed");
    }
}

/* SysTick, free running from the core clock: one tick per 40 instructions under
 * -icount shift=0, calibrated rather than trusted (see the board's counter.rs). */
#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define RELOAD 0x00FFFFFFu
#define CALIBRATION_LOOPS 1000000u

static float instructions_per_tick = 40.0f;
static uint32_t empty_ticks;

static void busy_loop(uint32_t count)
{
    __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(count) : : "cc");
}

static uint32_t elapsed(uint32_t start) { return (start - SYST_CVR) & RELOAD; }

static void calibrate(void)
{
    SYST_RVR = RELOAD;
    SYST_CVR = 0;
    SYST_CSR = 5; /* enable, core clock, no interrupt */
    SYST_CVR = 0;
    uint32_t start = SYST_CVR;
    empty_ticks = elapsed(start);
    SYST_CVR = 0;
    start = SYST_CVR;
    busy_loop(CALIBRATION_LOOPS);
    uint32_t ticks = elapsed(start) - empty_ticks;
    instructions_per_tick = (float)(2 * CALIBRATION_LOOPS) / (float)(ticks ? ticks : 1);
}

static const uint8_t *layers = (const uint8_t *)LAYERS_ADDRESS;
static uint32_t layers_len;

static int32_t word(uint32_t offset)
{
    int32_t value;
    memcpy(&value, layers + offset, 4);
    return value;
}

/* A section of `len` bytes at `offset`, 4-byte aligned when `aligned`. */
static const void *section(int32_t offset, uint32_t len, int aligned)
{
    if (offset < 0 || (uint32_t)offset > layers_len || len > layers_len - (uint32_t)offset ||
        (aligned && (offset & 3)))
    {
        fail("a section lies outside the layer file");
    }
    return layers + offset;
}

static int positive(int32_t v) { return v > 0 && v <= 4096; }

static uint32_t run_layer(uint32_t index, int fd)
{
    int32_t f[RECORD_WORDS];
    for (uint32_t i = 0; i < RECORD_WORDS; i++)
    {
        f[i] = word(HEADER_BYTES + (index * RECORD_WORDS + i) * 4);
    }
    const int32_t c_in = f[0], h = f[1], w = f[2], c_out = f[3], kh = f[4], kw = f[5];
    const int32_t groups = f[10], out_h = f[11], out_w = f[12];
    for (int i = 0; i < 13; i++)
    {
        if (!(positive(f[i]) || ((i == 8 || i == 9) && f[i] == 0)))
        {
            fail("a layer has a dimension out of range");
        }
    }
    const int depthwise = groups > 1 && groups == c_in && c_out == c_in;
    if (!(groups == 1 || depthwise))
    {
        fail("only plain and depthwise convolutions are supported");
    }
    if (c_out > MAX_CHANNELS || out_h * out_w * c_out > MAX_OUTPUT)
    {
        fail("a layer's output is larger than the harness's buffers");
    }
    const uint32_t in_len = (uint32_t)(h * w * c_in);
    const uint32_t w_len = (uint32_t)(kh * kw * (depthwise ? c_out : c_out * c_in));
    const int8_t *input = section(f[17], in_len, 0);
    const int8_t *filter = section(f[18], w_len, 0);
    const int32_t *bias = section(f[19], (uint32_t)c_out * 4, 1);
    const int32_t *pairs = section(f[20], (uint32_t)c_out * 8, 1);
    for (int32_t c = 0; c < c_out; c++)
    {
        multipliers[c] = pairs[2 * c];
        shifts[c] = pairs[2 * c + 1];
    }
    const cmsis_nn_per_channel_quant_params quant = {multipliers, shifts};
    const cmsis_nn_tile stride = {f[7], f[6]}, padding = {f[9], f[8]}, dilation = {1, 1};
    const cmsis_nn_activation act = {f[15], f[16]};
    const cmsis_nn_dims input_dims = {1, h, w, c_in};
    const cmsis_nn_dims bias_dims = {1, 1, 1, c_out};
    const cmsis_nn_dims output_dims = {1, out_h, out_w, c_out};
    cmsis_nn_context ctx = {scratch, 0};
    arm_cmsis_nn_status status;
    uint32_t start, ticks;
    if (depthwise)
    {
        const cmsis_nn_dw_conv_params params = {-f[13], f[14], 1, stride, padding, dilation, act};
        const cmsis_nn_dims filter_dims = {1, kh, kw, c_out};
        ctx.size = arm_depthwise_conv_wrapper_s8_get_buffer_size(&params, &input_dims, &filter_dims, &output_dims);
        if (ctx.size > SCRATCH_BYTES)
        {
            fail("a depthwise layer needs more scratch than the harness has");
        }
        SYST_CVR = 0;
        start = SYST_CVR;
        status = arm_depthwise_conv_wrapper_s8(&ctx, &params, &quant, &input_dims, input, &filter_dims, filter,
                                               &bias_dims, bias, &output_dims, output);
        ticks = elapsed(start);
    }
    else
    {
        const cmsis_nn_conv_params params = {-f[13], f[14], stride, padding, dilation, act};
        const cmsis_nn_dims filter_dims = {c_out, kh, kw, c_in};
        ctx.size = arm_convolve_wrapper_s8_get_buffer_size(&params, &input_dims, &filter_dims, &output_dims);
        if (ctx.size > SCRATCH_BYTES)
        {
            fail("a layer needs more scratch than the harness has");
        }
        SYST_CVR = 0;
        start = SYST_CVR;
        status = arm_convolve_wrapper_s8(&ctx, &params, &quant, &input_dims, input, &filter_dims, filter, &bias_dims,
                                         bias, &output_dims, output);
        ticks = elapsed(start);
    }
    if (status != ARM_CMSIS_NN_SUCCESS)
    {
        fail("a CMSIS-NN wrapper refused a layer");
    }
    const uint32_t counted = ticks > empty_ticks ? ticks - empty_ticks : 0;
    const uint32_t instructions = (uint32_t)((float)counted * instructions_per_tick + 0.5f);
    const uint32_t out_len = (uint32_t)(out_h * out_w * c_out);
    write_all(fd, &instructions, 4);
    write_all(fd, &out_len, 4);
    write_all(fd, output, out_len);
    return instructions;
}

int main(void)
{
    calibrate();
    if (memcmp(layers, "SPCB", 4) != 0 || word(4) != 1 || word(8) != 1)
    {
        fail("no NHWC layer file (version 1) at 0x21000000");
    }
    const uint32_t count = (uint32_t)word(12);
    layers_len = (uint32_t)word(16);
    if (layers_len > LAYERS_MAX_BYTES || count > (layers_len - HEADER_BYTES) / (RECORD_WORDS * 4))
    {
        fail("the layer file's header is inconsistent");
    }
    const int fd = open_for_writing("cmsis.out");
    if (fd < 0)
    {
        fail("cannot open cmsis.out");
    }
    for (uint32_t i = 0; i < count; i++)
    {
        run_layer(i, fd);
    }
    semihost(0x02, (const uint32_t[1]){(uint32_t)fd});
    finish(1);
    return 0;
}

/* Start-up: the FPU on (the library is built for the hard-float ABI), .bss cleared. */
extern uint32_t __bss_start, __bss_end, __stack_top;

__attribute__((noreturn)) void reset(void)
{
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
    for (uint32_t *p = &__bss_start; p < &__bss_end; p++)
    {
        *p = 0;
    }
    main();
    finish(1);
}

static void fault(void) { fail("fault"); }

__attribute__((section(".vectors"), used)) static void *const vectors[16] = {
    &__stack_top, reset, fault, fault, fault, fault, fault, 0, 0, 0, 0, fault, fault, 0, fault, fault,
};
