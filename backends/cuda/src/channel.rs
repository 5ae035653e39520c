//! Peer copies a graph repeats (issue 28): a [`Channel`] per captured transfer between two CUDA
//! runtimes. Its first run learns the destination's address as a peer copy does (the copy waits
//! for the destination's runtime to publish it). From then on the devices order each run among
//! themselves, through two words of page-locked, device-mapped host memory, so no part waits for
//! the other runtime's thread:
//! - the destination's stream writes the run's number into `ready` after its earlier work
//!   (`cuStreamWriteValue32`, which fences the stream's earlier writes);
//! - the source's stream waits until `ready` is at or past it (`cuStreamWaitValue32`), copies
//!   (`cuMemcpyPeerAsync`) and writes the number into `copied`;
//! - the destination's stream waits for `copied` before its later work.
//!
//! The waits mirror the holds of an eager peer copy (`peer.rs`), queued in the same order, so
//! they cannot form a cycle the eager copy would not. Where a runtime is ticked by its owner
//! only (`Driver::Manual`), the other side's part still waits on the host until that runtime has
//! queued its own (driving it, as an eager copy does): a device must not wait for work nobody
//! will queue. Run numbers come from one process-wide
//! counter and words are compared cyclically, so a word only counts up. A part dropped unrun
//! raises its word from the host, so the other stream never waits forever; a failed part is its
//! own stream's error and, for the copy, the destination's at its next arrival. The destination
//! range is a graph's, pinned, and pinned memory never moves; a run that finds another address
//! is an error, never a copy to the old one. A channel's words go back to the pool when it drops
//! with both at its last number (every write landed); otherwise they are never reused.

use crate::CudaBackend;
use crate::peer::{Drive, Slot, never_ran, publish, published};
use cudarc::driver::sys;
use gpuworld_systems::backend::{NativeOp, NativeWork, Region};
use gpuworld_systems::cross_device::{PeerChannel, PeerTransfer};
use gpuworld_systems::error::Error;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};

/// The next run's number, for every channel of the process.
static SEQUENCE: AtomicU32 = AtomicU32::new(1);

/// Words of device-mapped host memory no channel holds.
static POOL: Mutex<Vec<Word>> = Mutex::new(Vec::new());

/// Words a pool page holds.
const PAGE_WORDS: usize = 1024;

/// One 32-bit word of a page-locked, device-mapped page that lives for the process (its
/// context, a device's primary one, is retained for the process).
#[derive(Clone, Copy, Debug)]
struct Word {
    host: *mut u32,
    device: sys::CUdeviceptr,
}

// SAFETY: the page lives for the process; the host touches a word only atomically.
unsafe impl Send for Word {}
// SAFETY: as above.
unsafe impl Sync for Word {}

impl Word {
    fn atomic(self) -> &'static AtomicU32 {
        // SAFETY: the word is aligned, inside a page never freed, and the host accesses it only
        // through this atomic (the device writes it whole).
        unsafe { AtomicU32::from_ptr(self.host) }
    }

    /// Whether the word is at `n`.
    fn is(self, n: u32) -> bool {
        self.atomic().load(Ordering::Acquire) == n
    }

    /// Raises the word to `n` from the host, unless it is at or past it already.
    fn raise(self, n: u32) {
        raise(self.atomic(), n);
    }
}

/// Raises `word` to `n` unless it is at or past it already, counting cyclically.
fn raise(word: &AtomicU32, n: u32) {
    let mut current = word.load(Ordering::Acquire);
    while (current.wrapping_sub(n) as i32) < 0 {
        match word.compare_exchange(current, n, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(seen) => current = seen,
        }
    }
}

