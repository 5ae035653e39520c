//! Per-kernel statistics while enabled: launches, bytes bound and, where the backend times its
//! operations, every launch's device time (total, mean, p50, p99).

use crate::backend::{OpKind, OpTime};
use bevy_ecs::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// One kernel's launches so far.
#[derive(Debug, Default)]
struct KernelRecord {
    name: &'static str,
    launches: u64,
    bytes_bound: u64,
    /// Device time of each timed launch, in nanoseconds.
    durations: Vec<u64>,
}

/// Launch statistics by kernel id, gathered while enabled. Every timed launch's duration is
/// kept (8 bytes each), so that the percentiles are exact.
#[derive(Resource, Debug, Default)]
pub struct KernelStats {
    enabled: bool,
    kernels: BTreeMap<&'static str, KernelRecord>,
}

/// Device time of a kernel's launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelTimes {
    /// All launches together.
    pub total: Duration,
    /// Per launch, on average.
    pub mean: Duration,
    /// The median launch.
    pub p50: Duration,
    /// The 99th percentile launch.
    pub p99: Duration,
}

/// One kernel's statistics, as `kernel_stats()` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelStat {
    /// The kernel's id.
    pub id: &'static str,
    /// The kernel's name.
    pub name: &'static str,
    /// Launches run.
    pub launches: u64,
    /// Bytes bound by all launches together.
    pub bytes_bound: u64,
    /// Their device time; `None` where the backend cannot time launches.
    pub device_time: Option<KernelTimes>,
}

impl KernelStats {
    /// Whether launches are being counted.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Starts or stops counting; stopping keeps what was counted.
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Forgets what was counted.
    pub fn clear(&mut self) {
        self.kernels.clear();
    }

    /// Counts the launches among `submitted` (host-timed, so without device time) and `timed`
    /// (timed by the device).
    pub fn add(&mut self, submitted: &[OpTime], timed: &[OpTime]) {
        if !self.enabled {
            return;
        }
        for (op, is_timed) in submitted
            .iter()
            .map(|op| (op, false))
            .chain(timed.iter().map(|op| (op, true)))
        {
            let OpKind::Launch(kernel) = op.kind else {
                continue;
            };
            let record = self.kernels.entry(kernel.id).or_default();
            record.name = kernel.name;
            record.launches += 1;
            record.bytes_bound += op.bytes;
            if is_timed {
                record.durations.push(op.duration_ns());
            }
        }
    }

    /// Every kernel's statistics, by kernel id.
    pub fn report(&self) -> Vec<KernelStat> {
        self.kernels
            .iter()
            .map(|(&id, record)| KernelStat {
                id,
                name: record.name,
                launches: record.launches,
                bytes_bound: record.bytes_bound,
                device_time: times(&record.durations),
            })
            .collect()
    }
}

/// Total, mean and nearest-rank percentiles of `durations`; `None` when empty.
fn times(durations: &[u64]) -> Option<KernelTimes> {
    if durations.is_empty() {
        return None;
    }
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let total: u64 = sorted.iter().sum();
    let rank = |p: u64| {
        let index = (p * sorted.len() as u64).div_ceil(100).max(1) - 1;
        Duration::from_nanos(sorted[index as usize])
    };
    Some(KernelTimes {
        total: Duration::from_nanos(total),
        mean: Duration::from_nanos(total / sorted.len() as u64),
        p50: rank(50),
        p99: rank(99),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let durations: Vec<u64> = (1..=100).collect();
        let t = times(&durations).unwrap();
        assert_eq!(t.total, Duration::from_nanos(5050));
        assert_eq!(t.mean, Duration::from_nanos(50));
        assert_eq!(t.p50, Duration::from_nanos(50));
        assert_eq!(t.p99, Duration::from_nanos(99));
        assert_eq!(times(&[7]).unwrap().p99, Duration::from_nanos(7));
        assert!(times(&[]).is_none());
    }
}
