//! Shared helpers for sprout's cross-crate tests.

pub mod conformance;
pub mod models;

pub mod gradcheck;
