//! The inbox's synchronization core: a lock-free queue of items, the `has_work` flags beside it,
//! the condvars a device thread sleeps on and pushers wait for room on, and the close at
//! shutdown. It knows nothing of commands, so `systems/loom` compiles this very file against
//! loom's primitives (see `crate::sync`; there the lock-free queue is a mutex-guarded stand-in
//! with the same linearizable push and pop) and model-checks it without the rest of the crate.
//!
//! Pushes take no lock: with a mutex, many pushers on many cores parked and woke each other on
//! every push (issue 31: launch-only throughput halved from 2 to 8 callers on 16 cores). The
//! lock here is taken only to sleep and to wake a sleeper.

use crate::sync::{AtomicBool, Condvar, Mutex, Ordering, SegQueue, fence};
use std::time::Duration;

/// Items pushed by many threads, drained in arrival order by whoever ticks, closed for good
/// when the consumer goes.
#[derive(Debug)]
pub struct WorkQueue<T> {
    items: SegQueue<T>,
    /// Taken only around sleeps and the wake-ups that end them.
    sleep: Mutex<()>,
    /// A consumer sleeps here for work.
    work: Condvar,
    /// Pushers sleep here for room (see [`WorkQueue::wait_for_room`]).
    room: Condvar,
    /// What a thread spinning for work reads, on a cache line of its own: only the flags
    /// themselves move between cores.
    signals: Signals,
    /// Pushers are asleep in [`WorkQueue::wait_for_room`]: a drain wakes them.
    waiting_for_room: AtomicBool,
    /// Nothing will drain the queue again.
    closed: AtomicBool,
    /// The consumer was told to stop (see [`WorkQueue::stop_consumer`]).
    consumer_stopped: AtomicBool,
}

/// The flags a consumer spins on (see [`WorkQueue::has_work`]), aligned to a cache-line pair so
/// that nothing else written often shares their line.
#[repr(align(128))]
#[derive(Debug)]
struct Signals {
    /// Set by a push that found it clear, cleared by a drain: true from a push's return until a
    /// drain that takes its item (see [`WorkQueue::has_work`]).
    queued: AtomicBool,
    /// A tick was asked for with nothing queued (see [`WorkQueue::request_tick`]).
    tick_requested: AtomicBool,
}

impl<T> Default for WorkQueue<T> {
    fn default() -> WorkQueue<T> {
        WorkQueue::new()
    }
}

impl<T> WorkQueue<T> {
    /// An empty, open queue (the lock-free queue grows in segments and needs no reservation).
    pub fn new() -> WorkQueue<T> {
        WorkQueue {
            items: SegQueue::new(),
            sleep: Mutex::new(()),
            work: Condvar::new(),
            room: Condvar::new(),
            signals: Signals {
                queued: AtomicBool::new(false),
                tick_requested: AtomicBool::new(false),
            },
            waiting_for_room: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            consumer_stopped: AtomicBool::new(false),
        }
    }

