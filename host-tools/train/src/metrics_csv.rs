//! `metrics.csv` of a run folder: a header and one row per epoch (losses, accuracy, learning
//! rate, training speed, time), rewritten atomically after each epoch and read back on resume.

use std::fs;
use std::path::Path;

use crate::checkpoint::EpochRecord;
use crate::files::write_atomic;
use crate::TrainError;

/// The file name in a run folder.
pub const METRICS_FILE: &str = "metrics.csv";

/// The first line of the file.
pub const HEADER: &str =
    "epoch,train_loss,val_loss,val_accuracy,learning_rate,images_per_second,seconds";

/// Larger files are not ones sprout wrote (a row is under 100 bytes).
const MAX_BYTES: u64 = 64 << 20;

/// One epoch: its record, and how fast it went (unknown for epochs trained before a
/// `metrics.csv` existed; written as empty fields).
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsRow {
    pub record: EpochRecord,
    /// Training images per second (training steps only).
    pub images_per_second: Option<f64>,
    /// Wall time of the epoch, validation included (written to the microsecond: a small
    /// model's epoch can take under a millisecond).
    pub seconds: Option<f64>,
}

/// The file's text for `rows`.
pub fn render_metrics(rows: &[MetricsRow]) -> String {
    let mut text = format!("{HEADER}\n");
    let optional =
        |v: Option<f64>, digits: usize| v.map_or(String::new(), |v| format!("{v:.digits$}"));
    for row in rows {
        let r = &row.record;
        text += &format!(
            "{},{},{},{},{},{},{}\n",
            r.epoch,
            r.train_loss,
            r.val_loss,
            r.val_accuracy,
            r.learning_rate,
            optional(row.images_per_second, 1),
            optional(row.seconds, 6)
        );
    }
    text
}

/// Writes `rows` to `path` atomically.
pub fn write_metrics(path: &Path, rows: &[MetricsRow]) -> Result<(), TrainError> {
    write_atomic(path, render_metrics(rows).as_bytes())
}

/// Reads a `metrics.csv`, checking its header and every field.
pub fn read_metrics(path: &Path) -> Result<Vec<MetricsRow>, TrainError> {
    let size = fs::metadata(path).map_err(TrainError::io(path))?.len();
    let bad = |line: usize, detail: String| {
        TrainError::Mismatch(format!("{} line {line}: {detail}", path.display()))
    };
    if size > MAX_BYTES {
        return Err(bad(1, format!("{size} bytes, more than a metrics file holds")));
    }
    let text = fs::read_to_string(path).map_err(TrainError::io(path))?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(bad(1, format!("expected the header {HEADER}")));
    }
    lines
        .enumerate()
        .map(|(i, line)| {
            let n = i + 2;
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != 7 {
                return Err(bad(n, format!("{} fields, expected 7", fields.len())));
            }
            let number = |k: usize| -> Result<f64, TrainError> {
                fields[k].parse().map_err(|_| bad(n, format!("'{}' is not a number", fields[k])))
            };
            let optional = |k: usize| {
                if fields[k].is_empty() {
                    Ok(None)
                } else {
                    number(k).map(Some)
                }
            };
            let epoch = fields[0]
                .parse()
                .map_err(|_| bad(n, format!("'{}' is not an epoch number", fields[0])))?;
            Ok(MetricsRow {
                record: EpochRecord {
                    epoch,
                    train_loss: number(1)? as f32,
                    val_loss: number(2)? as f32,
                    val_accuracy: number(3)? as f32,
                    learning_rate: number(4)? as f32,
                },
                images_per_second: optional(5)?,
                seconds: optional(6)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_survive_a_round_trip_and_bad_files_are_named_errors() {
        let record = |epoch| EpochRecord {
            epoch,
            train_loss: 1.25,
            val_loss: 0.5,
            val_accuracy: 0.75,
            learning_rate: 0.05,
        };
        let rows = vec![
            MetricsRow { record: record(1), images_per_second: None, seconds: None },
            MetricsRow { record: record(2), images_per_second: Some(120.5), seconds: Some(2.5) },
        ];
        let dir = std::env::temp_dir().join(format!("sprout-metrics-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(METRICS_FILE);
        write_metrics(&path, &rows).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().nth(2), Some("2,1.25,0.5,0.75,0.05,120.5,2.500000"));
        assert_eq!(read_metrics(&path).unwrap(), rows);
        fs::write(&path, format!("{HEADER}\n1,2,3\n")).unwrap();
        let err = read_metrics(&path).unwrap_err().to_string();
        assert!(err.contains("line 2: 3 fields, expected 7"), "{err}");
        fs::write(&path, "epoch,loss\n").unwrap();
        assert!(read_metrics(&path).unwrap_err().to_string().contains("line 1"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
