//! sprout-core: shapes, graph IR, compile-time autograd, plans, the allocation-free executor,
//! the backend trait and the reference kernels every backend is checked against.
//!
//! Without the `alloc` feature the crate holds what a device needs to *run* a plan: the
//! plan format, the executor, the backend trait and the reference kernels. With `alloc` it
//! also records graphs, differentiates them and compiles plans.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod backend;
pub mod dispatch;
pub mod error;
pub mod executor;
pub mod geometry;
pub mod kernel;
pub mod plan;
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
pub mod eager;
#[cfg(feature = "alloc")]
pub mod graph;
#[cfg(feature = "alloc")]
pub mod lower;
#[cfg(feature = "alloc")]
pub mod nn;
#[cfg(feature = "alloc")]
pub mod op;
#[cfg(feature = "alloc")]
pub mod optim;

pub use backend::{Kernels, Reference};
pub use dispatch::StepContext;
pub use executor::{Executor, Regions, StepOutcome};
pub use plan::{ExecError, Operand, PlanView, Region, RegionSizes, Step};
pub use shape::Shape;
pub use tensor::{DType, Role, TensorId};

#[cfg(feature = "alloc")]
pub use autograd::{differentiate, Differentiated};
#[cfg(feature = "alloc")]
pub use compile::{compile_inference, compile_outputs, Binding, HostMemory, Plan};
#[cfg(feature = "alloc")]
pub use eager::EagerOptions;
#[cfg(feature = "alloc")]
pub use graph::{Graph, GraphError, Init};
#[cfg(feature = "alloc")]
pub use lower::Mode;
#[cfg(feature = "alloc")]
pub use optim::{compile_training_step, Optimizer, TrainConfig, Training};
