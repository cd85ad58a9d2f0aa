//! `sprout plan` end to end: the built binary on zoo models, its JSON, text and SVG output,
//! memory budgets met by recomputation or refused with the smallest reachable size, and the
//! messages for bad arguments.

mod common;

use std::process::Output;

use serde_json::Value;

use common::{sprout, text, Scratch};

/// Runs `sprout plan ARGS`.
fn sprout_plan(args: &[&str]) -> Output {
    sprout(&[&["plan"], args].concat())
}

/// Runs `sprout plan ARGS --json`, expecting success, and parses its one JSON object.
fn plan_json(args: &[&str]) -> Value {
    let output = sprout_plan(&[args, &["--json"]].concat());
    assert!(output.status.success(), "sprout plan {args:?} failed: {}", text(&output.stderr));
    serde_json::from_str(&text(&output.stdout)).expect("--json prints one JSON object")
}

fn number(report: &Value, key: &str) -> u64 {
    report[key].as_u64().unwrap_or_else(|| panic!("'{key}' is not a number in {report}"))
}

#[test]
fn json_has_every_key_and_every_buffer_lies_inside_the_arena() {
    let report = plan_json(&["--zoo", "mlp", "--batch", "4"]);
    for key in [
        "model",
        "batch",
        "trainable",
        "strategy",
        "arena_bytes",
        "lower_bound_bytes",
        "state_bytes",
        "frozen_bytes",
        "forward_flops",
        "backward_flops",
        "recompute_flops",
        "steps",
        "recomputed",
        "buffers",
    ] {
        assert!(report.get(key).is_some(), "no '{key}' in {report}");
    }
    assert_eq!(report["model"], "mlp");
    assert_eq!(report["batch"], 4);
    assert_eq!(report["trainable"], "all");
    assert_eq!(report["strategy"], "greedy");
    let arena = number(&report, "arena_bytes");
    let lower_bound = number(&report, "lower_bound_bytes");
    assert!(lower_bound > 0 && arena >= lower_bound, "arena {arena} < lower bound {lower_bound}");
    // Training everything keeps every weight in the state region, none frozen.
    assert!(number(&report, "state_bytes") > 0);
    assert_eq!(number(&report, "frozen_bytes"), 0);
    assert!(number(&report, "backward_flops") > number(&report, "forward_flops"));
    assert_eq!(number(&report, "recompute_flops"), 0);
    assert_eq!(report["recomputed"].as_array().unwrap().len(), 0);

    let steps = number(&report, "steps");
    let buffers = report["buffers"].as_array().unwrap();
    assert!(buffers.len() > 5, "{buffers:?}");
    let mut names = Vec::new();
    for b in buffers {
        let (offset, size) = (number(b, "offset"), number(b, "size"));
        let (first, last) = (number(b, "first_step"), number(b, "last_step"));
        assert!(offset + size <= arena, "{b} ends past the {arena}-byte arena");
        assert!(first <= last && last < steps, "{b}: lifetime outside {steps} steps");
        names.push(b["name"].as_str().unwrap().to_string());
    }
    assert!(names.iter().any(|n| n == "input") && names.iter().any(|n| n == "labels"), "{names:?}");
    // Buffers live at a common step never share a byte.
    for (i, a) in buffers.iter().enumerate() {
        for b in &buffers[i + 1..] {
            let live_together = number(a, "first_step") <= number(b, "last_step")
                && number(b, "first_step") <= number(a, "last_step");
            let overlap = number(a, "offset") < number(b, "offset") + number(b, "size")
                && number(b, "offset") < number(a, "offset") + number(a, "size");
            let in_place = number(a, "offset") == number(b, "offset")
                && (number(a, "last_step") == number(b, "first_step")
                    || number(b, "last_step") == number(a, "first_step"));
            assert!(!(live_together && overlap) || in_place, "{a} and {b} collide");
        }
    }
}