    /// Queues `item` and wakes a waiting consumer. Once the queue is closed, hands back instead
    /// what nothing will drain, for the caller to answer: `item`, and any other item pushed in
    /// the same moment as the close.
    #[inline]
    pub fn push(&self, item: T) -> Result<(), Vec<T>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(vec![item]);
        }
        self.items.push(item);
        // Against the close's store and drain: either the close's drain sees our item, or we see
        // the close and drain it ourselves.
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.take_all());
        }
        // The first push since a drain wakes the consumer; under the sleep lock, so that a
        // consumer between its check of the flag and its wait cannot miss it.
        if !self.signals.queued.swap(true, Ordering::AcqRel) {
            let _sleep = self.sleep.lock();
            self.work.notify_one();
        }
        Ok(())
    }

    /// Every item queued now, in arrival order.
    fn take_all(&self) -> Vec<T> {
        let mut items = Vec::new();
        while let Some(item) = self.items.pop() {
            items.push(item);
        }
        items
    }

    /// Closes the queue for good: returns what was queued, and every later push hands its item
    /// back.
    pub fn close(&self) -> Vec<T> {
        self.closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let items = self.take_all();
        self.signals.queued.store(false, Ordering::Release);
        // Pushers waiting for room wait no more: nothing will drain.
        let _sleep = self.sleep.lock();
        self.room.notify_all();
        items
    }

    /// Moves every queued item, in arrival order, to the end of `into`; this is the tick a
    /// [`WorkQueue::request_tick`] asked for.
    pub fn drain_into(&self, into: &mut Vec<T>) {
        if self.signals.tick_requested.load(Ordering::Relaxed) {
            self.signals.tick_requested.store(false, Ordering::Release);
        }
        loop {
            while let Some(item) = self.items.pop() {
                into.push(item);
            }
            // Cleared only when set: a store to a flag the consumer reads would take its line
            // from that core's cache even when it changes nothing. The swap reads the flag from
            // every push that set it before, so the check after it sees their items.
            if !self.signals.queued.load(Ordering::Relaxed)
                || !self.signals.queued.swap(false, Ordering::AcqRel)
                || self.items.is_empty()
            {
                break;
            }
        }
        // Against `wait_for_room`'s flag and check: either it sees what we took, or we see it.
        fence(Ordering::SeqCst);
        if self.waiting_for_room.load(Ordering::SeqCst) {
            let _sleep = self.sleep.lock();
            self.waiting_for_room.store(false, Ordering::Relaxed);
            self.room.notify_all();
        }
    }

    /// Number of items queued now.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no item is queued now.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether items are waiting or a tick was asked for; without taking a lock. After a push
    /// returned, this stays true until a drain has taken, or is taking, its item.
    pub fn has_work(&self) -> bool {
        self.signals.queued.load(Ordering::Acquire)
            || self.signals.tick_requested.load(Ordering::Acquire)
    }

    /// Whether a tick was asked for (see [`WorkQueue::request_tick`]) and no drain took it yet.
    pub fn tick_requested(&self) -> bool {
        self.signals.tick_requested.load(Ordering::Acquire)
    }

    /// Blocks until an item arrives, a tick is asked for, the consumer is told to stop, or
    /// `timeout` passes; returns at once if any of these is already so.
    pub fn wait_for_work(&self, timeout: Duration) {
        let mut sleep = self.sleep.lock();
        if !self.signals.queued.load(Ordering::Acquire)
            && !self.signals.tick_requested.load(Ordering::Acquire)
            && !self.consumer_stopped.load(Ordering::Acquire)
        {
            self.work.wait_for(&mut sleep, timeout);
        }
    }

    /// Blocks while `limit` items or more are queued, until a drain, the close, or `timeout`;
    /// whether fewer than `limit` are queued on return. A pusher calls it before pushing, so a
    /// consumer that falls behind is not buried under an ever longer queue (and gets the cores
    /// its pushers were spinning on).
    pub fn wait_for_room(&self, limit: usize, timeout: Duration) -> bool {
        if self.items.len() < limit {
            return true;
        }
        let mut sleep = self.sleep.lock();
        self.waiting_for_room.store(true, Ordering::SeqCst);
        // Checked after the flag is up: a drain that follows sees it and wakes us.
        fence(Ordering::SeqCst);
        if self.items.len() >= limit && !self.closed.load(Ordering::SeqCst) {
            self.room.wait_for(&mut sleep, timeout);
        }
        self.items.len() < limit
    }

    /// Asks the waiting consumer for a tick though nothing may be queued. Unlike
    /// [`WorkQueue::wake_all`] it cannot be missed: the flag is set before the notification and
    /// checked under the sleep lock before a wait.
    pub fn request_tick(&self) {
        self.signals.tick_requested.store(true, Ordering::Release);
        let _sleep = self.sleep.lock();
        self.work.notify_one();
    }

    /// Tells the consumer to stop, in a way it cannot miss, as [`WorkQueue::request_tick`] does:
    /// a sleeping consumer wakes, and every later [`WorkQueue::wait_for_work`] returns at once,
    /// so a consumer that checks [`WorkQueue::consumer_stopped`] before each wait exits.
    pub fn stop_consumer(&self) {
        self.consumer_stopped.store(true, Ordering::Release);
        let _sleep = self.sleep.lock();
        self.work.notify_all();
    }

    /// Whether [`WorkQueue::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether [`WorkQueue::stop_consumer`] was called.
    pub fn consumer_stopped(&self) -> bool {
        self.consumer_stopped.load(Ordering::Acquire)
    }

    /// Wakes every thread waiting for work without queuing any. A consumer that has not reached
    /// its wait yet misses it and sleeps out its timeout; use [`WorkQueue::request_tick`] for a
    /// wake-up that must arrive.
    pub fn wake_all(&self) {
        let _sleep = self.sleep.lock();
        self.work.notify_all();
    }
}
