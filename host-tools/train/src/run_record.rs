//! `args.json` of a run folder: every option as given and resolved, the data split and the
//! sprout version; read back on `--resume` to refuse a run whose options or data changed.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::files::write_atomic;
use crate::split::DataSplit;
use crate::TrainError;

/// The file name of the record in a run folder.
pub const RECORD_FILE: &str = "args.json";

/// Options a resumed run may change: `--epochs` (growing the run; the checkpoint refuses
/// fewer than it has done), where it writes, and when it stops early.
const MAY_CHANGE: [&str; 5] = ["--epochs", "--resume", "--out-dir", "--output", "--patience"];

/// Larger `args.json` files are not ones sprout wrote.
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// What a run was started with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The sprout version, with the git commit it was built from when known.
    pub sprout: String,
    /// The command line as typed.
    pub command_line: Vec<String>,
    /// Every option by flag name, defaults filled in and paths made absolute.
    pub options: BTreeMap<String, Value>,
    /// The training and validation data.
    pub data: Option<DataSplit>,
}

impl RunRecord {
    /// A record of `command_line` with no options yet.
    pub fn new(command_line: Vec<String>) -> Self {
        Self { sprout: crate::version_string(), command_line, options: BTreeMap::new(), data: None }
    }

    /// Records option `flag` (`--lr`) with its resolved value.
    pub fn set(&mut self, flag: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).expect("option values serialize");
        self.options.insert(flag.to_string(), value);
    }

    /// Records an `f32` option as its shortest decimal (`0.05`, not `0.05000000074505806`).
    pub fn set_f32(&mut self, flag: &str, value: f32) {
        match value.to_string().parse::<f64>() {
            Ok(decimal) if value.is_finite() => self.set(flag, decimal),
            _ => self.set(flag, value.to_string()),
        }
    }

    /// Reads `DIR/args.json`.
    pub fn read(dir: &Path) -> Result<Self, TrainError> {
        let path = dir.join(RECORD_FILE);
        let size = fs::metadata(&path).map_err(TrainError::io(&path))?.len();
        if size > MAX_RECORD_BYTES {
            return Err(TrainError::Mismatch(format!(
                "{}: {size} bytes, more than an args.json holds ({MAX_RECORD_BYTES})",
                path.display()
            )));
        }
        let bytes = fs::read(&path).map_err(TrainError::io(&path))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| TrainError::Mismatch(format!("{}: not a run record: {e}", path.display())))
    }

    /// Writes `DIR/args.json` atomically.
    pub fn write(&self, dir: &Path) -> Result<(), TrainError> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a record serializes");
        bytes.push(b'\n');
        write_atomic(&dir.join(RECORD_FILE), &bytes)
    }

    /// Refuses to continue `previous` with this record's options and data when anything but
    /// the options of [`MAY_CHANGE`] differs, naming each change (`--lr was 0.05, now 0.1`).
    pub fn refuse_changes(&self, previous: &RunRecord) -> Result<(), TrainError> {
        let mut changes = Vec::new();
        let flags: std::collections::BTreeSet<&String> =
            previous.options.keys().chain(self.options.keys()).collect();
        for flag in flags {
            if MAY_CHANGE.contains(&flag.as_str()) {
                continue;
            }
            let (was, now) = (previous.options.get(flag), self.options.get(flag));
            if was != now {
                changes.push(format!("{flag} was {}, now {}", show(was), show(now)));
            }
        }
        match (&previous.data, &self.data) {
            (Some(was), Some(now)) if was != now => changes.push(data_change(was, now)),
            (was, now) if was.is_some() != now.is_some() => {
                changes.push("the data set changed".into())
            }
            _ => {}
        }
        if changes.is_empty() {
            Ok(())
        } else {
            Err(TrainError::Mismatch(format!("--resume: {}", changes.join("; "))))
        }
    }
}

/// An option value as typed: strings without quotes, absent as `(not given)`.
fn show(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "(not given)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// What differs between two data splits, the first difference found.
fn data_change(was: &DataSplit, now: &DataSplit) -> String {
    if was.kind != now.kind {
        return format!("the data split was '{was}', now '{now}'");
    }
    let names = |s: &DataSplit| s.classes.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    if names(was) != names(now) {
        return format!(
            "the classes were {}, now {}",
            names(was).join(", "),
            names(now).join(", ")
        );
    }
    for (a, b) in was.classes.iter().zip(&now.classes) {
        if (a.train, a.val) != (b.train, b.val) {
            return format!(
                "the data changed: class '{}' had {} train / {} validation images, now {} / {}",
                a.name, a.train, a.val, b.train, b.val
            );
        }
    }
    format!("the data changed: same counts, different files (hash {}, now {})", was.hash, now.hash)
}
