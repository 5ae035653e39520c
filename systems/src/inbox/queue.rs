//! The inbox's synchronization core: a queue of items sharded by pushing thread, the `has_work`
//! flags beside it, the condvars a device thread sleeps on and pushers wait for room on, and the
//! close at shutdown. It knows nothing of commands, so `systems/loom` compiles this very file
//! against loom's primitives (see `crate::sync`) and model-checks it without the rest of the
//! crate.
//!
//! A push locks only its own thread's shard: with one mutex for every pusher, many pushers on
//! many cores parked and woke each other on every push (issue 31: launch-only throughput halved
//! from 2 to 8 callers on 16 cores). A drain takes each shard's items in one move; items carry
//! their arrival number (in a vector beside them), so the drain restores arrival order across
//! shards. When one shard holds everything, as with a single caller, the drain swaps its vector
//! for the consumer's: no item is moved at all. A lock-free segmented queue popped item by item
//! made a single caller's allocation loop 1.36x slower (it zeroes a block per 31 items and moves
//! every item twice more), and gathering every drain through a numbered batch cost two more
//! moves of every command.

use crate::sync::{AtomicBool, AtomicUsize, Condvar, Mutex, Ordering, fence};
use std::time::Duration;

/// Items pushed by many threads, drained in arrival order by whoever ticks, closed for good
/// when the consumer goes.
#[derive(Debug)]
pub struct WorkQueue<T> {
    /// Where pushes go: each thread pushes to one shard (see `crate::sync::thread_index`).
    shards: Box<[Shard<T>]>,
    /// The next push's arrival number: counts every push that got past the first close check.
    arrivals: AtomicUsize,
    /// Items drained so far; `arrivals - taken` is how many are queued.
    taken: AtomicUsize,
    /// Where a drain merges shards (its capacity kept from drain to drain).
    scratch: Mutex<Scratch<T>>,
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

/// One shard: the items some threads pushed, in the order those threads took the lock; on a
/// cache-line pair of its own, so that pushers to other shards do not take its line.
#[repr(align(128))]
#[derive(Debug)]
struct Shard<T> {
    held: Mutex<Held<T>>,
    /// How many items `held` holds, written under its lock: a drain skips empty shards without
    /// locking them.
    len: AtomicUsize,
}

/// A shard's items and, beside them, their arrival numbers (rising).
#[derive(Debug)]
struct Held<T> {
    items: Vec<T>,
    arrivals: Vec<usize>,
}

impl<T> Held<T> {
    /// The first `count` items, numbered.
    fn take_numbered(&mut self, count: usize) -> impl Iterator<Item = (usize, T)> + '_ {
        self.arrivals.drain(..count).zip(self.items.drain(..count))
    }
}

