//! The client inbox: clients push commands without taking the runtime lock; the ingest stage
//! drains them in arrival order. Its synchronization core is `queue.rs`, model-checked with loom
//! by `systems/loom`.

use crate::binding::Binding;
use crate::error::{Error, Result};
use crate::ids::{HandleId, RuntimeId, StreamId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

pub mod capture;
mod command;
mod op;
mod queue;
mod tap;

pub use command::{Command, ReadReply, Reply};
pub use op::{Launch, Op, PinHolder};
pub use queue::WorkQueue;
pub use tap::CommandTap;

/// The queue between clients and the tick: a [`WorkQueue`] of commands that answers a command
/// pushed after its runtime is gone with [`Error::Disconnected`].
#[derive(Debug)]
pub struct Inbox {
    runtime: RuntimeId,
    queue: WorkQueue<Command>,
    next_handle: AtomicU64,
    /// Whether a capture is open (`capture` holds it): the one check a push pays without one.
    capturing: AtomicBool,
    capture: parking_lot::Mutex<Option<capture::Recording>>,
}

/// How long a pusher sleeps for room before it looks again (a drain or the close wakes it
/// sooner).
const ROOM_WAIT: Duration = Duration::from_millis(5);

impl Inbox {
    /// Commands queued beyond which a client beside a device thread waits for a tick before it
    /// pushes more (see [`Inbox::wait_for_room`]): about a megabyte of commands, many ticks' worth.
    pub const ROOM: usize = 8192;

    /// Commands queued at which a wait on the device ends though no tick was asked for (see
    /// [`Inbox::needs_tick`]).
    pub const URGENT: usize = 256;

    /// An empty inbox for `runtime`.
    pub fn new(runtime: RuntimeId) -> Inbox {
        Inbox {
            runtime,
            queue: WorkQueue::new(),
            next_handle: AtomicU64::new(0),
            capturing: AtomicBool::new(false),
            capture: parking_lot::Mutex::new(None),
        }
    }

    /// The runtime the inbox feeds.
    pub fn runtime(&self) -> RuntimeId {
        self.runtime
    }

    /// A handle id never used before by this runtime.
    pub fn next_handle_id(&self) -> HandleId {
        HandleId(self.next_handle.fetch_add(1, Ordering::Relaxed))
    }

    /// Queues a command and wakes a waiting device thread; once the inbox is closed, answers it
    /// with [`Error::Disconnected`] at once instead.
    #[inline]
    pub fn push(&self, command: Command) {
        if self.capturing.load(Ordering::Acquire) {
            let mut capture = self.capture.lock();
            if let Some(recording) = capture.as_mut().filter(|r| r.is_this_thread()) {
                // Queued under the capture's lock: a pin follows its command with nothing of
                // this thread's between them.
                for command in recording.take(self.runtime, command) {
                    self.push_now(command);
                }
                return;
            }
        }
        self.push_now(command);
    }

    /// Opens a capture of what the calling thread pushes; `GraphError::NestedCapture` when one
    /// is open already.
    pub fn begin_capture(&self) -> Result<(), Error> {
        self.begin(capture::Recording::on_this_thread())
    }

    /// Opens a capture of what the calling thread pushes, numbered by `order`, which the
    /// captures of other runtimes opened with it share; `GraphError::NestedCapture` when one is
    /// open already.
    pub fn begin_ordered_capture(&self, order: capture::CaptureOrder) -> Result<(), Error> {
        self.begin(capture::Recording::ordered_by(order))
    }

    /// Whether the calling thread has a capture open on this inbox.
    pub fn capturing_here(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
            && self
                .capture
                .lock()
                .as_ref()
                .is_some_and(|r| r.is_this_thread())
    }

    /// Records a transfer to another runtime in the calling thread's capture and pins its
    /// source; whether it must also run now (the warm-up), `None` when this thread has no capture
    /// open here.
    pub fn record_transfer(
        &self,
        src: Binding,
        stream: StreamId,
        target: std::sync::Arc<dyn capture::TransferOut>,
    ) -> Option<bool> {
        let mut capture = self.capture.lock();
        let recording = capture.as_mut().filter(|r| r.is_this_thread())?;
        let (pins, run) = recording.record_transfer(src, stream, target);
        for pin in pins {
            self.push_now(pin);
        }
        Some(run)
    }

    /// Queues a command past any capture open on this inbox: the parts of a transfer a graph
    /// issues, which belong to that graph and not to a capture here.
    pub fn push_uncaptured(&self, command: Command) {
        self.push_now(command);
    }

    /// Opens a dry capture: what the calling thread pushes is recorded, and its launches,
    /// writes and flushes are not queued (see [`capture::Recording::dry_on_this_thread`]).
    pub fn begin_dry_capture(&self) -> Result<(), Error> {
        self.begin(capture::Recording::dry_on_this_thread())
    }

    fn begin(&self, recording: capture::Recording) -> Result<(), Error> {
        let mut capture = self.capture.lock();
        if capture.is_some() {
            return Err(Error::Graph(crate::error::GraphError::NestedCapture));
        }
        *capture = Some(recording);
        self.capturing.store(true, Ordering::Release);
        Ok(())
    }

    /// Closes the capture and returns what it recorded.
    pub fn end_capture(&self) -> Option<capture::Recording> {
        let mut capture = self.capture.lock();
        self.capturing.store(false, Ordering::Release);
        capture.take()
    }

    fn push_now(&self, command: Command) {
        if let Err(unrun) = self.queue.push(command) {
            // Nothing will run them: answer them now, and keep no data for nobody.
            for command in unrun {
                command.fail(Error::Disconnected);
            }
        }
    }

    /// Blocks while [`Inbox::ROOM`] commands or more are queued, until a tick drains them (or
    /// the inbox closes); a client calls it before a push beside a device thread, so callers
    /// that outrun the tick wait for it instead of growing the queue without bound.
    pub fn wait_for_room(&self) {
        while !self.queue.wait_for_room(Self::ROOM, ROOM_WAIT) && !self.queue.is_closed() {}
    }

    /// Closes the inbox for good, when its runtime goes: returns what was queued, and every later
    /// push is answered with [`Error::Disconnected`] at once instead of queued.
    pub(crate) fn close(&self) -> Vec<Command> {
        self.queue.close()
    }

    /// Moves every queued command, in arrival order, to the end of `into`: only the tick takes
    /// commands out.
    pub(crate) fn drain_into(&self, into: &mut Vec<Command>) {
        self.queue.drain_into(into);
    }

    /// Number of commands pushed and not yet drained by a tick (without a lock).
    pub fn queued_commands(&self) -> usize {
        self.queue.len()
    }

    /// Whether commands are waiting or a tick was asked for; without taking a lock.
    pub fn has_work(&self) -> bool {
        self.queue.has_work()
    }

    /// Whether a tick is wanted now rather than once the current wait on the device is over: it
    /// was asked for (a caller blocks on a reply while another thread holds the runtime, or
    /// another runtime's part of a transfer arrived), or [`Inbox::URGENT`] commands are queued.
    /// A wait on the device between or inside ticks ends on it; a command that only enqueues
    /// waits for the wait's end (its slice, tens of microseconds). Ending the wait for every
    /// command made each caller's launch cost the others' round trips a tick (issue 31).
    pub fn needs_tick(&self) -> bool {
        self.queue.tick_requested() || self.queue.len() >= Self::URGENT
    }

    /// Blocks until a command arrives, a tick is asked for, or `timeout` passes.
    pub fn wait_for_work(&self, timeout: Duration) {
        self.queue.wait_for_work(timeout);
    }

    /// Asks a device thread for a tick though nothing may be queued, in a way it cannot miss: a
    /// caller that ticked itself took commands from the queue and leaves their work in flight
    /// for the device thread, which may have gone to sleep having seen none.
    pub fn request_tick(&self) {
        self.queue.request_tick();
    }

    /// Tells the device thread to stop (the last client is gone): it wakes if asleep, and
    /// cannot go to sleep again.
    pub fn stop_device_thread(&self) {
        self.queue.stop_consumer();
    }

    /// Whether [`Inbox::stop_device_thread`] was called.
    pub fn device_thread_stopped(&self) -> bool {
        self.queue.consumer_stopped()
    }

    /// Wakes every thread waiting for work without queuing any, when a caller that ticked itself
    /// leaves memory in flight; a device thread about to sleep may miss it (see
    /// [`WorkQueue::wake_all`]).
    pub fn wake_all(&self) {
        self.queue.wake_all();
    }
}

/// Wakes the runtime behind an inbox: asks for a tick, which a sleeping device thread cannot
/// miss; a manually driven runtime ticks when its owner next calls.
#[derive(Debug)]
pub struct InboxWaker(pub Arc<Inbox>);

impl InboxWaker {
    /// A waker that asks `inbox`'s runtime for a tick.
    pub fn waker(inbox: Arc<Inbox>) -> Waker {
        Waker::from(Arc::new(InboxWaker(inbox)))
    }
}

impl Wake for InboxWaker {
    fn wake(self: Arc<Self>) {
        self.0.request_tick();
    }
}
