//! Test support for the link: an in-memory duplex pipe, a transport that damages frames,
//! and a fake device app with a session served on a thread. Test doubles only.

#![allow(dead_code)] // Each test file uses its own part of the support.

pub mod fake_app;
pub mod faults;
pub mod pipe;
