//! What can be wrong with a device bundle: each variant names the part that failed.

use crate::format::FrameError;
use crate::ExecError;
use core::fmt;

/// Why a bundle was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum BundleError {
    /// Magic, version, length or CRC-32 of the frame is wrong.
    Frame(FrameError),
    /// The header does not decode.
    Header(postcard::Error),
    /// The plans have more steps than the caller's storage holds.
    TooManySteps { needed: usize, capacity: usize },
    /// Step `index` (counting through all plans) does not decode, e.g. an unknown kernel.
    Step { index: usize, error: postcard::Error },
    /// A section lies outside the body, before the steps' end, overlaps the other
    /// section or is misaligned.
    Section { section: &'static str, offset: u32, len: u32 },
    /// A plan does not check out against its own region sizes.
    Plan { plan: &'static str, error: ExecError },
    /// An input or output of a plan has the wrong type, length or place.
    Operand { operand: &'static str },
    /// The head has no batch, no features or no classes.
    Empty,
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BundleError::Frame(e) => write!(f, "bad bundle frame: {e}"),
            BundleError::Header(e) => write!(f, "malformed bundle header: {e}"),
            BundleError::TooManySteps { needed, capacity } => write!(
                f,
                "the bundle's plans have {needed} steps, the step storage holds {capacity}"
            ),
            BundleError::Step { index, error } => {
                write!(f, "bundle step {index} does not decode: {error}")
            }
            BundleError::Section { section, offset, len } => write!(
                f,
                "the bundle's {section} section ({len} bytes at {offset}) is out of place"
            ),
            BundleError::Plan { plan, error } => write!(f, "the bundle's {plan} plan: {error}"),
            BundleError::Operand { operand } => write!(
                f,
                "the bundle's {operand} operand has the wrong type or length, or lies outside its region"
            ),
            BundleError::Empty => f.write_str("the bundle's head has no batch, features or classes"),
        }
    }
}

impl core::error::Error for BundleError {}

impl From<FrameError> for BundleError {
    fn from(e: FrameError) -> Self {
        BundleError::Frame(e)
    }
}
