//! `StdStream`: a host `std::io` stream (a TCP socket, a serial port) as an `embedded-io`
//! stream for the link, with `ReadReady` built on the stream's read timeout.

use std::io;

use embedded_io::{ErrorType, Read, ReadReady, Write};

/// An `embedded-io` view of `S`. `S`'s reads must time out (a socket's read timeout, a
/// serial port's timeout): [`ReadReady::read_ready`] waits at most that long for a byte,
/// which is how the link's client waits without spinning.
pub struct StdStream<S> {
    inner: S,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    ended: bool,
}

impl<S: io::Read + io::Write> StdStream<S> {
    pub fn new(inner: S) -> Self {
        Self { inner, buf: vec![0; 4096].into_boxed_slice(), start: 0, end: 0, ended: false }
    }
}

impl<S> ErrorType for StdStream<S> {
    type Error = io::Error;
}

impl<S: io::Read + io::Write> ReadReady for StdStream<S> {
    /// True when bytes are buffered or the stream ended; otherwise one read, which returns
    /// after the stream's timeout when nothing comes.
    fn read_ready(&mut self) -> io::Result<bool> {
        if self.start < self.end || self.ended {
            return Ok(true);
        }
        match self.inner.read(&mut self.buf) {
            Ok(0) => self.ended = true,
            Ok(n) => (self.start, self.end) = (0, n),
            Err(e) if is_timeout(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
        Ok(true)
    }
}

impl<S: io::Read + io::Write> Read for StdStream<S> {
    /// Blocks until at least one byte arrives; `Ok(0)` once the stream ended.
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        while !self.read_ready()? {}
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        Ok(n)
    }
}

impl<S: io::Read + io::Write> Write for StdStream<S> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A read that ran into the timeout (sockets say `WouldBlock` on Unix, `TimedOut` elsewhere).
fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that times out once before each chunk of its data.
    struct Hesitant {
        chunks: Vec<Vec<u8>>,
        hesitated: bool,
    }

    impl io::Read for Hesitant {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if !std::mem::replace(&mut self.hesitated, true) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.hesitated = false;
            if self.chunks.is_empty() {
                return Ok(0);
            }
            let chunk = self.chunks.remove(0);
            out[..chunk.len()].copy_from_slice(&chunk);
            Ok(chunk.len())
        }
    }

    impl io::Write for Hesitant {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn timeouts_are_not_ready_and_bytes_come_through_in_order_until_the_end() {
        let mut stream =
            StdStream::new(Hesitant { chunks: vec![vec![1, 2, 3], vec![4]], hesitated: false });
        assert!(!stream.read_ready().unwrap());
        assert!(stream.read_ready().unwrap());
        let mut out = [0; 2];
        assert_eq!(stream.read(&mut out).unwrap(), 2);
        assert_eq!(out, [1, 2]);
        assert_eq!(stream.read(&mut out).unwrap(), 1);
        assert_eq!(stream.read(&mut out).unwrap(), 1);
        assert_eq!(out[0], 4);
        assert_eq!(stream.read(&mut out).unwrap(), 0);
        assert!(stream.read_ready().unwrap());
    }

    #[test]
    fn other_errors_pass_through() {
        struct Broken;
        impl io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::ErrorKind::ConnectionReset.into())
            }
        }
        impl io::Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut stream = StdStream::new(Broken);
        assert_eq!(stream.read_ready().unwrap_err().kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(stream.write(&[1]).unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
