//! Ports: what `--port` names (a serial device, or `tcp:HOST:PORT` such as QEMU's serial
//! socket) and opening it as a stream the link can use.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use crate::error::LinkError;
use crate::stream::StdStream;

/// How long one read waits before the link looks at its clock again.
const POLL: Duration = Duration::from_millis(2);

/// How long connecting to a TCP port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A byte stream to a device.
pub trait Stream: io::Read + io::Write + Send {}

impl<T: io::Read + io::Write + Send> Stream for T {}

/// An open port.
pub type Port = StdStream<Box<dyn Stream>>;

/// What `--port` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortSpec {
    /// `tcp:HOST:PORT`.
    Tcp(String),
    /// A serial device (`/dev/ttyACM0`, `COM3`) at a baud rate.
    Serial { path: String, baud: u32 },
}

impl PortSpec {
    /// Reads a `--port` value: `tcp:HOST:PORT`, or else a serial device at `baud`.
    pub fn parse(port: &str, baud: u32) -> Self {
        match port.strip_prefix("tcp:") {
            Some(address) => PortSpec::Tcp(address.to_string()),
            None => PortSpec::Serial { path: port.to_string(), baud },
        }
    }

    /// The port as the user wrote it.
    pub fn name(&self) -> String {
        match self {
            PortSpec::Tcp(address) => format!("tcp:{address}"),
            PortSpec::Serial { path, .. } => path.clone(),
        }
    }

    /// Opens the port, its reads timing out after a few milliseconds.
    pub fn open(&self) -> Result<Port, LinkError> {
        let stream: Box<dyn Stream> = match self {
            PortSpec::Tcp(address) => Box::new(connect(address)?),
            PortSpec::Serial { path, baud } => open_serial(path, *baud)?,
        };
        Ok(StdStream::new(stream))
    }
}

/// A port with nothing behind it: reads end at once, writes vanish. What a [`Port`] owner
/// holds while it closes one connection before opening the next.
pub(crate) fn closed() -> Port {
    StdStream::new(Box::new(io::empty()))
}

fn connect(address: &str) -> Result<TcpStream, LinkError> {
    let failed = |source: io::Error| LinkError::Connect { address: address.to_string(), source };
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "expected tcp:HOST:PORT");
    for candidate in address.to_socket_addrs().map_err(failed)? {
        match TcpStream::connect_timeout(&candidate, CONNECT_TIMEOUT) {
            Ok(stream) => {
                stream.set_read_timeout(Some(POLL)).map_err(failed)?;
                stream.set_nodelay(true).map_err(failed)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(failed(last))
}

fn open_serial(path: &str, baud: u32) -> Result<Box<dyn Stream>, LinkError> {
    let not_found = || LinkError::PortNotFound {
        port: path.to_string(),
        available: serialport::available_ports()
            .map(|ports| ports.into_iter().map(|p| p.port_name).collect())
            .unwrap_or_default(),
    };
    // Windows names (COM3) are not paths; elsewhere a missing file is a missing port.
    if !cfg!(windows) && !Path::new(path).exists() {
        return Err(not_found());
    }
    match serialport::new(path, baud).timeout(POLL).open() {
        Ok(port) => Ok(Box::new(port)),
        Err(e) if e.kind() == serialport::ErrorKind::Io(io::ErrorKind::NotFound) => {
            Err(not_found())
        }
        Err(source) => Err(LinkError::OpenSerial { port: path.to_string(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_ports_are_told_from_serial_ones() {
        assert_eq!(
            PortSpec::parse("tcp:localhost:4444", 9600),
            PortSpec::Tcp("localhost:4444".into())
        );
        let serial = PortSpec::parse("/dev/ttyACM0", 9600);
        assert_eq!(serial, PortSpec::Serial { path: "/dev/ttyACM0".into(), baud: 9600 });
        assert_eq!(serial.name(), "/dev/ttyACM0");
    }

    #[test]
    fn a_missing_serial_port_is_named_with_the_ports_there_are() {
        let error = PortSpec::parse("/dev/sprout-no-such-port", 115_200).open().err().unwrap();
        assert!(
            matches!(&error, LinkError::PortNotFound { port, .. } if port == "/dev/sprout-no-such-port")
        );
        assert!(error.to_string().contains("/dev/sprout-no-such-port"), "{error}");
    }

    #[test]
    fn a_tcp_port_without_a_port_number_is_a_connect_error() {
        let error = PortSpec::parse("tcp:localhost", 0).open().err().unwrap();
        assert!(matches!(error, LinkError::Connect { .. }), "{error}");
    }
}
