//! Shared helpers for sprout's cross-crate tests.
