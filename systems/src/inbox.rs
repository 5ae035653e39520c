//! The client inbox: clients push commands without taking the runtime lock; the ingest stage
//! drains them in arrival order.

use crate::bytes::HostBytes;
use crate::error::{Error, Result};
use crate::handle::Binding;
use crate::ids::{HandleId, RuntimeId, StreamId};
use crate::kernel::{CubeCount, ExecutionMode, Kernel};
use crate::memory::AllocationMode;
use futures_channel::oneshot;
use parking_lot::{Condvar, Mutex};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The sending half of a reply the tick completes.
pub type Reply<T> = oneshot::Sender<T>;

/// The bytes of each binding of a read, in order.
pub type ReadReply = Result<Vec<HostBytes>>;

/// A client request, as queued for the next tick.
pub enum Command {
    /// Reserve `size` bytes for `handle`, optionally filled with `data`.
    Create {
        /// The new handle.
        handle: HandleId,
        /// Bytes to reserve.
        size: u64,
        /// Initial contents.
        data: Option<HostBytes>,
        /// The stream it is created on.
        stream: StreamId,
    },
    /// Copy `data` into `dst`.
    Write {
        /// Destination range.
        dst: Binding,
        /// Bytes to copy.
        data: HostBytes,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Run a kernel.
    Launch {
        /// The kernel.
        kernel: Kernel,
        /// How many cubes.
        count: CubeCount,
        /// Buffer bindings, in the kernel's order.
        buffers: SmallVec<[Binding; 4]>,
        /// 32-bit scalars.
        scalars: SmallVec<[u32; 4]>,
        /// Checked or unchecked.
        mode: ExecutionMode,
        /// The stream it runs on.
        stream: StreamId,
    },
    /// Read bindings back to the host.
    Read {
        /// What to read.
        sources: SmallVec<[Binding; 2]>,
        /// The stream it runs on.
        stream: StreamId,
        /// Where the bytes go.
        reply: Reply<ReadReply>,
    },
    /// Submit the stream's queued work.
    Flush {
        /// The stream.
        stream: StreamId,
    },
    /// Wait until the stream's work has completed.
    Sync {
        /// The stream.
        stream: StreamId,
        /// Completed when the work has run, with the stream's fault if any.
        reply: Reply<Result<()>>,
    },
    /// Flush the stream and reply with the event that follows its work so far (for device timing).
    Mark {
        /// The stream.
        stream: StreamId,
        /// The event, once the stream's earlier work is submitted.
        reply: Reply<Result<crate::backend::DeviceEvent>>,
    },
    /// The last clone of a handle was dropped.
    Release {
        /// The handle.
        handle: HandleId,
    },
    /// Return free memory to the device.
    MemoryCleanup,
    /// Open a window of `mode` for the stream's allocations, until the matching close.
    OpenAllocationMode {
        /// The stream whose allocations it governs.
        stream: StreamId,
        /// The mode.
        mode: AllocationMode,
    },
    /// Close the stream's innermost allocation-mode window.
    CloseAllocationMode {
        /// The stream.
        stream: StreamId,
    },
}

impl Command {
    /// Fails the command's reply, if it has one, with `error`.
    pub fn fail(self, error: Error) {
        match self {
            Command::Read { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Command::Mark { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Command::Sync { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            _ => {}
        }
    }
}

/// The queue between clients and the tick.
pub struct Inbox {
    runtime: RuntimeId,
    queue: Mutex<Vec<Command>>,
    work: Condvar,
    next_handle: AtomicU64,
    /// Whether commands are queued, kept beside the queue (written under its lock) so a thread
    /// spinning for work does not take the lock the pushers need.
    queued: AtomicBool,
    /// A tick was asked for with nothing queued (see [`Inbox::request_tick`]).
    tick_requested: AtomicBool,
    /// The runtime is gone: nothing will drain the queue again (written under its lock).
    closed: AtomicBool,
}

impl Inbox {
    /// An empty inbox for `runtime`.
    pub fn new(runtime: RuntimeId) -> Inbox {
        Inbox {
            runtime,
            queue: Mutex::new(Vec::with_capacity(1024)),
            work: Condvar::new(),
            next_handle: AtomicU64::new(0),
            queued: AtomicBool::new(false),
            tick_requested: AtomicBool::new(false),
            closed: AtomicBool::new(false),
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

    /// Queues a command and wakes a waiting device thread.
    #[inline]
    pub fn push(&self, command: Command) {
        let mut queue = self.queue.lock();
        if self.closed.load(Ordering::Relaxed) {
            drop(queue);
            // Nothing will run it: answer it now, and keep no data for nobody.
            command.fail(Error::Disconnected);
            return;
        }
        queue.push(command);
        if queue.len() == 1 {
            self.queued.store(true, Ordering::Release);
            self.work.notify_one();
        }
    }

    /// Closes the inbox for good, when its runtime goes: returns what was queued, and every later
    /// push is answered with [`Error::Disconnected`] at once instead of queued.
    pub fn close(&self) -> Vec<Command> {
        let mut queue = self.queue.lock();
        self.closed.store(true, Ordering::Relaxed);
        self.queued.store(false, Ordering::Release);
        std::mem::take(&mut *queue)
    }

    /// Moves every queued command, in arrival order, to the end of `into`.
    pub fn drain_into(&self, into: &mut Vec<Command>) {
        let mut queue = self.queue.lock();
        self.queued.store(false, Ordering::Release);
        // The tick that drains is the tick that was asked for.
        self.tick_requested.store(false, Ordering::Release);
        if into.is_empty() {
            std::mem::swap(&mut *queue, into);
        } else {
            into.append(&mut queue);
        }
    }

    /// Whether commands are waiting or a tick was asked for; without taking the queue's lock.
    pub fn has_work(&self) -> bool {
        self.queued.load(Ordering::Acquire) || self.tick_requested.load(Ordering::Acquire)
    }

    /// Blocks until a command arrives, a tick is asked for, or `timeout` passes.
    pub fn wait_for_work(&self, timeout: Duration) {
        let mut queue = self.queue.lock();
        if queue.is_empty() && !self.tick_requested.load(Ordering::Acquire) {
            self.work.wait_for(&mut queue, timeout);
        }
    }

    /// Asks a device thread for a tick though nothing may be queued: a caller that ticked itself
    /// took commands from the queue and leaves their work in flight for the device thread,
    /// which may have gone to sleep having seen none.
    pub fn request_tick(&self) {
        self.tick_requested.store(true, Ordering::Release);
        // Under the queue's lock, so a device thread between its check and its wait cannot
        // miss the notification.
        let _queue = self.queue.lock();
        self.work.notify_one();
    }

    /// Wakes every thread waiting for work without queuing any (on shutdown, and when a caller
    /// that ticked itself leaves work in flight).
    pub fn wake_all(&self) {
        let _queue = self.queue.lock();
        self.work.notify_all();
    }
}
