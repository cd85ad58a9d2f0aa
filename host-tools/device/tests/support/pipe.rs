//! `pipe()`: two connected in-memory byte streams; dropping one ends the other's reads.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use embedded_io::{ErrorType, Read, ReadReady, Write};

#[derive(Default)]
struct Channel {
    state: Mutex<(VecDeque<u8>, bool)>,
    changed: Condvar,
}

/// One end of a pipe.
pub struct PipeEnd {
    incoming: Arc<Channel>,
    outgoing: Arc<Channel>,
}

pub fn pipe() -> (PipeEnd, PipeEnd) {
    let (a, b) = (Arc::new(Channel::default()), Arc::new(Channel::default()));
    (PipeEnd { incoming: a.clone(), outgoing: b.clone() }, PipeEnd { incoming: b, outgoing: a })
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        self.outgoing.state.lock().unwrap().1 = true;
        self.outgoing.changed.notify_all();
    }
}

impl ErrorType for PipeEnd {
    type Error = Infallible;
}

impl ReadReady for PipeEnd {
    /// Waits up to a millisecond for a byte.
    fn read_ready(&mut self) -> Result<bool, Infallible> {
        let state = self.incoming.state.lock().unwrap();
        let (state, _) = self
            .incoming
            .changed
            .wait_timeout_while(state, Duration::from_millis(1), |(bytes, closed)| {
                bytes.is_empty() && !*closed
            })
            .unwrap();
        Ok(!state.0.is_empty() || state.1)
    }
}

impl Read for PipeEnd {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, Infallible> {
        let state = self.incoming.state.lock().unwrap();
        let mut state = self
            .incoming
            .changed
            .wait_while(state, |(bytes, closed)| bytes.is_empty() && !*closed)
            .unwrap();
        let n = out.len().min(state.0.len());
        for (slot, byte) in out.iter_mut().zip(state.0.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }
}

impl Write for PipeEnd {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, Infallible> {
        self.outgoing.state.lock().unwrap().0.extend(bytes);
        self.outgoing.changed.notify_all();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}
