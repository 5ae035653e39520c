//! Copies on the cuda backend: device-to-device copies in stream order, uploads from page-locked
//! bytes or through pinned staging (filled on several threads), readbacks into pinned buffers
//! handed over without a host copy (they are what a read returns), and the poll that retires
//! uploads and readbacks once their events passed (staging goes back to the pool when dropped).

mod record;

use cudarc::driver::sys;
use gpuworld_hal::backend::HostBytes;

/// A host-to-device copy whose pinned source is held until its event passed.
pub(crate) struct Upload {
    stream: usize,
    event: sys::CUevent,
    /// The copy's source, kept alive (never read) until the event passed.
    _source: HostBytes,
}

/// A device-to-host copy into pinned memory, waiting for its event: `None` while the copy is the
/// last work on its stream, whose completion is then the copy's (a blocking read's round trip
/// records no event); the stream records one before it takes more work (`work_stream`).
pub(crate) struct PendingRead {
    stream: usize,
    event: Option<sys::CUevent>,
    /// The value the stream's read flag takes once the copy landed, where one was enqueued.
    flag: Option<u32>,
    buffer: HostBytes,
}

impl Upload {
    /// The event the copy recorded.
    pub(crate) fn event(&self) -> sys::CUevent {
        self.event
    }
}

impl PendingRead {
    /// The event the copy recorded, if it recorded one.
    pub(crate) fn event(&self) -> Option<sys::CUevent> {
        self.event
    }

    /// The stream the copy runs on.
    pub(crate) fn stream(&self) -> usize {
        self.stream
    }
}
