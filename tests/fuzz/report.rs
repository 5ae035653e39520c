//! What a fuzzing run reports: the last operations (for a failure, and for the watchdog that
//! tells a hang from slow progress) and a tally of what it checked.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// The last operations of a run, for the failure report, and how many ran (for the watchdog);
/// with `trace`, every operation is also printed as it starts.
#[derive(Default)]
pub struct OpLog {
    tail: Mutex<VecDeque<String>>,
    count: AtomicU64,
    trace: bool,
}

/// Operations the failure report shows.
const LOG_TAIL: usize = 40;

impl OpLog {
    /// A log that prints every operation as it starts when `trace`.
    pub fn new(trace: bool) -> OpLog {
        OpLog {
            trace,
            ..OpLog::default()
        }
    }

    /// Records `entry` as the latest operation.
    pub fn record(&self, entry: String) {
        if self.trace {
            eprintln!("{entry}");
        }
        let mut tail = self.tail.lock();
        if tail.len() == LOG_TAIL {
            tail.pop_front();
        }
        tail.push_back(entry);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Operations recorded so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The last operations, one a line.
    pub fn tail(&self) -> String {
        let tail = self.tail.lock();
        tail.iter().map(|entry| format!("  {entry}\n")).collect()
    }
}

/// What a run checked, for the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    pub reads: u64,
    pub bytes_compared: u64,
    pub launches: u64,
    pub refusals: u64,
    pub faults: u64,
    pub releases: u64,
    /// Leases taken, and leases checked.
    pub leases: u64,
    pub lease_checks: u64,
    /// Live allocations compactions moved.
    pub moves: u64,
}

impl Tally {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Tally) {
        self.reads += other.reads;
        self.bytes_compared += other.bytes_compared;
        self.launches += other.launches;
        self.refusals += other.refusals;
        self.faults += other.faults;
        self.releases += other.releases;
        self.leases += other.leases;
        self.lease_checks += other.lease_checks;
        self.moves += other.moves;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} reads ({} MiB compared), {} launches, {} misuses refused, {} faults reported, \
             {} handles released, {} leases ({} checked), {} allocations moved",
            self.reads,
            self.bytes_compared >> 20,
            self.launches,
            self.refusals,
            self.faults,
            self.releases,
            self.leases,
            self.lease_checks,
            self.moves
        )
    }
}
