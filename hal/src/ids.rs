//! Identifiers shared by the client and the world: streams, handles, runtimes.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A logical stream of work, by default one per host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId {
    /// The stream's number; streams share a slot when their numbers are equal modulo the slot count.
    pub value: u64,
}

static NEXT_THREAD_STREAM: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD_STREAM: Cell<Option<StreamId>> = const { Cell::new(None) };
}

impl StreamId {
    /// The stream of the calling thread: each thread gets its own on first use.
    pub fn current() -> StreamId {
        THREAD_STREAM.with(|cell| match cell.get() {
            Some(id) => id,
            None => {
                let id = StreamId {
                    value: NEXT_THREAD_STREAM.fetch_add(1, Ordering::Relaxed),
                };
                cell.set(Some(id));
                id
            }
        })
    }

    /// Makes `id` the stream of the calling thread from now on.
    pub fn set_current(id: StreamId) {
        THREAD_STREAM.with(|cell| cell.set(Some(id)));
    }
}

impl StreamId {
    /// The id of the runtime's own work outside any thread's stream (a warm-up's compile, and a
    /// fault found there); never a thread's.
    pub const GC: StreamId = StreamId { value: u64::MAX };
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == StreamId::GC {
            write!(f, "gc")
        } else {
            write!(f, "s{}", self.value)
        }
    }
}

/// Names one allocation of one runtime; never reused within that runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleId(pub u64);

impl fmt::Display for HandleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "h{}", self.0)
    }
}

/// Names one runtime in this process, so a handle from another runtime is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuntimeId(pub u64);

static NEXT_RUNTIME: AtomicU64 = AtomicU64::new(1);

impl RuntimeId {
    /// A runtime id not used before in this process.
    pub fn fresh() -> RuntimeId {
        RuntimeId(NEXT_RUNTIME.fetch_add(1, Ordering::Relaxed))
    }
}

impl fmt::Display for RuntimeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "runtime#{}", self.0)
    }
}
