//! sprout-core: shapes, graph IR, compile-time autograd, plans, the allocation-free executor,
//! the backend trait and the reference kernels every backend is checked against.
//!
//! Without the `alloc` feature the crate holds what a device needs to *run* a plan: the
//! plan format, the executor, the backend trait and the reference kernels. With `alloc` it
//! also records graphs, differentiates them and compiles plans. The `link` feature adds the
//! host <-> device link protocol ([`link`]), which needs no heap either.
//!
//! ```
//! use sprout_core::{compile_training_step, nn, Executor, Graph, Reference, Shape, TrainConfig};
//!
//! # fn main() -> Result<(), Box<dyn core::error::Error>> {
//! // Model code is ordinary Rust that records a graph.
//! let mut g = Graph::new(7);
//! let x = g.input("x", Shape::d2(4, 3))?;
//! let labels = g.labels("y", 4)?;
//! let h = nn::linear(&mut g, "hidden", x, 8)?;
//! let h = g.relu("act", h)?;
//! let logits = nn::linear(&mut g, "head", h, 2)?;
//! let loss = g.cross_entropy("loss", logits, labels)?;
//!
//! // Train only the head: the hidden layer stays frozen and gets no gradient work.
//! let head: Vec<_> = ["head.weight", "head.bias"].iter().filter_map(|n| g.find(n)).collect();
//! let training = compile_training_step(&g, loss, &head, &TrainConfig::sgd(0.9))?;
//! let plan = &training.plan;
//!
//! // Run it over fixed memory: the executor allocates nothing.
//! let mut memory = plan.initial_memory(&training.graph);
//! let mut exec = Executor::new(plan.view(), Reference)?;
//! let mut regions = memory.regions();
//! regions.write(&plan.operand("x")?, &[0.5f32, -1.0, 2.0, 1.0, 0.0, -0.5, 0.3, 0.3, 0.3, -2.0, 1.0, 0.0])?;
//! regions.write(&plan.operand("y")?, &[1i32, 0, 1, 0])?;
//! let first = {
//!     exec.train_step(&mut regions, 0.1)?;
//!     regions.read::<f32>(&plan.operand("loss")?)?[0]
//! };
//! for _ in 0..20 {
//!     exec.train_step(&mut regions, 0.1)?;
//! }
//! assert!(regions.read::<f32>(&plan.operand("loss")?)?[0] < first);
//! # Ok(())
//! # }
//! ```
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod backend;
pub mod checksum;
pub mod dispatch;
pub mod error;
pub mod executor;
pub mod format;
pub mod geometry;
pub mod hyperparams;
pub mod kernel;
#[cfg(feature = "link")]
pub mod link;
pub mod memory;
pub mod plan;
pub mod quant;
pub mod reference;
pub mod rng;
pub mod schedule;
pub mod shape;
pub mod tensor;

#[cfg(feature = "alloc")]
pub mod autograd;
#[cfg(feature = "alloc")]
pub mod builder;
#[cfg(feature = "alloc")]
pub mod compile;
#[cfg(feature = "alloc")]
pub mod dilation;
#[cfg(feature = "alloc")]
pub mod eager;
#[cfg(feature = "alloc")]
pub mod f16_storage;
#[cfg(feature = "alloc")]
pub mod graph;
#[cfg(feature = "alloc")]
pub mod int8_conversion;
#[cfg(feature = "alloc")]
pub mod lower;
#[cfg(feature = "alloc")]
pub mod nn;
#[cfg(feature = "alloc")]
pub mod op;
#[cfg(feature = "alloc")]
pub mod ops;
#[cfg(feature = "alloc")]
pub mod optim;
#[cfg(feature = "alloc")]
mod passes;
#[cfg(feature = "alloc")]
mod rebatch;
#[cfg(feature = "alloc")]
pub mod training;
#[cfg(feature = "alloc")]
mod validate;

pub use backend::{Backend, Host, Kernels, Memory, Reference};
pub use dispatch::{Flow, StepContext};
pub use executor::{Executor, Progress, Regions, RegionsIn, StepObserver, StepOutcome};
pub use plan::{ExecError, Operand, PlanView, Region, RegionSizes, Step};
pub use shape::Shape;
pub use tensor::{DType, Role, TensorId};

#[cfg(feature = "alloc")]
pub use autograd::{differentiate, Differentiated};
#[cfg(feature = "alloc")]
pub use compile::{
    compile_inference, compile_outputs, ArenaPeak, Binding, HostMemory, PlacementOptions, Plan,
    PlanStats,
};
#[cfg(feature = "alloc")]
pub use eager::EagerOptions;
#[cfg(feature = "alloc")]
pub use f16_storage::{to_f16_storage, F16Storage};
#[cfg(feature = "alloc")]
pub use format::{load_model, save_model, FormatError, Metadata, ModelFile};
#[cfg(feature = "alloc")]
pub use graph::{Graph, GraphError, Init};
#[cfg(feature = "alloc")]
pub use lower::Mode;
#[cfg(feature = "alloc")]
pub use optim::{Optimizer, TrainConfig};
#[cfg(feature = "alloc")]
pub use sprout_planner::Strategy;
#[cfg(feature = "alloc")]
pub use training::{compile_training_step, compile_training_step_with, MemoryOptions, Training};
