//! Whose turn it is to drive a runtime: the user's [`Driver`], and the counts through which
//! blocking callers and the device thread take turns at ticking ([`Drivers`]), so that one thread
//! at a time drives.

use super::policy::DriverPolicy;
use futures_channel::oneshot;
use gpuworld_systems::{Error, Result};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Instant;

/// Who advances the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Driver {
    /// The host calls [`ComputeClient::tick`](crate::ComputeClient::tick); blocking calls tick
    /// until their reply is ready; nothing else ticks, and getters read what the last tick left.
    Manual,
    /// A device thread ticks whenever the inbox has work; calls that only enqueue return at
    /// once, and a blocking call ticks itself as under `Manual` while the device thread waits.
    DeviceThread,
}

/// What the device thread and blocking callers share so that one thread at a time drives the
/// runtime: a blocking caller ticks itself from its command to its reply (no handoff on the
/// way), and the device thread stays out of its way meanwhile. Aligned to a cache-line pair: the
/// device thread spins on `driving`, which nothing else written often may share a line with.
#[repr(align(128))]
pub(in crate::client) struct Drivers {
    /// Blocking callers ticking the runtime themselves.
    pub(super) driving: AtomicUsize,
    /// Blocking callers waiting for a reply, driving or asleep.
    waiting: AtomicUsize,
    /// The device thread, woken when the last driving caller leaves.
    pub(super) device_thread: OnceLock<Thread>,
    /// When to spin, park or sleep, for this host's cores.
    pub(in crate::client) policy: DriverPolicy,
    /// With spare cores: until when (nanoseconds since `epoch`) callers leave every tick to the
    /// device thread, `policy.shared_hold` after two last waited at once. A caller alone still
    /// drives: the device thread's tick then costs a handoff per round trip (0.7x).
    shared_until: AtomicU64,
    /// The origin of `shared_until`.
    epoch: Instant,
    /// Callers spinning for a reply the device thread will send (see `policy.reply_spin`).
    spinning: AtomicUsize,
}

/// Makes every runtime made afterwards take the path of a host with spare cores, so that the
/// unit tests run it on CI's two cores too.
#[cfg(test)]
pub(super) static FORCE_SPARE_CORES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

impl Default for Drivers {
    fn default() -> Drivers {
        let policy = DriverPolicy::for_this_host();
        #[cfg(test)]
        let policy = if FORCE_SPARE_CORES.load(Ordering::Relaxed) {
            DriverPolicy::for_cores(2 * DriverPolicy::CORES_PER_DRIVER)
        } else {
            policy
        };
        Drivers {
            driving: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            device_thread: OnceLock::new(),
            policy,
            shared_until: AtomicU64::new(0),
            epoch: Instant::now(),
            spinning: AtomicUsize::new(0),
        }
    }
}

impl Drivers {
    /// Nanoseconds since `epoch`.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Spins up to `policy.reply_spin` for the reply on `receiver`, if fewer than
    /// `policy.max_spinning` callers spin already; the reply, if it came.
    pub(super) fn spin_for<T>(
        &self,
        receiver: &mut oneshot::Receiver<Result<T>>,
    ) -> Option<Result<T>> {
        if self.spinning.fetch_add(1, Ordering::AcqRel) >= self.policy.max_spinning {
            self.spinning.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let start = Instant::now();
        let mut reply = None;
        while reply.is_none() && start.elapsed() < self.policy.reply_spin {
            reply = ready(receiver);
            std::hint::spin_loop();
        }
        self.spinning.fetch_sub(1, Ordering::AcqRel);
        reply
    }

    /// Whether callers leave every tick to the device thread now (see `Drivers::shared_until`).
    pub(super) fn shared(&self) -> bool {
        self.policy.spare_cores && self.now() < self.shared_until.load(Ordering::Relaxed)
    }
}

/// A blocking caller's turn at driving the runtime; leaving wakes the device thread if it was
/// the last one.
pub(super) struct Driving<'a> {
    drivers: &'a Drivers,
    /// Whether the device thread may have work once this caller leaves (the default): the last
    /// driver to leave then wakes it. Where cores are plentiful, a caller that leaves nothing in
    /// flight and nothing queued lets it sleep out its `policy.quiet_poll` instead (a wake-up is a futex
    /// call on the caller's thread).
    pub(super) work_left: bool,
}

impl<'a> Driving<'a> {
    pub(super) fn enter(drivers: &'a Drivers) -> Driving<'a> {
        drivers.driving.fetch_add(1, Ordering::AcqRel);
        Driving {
            drivers,
            work_left: true,
        }
    }
}

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        // Where cores are few the device thread parks for long while callers drive (it does not
        // poll): it is always woken.
        if self.drivers.driving.fetch_sub(1, Ordering::AcqRel) == 1
            && (self.work_left || !self.drivers.policy.spare_cores)
            && let Some(thread) = self.drivers.device_thread.get()
        {
            thread.unpark();
        }
    }
}

/// A blocking caller's wait for its reply, counted so that a caller knows whether others wait
/// too.
pub(super) struct Waiting<'a> {
    drivers: &'a Drivers,
    /// Whether fewer than `Drivers::max_drivers` other callers were waiting when this one came
    /// (on few cores: whether none was): it may drive.
    pub(super) may_drive: bool,
}

impl<'a> Waiting<'a> {
    pub(super) fn enter(drivers: &'a Drivers) -> Waiting<'a> {
        let others = drivers.waiting.fetch_add(1, Ordering::AcqRel);
        if others > 0 && drivers.policy.spare_cores {
            let hold = drivers.policy.shared_hold.as_nanos() as u64;
            let until = drivers.now().saturating_add(hold);
            drivers.shared_until.fetch_max(until, Ordering::Relaxed);
        }
        Waiting {
            drivers,
            may_drive: others < drivers.policy.max_drivers && !drivers.shared(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.drivers.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The reply, if it came; a dropped sender is `Error::Disconnected`.
pub(super) fn ready<T>(receiver: &mut oneshot::Receiver<Result<T>>) -> Option<Result<T>> {
    match receiver.try_recv() {
        Ok(Some(reply)) => Some(reply),
        Ok(None) => None,
        Err(oneshot::Canceled) => Some(Err(Error::Disconnected)),
    }
}
