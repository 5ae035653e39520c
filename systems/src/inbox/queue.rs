//! The inbox's synchronization core: a queue under a short mutex, the lock-free `has_work` flags
//! beside it, the condvar a device thread sleeps on, and the close at shutdown. It knows nothing
//! of commands, so `systems/loom` compiles this very file against loom's primitives (see
//! `crate::sync`) and model-checks it without the rest of the crate.

use crate::sync::{AtomicBool, Condvar, Mutex, Ordering};
use std::time::Duration;

/// Items pushed by many threads, drained in arrival order by whoever ticks, closed for good
/// when the consumer goes.
#[derive(Debug)]
pub struct WorkQueue<T> {
    items: Mutex<Vec<T>>,
    work: Condvar,
    /// What a thread spinning for work reads, on a cache line of its own: the pushers' lock
    /// then stays in their cache, and only the flag itself moves between cores.
    signals: Signals,
    /// Nothing will drain the queue again (written under its lock).
    closed: AtomicBool,
    /// The consumer was told to stop (see [`WorkQueue::stop_consumer`]).
    consumer_stopped: AtomicBool,
}

/// The flags a consumer spins on (see [`WorkQueue::has_work`]), aligned to a cache-line pair so
/// that nothing else written often shares their line.
#[repr(align(128))]
#[derive(Debug)]
struct Signals {
    /// Whether items are queued, kept beside the queue (written under its lock) so a thread
    /// spinning for work does not take the lock the pushers need.
    queued: AtomicBool,
    /// A tick was asked for with nothing queued (see [`WorkQueue::request_tick`]).
    tick_requested: AtomicBool,
}

impl<T> WorkQueue<T> {
    /// An empty, open queue with room for `capacity` items before it grows.
    pub fn with_capacity(capacity: usize) -> WorkQueue<T> {
        WorkQueue {
            items: Mutex::new(Vec::with_capacity(capacity)),
            work: Condvar::new(),
            signals: Signals {
                queued: AtomicBool::new(false),
                tick_requested: AtomicBool::new(false),
            },
            closed: AtomicBool::new(false),
            consumer_stopped: AtomicBool::new(false),
        }
    }

    /// Queues `item` and wakes a waiting consumer; once the queue is closed, hands `item` back
    /// instead, for the caller to answer (nothing will drain it).
    #[inline]
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut items = self.items.lock();
        if self.closed.load(Ordering::Relaxed) {
            return Err(item);
        }
        items.push(item);
        if items.len() == 1 {
            self.signals.queued.store(true, Ordering::Release);
            self.work.notify_one();
        }
        Ok(())
    }

    /// Closes the queue for good: returns what was queued, and every later push hands its item
    /// back.
    pub fn close(&self) -> Vec<T> {
        let mut items = self.items.lock();
        self.closed.store(true, Ordering::Relaxed);
        self.signals.queued.store(false, Ordering::Release);
        std::mem::take(&mut *items)
    }

    /// Moves every queued item, in arrival order, to the end of `into`; this is the tick a
    /// [`WorkQueue::request_tick`] asked for.
    pub fn drain_into(&self, into: &mut Vec<T>) {
        let mut items = self.items.lock();
        // Cleared only when set: a store to a flag the consumer reads would take its line from
        // that core's cache even when it changes nothing.
        for flag in [&self.signals.queued, &self.signals.tick_requested] {
            if flag.load(Ordering::Relaxed) {
                flag.store(false, Ordering::Release);
            }
        }
        if into.is_empty() {
            std::mem::swap(&mut *items, into);
        } else {
            into.append(&mut items);
        }
    }

    /// Number of items queued now (takes the queue's short lock).
    pub fn len(&self) -> usize {
        self.items.lock().len()
    }

    /// Whether no item is queued now (takes the queue's short lock).
    pub fn is_empty(&self) -> bool {
        self.items.lock().is_empty()
    }

    /// Whether items are waiting or a tick was asked for; without taking the queue's lock.
    pub fn has_work(&self) -> bool {
        self.signals.queued.load(Ordering::Acquire)
            || self.signals.tick_requested.load(Ordering::Acquire)
    }

    /// Blocks until an item arrives, a tick is asked for, the consumer is told to stop, or
    /// `timeout` passes; returns at once if any of these is already so.
    pub fn wait_for_work(&self, timeout: Duration) {
        let mut items = self.items.lock();
        if items.is_empty()
            && !self.signals.tick_requested.load(Ordering::Acquire)
            && !self.consumer_stopped.load(Ordering::Acquire)
        {
            self.work.wait_for(&mut items, timeout);
        }
    }

    /// Asks the waiting consumer for a tick though nothing may be queued. Unlike
    /// [`WorkQueue::wake_all`] it cannot be missed: the flag is set before the notification and
    /// checked under the lock before a wait.
    pub fn request_tick(&self) {
        self.signals.tick_requested.store(true, Ordering::Release);
        // Under the queue's lock, so a consumer between its check and its wait cannot miss the
        // notification.
        let _items = self.items.lock();
        self.work.notify_one();
    }

    /// Tells the consumer to stop, in a way it cannot miss, as [`WorkQueue::request_tick`] does:
    /// a sleeping consumer wakes, and every later [`WorkQueue::wait_for_work`] returns at once,
    /// so a consumer that checks [`WorkQueue::consumer_stopped`] before each wait exits.
    pub fn stop_consumer(&self) {
        self.consumer_stopped.store(true, Ordering::Release);
        let _items = self.items.lock();
        self.work.notify_all();
    }

    /// Whether [`WorkQueue::stop_consumer`] was called.
    pub fn consumer_stopped(&self) -> bool {
        self.consumer_stopped.load(Ordering::Acquire)
    }

    /// Wakes every thread waiting for work without queuing any. A consumer that has not reached
    /// its wait yet misses it and sleeps out its timeout; use [`WorkQueue::request_tick`] for a
    /// wake-up that must arrive.
    pub fn wake_all(&self) {
        let _items = self.items.lock();
        self.work.notify_all();
    }
}