/// Two words from the pool; a new page where it has none (the context must be current).
fn take_words() -> Result<[Word; 2], String> {
    let mut pool = POOL.lock();
    if pool.len() < 2 {
        // The page belongs to the current context, which would free it with itself: the
        // device's primary context is retained once more, for the process.
        let (mut device, mut context) = (0, std::ptr::null_mut());
        // SAFETY: out-pointers; a context is current (the caller binds it).
        let code = unsafe { sys::cuCtxGetDevice(&mut device) };
        if let Err(error) = code.result() {
            return Err(format!(
                "cuCtxGetDevice: {}",
                crate::loader::describe(error)
            ));
        }
        // SAFETY: as above; the retain is never released.
        let code = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
        if let Err(error) = code.result() {
            let reason = crate::loader::describe(error);
            return Err(format!("cuDevicePrimaryCtxRetain: {reason}"));
        }
        let mut host = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: an out-pointer; the page lives for the process.
        let code = unsafe { sys::cuMemHostAlloc(&mut host, 4 * PAGE_WORDS, flags) };
        if let Err(error) = code.result() {
            return Err(format!(
                "cuMemHostAlloc: {}",
                crate::loader::describe(error)
            ));
        }
        let host = host.cast::<u32>();
        // SAFETY: the page holds PAGE_WORDS words.
        unsafe { std::ptr::write_bytes(host, 0, PAGE_WORDS) };
        let mut device = 0;
        // SAFETY: a device-mapped page; `device` an out-pointer.
        let code = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) };
        if let Err(error) = code.result() {
            // SAFETY: the page just allocated, used by nothing.
            unsafe { sys::cuMemFreeHost(host.cast()) };
            let reason = crate::loader::describe(error);
            return Err(format!("cuMemHostGetDevicePointer: {reason}"));
        }
        pool.extend((0..PAGE_WORDS).map(|i| Word {
            // SAFETY: inside the page.
            host: unsafe { host.add(i) },
            device: device + 4 * i as u64,
        }));
    }
    match (pool.pop(), pool.pop()) {
        (Some(ready), Some(copied)) => Ok([ready, copied]),
        _ => Err("no flag words".to_string()),
    }
}

/// Where the destination's bytes go.
#[derive(Clone, Copy, Debug)]
struct Place {
    pointer: sys::CUdeviceptr,
    context: sys::CUcontext,
}

// SAFETY: plain driver handles, valid from any thread.
unsafe impl Send for Place {}

/// What the runs of one channel share.
#[derive(Default)]
struct State {
    /// `ready` and `copied`, taken at the destination's first run.
    words: Mutex<Option<[Word; 2]>>,
    /// The destination's address, published at its first run.
    destination: Mutex<Slot<Place>>,
    /// The number of the last run issued.
    last: AtomicU32,
    /// A copy's failure, for the destination's next arrival to report.
    failed: Mutex<Option<Error>>,
    /// The number of the last destination part and the last copy run (or dropped unrun), on
    /// the host.
    queued: [AtomicU32; 2],
    /// A copy and an arrival waiting on the host for the other side's part.
    waiters: [Mutex<Option<std::task::Waker>>; 2],
}

impl State {
    fn words(&self) -> Option<[Word; 2]> {
        *self.words.lock()
    }

    /// Lets the waits of run `n` go: its word `which` (0 `ready`, 1 `copied`) is raised.
    fn release(&self, which: usize, n: u32) {
        if let Some(words) = self.words() {
            words[which].raise(n);
        }
    }

    /// Whether part `which` (0 the destination's, 1 the copy) of run `n` ran (or was dropped)
    /// on the host.
    fn queued(&self, which: usize, n: u32) -> bool {
        (self.queued[which].load(Ordering::Acquire).wrapping_sub(n) as i32) >= 0
    }

    /// Part `which` of run `n` ran or was dropped: the part waiting for it goes on.
    fn mark_queued(&self, which: usize, n: u32) {
        raise(&self.queued[which], n);
        if let Some(waiter) = self.waiters[which].lock().take() {
            waiter.wake();
        }
    }

    /// Ready once part `which` of run `n` was queued by the other runtime, driving it with
    /// `drive` meanwhile.
    fn wait_queued(&self, which: usize, n: u32, drive: &Drive, cx: &mut Context<'_>) -> Poll<()> {
        if self.queued(which, n) {
            return Poll::Ready(());
        }
        drive();
        *self.waiters[which].lock() = Some(cx.waker().clone());
        if self.queued(which, n) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let Some([ready, copied]) = self.words.get_mut().take() else {
            return;
        };
        let last = *self.last.get_mut();
        if ready.is(last) && copied.is(last) {
            POOL.lock().extend([ready, copied]);
        } else {
            tracing::debug!(target: "gpuworld::stream", "a peer channel dropped with writes in flight: its two flag words are not reused");
        }
    }
}

