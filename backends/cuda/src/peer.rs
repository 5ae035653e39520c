//! Copies between two CUDA runtimes on the devices themselves, events on both sides: three
//! native tasks sharing one [`PeerLink`]. On the destination, `PeerDestination` publishes the
//! destination's device pointer and an event recorded after the destination's earlier work; on
//! the source, `PeerCopy` (held at ingest until both are there) makes the source stream wait on
//! that event, so the copy never overwrites what earlier destination work still reads or
//! writes, enqueues `cuMemcpyPeerAsync` after the source's earlier work and records an event;
//! on the destination, `PeerArrival` (held at ingest until that event is there) makes the
//! destination stream wait on it, so later destination work sees the bytes. Each side's memory
//! is used only by tasks on its own stream, so each runtime's own reuse rules keep it alive for
//! the copy.

use crate::device::CudaBackend;
use cudarc::driver::sys;
use gpuworld_hal::backend::{NativeOp, NativeWork, Region};
use gpuworld_hal::error::Error;
use parking_lot::Mutex;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// A recorded event and the context that made it.
#[derive(Clone, Copy)]
struct Recorded {
    event: sys::CUevent,
    context: sys::CUcontext,
}

impl Recorded {
    /// Destroys the event in its context.
    fn destroy(self) {
        // SAFETY: the event was created in `context`, which its backend's primary-context retain
        // keeps alive while the event may be waited on; destroying an event a stream still waits
        // on is allowed (released once passed).
        unsafe {
            if sys::cuCtxPushCurrent_v2(self.context) == sys::CUresult::CUDA_SUCCESS {
                sys::cuEventDestroy_v2(self.event);
                let mut popped = std::ptr::null_mut();
                sys::cuCtxPopCurrent_v2(&mut popped);
            }
        }
    }
}

/// Where the destination's bytes go, and the event after the destination's earlier work.
#[derive(Clone, Copy)]
struct Place {
    pointer: sys::CUdeviceptr,
    ready: Recorded,
}

/// The recorded event that follows the copy.
type Copied = Recorded;

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

impl std::fmt::Debug for PeerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLink")
            .field(
                "destination_known",
                &self.destination.try_lock().map(|slot| slot.value.is_some()),
            )
            .field(
                "copied",
                &self.copied.try_lock().map(|slot| slot.value.is_some()),
            )
            .finish()
    }
}

impl Drop for PeerLink {
    fn drop(&mut self) {
        if let Some(Ok(place)) = self.destination.get_mut().value.take() {
            place.ready.destroy();
        }
        if let Some(Ok(copied)) = self.copied.get_mut().value.take() {
            copied.destroy();
        }
    }
}

/// What a part waiting for `what` reports when that part was dropped without running and
/// without failing: its runtime went away with it still queued.
fn never_ran(what: &str) -> Error {
    tracing::debug!(target: "gpuworld::stream", "the {what} of a peer copy never ran: its runtime is gone");
    Error::Disconnected
}

impl PeerLink {
    /// A link for one copy.
    pub fn new() -> Arc<PeerLink> {
        Arc::new(PeerLink::default())
    }
}

/// The destination's part before the copy: publishes where the bytes go.
#[derive(Debug)]
pub struct PeerDestination(pub Arc<PeerLink>);

pub use gpuworld_hal::cross_device::Drive;

/// The source's part: the copy itself, once the destination is known.
pub struct PeerCopy {
    /// The copy's link.
    pub link: Arc<PeerLink>,
    /// Drives the destination's runtime while the copy waits for it.
    pub drive: Drive,
}

impl std::fmt::Debug for PeerCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCopy")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

/// The destination's part after the copy: its stream waits for the copy's event.
pub struct PeerArrival {
    /// The copy's link.
    pub link: Arc<PeerLink>,
    /// Drives the source's runtime while the arrival waits for it.
    pub drive: Drive,
}

