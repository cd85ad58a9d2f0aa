//! sprout-planner: buffer sizes and lifetimes in, one offset per buffer in a single arena out,
//! with the lower bound on any arena and a verifier that proves a placement safe.
//!
//! The planner knows nothing of neural-network ops: a [`Buffer`] is a size, an alignment, the
//! inclusive range of program steps at which it is live, and optionally another buffer whose
//! memory it takes over in place (an element-wise op writing its output over its input).
//!
//! ```
//! use sprout_planner::{lower_bound, plan_memory, verify, Buffer, Strategy};
//!
//! # fn main() -> Result<(), Box<dyn core::error::Error>> {
//! let buffers = [
//!     Buffer::new(1024, 0, 1).aligned(16), // input, read by step 1
//!     Buffer::new(512, 1, 2),              // step 1 writes it, step 2 reads it
//!     Buffer::new(512, 2, 3).reusing(1),   // step 2 rewrites buffer 1 in place
//!     Buffer::new(2048, 3, 3),
//! ];
//! let placement = plan_memory(&buffers, Strategy::default())?;
//! assert_eq!(placement.offsets[1], placement.offsets[2]);
//! assert_eq!(placement.arena_bytes, lower_bound(&buffers)); // 2048 + 512 at step 3
//! assert!(placement.proven_optimal);
//! verify(&buffers, &placement)?;
//! # Ok(())
//! # }
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

mod block;
mod bound;
mod buffer;
mod exact;
mod first_fit;
mod gap;
mod greedy;
mod plan;
mod validate;
mod verify;

pub use bound::lower_bound;
pub use buffer::Buffer;
pub use plan::{plan_memory, Placement, Strategy};
pub use validate::PlanError;
pub use verify::{verify, Conflict};
