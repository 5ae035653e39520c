//! Copies between two CUDA runtimes on the devices themselves, events on both sides: three
//! native tasks sharing one [`PeerLink`]. On the destination, `PeerDestination` publishes the
//! destination's device pointer; on the source, `PeerCopy` (held at ingest until that pointer
//! is there) enqueues `cuMemcpyPeerAsync` on the source stream after the source's earlier work
//! and records an event; on the destination, `PeerArrival` (held at ingest until the event is
//! there) makes the destination stream wait on it. Each side's memory is used only by tasks on
//! its own stream, so each runtime's own reuse rules keep it alive for the copy.

use crate::CudaBackend;
use cudarc::driver::sys;
use gpuworld_systems::backend::{NativeOp, NativeWork, Region};
use gpuworld_systems::error::Error;
use parking_lot::Mutex;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A device pointer and the context it belongs to.
#[derive(Clone, Copy)]
struct Place {
    pointer: sys::CUdeviceptr,
    context: sys::CUcontext,
}

/// The recorded event that follows the copy, and the context that made it.
#[derive(Clone, Copy)]
struct Copied {
    event: sys::CUevent,
    context: sys::CUcontext,
}

/// One side's answer to the other, and the waker of the runtime waiting for it.
struct Slot<T> {
    value: Option<Result<T, Error>>,
    waiter: Option<Waker>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            value: None,
            waiter: None,
        }
    }
}

/// Publishes `value` into `slot` unless it holds one already, then wakes the runtime waiting
/// for it, so a sleeping device thread takes the waiting part at once.
fn publish<T>(slot: &Mutex<Slot<T>>, value: impl FnOnce() -> Result<T, Error>) {
    let waiter = {
        let mut slot = slot.lock();
        if slot.value.is_none() {
            slot.value = Some(value());
        }
        slot.waiter.take()
    };
    if let Some(waiter) = waiter {
        waiter.wake();
    }
}

/// What the three tasks of one copy tell each other.
#[derive(Default)]
pub struct PeerLink {
    destination: Mutex<Slot<Place>>,
    copied: Mutex<Slot<Copied>>,
}

// SAFETY: the raw handles are plain values passed between the two backends' threads; the
// driver's handles may be used from any thread, and the event is destroyed once, in `Drop`.
unsafe impl Send for PeerLink {}
// SAFETY: as above; every field is behind a mutex.
unsafe impl Sync for PeerLink {}

impl Drop for PeerLink {
    fn drop(&mut self) {
        if let Some(Ok(copied)) = self.copied.get_mut().value.take() {
            // SAFETY: the event was created by `PeerCopy` in `context`, which the source
            // backend's primary-context retain keeps alive while the event may be waited on;
            // destroying an event a stream still waits on is allowed (released once passed).
            unsafe {
                if sys::cuCtxPushCurrent_v2(copied.context) == sys::CUresult::CUDA_SUCCESS {
                    sys::cuEventDestroy_v2(copied.event);
                    let mut popped = std::ptr::null_mut();
                    sys::cuCtxPopCurrent_v2(&mut popped);
                }
            }
        }
    }
}

fn never_ran(what: &str) -> Error {
    Error::BackendUnavailable {
        backend: "cuda",
        reason: format!(
            "the {what} of a peer copy never ran (a released handle, or its runtime is gone)"
        )
        .into(),
    }
}

impl PeerLink {
    /// A link for one copy.
    pub fn new() -> Arc<PeerLink> {
        Arc::new(PeerLink::default())
    }
}

/// The destination's part before the copy: publishes where the bytes go.
pub struct PeerDestination(pub Arc<PeerLink>);

/// Ticks the other side's runtime if nobody else does (never blocking), while a part waits.
pub type Drive = Box<dyn Fn() + Send + Sync>;

/// The source's part: the copy itself, once the destination is known.
pub struct PeerCopy {
    /// The copy's link.
    pub link: Arc<PeerLink>,
    /// Drives the destination's runtime while the copy waits for it.
    pub drive: Drive,
}

/// The destination's part after the copy: its stream waits for the copy's event.
pub struct PeerArrival {
    /// The copy's link.
    pub link: Arc<PeerLink>,
    /// Drives the source's runtime while the arrival waits for it.
    pub drive: Drive,
}

impl Drop for PeerDestination {
    fn drop(&mut self) {
        publish(&self.0.destination, || Err(never_ran("destination")));
    }
}

impl Drop for PeerCopy {
    fn drop(&mut self) {
        publish(&self.link.copied, || Err(never_ran("source")));
    }
}

macro_rules! native_op {
    ($type:ty, $name:literal) => {
        impl NativeOp for $type {
            fn name(&self) -> &'static str {
                $name
            }
            fn as_any(&self) -> &dyn std::any::Any {
                self
            }
            fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
                self.ready(cx)
            }
        }
    };
}

native_op!(PeerDestination, "peer destination");
native_op!(PeerCopy, "peer copy");
native_op!(PeerArrival, "peer arrival");

impl PeerDestination {
    fn ready(&self, _: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }
}

impl PeerCopy {
    fn ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        published(&self.link.destination, &self.drive, cx)
    }
}

