//! `sprout-device`: the host end of the link to a device running sprout's firmware
//! (`sprout_core::link`): serial and `tcp:HOST:PORT` ports ([`PortSpec`]), a connected
//! [`Device`] that retries, reconnects and resumes, streams the samples every epoch to a
//! device that trains from its input ([`Device::train_streamed`]), and the data folder as
//! the device takes it ([`SampleSet`]).
//!
//! ```no_run
//! use sprout_device::{ConnectOptions, Device, PortSpec};
//! # fn main() -> Result<(), sprout_device::LinkError> {
//! let mut device = Device::connect(PortSpec::parse("tcp:127.0.0.1:4444", 115_200), ConnectOptions::default())?;
//! let (checkpoint, info) = device.pull_checkpoint(1 << 20, |_, _| {})?;
//! sprout_train::write_atomic(std::path::Path::new("device.ckpt"), &checkpoint)?;
//! # let _ = info;
//! # Ok(())
//! # }
//! ```

mod checkpoint;
mod clock;
mod device;
mod error;
mod port;
mod samples;
mod stream;
mod streamed;

pub use checkpoint::{checkpoint_for, read_checkpoint_file, write_checkpoint_file, FILE_FRAMING};
pub use clock::StdClock;
pub use device::{ConnectOptions, Device};
pub use error::LinkError;
pub use port::{Port, PortSpec, Stream};
pub use samples::SampleSet;
pub use stream::StdStream;
pub use streamed::StreamEvent;
