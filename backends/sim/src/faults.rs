//! Fault injection for the sim backend: a plan names which call fails (the n-th allocation,
//! launch, copy or event, an event that never completes, the device lost), chosen by hand or from
//! a seed, and the sim counts its calls to fire each fault exactly once, deterministically.
//!
//! What each fault does to the device, and so which call of the user sees it:
//! - an allocation: the device refuses it, and every allocation for the rest of that tick (the
//!   pool's retry after cleanup included): uses of the handle report `MemoryError::OutOfMemory`;
//! - a launch or a copy (write, read or device-to-device copy): the operation does not run and
//!   faults its stream: the stream's next read or sync reports `ExecutionError::DeviceFault`;
//! - an event: recording it fails: the flushed stream faults, the event still passes;
//! - an event that never completes: the operation before it hangs until the device's watchdog
//!   fires `watchdog_ticks` later, which faults its stream and lets the queue go on;
//! - the device lost, from a tick on: allocations are refused, every queued or later operation
//!   faults its stream instead of running, and events pass, so memory can still be reclaimed.

use gpuworld_hal::host_ops::HostOp;
use std::collections::HashMap;

/// One fault of a [`FaultPlan`]; counts start at 1 (the first call of its kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// The n-th device allocation is refused, and so is every other one in the same tick.
    Allocation(u64),
    /// The n-th launch faults its stream instead of running.
    Launch(u64),
    /// The n-th copy (host-to-device write, device-to-host read or device-to-device copy)
    /// faults its stream.
    Copy(u64),
    /// Recording the n-th event (a flush) fails: its stream faults.
    Event(u64),
    /// The n-th event with work before it never completes on its own (see the module's notes).
    EventNeverCompletes(u64),
    /// The device is lost at the start of this tick.
    DeviceLost {
        /// The first tick without a device.
        tick: u64,
    },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Allocation(n) => write!(f, "allocation {n} refused"),
            Fault::Launch(n) => write!(f, "launch {n} faults"),
            Fault::Copy(n) => write!(f, "copy {n} faults"),
            Fault::Event(n) => write!(f, "event {n} fails"),
            Fault::EventNeverCompletes(n) => write!(f, "event {n} never completes"),
            Fault::DeviceLost { tick } => write!(f, "device lost at tick {tick}"),
        }
    }
}

/// How many calls of each kind a program made on the sim: the failure points a sweep can try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Device allocations.
    pub allocations: u64,
    /// Launches.
    pub launches: u64,
    /// Writes, reads and device-to-device copies.
    pub copies: u64,
    /// Events with work before them (flushes of non-empty streams).
    pub events: u64,
    /// Ticks run.
    pub ticks: u64,
}

impl CallCounts {
    /// Every single fault this program can meet: each allocation, launch, copy and event
    /// failing, each event never completing, and the device lost at each tick.
    pub fn every_fault(&self) -> Vec<Fault> {
        let mut faults = Vec::new();
        faults.extend((1..=self.allocations).map(Fault::Allocation));
        faults.extend((1..=self.launches).map(Fault::Launch));
        faults.extend((1..=self.copies).map(Fault::Copy));
        faults.extend((1..=self.events).map(Fault::Event));
        faults.extend((1..=self.events).map(Fault::EventNeverCompletes));
        faults.extend((1..=self.ticks).map(|tick| Fault::DeviceLost { tick }));
        faults
    }
}

/// The faults the sim injects.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultPlan {
    /// The faults, each fired once.
    pub faults: Vec<Fault>,
    /// Ticks a hung operation waits before the device's watchdog faults its stream.
    pub watchdog_ticks: u64,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl FaultPlan {
    /// This configuration with [`faults`](Self::faults) set to `faults`.
    #[must_use]
    pub fn with_faults(mut self, faults: Vec<Fault>) -> Self {
        self.faults = faults;
        self
    }

    /// This configuration with [`watchdog_ticks`](Self::watchdog_ticks) set to `watchdog_ticks`.
    #[must_use]
    pub fn with_watchdog_ticks(mut self, watchdog_ticks: u64) -> Self {
        self.watchdog_ticks = watchdog_ticks;
        self
    }
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            faults: Vec::new(),
            watchdog_ticks: 8,
        }
    }
}

impl FaultPlan {
    /// A plan of one fault.
    pub fn one(fault: Fault) -> FaultPlan {
        FaultPlan {
            faults: vec![fault],
            ..FaultPlan::default()
        }
    }

    /// A plan of `count` faults drawn from `seed` among the failure points of `calls`: the same
    /// seed and counts give the same plan on every machine.
    pub fn seeded(seed: u64, calls: &CallCounts, count: usize) -> FaultPlan {
        let points = calls.every_fault();
        let mut state = seed;
        let faults = (0..count)
            .filter_map(|_| {
                let index = splitmix64(&mut state) % (points.len().max(1) as u64);
                points.get(index as usize).copied()
            })
            .collect();
        FaultPlan {
            faults,
            ..FaultPlan::default()
        }
    }
}