impl PeerArrival {
    fn ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        published(&self.link.copied, &self.drive, cx)
    }
}

/// Whether the other side has published `slot` (its error if it failed); while it has not,
/// drives the other side's runtime once and looks again, and leaves `cx`'s waker for the
/// publisher to wake.
fn published<T>(
    slot: &Mutex<Slot<T>>,
    drive: &Drive,
    cx: &mut Context<'_>,
) -> Poll<Result<(), Error>> {
    if slot.lock().value.is_none() {
        drive();
    }
    let mut slot = slot.lock();
    match &slot.value {
        None => {
            if !slot
                .waiter
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                slot.waiter = Some(cx.waker().clone());
            }
            Poll::Pending
        }
        Some(Ok(_)) => Poll::Ready(Ok(())),
        Some(Err(error)) => Poll::Ready(Err(error.clone())),
    }
}

impl CudaBackend {
    /// Runs `work` if it is one of the peer copy's tasks; `None` if it is not.
    pub(crate) fn run_peer(
        &mut self,
        s: usize,
        buffers: &[Region],
        work: &NativeWork,
    ) -> Option<Result<(), Error>> {
        let any = work.as_any();
        if let Some(PeerDestination(link)) = any.downcast_ref::<PeerDestination>() {
            let place = self.peer_place(s, buffers);
            let result = place.as_ref().map(|_| ()).map_err(Error::clone);
            publish(&link.destination, || place);
            return Some(result);
        }
        if let Some(PeerCopy { link, .. }) = any.downcast_ref::<PeerCopy>() {
            let copied = self.peer_copy(s, buffers, link);
            let result = copied.as_ref().map(|_| ()).map_err(Error::clone);
            publish(&link.copied, || copied);
            return Some(result);
        }
        if let Some(PeerArrival { link, .. }) = any.downcast_ref::<PeerArrival>() {
            let copied = link.copied.lock().value.clone();
            return Some(match copied {
                Some(Ok(copied)) => {
                    self.bind();
                    // SAFETY: `copied.event` was recorded by the source after the copy and
                    // lives until the link drops; waiting on another context's event is allowed.
                    let handle = self.work_stream(s);
                    let code = unsafe { sys::cuStreamWaitEvent(handle, copied.event, 0) };
                    self.check_peer(s, code, "cuStreamWaitEvent")
                }
                Some(Err(error)) => Err(error),
                None => Err(never_ran("source")),
            });
        }
        None
    }

    fn peer_place(&self, s: usize, buffers: &[Region]) -> Result<Place, Error> {
        let pointer = buffers
            .first()
            .and_then(|region| self.region_pointer(*region))
            .ok_or_else(|| {
                Error::device_fault(self.streams[s].id, "peer copy bound to freed memory")
            })?;
        Ok(Place {
            pointer,
            context: self.context,
        })
    }

    fn peer_copy(
        &mut self,
        s: usize,
        buffers: &[Region],
        link: &PeerLink,
    ) -> Result<Copied, Error> {
        let destination = match &link.destination.lock().value {
            Some(Ok(place)) => *place,
            Some(Err(error)) => return Err(error.clone()),
            None => return Err(never_ran("destination")),
        };
        let source = self.peer_place(s, buffers)?;
        let size = buffers.first().map_or(0, |r| r.size) as usize;
        self.bind();
        let stream = self.work_stream(s);
        if destination.context != self.context {
            // Direct access where the GPUs offer it; the copy works (staged by the driver)
            // either way, so a refusal is no error.
            // SAFETY: the destination's context is alive (its backend published it and holds
            // its retain); enabling access twice only returns "already enabled".
            unsafe { sys::cuCtxEnablePeerAccess(destination.context, 0) };
        }
        let mut event = std::ptr::null_mut();
        // SAFETY: both pointers are live allocations of at least `size` bytes (the client
        // checked the sizes; each runtime keeps its side alive until its stream passed this
        // copy); the event is created in the current (source) context.
        unsafe {
            let code = sys::cuMemcpyPeerAsync(
                destination.pointer,
                destination.context,
                source.pointer,
                source.context,
                size,
                stream,
            );
            self.check_peer(s, code, "cuMemcpyPeerAsync")?;
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            let code = sys::cuEventCreate(&mut event, flags);
            self.check_peer(s, code, "cuEventCreate")?;
            let code = sys::cuEventRecord(event, stream);
            if let Err(error) = self.check_peer(s, code, "cuEventRecord") {
                sys::cuEventDestroy_v2(event);
                return Err(error);
            }
        }
        Ok(Copied {
            event,
            context: self.context,
        })
    }

    /// `Ok`, or the failed call as the stream's error; a sticky one poisons the context.
    fn check_peer(&mut self, s: usize, code: sys::CUresult, what: &str) -> Result<(), Error> {
        let Err(error) = code.result() else {
            return Ok(());
        };
        let message = format!("{what}: {}", crate::loader::describe(error));
        if crate::loader::is_sticky(code) {
            self.poison(message.clone());
        }
        Err(Error::device_fault(self.streams[s].id, message))
    }
}