/// A drain's room to merge shards: the numbers of the first shard it took (whose items went
/// straight to the consumer), and the later shards' items, numbered.
#[derive(Debug)]
struct Scratch<T> {
    first: Vec<usize>,
    batch: Vec<(usize, T)>,
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
    /// An empty, open queue with a shard per core (at most `crate::sync::MAX_SHARDS`).
    pub fn new() -> WorkQueue<T> {
        let shards = (0..crate::sync::shard_count())
            .map(|_| Shard {
                held: Mutex::new(Held {
                    items: Vec::new(),
                    arrivals: Vec::new(),
                }),
                len: AtomicUsize::new(0),
            })
            .collect();
        WorkQueue {
            shards,
            arrivals: AtomicUsize::new(0),
            taken: AtomicUsize::new(0),
            scratch: Mutex::new(Scratch {
                first: Vec::new(),
                batch: Vec::new(),
            }),
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
    /// what nothing will drain: `item`.
    #[inline]
    pub fn push(&self, item: T) -> Result<(), Vec<T>> {
        let shard = &self.shards[crate::sync::thread_index() % self.shards.len()];
        {
            let mut held = shard.held.lock();
            // Under the shard's lock, which the close takes after it sets the flag: either the
            // close's drain of this shard sees our item, or we see the close.
            if self.closed.load(Ordering::Acquire) {
                return Err(vec![item]);
            }
            // Taken under the lock: a push that returned before another began has the smaller
            // number, and within a shard numbers rise in lock order.
            let arrival = self.arrivals.fetch_add(1, Ordering::Relaxed);
            held.items.push(item);
            held.arrivals.push(arrival);
            shard.len.store(held.items.len(), Ordering::Release);
        }
        // The first push since a drain wakes the consumer; under the sleep lock, so that a
        // consumer between its check of the flag and its wait cannot miss it. The flag is read
        // before it is written: a consumer spinning on it keeps its line, and a write on every
        // push moved that line between the two cores each time (a single caller's allocation
        // loop ran 2x slower). The fence pairs with the one after a drain clears the flag: either
        // the drain's later look at the shards sees our item, or we see the flag cleared.
        fence(Ordering::SeqCst);
        if !self.signals.queued.load(Ordering::Relaxed)
            && !self.signals.queued.swap(true, Ordering::AcqRel)
        {
            let _sleep = self.sleep.lock();
            self.work.notify_one();
        }
        Ok(())
    }

    /// Closes the queue for good: returns what was queued, and every later push hands its item
    /// back.
    pub fn close(&self) -> Vec<T> {
        self.closed.store(true, Ordering::Release);
        // Every shard is locked once the flag is up: a push that takes a shard's lock later sees
        // the flag, and one that took it earlier left its item for us.
        let mut taken = Vec::new();
        for shard in self.shards.iter() {
            let mut held = shard.held.lock();
            let count = held.items.len();
            taken.extend(held.take_numbered(count));
            shard.len.store(0, Ordering::Release);
        }
        taken.sort_by_key(|(arrival, _)| *arrival);
        self.taken.fetch_add(taken.len(), Ordering::Release);
        let items = taken.into_iter().map(|(_, item)| item).collect();
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
            self.take_shards(into);
            // Cleared only when set: a store to a flag the consumer reads would take its line
            // from that core's cache even when it changes nothing. The swap reads the flag from
            // every push that set it before; the fence pairs with the one in `push`, whose
            // pusher may have read the flag set and left it so: then the check after the fence
            // sees its item.
            if !self.signals.queued.load(Ordering::Relaxed)
                || !self.signals.queued.swap(false, Ordering::AcqRel)
            {
                break;
            }
            fence(Ordering::SeqCst);
            if self.is_empty() {
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

    /// Moves every item the shards hold to the end of `into`, in arrival order. The first shard
    /// that holds items moves straight to `into` (swapped in whole when `into` is empty); only
    /// when a second one holds items too are they merged by number.
    fn take_shards(&self, into: &mut Vec<T>) {
        let mut scratch = self.scratch.lock();
        let Scratch { first, batch } = &mut *scratch;
        let start = into.len();
        let mut runs = 0;
        let mut newest = None;
        for shard in self.holding_shards() {
            let mut held = shard.held.lock();
            let Some(&last) = held.arrivals.last() else {
                continue;
            };
            newest = newest.max(Some(last));
            if runs == 0 {
                if into.is_empty() {
                    std::mem::swap(into, &mut held.items);
                } else {
                    into.append(&mut held.items);
                }
                std::mem::swap(first, &mut held.arrivals);
            } else {
                let count = held.items.len();
                batch.extend(held.take_numbered(count));
            }
            shard.len.store(0, Ordering::Release);
            runs += 1;
        }
        let Some(newest) = newest else {
            return;
        };
        // A shard looked at before its item came may now hold one that arrived before the newest
        // we took (its push returned before that one began): it goes in this drain too, or the
        // next drain would run it after a command that came later.
        for shard in self.holding_shards() {
            let mut held = shard.held.lock();
            let earlier = held.arrivals.partition_point(|arrival| *arrival < newest);
            if earlier > 0 {
                batch.extend(held.take_numbered(earlier));
                shard.len.store(held.items.len(), Ordering::Release);
                runs += 1;
            }
        }
        // Each run rises: a stable sort of them all merges the runs.
        if runs > 1 {
            batch.extend(first.drain(..).zip(into.drain(start..)));
            batch.sort_by_key(|(arrival, _)| *arrival);
            into.extend(batch.drain(..).map(|(_, item)| item));
        }
        first.clear();
        self.taken.fetch_add(into.len() - start, Ordering::Release);
    }

    /// The shards that hold items now, as their lengths say.
    fn holding_shards(&self) -> impl Iterator<Item = &Shard<T>> {
        self.shards
            .iter()
            .filter(|shard| shard.len.load(Ordering::Acquire) > 0)
    }

    /// Number of items queued now (pushes in progress may count already).
    pub fn len(&self) -> usize {
        let taken = self.taken.load(Ordering::Acquire);
        self.arrivals.load(Ordering::Acquire).saturating_sub(taken)
    }

    /// Whether no item is queued now.
    pub fn is_empty(&self) -> bool {
        self.shards
            .iter()
            .all(|shard| shard.len.load(Ordering::Acquire) == 0)
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
        if self.len() < limit {
            return true;
        }
        let mut sleep = self.sleep.lock();
        self.waiting_for_room.store(true, Ordering::SeqCst);
        // Checked after the flag is up: a drain that follows sees it and wakes us.
        fence(Ordering::SeqCst);
        if self.len() >= limit && !self.closed.load(Ordering::SeqCst) {
            self.room.wait_for(&mut sleep, timeout);
        }
        self.len() < limit
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
