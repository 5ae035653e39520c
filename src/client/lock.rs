//! The runtime's lock. Whoever holds it may tick; under `Driver::Manual` a `ReplyFuture`
//! polled while another thread holds it cannot tick, so it parks its waker here and is woken
//! when the holder lets go, instead of polling again at once (which, with more callers than
//! cores, spun on the core the holder needed: issue 31).

use gpuworld_systems::{Backend, Runtime};
use parking_lot::{Mutex, MutexGuard};
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;
use std::time::Duration;

/// The runtime behind its mutex, and the wakers of futures waiting for it to be free.
pub(super) struct RuntimeLock<B: Backend> {
    runtime: Mutex<Runtime<B>>,
    parked: Parked,
}

/// Wakers waiting for the runtime to be let go of.
#[derive(Default)]
struct Parked {
    wakers: Mutex<Vec<Waker>>,
    /// Whether `wakers` may hold any: a release that finds it false costs one load.
    any: AtomicBool,
}

impl Parked {
    fn park(&self, waker: &Waker) {
        let mut wakers = self.wakers.lock();
        if !wakers.iter().any(|parked| parked.will_wake(waker)) {
            wakers.push(waker.clone());
        }
        self.any.store(true, Ordering::SeqCst);
    }

    fn wake_all(&self) {
        if !self.any.load(Ordering::SeqCst) {
            return;
        }
        let wakers = {
            let mut wakers = self.wakers.lock();
            self.any.store(false, Ordering::SeqCst);
            std::mem::take(&mut *wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }
}

impl<B: Backend> RuntimeLock<B> {
    pub(super) fn new(runtime: Runtime<B>) -> RuntimeLock<B> {
        RuntimeLock {
            runtime: Mutex::new(runtime),
            parked: Parked::default(),
        }
    }

    /// Blocks until the runtime is free, then holds it.
    pub(super) fn lock(&self) -> RuntimeGuard<'_, B> {
        RuntimeGuard {
            guard: self.runtime.lock(),
            _wake: WakeParked(&self.parked),
            _held: Held::new(),
        }
    }

    /// Holds the runtime if it is free.
    pub(super) fn try_lock(&self) -> Option<RuntimeGuard<'_, B>> {
        Some(RuntimeGuard {
            guard: self.runtime.try_lock()?,
            _wake: WakeParked(&self.parked),
            _held: Held::new(),
        })
    }

    /// Holds the runtime if it is free; otherwise `waker` is woken once the holder lets go.
    /// Parked before a second attempt: a holder that lets go after the park wakes it, and one
    /// that let go before leaves the runtime free for that attempt.
    pub(super) fn try_lock_or_park(&self, waker: &Waker) -> Option<RuntimeGuard<'_, B>> {
        if let Some(guard) = self.try_lock() {
            return Some(guard);
        }
        self.parked.park(waker);
        self.try_lock()
    }
}

/// The runtime, held; letting go wakes the futures parked meanwhile.
pub(super) struct RuntimeGuard<'a, B: Backend> {
    // Fields drop in order: the mutex is unlocked before the parked futures are woken.
    guard: MutexGuard<'a, Runtime<B>>,
    _wake: WakeParked<'a>,
    _held: Held,
}

thread_local! {
    /// Runtimes this thread holds now.
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread holds a runtime's lock: it must not wait for a tick (its own, or one that
/// another runtime's may wait on), so it skips the wait for room in the inbox.
pub(super) fn holds_a_runtime() -> bool {
    HELD.with(|held| held.get() > 0)
}

/// Counts a held runtime in [`HELD`] while it lives.
struct Held;

impl Held {
    fn new() -> Held {
        HELD.with(|held| held.set(held.get() + 1));
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|held| held.set(held.get().saturating_sub(1)));
    }
}

struct WakeParked<'a>(&'a Parked);

impl Drop for WakeParked<'_> {
    fn drop(&mut self) {
        self.0.wake_all();
    }
}

impl<B: Backend> RuntimeGuard<'_, B> {
    /// Waits up to `timeout` for the device to progress, or until `interrupt`, and lets go of
    /// the runtime: before the wait where the backend offers a watch, so that other threads tick
    /// meanwhile (issue 31: a caller waiting under the lock held every other caller's submission
    /// back), else after it (the sim, whose wait returns at once).
    pub(super) fn release_and_wait_for_device(
        mut self,
        timeout: Duration,
        interrupt: &dyn Fn() -> bool,
    ) {
        match self.progress_watch() {
            Some(mut watch) => {
                drop(self);
                watch.wait(timeout, Some(interrupt));
            }
            None => self.wait_for_device_until(timeout, interrupt),
        }
    }
}

impl<B: Backend> Deref for RuntimeGuard<'_, B> {
    type Target = Runtime<B>;

    fn deref(&self) -> &Runtime<B> {
        &self.guard
    }
}

impl<B: Backend> DerefMut for RuntimeGuard<'_, B> {
    fn deref_mut(&mut self) -> &mut Runtime<B> {
        &mut self.guard
    }
}
