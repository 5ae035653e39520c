//! loom's primitives under the names and signatures `queue.rs` takes from parking_lot and std
//! (`gpuworld-systems`' `sync` module), and a thread's shard from loom's thread id. loom's condvar never times out: a wait that nothing
//! wakes is reported as a deadlock, so a lost wake-up fails a model instead of costing a timeout.

use std::ops::{Deref, DerefMut};
use std::sync::PoisonError;
use std::time::Duration;

pub use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A mutex with parking_lot's signature (`lock` returns the guard; no poisoning).
#[derive(Debug)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub fn new(value: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(value))
    }

    /// Locks, blocking until the mutex is free.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
    }
}

/// The lock on a [`Mutex`]; empty only while [`Condvar::wait_for`] has handed it to loom.
#[derive(Debug)]
pub struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_deref().expect("the guard is held outside a wait")
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0
            .as_deref_mut()
            .expect("the guard is held outside a wait")
    }
}

/// A condition variable with parking_lot's signature (`wait_for` takes the guard by reference).
#[derive(Debug)]
pub struct Condvar(loom::sync::Condvar);

impl Condvar {
    /// A condvar nobody waits on.
    pub fn new() -> Condvar {
        Condvar(loom::sync::Condvar::new())
    }

    /// Releases the lock and waits for a notification (in loom, however long `timeout` is).
    pub fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, timeout: Duration) {
        let held = guard.0.take().expect("the guard is held before a wait");
        let (held, _) = self
            .0
            .wait_timeout(held, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        guard.0 = Some(held);
    }

    /// Wakes one waiting thread.
    pub fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiting thread.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}

impl Default for Condvar {
    fn default() -> Condvar {
        Condvar::new()
    }
}

pub use loom::sync::atomic::fence;

/// The most shards a queue has.
pub const MAX_SHARDS: usize = 2;

/// Two shards: enough for loom to interleave pushes to different shards with a drain.
pub fn shard_count() -> usize {
    MAX_SHARDS
}

/// The model thread's number (0 for the model's main thread, then 1, 2, ... in spawn order),
/// from loom's thread id, without an atomic operation loom would have to interleave.
pub fn thread_index() -> usize {
    let id = format!("{:?}", loom::thread::current().id());
    id.trim_start_matches("ThreadId(")
        .trim_end_matches(')')
        .parse()
        .unwrap_or(0)
}
