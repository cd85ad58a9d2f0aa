//! Shared helpers for sprout's cross-crate tests.

pub mod models;

pub mod gradcheck;
