//! How a sim device behaves: [`SimConfig`], its ordering model and its costs.

use crate::{CostModel, FaultPlan, SimLink};
use gpuworld_hal::kernel::KernelDef;

/// The virtual device time, in nanoseconds, of one launch of a kernel over a cube count.
pub type KernelCost = fn(&KernelDef, [u32; 3]) -> u64;

/// How the virtual device orders work across streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimModel {
    /// Each stream is a queue of its own; waits on other streams' events order them (CUDA-like).
    Events,
    /// Every stream feeds one device queue in submission order; waits are implied (wgpu-like).
    SingleQueue,
}

/// How the virtual device behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SimConfig {
    /// How work of different streams is ordered.
    pub model: SimModel,
    /// Ticks between a submission and its completion.
    pub latency_ticks: u64,
    /// Device memory in bytes; allocations beyond it fail.
    pub memory_bytes: u64,
    /// Whether calls are recorded in the log.
    pub record: bool,
    /// Virtual cost of each launch; when set, a virtual device clock advances by it as launches
    /// complete and [`DeviceTiming::device_clock`](gpuworld_hal::backend::DeviceTiming::device_clock)
    /// reports it (deterministic timings for autotune).
    pub kernel_cost: Option<KernelCost>,
    /// Faults to inject (none by default).
    pub faults: FaultPlan,
    /// Virtual durations of launches and copies, and a timeline of the work
    /// ([`SimBackend::timeline`](crate::SimBackend::timeline)); when set and `kernel_cost` is not,
    /// [`DeviceTiming::device_clock`](gpuworld_hal::backend::DeviceTiming::device_clock) reports
    /// the timeline's end and `profile()` times work by this model.
    pub costs: Option<CostModel>,
    /// Virtual cost of copies between host and device (writes, reads: what transfers between
    /// sim devices and host collectives are made of); when set, the virtual device clock
    /// advances by it as copies complete.
    pub link: Option<SimLink>,
    /// Which virtual device this is: its index in its `DeviceId` (0 by default).
    pub device: u32,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl SimConfig {
    /// This configuration with [`model`](Self::model) set to `model`.
    #[must_use]
    pub fn with_model(mut self, model: SimModel) -> Self {
        self.model = model;
        self
    }

    /// This configuration with [`latency_ticks`](Self::latency_ticks) set to `latency_ticks`.
    #[must_use]
    pub fn with_latency_ticks(mut self, latency_ticks: u64) -> Self {
        self.latency_ticks = latency_ticks;
        self
    }

    /// This configuration with [`device`](Self::device) set to `device`.
    #[must_use]
    pub fn with_device(mut self, device: u32) -> Self {
        self.device = device;
        self
    }

    /// This configuration with [`memory_bytes`](Self::memory_bytes) set to `memory_bytes`.
    #[must_use]
    pub fn with_memory_bytes(mut self, memory_bytes: u64) -> Self {
        self.memory_bytes = memory_bytes;
        self
    }

    /// This configuration with [`record`](Self::record) set to `record`.
    #[must_use]
    pub fn with_record(mut self, record: bool) -> Self {
        self.record = record;
        self
    }

    /// This configuration with [`kernel_cost`](Self::kernel_cost) set to `kernel_cost`.
    #[must_use]
    pub fn with_kernel_cost(mut self, kernel_cost: Option<KernelCost>) -> Self {
        self.kernel_cost = kernel_cost;
        self
    }

    /// This configuration with [`faults`](Self::faults) set to `faults`.
    #[must_use]
    pub fn with_faults(mut self, faults: FaultPlan) -> Self {
        self.faults = faults;
        self
    }

    /// This configuration with [`costs`](Self::costs) set to `costs`.
    #[must_use]
    pub fn with_costs(mut self, costs: Option<CostModel>) -> Self {
        self.costs = costs;
        self
    }

    /// This configuration with [`link`](Self::link) set to `link`.
    #[must_use]
    pub fn with_link(mut self, link: Option<SimLink>) -> Self {
        self.link = link;
        self
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: SimModel::Events,
            latency_ticks: 1,
            memory_bytes: 1 << 30,
            record: true,
            kernel_cost: None,
            faults: FaultPlan::default(),
            costs: None,
            link: None,
            device: 0,
        }
    }
}
