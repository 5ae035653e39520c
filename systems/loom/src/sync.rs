//! loom's primitives under the names and signatures `queue.rs` takes from parking_lot and std
//! (`gpuworld-systems`' `sync` module). loom's condvar never times out: a wait that nothing
//! wakes is reported as a deadlock, so a lost wake-up fails a model instead of costing a timeout.

use std::ops::{Deref, DerefMut};
use std::sync::PoisonError;
use std::time::Duration;

pub use loom::sync::atomic::{AtomicBool, Ordering};

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

/// A stand-in for crossbeam's lock-free `SegQueue`: the same linearizable push and pop, behind a
/// loom mutex, so that loom checks the protocol `queue.rs` builds on it (its flags, sleeps and
/// close) with every interleaving of whole pushes and pops.
#[derive(Debug)]
pub struct SegQueue<T>(loom::sync::Mutex<std::collections::VecDeque<T>>);

impl<T> SegQueue<T> {
    /// An empty queue.
    pub fn new() -> SegQueue<T> {
        SegQueue(loom::sync::Mutex::new(std::collections::VecDeque::new()))
    }

    fn items(&self) -> loom::sync::MutexGuard<'_, std::collections::VecDeque<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item` at the back.
    pub fn push(&self, item: T) {
        self.items().push_back(item);
    }

    /// Takes the front item, if any.
    pub fn pop(&self) -> Option<T> {
        self.items().pop_front()
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        self.items().len()
    }

    /// Whether none is queued now.
    pub fn is_empty(&self) -> bool {
        self.items().is_empty()
    }
}

impl<T> Default for SegQueue<T> {
    fn default() -> SegQueue<T> {
        SegQueue::new()
    }
}