impl std::fmt::Debug for PeerArrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerArrival")
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
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
            fn pass_on(&self, error: &Error) -> bool {
                self.pass_on(error)
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

    /// The source waits for the destination: it fails with the destination's error, and passes
    /// it on to the arrival, which reports it.
    fn pass_on(&self, error: &Error) -> bool {
        publish(&self.0.destination, || Err(error.clone()));
        true
    }
}

impl PeerCopy {
    fn ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        published(&self.link.destination, &self.drive, cx)
    }

    /// The arrival waits for the copy: the destination's stream reports the source's error.
    fn pass_on(&self, error: &Error) -> bool {
        publish(&self.link.copied, || Err(error.clone()));
        true
    }
}

impl PeerArrival {
    fn ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        published(&self.link.copied, &self.drive, cx)
    }

    /// Nobody waits for the arrival: its stream reports the error.
    fn pass_on(&self, _: &Error) -> bool {
        false
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
            let place = self.peer_pointer(s, buffers).and_then(|pointer| {
                self.bind();
                let ready = self.record_peer_event(s)?;
                Ok(Place { pointer, ready })
            });
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
                    let handle = self.work_stream(s);
                    // SAFETY: `copied.event` was recorded by the source after the copy and
                    // lives until the link drops; waiting on another context's event is allowed.
                    let code = unsafe { sys::cuStreamWaitEvent(handle, copied.event, 0) };
                    self.check_peer(s, code, "cuStreamWaitEvent")
                }
                Some(Err(error)) => Err(error),
                None => Err(never_ran("source")),
            });
        }
        None
    }

    /// The device pointer of the task's one binding.
    fn peer_pointer(&self, s: usize, buffers: &[Region]) -> Result<sys::CUdeviceptr, Error> {
        buffers
            .first()
            .and_then(|region| self.region_pointer(*region))
            .ok_or_else(|| {
                Error::device_fault(self.streams[s].id, "peer copy bound to freed memory")
            })
    }

    /// An event recorded on stream `s` after its work so far; the context must be bound.
    fn record_peer_event(&mut self, s: usize) -> Result<Recorded, Error> {
        let stream = self.work_stream(s);
        let mut event = std::ptr::null_mut();
        // SAFETY: the event is created in the current context, recorded on one of its streams,
        // and destroyed once, by the link that carries it (or here, when recording fails).
        unsafe {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            let code = sys::cuEventCreate(&mut event, flags);
            self.check_peer(s, code, "cuEventCreate")?;
            let code = sys::cuEventRecord(event, stream);
            if let Err(error) = self.check_peer(s, code, "cuEventRecord") {
                sys::cuEventDestroy_v2(event);
                return Err(error);
            }
        }
        Ok(Recorded {
            event,
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
        let source = self.peer_pointer(s, buffers)?;
        let size = buffers.first().map_or(0, |r| r.size) as usize;
        self.bind();
        let stream = self.work_stream(s);
        let peer = destination.ready.context as usize;
        if destination.ready.context != self.context && !self.peers_enabled.contains(&peer) {
            // Direct access where the GPUs offer it, asked once per peer (the call costs tens
            // of microseconds even when access is on); the copy works (staged by the driver)
            // either way, so a refusal is no error.
            // SAFETY: the destination's context is alive (its backend published it and holds
            // its retain); enabling access twice only returns "already enabled".
            unsafe { sys::cuCtxEnablePeerAccess(destination.ready.context, 0) };
            self.peers_enabled.push(peer);
        }
        // SAFETY: the destination's event lives until the link drops, after this call; waiting
        // on another context's event is allowed. Both pointers are live allocations of at least
        // `size` bytes (the client checked the sizes; each runtime keeps its side alive until
        // its stream passed this copy).
        unsafe {
            let code = sys::cuStreamWaitEvent(stream, destination.ready.event, 0);
            self.check_peer(s, code, "cuStreamWaitEvent")?;
            let code = sys::cuMemcpyPeerAsync(
                destination.pointer,
                destination.ready.context,
                source,
                self.context,
                size,
                stream,
            );
            self.check_peer(s, code, "cuMemcpyPeerAsync")?;
        }
        self.record_peer_event(s)
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
