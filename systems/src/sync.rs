//! The synchronization primitives the inbox's core (`inbox/queue.rs`) is written against:
//! parking_lot's and std's, and which shard a thread pushes to. The model check in
//! `systems/loom` compiles that same file against loom's primitives under these names, so the
//! code it checks is the code that runs here.

pub(crate) use parking_lot::{Condvar, Mutex};
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

/// The most shards a queue has.
pub(crate) const MAX_SHARDS: usize = 32;

/// How many shards a queue has: two per core, so that threads that push at once rarely share
/// one, at least four and at most [`MAX_SHARDS`].
pub(crate) fn shard_count() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (2 * cores).clamp(4, MAX_SHARDS)
}

/// A number of this thread's own, given out in the order threads first ask: threads that push
/// at once land in different shards.
pub(crate) fn thread_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|index| *index)
}
