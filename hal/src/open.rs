//! One entry point per backend: [`OpenBackend`] opens a device of a backend from its own
//! configuration and lists the devices it finds, so the client crate opens every backend, and
//! lists every device, through one trait and knows no backend by name.

use crate::backend::{Backend, DeviceProperties};
use crate::error::Result;
use std::fmt;

/// A device: its backend's name and its index among that backend's devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// The backend ([`Kernels::NAME`](crate::backend::Kernels::NAME): `"cpu"`, `"sim"`, `"wgpu"`,
    /// `"cuda"`).
    pub backend: &'static str,
    /// The device's index: a cpu or sim device's number, a wgpu adapter's index in
    /// `wgpu_adapters`, a CUDA ordinal.
    pub index: u32,
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend, self.index)
    }
}

/// A device found by [`OpenBackend::enumerate`].
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Which device.
    pub id: DeviceId,
    /// What it offers, or why it could not be opened to ask.
    pub properties: Result<DeviceProperties>,
    /// Backend-specific facts in one line (adapter type and driver, compute capability).
    pub detail: String,
}

/// What the configuration file and environment (`gpuworld.toml`, `GPUWORLD_*`) say about one
/// backend's devices, for [`OpenBackend::open`] to apply where its configuration leaves the
/// choice open. The scheduler and memory-pool settings are not here: the client applies those
/// to every backend alike.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendSettings {
    /// The most memory the device may allocate: `Some(Some(bytes))`, `Some(None)` for no limit
    /// but the host's, `None` for the backend's default (`[cpu] memory_limit`).
    pub memory_limit: Option<Option<u64>>,
}

impl BackendSettings {
    /// Settings with `memory_limit` given.
    pub fn with_memory_limit(limit: Option<u64>) -> BackendSettings {
        BackendSettings {
            memory_limit: Some(limit),
        }
    }
}

/// A backend that opens its own devices: how `ComputeClient::open` and `gpuworld::devices`
/// reach every backend, built in or in a crate of its own.
pub trait OpenBackend: Backend + Sized {
    /// What selects a device of this backend and how it is opened (`SimConfig`, `CpuConfig`,
    /// `WgpuConfig`, `CudaConfig`).
    type Config: Default + Send + 'static;
    /// Whether clients of this backend take the configuration file's and environment's
    /// settings; `false` for a backend whose runs must depend on the program alone (the sim).
    const READS_SETTINGS: bool = true;

    /// The configuration that selects device `index`, the rest default.
    fn device_config(index: u32) -> Self::Config;
    /// Opens the device `config` selects, taking `settings` where `config` leaves a choice to them;
    /// `DeviceError::NoSuchDevice` for a device that is not there,
    /// `DeviceError::BackendUnavailable` when the backend cannot run here,
    /// `ConfigError::InvalidSetting` for a configuration it refuses.
    fn open(config: Self::Config, settings: &BackendSettings) -> Result<Self>;
    /// Every device of this backend on this machine, in index order; empty when it has none.
    fn enumerate() -> Vec<DeviceInfo>;
    /// How the runtime best batches and submits this backend's streams, before the
    /// configuration's settings.
    fn scheduling() -> SchedulingDefaults {
        SchedulingDefaults::default()
    }
}

/// How streams are batched and submitted. Exhaustive: the runtime's interleave stage handles
/// every variant, so a new one is a change to both crates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulingStrategy {
    /// Round-robin over ready streams, one task each.
    Interleave,
    /// Each ready stream's queue whole, one stream after another.
    Sequential,
}

/// The scheduler settings a backend runs best with ([`OpenBackend::scheduling`]): the runtime
/// starts from these, and the configuration file and environment may override them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulingDefaults {
    /// A stream's queue is submitted once it holds this many tasks.
    pub max_tasks: usize,
    /// Submission order across ready streams.
    pub strategy: SchedulingStrategy,
}

impl Default for SchedulingDefaults {
    /// One task per submission, streams interleaved.
    fn default() -> Self {
        SchedulingDefaults {
            max_tasks: 1,
            strategy: SchedulingStrategy::Interleave,
        }
    }
}

impl SchedulingDefaults {
    /// These defaults with [`max_tasks`](Self::max_tasks) set to `max_tasks`.
    #[must_use]
    pub fn with_max_tasks(mut self, max_tasks: usize) -> Self {
        self.max_tasks = max_tasks;
        self
    }

    /// These defaults with [`strategy`](Self::strategy) set to `strategy`.
    #[must_use]
    pub fn with_strategy(mut self, strategy: SchedulingStrategy) -> Self {
        self.strategy = strategy;
        self
    }
}
