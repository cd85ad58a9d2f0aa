#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sprout_fuzz::tensors(data);
});