/// A small, well-known generator (SplitMix64): deterministic and dependency-free.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fault the plan attached to an operation.
#[derive(Clone, Copy, Debug)]
pub(super) enum Injected {
    /// The operation does not run; its stream faults.
    Instead(&'static str),
    /// The operation runs; its stream faults.
    After(&'static str),
}

/// The sim's count of calls so far, and the faults it decided from the plan.
#[derive(Debug, Default)]
pub(super) struct FaultState {
    pub(super) plan: FaultPlan,
    pub(super) counts: CallCounts,
    /// The tick in which an allocation was refused: the rest of the tick refuses too.
    pub(super) refusing_in_tick: Option<u64>,
    pub(super) device_lost: bool,
    /// Operations that hang (queue, number) and the tick they began to.
    hung: HashMap<(usize, u64), u64>,
}

impl FaultState {
    pub(super) fn new(plan: FaultPlan) -> FaultState {
        FaultState {
            plan,
            ..FaultState::default()
        }
    }

    fn planned(&self, fault: Fault) -> bool {
        self.plan.faults.contains(&fault)
    }

    /// Counts a tick; whether the device is lost from now on.
    pub(super) fn tick(&mut self, tick: u64) -> bool {
        self.counts.ticks = self.counts.ticks.max(tick);
        if !self.device_lost
            && self
                .plan
                .faults
                .iter()
                .any(|f| matches!(f, Fault::DeviceLost { tick: t } if *t <= tick))
        {
            self.device_lost = true;
        }
        self.device_lost
    }

    /// Counts an allocation in `tick`; whether it is refused.
    pub(super) fn allocation(&mut self, tick: u64) -> bool {
        self.counts.allocations += 1;
        if self.refusing_in_tick == Some(tick)
            || self.device_lost
            || self.planned(Fault::Allocation(self.counts.allocations))
        {
            self.refusing_in_tick = Some(tick);
            return true;
        }
        false
    }

    /// Counts a launch; whether it faults.
    pub(super) fn launch(&mut self) -> bool {
        self.counts.launches += 1;
        self.planned(Fault::Launch(self.counts.launches))
    }

    /// Counts a copy; whether it faults.
    pub(super) fn copy(&mut self) -> bool {
        self.counts.copies += 1;
        self.planned(Fault::Copy(self.counts.copies))
    }

    /// Counts an event with work before it; whether recording it fails and whether it hangs.
    pub(super) fn event(&mut self) -> (bool, bool) {
        self.counts.events += 1;
        let n = self.counts.events;
        (
            self.planned(Fault::Event(n)),
            self.planned(Fault::EventNeverCompletes(n)),
        )
    }

    /// The fault the plan attaches to an operation being enqueued.
    pub(super) fn for_new(&mut self, kind: &HostOp) -> Option<Injected> {
        match kind {
            HostOp::Launch { .. } | HostOp::Replay { .. } => self
                .launch()
                .then_some(Injected::Instead("the launch failed (injected fault)")),
            HostOp::Write { .. } | HostOp::Read { .. } | HostOp::Copy { .. } => self
                .copy()
                .then_some(Injected::Instead("the copy failed (injected fault)")),
            HostOp::Wait { .. } => None,
        }
    }

    /// Counts the event after operation `op` of `queue`, still queued with `injected` attached,
    /// in `tick`, and applies the plan to it: recording it fails (the operation before it
    /// faults its stream) or it hangs.
    pub(super) fn after(
        &mut self,
        queue: usize,
        op: u64,
        tick: u64,
        injected: &mut Option<Injected>,
    ) {
        let (fails, hangs) = self.event();
        if fails && injected.is_none() {
            *injected = Some(Injected::After(
                "recording an event failed (injected fault)",
            ));
        }
        if hangs {
            self.hung.insert((queue, op), tick);
        }
    }

    /// Whether operation `op` of `queue`, hanging, may run at `tick` (its watchdog fired);
    /// `None` when it does not hang or the device is lost (a lost device runs everything, as
    /// faults).
    #[inline]
    pub(super) fn hang_over(&self, queue: usize, op: u64, tick: u64) -> Option<bool> {
        // Hashing the key costs more than the rest of this check: most runs hang nothing.
        if self.hung.is_empty() || self.device_lost {
            return None;
        }
        let since = self.hung.get(&(queue, op))?;
        Some(tick >= since + self.plan.watchdog_ticks)
    }

    /// The fault operation `op` of `queue` (a wait or not), taken off its queue to run with
    /// `injected` attached, ends in: the device's loss, its hang's watchdog, or what the plan
    /// attached to it.
    #[inline]
    pub(super) fn fault_of(
        &mut self,
        queue: usize,
        op: u64,
        wait: bool,
        injected: Option<Injected>,
    ) -> Option<Injected> {
        let hung = !self.hung.is_empty() && self.hung.remove(&(queue, op)).is_some();
        if self.device_lost && !wait {
            Some(Injected::Instead("the device was lost (injected fault)"))
        } else if hung {
            Some(Injected::Instead(
                "the work never completed; the watchdog fired (injected fault)",
            ))
        } else {
            injected
        }
    }
}
