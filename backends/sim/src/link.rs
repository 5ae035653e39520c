//! The sim's host link: the virtual time a copy between host and device memory takes, which is
//! how transfers between sim devices (`to_client`) and host collectives cost time on the sim.

use gpuworld_hal::host_ops::HostOp;

/// A link between host and device with a fixed latency per copy and a bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimLink {
    /// Virtual nanoseconds every copy takes before its first byte moves.
    pub latency_ns: u64,
    /// Bytes per virtual second.
    pub bytes_per_second: u64,
}

impl SimLink {
    /// A PCIe 4.0 x16-like link: 2 µs per copy, 25 GB/s.
    pub const PCIE4: SimLink = SimLink {
        latency_ns: 2_000,
        bytes_per_second: 25_000_000_000,
    };

    /// Virtual nanoseconds a copy of `bytes` takes.
    pub fn copy_ns(&self, bytes: u64) -> u64 {
        let moving = u128::from(bytes) * 1_000_000_000 / u128::from(self.bytes_per_second.max(1));
        self.latency_ns
            .saturating_add(u64::try_from(moving).unwrap_or(u64::MAX))
    }

    /// The virtual time `op` spends on the link: a write's or read's copy, nothing else.
    pub fn cost_of(&self, op: &HostOp) -> u64 {
        match op {
            HostOp::Write { data, .. } => self.copy_ns(data.len() as u64),
            HostOp::Read { src, .. } => self.copy_ns(src.size),
            _ => 0,
        }
    }
}
