//! The sim's virtual-time cost model: what each launch and copy costs in virtual nanoseconds,
//! and a timeline per device queue on which work starts when its queue is free and every event it
//! waits on has passed. Two streams with no waits between them overlap; a wait serializes. A test
//! checks an overlap or a scheduling decision by reading the timeline, with no wall clock.

use std::collections::HashMap;

/// The cost of one kernel's launch: `fixed + per_cube × cubes + per_byte × bound bytes`, in
/// virtual nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelRate {
    /// Per launch.
    pub fixed_ns: u64,
    /// Per cube launched.
    pub per_cube_ns: u64,
    /// Per byte of the buffers bound.
    pub per_byte_ns: u64,
}

impl KernelRate {
    /// The cost of a launch of `cubes` cubes over `bytes` bound bytes.
    pub fn cost(&self, cubes: u64, bytes: u64) -> u64 {
        self.fixed_ns
            .saturating_add(self.per_cube_ns.saturating_mul(cubes))
            .saturating_add(self.per_byte_ns.saturating_mul(bytes))
    }
}

/// Virtual costs of the sim's work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CostModel {
    /// Cost of kernels with no rate of their own.
    pub default_kernel: KernelRate,
    /// Rates by kernel id (`"gpuworld.fill"`).
    pub kernels: HashMap<&'static str, KernelRate>,
    /// Virtual nanoseconds per byte copied between host and device, or within the device.
    pub copy_ns_per_byte: u64,
}

impl CostModel {
    /// A model where launches of `kernel` cost `rate`.
    pub fn with_kernel(mut self, kernel: &'static str, rate: KernelRate) -> CostModel {
        self.kernels.insert(kernel, rate);
        self
    }

    /// The rate of the kernel with id `kernel`.
    pub fn rate(&self, kernel: &str) -> KernelRate {
        self.kernels
            .get(kernel)
            .copied()
            .unwrap_or(self.default_kernel)
    }
}

/// One piece of work on the virtual timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// The stream that submitted it (`s0`).
    pub stream: String,
    /// What ran (`launch fill`, `write 1024B`, `read 1024B`).
    pub what: String,
    /// Virtual start, in nanoseconds.
    pub start_ns: u64,
    /// Virtual end, in nanoseconds.
    pub end_ns: u64,
}

impl Span {
    /// Whether the two spans ran at the same virtual time.
    pub fn overlaps(&self, other: &Span) -> bool {
        self.start_ns < other.end_ns && other.start_ns < self.end_ns
    }
}

/// The timeline: when each queue is next free and when each of its operations ended.
#[derive(Debug, Default)]
pub(super) struct Timeline {
    /// Per queue: end time of each completed operation, in order (index = ops - 1).
    ends: Vec<Vec<u64>>,
    pub(super) spans: Vec<Span>,
}

impl Timeline {
    /// When operation `ops` of `queue` ended (0 for none, or one not yet run).
    pub(super) fn event_time(&self, queue: usize, ops: u64) -> u64 {
        if ops == 0 {
            return 0;
        }
        self.ends
            .get(queue)
            .and_then(|ends| ends.get(ops as usize - 1))
            .copied()
            .unwrap_or(0)
    }

    /// Runs the next operation of `queue`, which may start at `ready_ns` (its waits' events) and
    /// lasts `cost_ns`; its span is kept when `what` names it.
    pub(super) fn run(
        &mut self,
        queue: usize,
        ready_ns: u64,
        cost_ns: u64,
        span: Option<(String, String)>,
    ) {
        if self.ends.len() <= queue {
            self.ends.resize_with(queue + 1, Vec::new);
        }
        let free = self.ends[queue].last().copied().unwrap_or(0);
        let start = free.max(ready_ns);
        let end = start.saturating_add(cost_ns);
        self.ends[queue].push(end);
        if let Some((stream, what)) = span {
            self.spans.push(Span {
                stream,
                what,
                start_ns: start,
                end_ns: end,
            });
        }
    }

    /// The end of the last operation on any queue.
    pub(super) fn makespan(&self) -> u64 {
        self.ends
            .iter()
            .filter_map(|ends| ends.last())
            .copied()
            .max()
            .unwrap_or(0)
    }
}
