//! Waiting for the GPU without the backend: a caller that let go of the runtime's lock queries
//! the events and streams that were in flight when it let go, while other callers tick (issue
//! 31: a caller waiting on the device under the lock held every other caller's submission back).

use crate::device::CudaBackend;
use crate::events::{self, EventState};
use cudarc::driver::sys;
use gpuworld_hal::backend::ProgressWatch;
use smallvec::SmallVec;
use std::time::{Duration, Instant};

/// Something in flight whose completion is progress.
#[derive(Clone, Copy)]
enum Probe {
    /// The oldest live event of a stream, an upload's or a read's event.
    Event(sys::CUevent),
    /// A stream whose last work is a read that recorded no event.
    Stream(sys::CUstream),
}

/// The probes of the work in flight when the watch was made, and the context they belong to.
pub(crate) struct CudaWatch {
    context: sys::CUcontext,
    probes: SmallVec<[Probe; 8]>,
}

// SAFETY: the handles are the driver's, which may be used from any thread; the backend that owns
// them outlives the watch (a watch is waited on by a caller of the client that owns the runtime),
// and it recycles events without destroying them, so a probe is at worst an event recorded again
// since, whose query then tells of newer work: the wait ends early or late, never unsoundly.
unsafe impl Send for CudaWatch {}

impl CudaBackend {
    /// A watch over the events and reads in flight now; `None` when nothing is.
    pub(crate) fn watch(&self) -> Option<CudaWatch> {
        let mut probes: SmallVec<[Probe; 8]> =
            self.events.oldest_live().map(Probe::Event).collect();
        probes.extend(
            self.uploads
                .iter()
                .map(|upload| Probe::Event(upload.event())),
        );
        for read in self.reads.values() {
            probes.push(match read.event() {
                Some(event) => Probe::Event(event),
                None => Probe::Stream(self.streams[read.stream()].handle),
            });
        }
        (!probes.is_empty()).then_some(CudaWatch {
            context: self.context,
            probes,
        })
    }
}

impl CudaWatch {
    /// Whether some probe completed or failed (a failure is for the next tick to report).
    fn progressed(&self) -> bool {
        self.probes.iter().any(|probe| {
            let state = match *probe {
                Probe::Event(event) => events::query(event),
                Probe::Stream(stream) => events::query_stream(stream),
            };
            !matches!(state, EventState::Pending)
        })
    }
}

impl ProgressWatch for CudaWatch {
    fn wait(&mut self, timeout: Duration, interrupt: Option<&dyn Fn() -> bool>) {
        crate::loader::bind_context(self.context);
        let start = Instant::now();
        loop {
            if self.progressed() || interrupt.is_some_and(|interrupted| interrupted()) {
                return;
            }
            if !pause(start.elapsed(), timeout) {
                return;
            }
        }
    }
}

/// Between two looks at the device, `waited` into a wait of `timeout`: spins (kernels often
/// finish within microseconds), yields the core after a while, then sleeps; false once the
/// wait is over.
pub(crate) fn pause(waited: Duration, timeout: Duration) -> bool {
    if waited >= timeout {
        return false;
    }
    if waited < Duration::from_micros(20) {
        std::hint::spin_loop();
    } else if waited < Duration::from_micros(200) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50).min(timeout - waited));
    }
    true
}
