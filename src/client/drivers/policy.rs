//! When the threads that drive a runtime spin, park or sleep: one policy, chosen once from the
//! host's core count. Each number says what it trades and the measurement behind it (issue 31).
//!
//! Two regimes. On **few cores** (fewer than [`DriverPolicy::SPARE_CORES`]) a spinning thread
//! takes the core the device's own work (the cpu backend's workers) or the caller needs: the
//! device thread spins briefly, parks while callers drive, and one caller drives at a time.
//! With **spare cores**, spinning is cheaper than a wake-up (a futex call, 2–4 µs on the H100
//! host): the device thread spins longer for work, callers spin for replies, and callers that
//! wait together leave every tick to the device thread.

use std::time::Duration;

/// How the device thread and blocking callers share the driving of one runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DriverPolicy {
    /// Whether the host has spare cores (see the module header): the device thread then polls
    /// every [`quiet_poll`](Self::quiet_poll) while callers drive, instead of sleeping.
    pub(crate) spare_cores: bool,
    /// How many blocking callers may drive (or spin to drive) at once: one where cores are few;
    /// with spare cores, one per [`DriverPolicy::CORES_PER_DRIVER`] cores, so that a second
    /// caller spins for the runtime instead of sleeping for its reply (a wake-up per round trip
    /// made two callers slower than one on CUDA).
    pub(crate) max_drivers: usize,
    /// The most callers that may spin for their replies at once: a quarter of the cores, so that
    /// spinners leave the device thread (and the cpu backend's stream workers) their cores. With
    /// 32 callers each spinning, the cpu backend on 16 cores did half the round trips. None
    /// spin where cores are few.
    pub(crate) max_spinning: usize,
    /// How long the device thread spins for new commands after activity before it sleeps; an
    /// idle runtime costs nothing beyond this. With spare cores, longer than a round trip's gap
    /// in a loop of them, so a command rarely pays the wake-up on the caller's thread.
    pub(crate) device_thread_spin: Duration,
    /// While callers drive, and after they drove until the next command, how often the device
    /// thread looks at the runtime (spare cores; where cores are few it sleeps
    /// [`device_thread_idle`](Self::device_thread_idle)). Spinning beside a lone caller kept the
    /// lines it writes moving between two cores: the CUDA round trip took 1.31–1.33x raw with
    /// the device thread against 1.23–1.30x with this poll. A caller that leaves work behind
    /// wakes it at once.
    pub(crate) quiet_poll: Duration,
    /// How long the device thread holds back from fresh commands for a blocking caller to take
    /// them in its own tick; a batch of non-blocking commands starts this much later.
    pub(crate) device_thread_linger: Duration,
    /// How long the idle device thread sleeps when nothing wakes it: a lost wake-up costs at
    /// most this.
    pub(crate) device_thread_idle: Duration,
    /// Beside a device thread, the longest whoever ticks blocks on the device between ticks,
    /// holding the runtime lock: commands that arrive meanwhile wait at most this long.
    pub(crate) device_wait_slice: Duration,
    /// The longest the manual driver blocks on the device between two ticks, holding the
    /// runtime lock; short, because other threads may want to tick meanwhile.
    pub(crate) manual_device_wait: Duration,
    /// How long a blocking caller spins for its reply while another thread holds the runtime,
    /// before it sleeps (waking a sleeping thread costs several microseconds).
    pub(crate) caller_spin: Duration,
    /// With spare cores, how long a caller that leaves ticking to the device thread spins for
    /// its reply before it sleeps: a round trip the device thread answers takes tens of
    /// microseconds, and a wake-up costs several.
    pub(crate) reply_spin: Duration,
    /// With spare cores, how long after two blocking callers last waited at once that callers
    /// leave every tick to the device thread. Callers that took turns at ticking moved the
    /// runtime's state from core to core with every tick: on CUDA, two callers did 0.8–0.9x one
    /// caller's round trips however they waited, and 1.0–1.05x with every tick on the device
    /// thread.
    pub(crate) shared_hold: Duration,
}

impl DriverPolicy {
    /// The fewest cores that count as spare: the device thread then spins rather than parks
    /// while callers drive, and spins longer for work.
    pub(crate) const SPARE_CORES: usize = 4;
    /// Cores per blocking caller that may drive the runtime at once (with spare cores).
    pub(crate) const CORES_PER_DRIVER: usize = 8;

    /// The policy for a host with `cores` cores.
    pub(crate) fn for_cores(cores: usize) -> DriverPolicy {
        let spare_cores = cores >= Self::SPARE_CORES;
        DriverPolicy {
            spare_cores,
            max_drivers: if spare_cores {
                (cores / Self::CORES_PER_DRIVER).max(1)
            } else {
                1
            },
            max_spinning: if spare_cores { (cores / 4).max(1) } else { 0 },
            device_thread_spin: if spare_cores {
                Duration::from_micros(250)
            } else {
                Duration::from_micros(50)
            },
            quiet_poll: Duration::from_micros(50),
            device_thread_linger: Duration::from_micros(5),
            device_thread_idle: Duration::from_millis(20),
            device_wait_slice: Duration::from_micros(50),
            manual_device_wait: Duration::from_micros(200),
            caller_spin: Duration::from_micros(50),
            reply_spin: Duration::from_micros(200),
            shared_hold: Duration::from_millis(2),
        }
    }

    /// The policy for this host's cores.
    pub(crate) fn for_this_host() -> DriverPolicy {
        Self::for_cores(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::DriverPolicy;

    #[test]
    fn few_cores_let_one_caller_drive_and_none_spin() {
        for cores in 1..DriverPolicy::SPARE_CORES {
            let policy = DriverPolicy::for_cores(cores);
            assert!(!policy.spare_cores);
            assert_eq!((policy.max_drivers, policy.max_spinning), (1, 0));
        }
    }

    #[test]
    fn spare_cores_let_callers_drive_and_spin_in_proportion() {
        let policy = DriverPolicy::for_cores(16);
        assert!(policy.spare_cores);
        assert_eq!((policy.max_drivers, policy.max_spinning), (2, 4));
        assert!(policy.device_thread_spin > DriverPolicy::for_cores(2).device_thread_spin);
        assert_eq!(DriverPolicy::for_cores(4).max_drivers, 1);
    }
}
