//! Errors a kernel can raise on data it did not create (labels from a data set).
//! Graph-building, compile and execution errors live beside the code that raises them.

use core::fmt;

/// A kernel refused its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// A class-index label outside `0..classes`.
    LabelOutOfRange { row: usize, label: i32, classes: usize },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::LabelOutOfRange { row, label, classes } => write!(
                f,
                "label {label} of sample {row} is outside the {classes} classes (expected 0..{classes})"
            ),
        }
    }
}

impl core::error::Error for KernelError {}