/// A channel for one transfer a graph repeats ([`PeerChannel`]).
#[derive(Default)]
pub struct Channel(Arc<State>);

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("last", &self.0.last.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl PeerChannel for Channel {
    fn next(&self, source: Drive, destination: Drive, manual: [bool; 2]) -> PeerTransfer {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        // Counting starts just below the first run: cyclic comparisons hold within 2^31 runs.
        if self.0.last.swap(n, Ordering::AcqRel) == 0 {
            for queued in &self.0.queued {
                queued.store(n.wrapping_sub(1), Ordering::Release);
            }
        }
        let part = || Part {
            state: self.0.clone(),
            n,
            ran: AtomicBool::new(false),
        };
        PeerTransfer {
            destination: Box::new(ChannelDestination(part())),
            copy: Box::new(ChannelCopy {
                part: part(),
                drive: destination,
                wait_on_host: manual[1],
            }),
            arrival: Box::new(ChannelArrival {
                part: part(),
                drive: source,
                wait_on_host: manual[0],
            }),
        }
    }
}

/// One part of run `n`.
struct Part {
    state: Arc<State>,
    n: u32,
    ran: AtomicBool,
}

/// The destination's part before the copy: writes `ready`.
pub struct ChannelDestination(Part);

/// The source's part: waits for `ready`, copies, writes `copied`.
pub struct ChannelCopy {
    part: Part,
    /// Drives the destination's runtime while the copy waits for it.
    drive: Drive,
    /// Whether the copy waits on the host for the destination's part (a runtime only its owner
    /// ticks), not only for its address at the first run.
    wait_on_host: bool,
}

/// The destination's part after the copy: waits for `copied`.
pub struct ChannelArrival {
    part: Part,
    /// Drives the source's runtime while the arrival waits for it.
    drive: Drive,
    /// Whether the arrival waits on the host for the copy (a source only its owner ticks).
    wait_on_host: bool,
}

macro_rules! channel_op {
    ($type:ty, $name:literal) => {
        impl std::fmt::Debug for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($name)
            }
        }

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

channel_op!(ChannelDestination, "peer channel destination");
channel_op!(ChannelCopy, "peer channel copy");
channel_op!(ChannelArrival, "peer channel arrival");

impl ChannelDestination {
    fn ready(&self, _: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    /// Its stream reports the error; a first copy waiting for the address fails with it.
    fn pass_on(&self, error: &Error) -> bool {
        publish(&self.0.state.destination, || Err(error.clone()));
        false
    }
}

impl Drop for ChannelDestination {
    fn drop(&mut self) {
        if !self.0.ran.load(Ordering::Acquire) {
            publish(&self.0.state.destination, || Err(never_ran("destination")));
            self.0.state.release(0, self.0.n);
            self.0.state.mark_queued(0, self.0.n);
        }
    }
}

impl ChannelCopy {
    /// Ready once the destination's address is known (at once after the first run), and, where
    /// the destination is ticked by its owner only, once its part of this run was queued.
    fn ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let state = &self.part.state;
        let known = published(&state.destination, &self.drive, cx);
        if !matches!(known, Poll::Ready(Ok(()))) || !self.wait_on_host {
            return known;
        }
        state.wait_queued(0, self.part.n, &self.drive, cx).map(Ok)
    }

    /// Its stream reports the error, and the destination's next arrival too.
    fn pass_on(&self, error: &Error) -> bool {
        *self.part.state.failed.lock() = Some(error.clone());
        false
    }
}

impl Drop for ChannelCopy {
    fn drop(&mut self) {
        if !self.part.ran.load(Ordering::Acquire) {
            let mut failed = self.part.state.failed.lock();
            failed.get_or_insert_with(|| never_ran("source"));
            drop(failed);
            self.part.state.release(1, self.part.n);
            self.part.state.mark_queued(1, self.part.n);
        }
    }
}

impl ChannelArrival {
    /// Ready at once, or, where the source is ticked by its owner only, once its copy was queued.
    fn ready(&self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if !self.wait_on_host {
            return Poll::Ready(Ok(()));
        }
        let state = &self.part.state;
        state.wait_queued(1, self.part.n, &self.drive, cx).map(Ok)
    }

    /// Nobody waits for the arrival: its stream reports the error.
    fn pass_on(&self, _: &Error) -> bool {
        false
    }
}

impl CudaBackend {
    /// Runs `work` if it is one of a peer channel's parts; `None` if it is not. The context is
    /// bound.
    pub(crate) fn run_channel(
        &mut self,
        s: usize,
        buffers: &[Region],
        work: &NativeWork,
    ) -> Option<Result<(), Error>> {
        let any = work.as_any();
        if let Some(ChannelDestination(part)) = any.downcast_ref::<ChannelDestination>() {
            let result = self.channel_destination(s, buffers, part);
            if let Err(error) = &result {
                publish(&part.state.destination, || Err(error.clone()));
            }
            // Run, or failed as its stream's error: either way the copy must not wait forever.
            part.ran.store(result.is_ok(), Ordering::Release);
            if result.is_err() {
                part.state.release(0, part.n);
            }
            part.state.mark_queued(0, part.n);
            return Some(result);
        }
        if let Some(ChannelCopy { part, .. }) = any.downcast_ref::<ChannelCopy>() {
            let result = self.channel_copy(s, buffers, part);
            part.ran.store(result.is_ok(), Ordering::Release);
            if let Err(error) = &result {
                *part.state.failed.lock() = Some(error.clone());
                part.state.release(1, part.n);
            }
            part.state.mark_queued(1, part.n);
            return Some(result);
        }
        if let Some(ChannelArrival { part, .. }) = any.downcast_ref::<ChannelArrival>() {
            part.ran.store(true, Ordering::Release);
            return Some(self.channel_arrival(s, part));
        }
        None
    }

    /// Writes `ready` on the destination's stream after its earlier work, and publishes the
    /// destination's address at the first run.
    fn channel_destination(
        &mut self,
        s: usize,
        buffers: &[Region],
        part: &Part,
    ) -> Result<(), Error> {
        let pointer = self.peer_pointer(s, buffers)?;
        let ready = {
            let mut words = part.state.words.lock();
            if words.is_none() {
                let taken = take_words().map_err(|reason| {
                    Error::device_fault(self.streams[s].id, format!("peer channel flags: {reason}"))
                })?;
                // Idle words (every write of their last channel landed): they start just
                // below this run, as the comparisons count.
                for word in taken {
                    word.atomic()
                        .store(part.n.wrapping_sub(1), Ordering::Release);
                }
                *words = Some(taken);
            }
            words.map(|[ready, _]| ready)
        };
        let Some(ready) = ready else {
            return Err(never_ran("destination"));
        };
        if let Some(Ok(place)) = &part.state.destination.lock().value
            && place.pointer != pointer
        {
            return Err(Error::device_fault(
                self.streams[s].id,
                "a captured transfer's destination moved (pinned memory never should)",
            ));
        }
        let stream = self.work_stream(s);
        // SAFETY: the word is inside a page that lives for the process; `stream` is this
        // context's. The default flags fence the stream's earlier writes before this one.
        let code = unsafe { sys::cuStreamWriteValue32_v2(stream, ready.device, part.n, 0) };
        self.check_peer(s, code, "cuStreamWriteValue32")?;
        let context = self.context;
        publish(&part.state.destination, || Ok(Place { pointer, context }));
        Ok(())
    }

    /// Waits for `ready`, copies, writes `copied`, all on the source's stream.
    fn channel_copy(&mut self, s: usize, buffers: &[Region], part: &Part) -> Result<(), Error> {
        let place = match &part.state.destination.lock().value {
            Some(Ok(place)) => *place,
            Some(Err(error)) => return Err(error.clone()),
            None => return Err(never_ran("destination")),
        };
        let Some([ready, copied]) = part.state.words() else {
            return Err(never_ran("destination"));
        };
        let source = self.peer_pointer(s, buffers)?;
        let size = buffers.first().map_or(0, |r| r.size) as usize;
        self.enable_peer(place.context);
        let stream = self.work_stream(s);
        let at_or_past = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: the words live for the process; the destination is a live, pinned allocation
        // of at least `size` bytes (the client checked the sizes) in a context its backend keeps
        // retained; the source is this stream's binding.
        unsafe {
            let code = sys::cuStreamWaitValue32_v2(stream, ready.device, part.n, at_or_past);
            self.check_peer(s, code, "cuStreamWaitValue32")?;
            let code = sys::cuMemcpyPeerAsync(
                place.pointer,
                place.context,
                source,
                self.context,
                size,
                stream,
            );
            self.check_peer(s, code, "cuMemcpyPeerAsync")?;
            let code = sys::cuStreamWriteValue32_v2(stream, copied.device, part.n, 0);
            self.check_peer(s, code, "cuStreamWriteValue32")
        }
    }

    /// Waits for `copied` on the destination's stream; a copy's failure is reported here.
    fn channel_arrival(&mut self, s: usize, part: &Part) -> Result<(), Error> {
        let Some([_, copied]) = part.state.words() else {
            return Err(never_ran("destination"));
        };
        let stream = self.work_stream(s);
        let at_or_past = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: the word lives for the process; `stream` is this context's.
        let code =
            unsafe { sys::cuStreamWaitValue32_v2(stream, copied.device, part.n, at_or_past) };
        self.check_peer(s, code, "cuStreamWaitValue32")?;
        match part.state.failed.lock().take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}
