//! What the runtime publishes at the end of every tick for readers that do not take its lock:
//! the memory usage the tick left, and which ticks have started and finished, so that a caller
//! whose reply came from another thread's tick can wait for that tick to publish.

use crate::usage::MemoryUsage;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The runtime's state as of its last finished tick, shared with clients through an `Arc`.
#[derive(Debug, Default)]
pub struct Published {
    /// A mutex rather than four atomics so a reader never sees one tick's bytes in use beside
    /// another tick's bytes reserved; it is held for a copy of 32 bytes.
    memory: Mutex<MemoryUsage>,
    started: AtomicU64,
    finished: AtomicU64,
}

impl Published {
    /// Memory in use and reserved as the last finished tick left it.
    pub fn memory_usage(&self) -> MemoryUsage {
        *self.memory.lock()
    }

    /// Number of the last tick that started.
    pub fn ticks_started(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    /// Number of the last tick whose state is published.
    pub fn ticks_finished(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// Records that tick `tick` started.
    pub(crate) fn start_tick(&self, tick: u64) {
        self.started.store(tick, Ordering::Release);
    }

    /// Publishes what tick `tick` left.
    pub(crate) fn finish_tick(&self, tick: u64, memory: MemoryUsage) {
        *self.memory.lock() = memory;
        self.finished.store(tick, Ordering::Release);
    }
}
