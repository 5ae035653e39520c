//! The device thread: ticks whatever no blocking caller is driving, spins briefly after
//! activity and sleeps on the inbox otherwise; stopped when the last client goes
//! ([`Lifetime`]).

use crate::client::shared::Shared;
use gpuworld_systems::Backend;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Stops the device thread when the last client clone is dropped.
pub(in crate::client) struct Lifetime {
    pub(in crate::client) inbox: std::sync::Arc<gpuworld_systems::inbox::Inbox>,
    pub(in crate::client) thread: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Lifetime {
    fn drop(&mut self) {
        // Through the inbox, which the device thread checks under its lock before it sleeps: a
        // stop flag beside it and a plain wake-up were missed by a thread between its check and
        // its wait, which then slept out `policy.device_thread_idle` (the loom model in `systems/loom`).
        self.inbox.stop_device_thread();
        if let Some(thread) = self.thread.lock().take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The device thread's body: [`run_device_thread`]. A panic in a tick (a backend's or wgpu's
/// assertion) is not left to die with the thread, where callers asleep for their replies would
/// wait for ever and work enqueued later would never run: it is logged, and every blocking call
/// of the runtime fails from then on with `ExecutionError::DeviceFault` quoting it (the tick it
/// broke may have left the runtime's state half-updated, so nothing ticks it again).
pub(in crate::client) fn device_thread<B: Backend>(shared: &Shared<B>) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_device_thread(shared);
    }));
    if let Err(payload) = outcome {
        let said = (payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        tracing::error!(target: "gpuworld::stream", panic = %said, "the device thread panicked: every blocking call of this runtime fails from now on");
        let _ =
            (shared.device_thread_panic).set(format!("the device thread panicked: {said}").into());
        // Callers asleep for a reply see it within `SLEEP_CHECK` (`drivers.rs`); pushers waiting
        // for room wait no more.
        shared.inbox.wake_all();
    }
}

/// The device thread: ticks while commands are queued or work is in flight, unless blocking
/// callers drive the runtime themselves; after a tick that did work it spins briefly for the next
/// command, then sleeps on the inbox. Callers hand over what they leave in flight: replies others
/// wait for through a tick request, memory behind events through a plain wake-up.
fn run_device_thread<B: Backend>(shared: &Shared<B>) {
    let drivers = &shared.drivers;
    let inbox = &shared.inbox;
    let _ = drivers.device_thread.set(std::thread::current());
    let callers_drive = || drivers.driving.load(Ordering::Acquire) > 0;
    // With few cores, a spinning device thread takes the core that the device's own work (the
    // cpu backend's workers) or the caller needs.
    let policy = drivers.policy;
    let spare_cores = policy.spare_cores;
    let spin_for_work = policy.device_thread_spin;
    // Whether our last tick left work in flight.
    let mut busy = false;
    // Whether others ticked, or nothing did, since our last tick.
    let mut away = false;
    while !inbox.device_thread_stopped() {
        if callers_drive() {
            // Stay out of the callers' way: park, looking again every `policy.quiet_poll` where cores
            // are plentiful; the last one to leave unparks us if it left work (an unpark before
            // the park makes it return).
            std::thread::park_timeout(if spare_cores {
                policy.quiet_poll
            } else {
                policy.device_thread_idle
            });
            (busy, away) = (false, true);
            continue;
        }
        let had_commands = inbox.has_work();
        if had_commands && !busy && !drivers.shared() {
            // A command is often followed at once by a blocking call (a launch, then its read)
            // whose caller ticks itself: give that caller a moment to take both in one tick.
            if spin_until(policy.device_thread_linger, callers_drive) {
                continue;
            }
        } else if away && !had_commands {
            // Back after callers drove, or after a sleep: what is left in flight is memory behind
            // events (a reply someone waits for comes with a tick request, which is work). It
            // needs a tick, not at once, and the next blocking call often ticks it first. Where
            // cores are plentiful, look every `policy.quiet_poll` rather than spin beside the caller.
            let ready = || inbox.has_work() || callers_drive();
            let found = if spare_cores {
                poll_until(spin_for_work, policy.quiet_poll, ready)
            } else {
                spin_until(spin_for_work, ready)
            };
            if found {
                continue;
            }
        }
        let was_busy = busy;
        busy = {
            let mut runtime = shared.runtime.lock();
            runtime.tick();
            let busy = runtime.has_work_in_flight();
            if busy && !inbox.has_work() && !callers_drive() {
                // A blocking caller that comes meanwhile takes the runtime at once.
                runtime.release_and_wait_for_device(policy.device_wait_slice, &|| {
                    inbox.has_work() || callers_drive()
                });
            }
            busy
        };
        away = false;
        if busy {
            continue;
        }
        let did_work = had_commands || was_busy;
        if did_work && spin_until(spin_for_work, || inbox.has_work() || callers_drive()) {
            continue;
        }
        inbox.wait_for_work(policy.device_thread_idle);
        away = true;
    }
}

/// Looks at `ready` until it holds or `limit` passed, with `pause` between looks; whether ready.
fn wait_until(limit: Duration, mut pause: impl FnMut(), mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        pause();
    }
}

/// [`wait_until`] yielding the core to runnable threads between looks.
fn spin_until(limit: Duration, ready: impl FnMut() -> bool) -> bool {
    wait_until(limit, std::thread::yield_now, ready)
}

/// [`wait_until`] parked `quiet_poll` at a time between looks.
fn poll_until(limit: Duration, quiet_poll: Duration, ready: impl FnMut() -> bool) -> bool {
    wait_until(limit, || std::thread::park_timeout(quiet_poll), ready)
}
