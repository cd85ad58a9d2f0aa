//! Every committed fuzz input, replayed on stable: the seed and minimised corpora under
//! `fuzz/corpus/<target>/` and the crashes found and fixed under `fuzz/regressions/<target>/`,
//! each fed to the function its fuzz target calls; none may panic or take long.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sprout_fuzz::TARGETS;

/// The longest one input may take in this (debug) build: the fuzzers run each input in
/// well under a millisecond, so this is room, not a benchmark.
const PER_INPUT: Duration = Duration::from_secs(5);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files directly inside `dir` (none when it does not exist), sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

#[test]
fn every_corpus_and_regression_input_runs_without_panic() {
    let mut replayed = 0;
    for &(target, run) in TARGETS {
        let corpus = files(&fuzz_dir().join("corpus").join(target));
        assert!(!corpus.is_empty(), "no corpus for fuzz target {target}");
        for path in corpus.iter().chain(&files(&fuzz_dir().join("regressions").join(target))) {
            let bytes = fs::read(path).unwrap();
            let start = Instant::now();
            let accepted = run(&bytes);
            let took = start.elapsed();
            assert!(took < PER_INPUT, "{} took {took:?}", path.display());
            let seed = path.file_name().unwrap().to_string_lossy().starts_with("seed-");
            // A seed the decoder refuses would start the fuzzer off at an early error:
            // remake them (`cargo run -p sprout-fuzz --example seeds`) when a format changes.
            assert!(accepted || !seed, "{target} refuses its seed {}", path.display());
            replayed += 1;
        }
    }
    assert!(replayed >= TARGETS.len());
}

#[test]
fn each_fuzz_target_file_calls_its_entry_and_each_entry_has_a_target() {
    let dir = fuzz_dir().join("targets/fuzz_targets");
    let mut names: Vec<String> =
        files(&dir).iter().map(|p| p.file_stem().unwrap().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut expected: Vec<String> = TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected);
    for name in &names {
        let source = fs::read_to_string(dir.join(format!("{name}.rs"))).unwrap();
        assert!(source.contains(&format!("sprout_fuzz::{name}(data)")), "{name}.rs");
    }
    let manifest = fs::read_to_string(fuzz_dir().join("targets/Cargo.toml")).unwrap();
    for name in &names {
        assert!(manifest.contains(&format!("path = \"fuzz_targets/{name}.rs\"")), "{name}");
    }
}

#[test]
fn a_real_conversation_passes_both_ends() {
    // The host's requests, and the device's answers, as records: both decode as frames
    // and carry more than the hello.
    let (sent, answered) = sprout_fuzz::conversation();
    for records in [&sent, &answered] {
        let frames = records_count(records);
        assert!(frames >= 6, "{frames} frames");
    }
    assert!(sprout_fuzz::link_device(&sent), "the device commits the pushed checkpoint");
    assert!(sprout_fuzz::link_host(&answered), "the host pulls the checkpoint");
}

/// Frames in a record list (each record: tag, two length bytes, contents).
fn records_count(mut records: &[u8]) -> usize {
    let mut count = 0;
    while let [tag, lo, hi, rest @ ..] = records {
        assert_eq!(*tag, 0, "a valid frame's record");
        let len = usize::from(u16::from_le_bytes([*lo, *hi]));
        records = &rest[len..];
        count += 1;
    }
    assert!(records.is_empty());
    count
}
