//! What the runtime publishes at the end of every tick for readers that do not take its lock:
//! the memory usage the tick left and the number of the last tick finished (replies are sent
//! after it, so a caller woken by one finds its tick published). Also what the tick left in
//! flight, so `ComputeClient::in_flight` needs no lock and no tick.

use crate::usage::MemoryUsage;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The runtime's state as of its last finished tick, shared with clients through an `Arc`.
#[derive(Debug, Default)]
pub struct Published {
    /// A mutex rather than four atomics so a reader never sees one tick's bytes in use beside
    /// another tick's bytes reserved; it is held for a copy of 32 bytes.
    memory: Mutex<MemoryUsage>,
    in_flight: Mutex<InFlight>,
    finished: AtomicU64,
}

impl Published {
    /// Memory in use and reserved as the last finished tick left it.
    pub fn memory_usage(&self) -> MemoryUsage {
        *self.memory.lock()
    }

    /// Work the last finished tick left unfinished; `commands` counts what was queued then.
    pub fn in_flight(&self) -> InFlight {
        *self.in_flight.lock()
    }

    /// Number of the last tick whose state is published.
    pub fn ticks_finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// Publishes what tick `tick` left.
    pub(crate) fn finish_tick(&self, tick: u64, memory: MemoryUsage, in_flight: InFlight) {
        *self.memory.lock() = memory;
        *self.in_flight.lock() = in_flight;
        self.finished.store(tick, Ordering::Release);
    }
}

/// Work a runtime has not finished: what `ComputeClient::in_flight` reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Commands pushed and not yet taken by a tick.
    pub commands: usize,
    /// Commands taken from the inbox and left for a later tick: waiting for retiring memory or
    /// another runtime, or carried behind a read or sync (`DeferredCommands`).
    pub deferred_commands: usize,
    /// Tasks queued on their streams and not yet submitted to the device.
    pub queued_tasks: usize,
    /// Reads submitted whose bytes have not arrived.
    pub reads: usize,
    /// Syncs (frame fences among them) submitted whose event has not passed.
    pub syncs: usize,
    /// Memory and pins held behind events that have not passed.
    pub pending_gcs: usize,
    /// Frames ended with `ComputeClient::end_frame` whose work has not finished.
    pub frames: usize,
}

impl InFlight {
    /// Whether nothing at all is unfinished.
    pub fn is_idle(&self) -> bool {
        *self == InFlight::default()
    }
}