#[test]
fn the_table_shows_arena_lower_bound_ratio_and_the_picture() {
    let output = sprout_plan(&["--zoo", "resnet", "--trainable", "head", "--top", "3"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let text = text(&output.stdout);
    let line = |label: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no '{label}' line in\n{text}"))
            .to_string()
    };
    assert!(text.starts_with("resnet, batch 1, trainable head (2 tensors, 650 of "), "{text}");
    let arena = line("arena  ");
    let bound = line("lower bound");
    let ratio = line("arena / lower bound");
    // `  arena                884612 B (863.9 KiB)`: the first number is the byte count.
    let bytes = |l: &str| -> u64 { l.split_whitespace().find_map(|t| t.parse().ok()).unwrap() };
    let (arena, bound) = (bytes(&arena), bytes(&bound));
    assert!(arena >= bound, "{text}");
    let shown: f64 =
        ratio.split_whitespace().last().unwrap().trim_end_matches('x').parse().unwrap();
    assert!((shown - arena as f64 / bound as f64).abs() < 0.001, "{text}");
    for label in ["state", "frozen weights", "steps", "forward FLOPs", "recompute FLOPs"] {
        line(label);
    }
    // Three buffers are listed and lettered A..C; the picture has a framed grid and a legend.
    assert!(text.contains("3 largest arena buffers"), "{text}");
    assert!(text.contains("\n  C  "), "{text}");
    assert!(!text.contains("\n  D  "), "{text}");
    assert!(text.contains("arena over time"), "{text}");
    let grid: Vec<&str> = text.lines().filter(|l| l.contains(" |") && l.ends_with('|')).collect();
    assert_eq!(grid.len(), 20, "{text}");
    assert!(grid.iter().any(|row| row.contains('A')), "{text}");
    assert!(text.contains("legend: A "), "{text}");
}

#[test]
fn svg_has_one_rect_per_arena_buffer() {
    let scratch = Scratch::new("svg");
    let dir = &scratch.0;
    let svg_path = dir.join("arena.svg");
    let report = plan_json(&["--zoo", "mlp", "--svg", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    let buffers = report["buffers"].as_array().unwrap();
    assert_eq!(svg.matches("<rect").count(), buffers.len());
    assert_eq!(svg.matches("<title>").count(), buffers.len());
    assert!(svg.contains("<title>input: "), "{svg}");
    assert!(!dir.join("arena.svg.tmp").exists());
}

#[test]
fn an_impossible_budget_names_the_smallest_reachable_arena() {
    let output = sprout_plan(&["--zoo", "leafnet", "--budget", "1KiB"]);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(
        message.contains(
            "error: leafnet (batch 1, trainable all) does not fit in 1024 bytes (1.0 KiB)"
        ),
        "{message}"
    );
    let smallest = smallest_reachable(&message);
    assert!(smallest > 1024, "{message}");
    assert!(text(&output.stdout).is_empty());
}

/// The byte count after "gradient checkpointing is" in a budget error.
fn smallest_reachable(message: &str) -> u64 {
    let (_, rest) = message
        .split_once("the smallest arena reachable with gradient checkpointing is ")
        .unwrap_or_else(|| panic!("no smallest reachable arena in: {message}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn a_budget_between_the_smallest_and_the_plain_arena_is_met_by_recomputing() {
    let args = ["--zoo", "resnet", "--trainable", "all"];
    let plain = number(&plan_json(&args), "arena_bytes");
    let refused = sprout_plan(&[&args[..], &["--budget", "1"]].concat());
    assert!(!refused.status.success());
    let smallest = smallest_reachable(&text(&refused.stderr));
    assert!(smallest < plain, "checkpointing saves nothing: {smallest} >= {plain}");

    let budget = (smallest + plain) / 2;
    let report = plan_json(&[&args[..], &["--budget", &budget.to_string()]].concat());
    assert!(number(&report, "arena_bytes") <= budget, "{report}");
    assert_eq!(number(&report, "budget_bytes"), budget);
    assert!(!report["recomputed"].as_array().unwrap().is_empty(), "{report}");
    assert!(number(&report, "recompute_flops") > 0);
}

#[test]
fn pass_switches_and_strategies_reach_the_compiler() {
    let default = plan_json(&["--zoo", "mlp", "--batch", "2"]);
    let exact = plan_json(&["--zoo", "mlp", "--batch", "2", "--strategy", "exact"]);
    let first_fit = plan_json(&["--zoo", "mlp", "--batch", "2", "--strategy", "first-fit"]);
    let plain = plan_json(&["--zoo", "mlp", "--batch", "2", "--no-update-early", "--no-in-place"]);
    assert_eq!(exact["strategy"], "exact");
    assert_eq!(first_fit["strategy"], "first-fit");
    assert_eq!(
        (plain["update_early"].clone(), plain["in_place"].clone()),
        (false.into(), false.into())
    );
    // The exact search starts from the greedy placement and never ends worse.
    assert!(number(&exact, "arena_bytes") <= number(&default, "arena_bytes"));
    // Without early updates every gradient lives to the end of the step.
    assert!(number(&plain, "lower_bound_bytes") > number(&default, "lower_bound_bytes"));
}

#[test]
fn an_unknown_zoo_model_is_refused_with_the_zoo_listed() {
    let output = sprout_plan(&["--zoo", "lenet"]);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(message.contains("unknown zoo model 'lenet'"), "{message}");
    assert!(message.contains("mlp, resnet, leafnet"), "{message}");
}

#[test]
fn a_bad_size_is_refused_with_the_units_listed() {
    let output = sprout_plan(&["--zoo", "mlp", "--budget", "12XB"]);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(message.contains("invalid size '12XB': unknown unit 'XB'"), "{message}");
    assert!(message.contains("KiB"), "{message}");
}

#[test]
fn a_pattern_that_matches_nothing_is_named() {
    let output = sprout_plan(&["--zoo", "mlp", "--trainable", "head,features.9.*"]);
    assert!(!output.status.success());
    let message = text(&output.stderr);
    assert!(message.contains("'features.9.*' matches no parameter"), "{message}");
}

/// The RAM column (arena + state, bytes) of one storage type's row of `--dtypes`.
fn ram_of(table: &str, storage: &str) -> u64 {
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{storage} ")))
        .unwrap_or_else(|| panic!("no {storage} row in\n{table}"));
    let cells: Vec<&str> = row.split(" B ").collect();
    cells[3].split_whitespace().last().unwrap().parse().unwrap()
}

#[test]
fn dtypes_show_the_leaf_head_step_in_f32_f16_and_int8() {
    let output = sprout_plan(&["--zoo", "leafnet", "--trainable", "head", "--dtypes"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let (f32_ram, f16_ram, int8_ram) =
        (ram_of(&table, "f32"), ram_of(&table, "f16"), ram_of(&table, "int8"));
    // The f32 head step does not fit a 256 KiB microcontroller; on an int8 backbone it does.
    assert!(f32_ram > 256 * 1024 && int8_ram < 256 * 1024, "{table}");
    assert!(int8_ram * 2 < f32_ram, "{table}");
    assert!(f16_ram > 0, "{table}");
}
