//! Who ticks: the device thread's loop, and how a blocking call waits for its reply under each
//! driver. The runtime sits behind one mutex; whoever holds it ticks. A blocking caller that finds
//! it free ticks itself (no handoff to another thread on the way to its reply), a device thread
//! ticks whenever work is queued or in flight, and both spin briefly before they sleep, because
//! the next command or reply usually comes within microseconds of the last.

use super::{ComputeClient, Shared};
use futures_channel::oneshot;
use gpuworld_systems::{Backend, Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Who advances the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// The host calls [`ComputeClient::tick`]; blocking calls tick until their reply is ready;
    /// nothing else ticks, and getters read what the last tick left.
    Manual,
    /// A device thread ticks whenever the inbox has work; callers only enqueue, and a blocking
    /// call ticks itself while the device thread is not ticking.
    DeviceThread,
}

/// Longest a caller blocks on the device between two ticks of its own, holding the runtime lock;
/// short, because other threads may want to tick meanwhile.
const CALLER_DEVICE_WAIT: Duration = Duration::from_micros(200);

/// Longest the device thread blocks on the device between ticks, holding the runtime lock:
/// commands that arrive meanwhile wait at most this long before a tick ingests them.
const DEVICE_THREAD_DEVICE_WAIT: Duration = Duration::from_micros(50);

/// How long a waiting caller spins for its reply while another thread ticks, before it sleeps
/// (waking a sleeping thread costs tens of microseconds).
const CALLER_SPIN: Duration = Duration::from_micros(50);

/// How long the device thread spins for new commands after a tick that did work, before it
/// sleeps on the inbox; an idle runtime costs nothing beyond this.
const DEVICE_THREAD_SPIN: Duration = Duration::from_micros(50);

/// How long the idle device thread sleeps when nothing wakes it, so a lost wake-up costs at
/// most this.
const DEVICE_THREAD_IDLE: Duration = Duration::from_millis(20);

/// Stops the device thread when the last client clone is dropped.
pub(super) struct Lifetime {
    pub(super) stop: std::sync::Arc<AtomicBool>,
    pub(super) inbox: std::sync::Arc<gpuworld_systems::inbox::Inbox>,
    pub(super) thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.inbox.wake_all();
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

/// The device thread: ticks while commands are queued or work is in flight; after a tick that
/// did work it spins briefly for the next command, then sleeps on the inbox.
pub(super) fn run_device_thread<B: Backend>(shared: &Shared<B>, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        let had_commands = shared.inbox.has_work();
        let busy = {
            let mut runtime = shared.runtime.lock();
            runtime.tick();
            let busy = runtime.has_work_in_flight();
            if busy && !shared.inbox.has_work() {
                runtime.wait_for_device(DEVICE_THREAD_DEVICE_WAIT);
            }
            busy
        };
        let active = busy || had_commands;
        if busy {
            continue;
        }
        if active && spin_until(DEVICE_THREAD_SPIN, || shared.inbox.has_work()) {
            continue;
        }
        shared.inbox.wait_for_work(DEVICE_THREAD_IDLE);
    }
}

/// Spins (yielding the core to runnable threads) until `ready` or `limit` passed; whether ready.
fn spin_until(limit: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::yield_now();
    }
}

impl<B: Backend> ComputeClient<B> {
    /// Blocks until `receiver` has its reply, driving the runtime as the driver says.
    pub(super) fn wait<T>(&self, receiver: oneshot::Receiver<Result<T>>) -> Result<T> {
        let reply = if self.driver() == Driver::Manual {
            self.tick_until_ready(receiver)
        } else {
            self.wait_beside_device_thread(receiver)
        };
        self.wait_for_publication();
        reply
    }

    /// The manual driver: tick until the reply is ready, waiting for the device in between.
    fn tick_until_ready<T>(&self, mut receiver: oneshot::Receiver<Result<T>>) -> Result<T> {
        loop {
            if let Some(reply) = ready(&mut receiver) {
                return reply;
            }
            let mut runtime = self.shared.runtime.lock();
            runtime.tick();
            // Checked before waiting on the device: work of others (memory pinned behind an
            // event) may still be in flight after our reply came.
            if let Some(reply) = ready(&mut receiver) {
                return reply;
            }
            if runtime.has_work_in_flight() {
                runtime.wait_for_device(CALLER_DEVICE_WAIT);
            }
        }
    }

    /// Beside a device thread: tick ourselves whenever the runtime is free, as the manual driver
    /// does (one thread from command to reply is the shortest path); while another thread ticks,
    /// spin for the reply, then sleep until it wakes us.
    fn wait_beside_device_thread<T>(
        &self,
        mut receiver: oneshot::Receiver<Result<T>>,
    ) -> Result<T> {
        let mut spin_start = Instant::now();
        loop {
            if let Some(reply) = ready(&mut receiver) {
                return reply;
            }
            if let Some(mut runtime) = self.shared.runtime.try_lock() {
                runtime.tick();
                let in_flight = runtime.has_work_in_flight();
                if let Some(reply) = ready(&mut receiver) {
                    drop(runtime);
                    if in_flight {
                        // Others' work we leave in flight: the device thread may be asleep,
                        // having found none before our tick took it from the inbox.
                        self.shared.inbox.request_tick();
                    }
                    return reply;
                }
                if in_flight {
                    runtime.wait_for_device(CALLER_DEVICE_WAIT);
                }
                spin_start = Instant::now();
                continue;
            }
            if spin_start.elapsed() < CALLER_SPIN {
                std::thread::yield_now();
                continue;
            }
            // Whatever we ticked may be in flight while the device thread sleeps: wake it, it
            // ticks until nothing is in flight, completing our reply on the way.
            self.shared.inbox.request_tick();
            return futures_executor::block_on(&mut receiver).unwrap_or(Err(Error::Disconnected));
        }
    }

    /// Returns once the tick that answered a reply has published its state, so a getter called
    /// next (`memory_usage`) sees at least that tick. Replies are sent mid-tick; this is the
    /// rest of that tick, on whichever thread runs it.
    fn wait_for_publication(&self) {
        let published = &self.shared.published;
        let started = published.ticks_started();
        while published.ticks_finished() < started {
            // Free lock: no tick is running (a tick that panicked never publishes).
            if self.shared.runtime.try_lock().is_some() {
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// The reply, if it came; a dropped sender is `Error::Disconnected`.
fn ready<T>(receiver: &mut oneshot::Receiver<Result<T>>) -> Option<Result<T>> {
    match receiver.try_recv() {
        Ok(Some(reply)) => Some(reply),
        Ok(None) => None,
        Err(oneshot::Canceled) => Some(Err(Error::Disconnected)),
    }
}
