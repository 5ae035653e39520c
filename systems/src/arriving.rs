//! Bytes still on their way from another runtime: what a transfer or a collective writes into a
//! destination once its sources' reads have come back. Ingest holds a write of arriving bytes,
//! with every command after it, until they are there (see `docs/architecture.md`, Devices).

use crate::bytes::HostBytes;
use crate::error::Result;
use std::task::{Context, Poll};

/// Where arriving bytes come from: polled, never awaited, by the destination's ingest.
pub trait ArrivingSource: Send + 'static {
    /// The bytes once they are all there, or the error that stopped them; `Pending` meanwhile,
    /// after arranging for `cx`'s waker to be woken when polling again may make progress. May
    /// drive the source runtimes forward (without blocking) so that a manually ticked source
    /// cannot stall its destination.
    fn poll_bytes(&mut self, cx: &mut Context<'_>) -> Poll<Result<HostBytes>>;
}

/// Bytes another runtime is still producing. (The mutex makes it `Sync`, as a command in a
/// resource must be; only ingest, which owns it, ever polls it.)
pub struct Arriving(parking_lot::Mutex<Box<dyn ArrivingSource>>);

impl Arriving {
    /// Bytes that `source` produces.
    pub fn new(source: impl ArrivingSource) -> Arriving {
        Arriving(parking_lot::Mutex::new(Box::new(source)))
    }

    /// The bytes once they are there; see [`ArrivingSource::poll_bytes`].
    pub fn poll_bytes(&mut self, cx: &mut Context<'_>) -> Poll<Result<HostBytes>> {
        self.0.get_mut().poll_bytes(cx)
    }
}

impl std::fmt::Debug for Arriving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Arriving")
    }
}
