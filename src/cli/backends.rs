//! The backends this binary knows by name: the `--backend` values, whether each one is built in,
//! and the device settings the CLI gives the ones that are.

use clap::ValueEnum;
use gpuworld::{DeviceProperties, SimConfig};

/// A backend named on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Host CPU, cubes spread over worker threads
    Cpu,
    /// Deterministic virtual device that runs the CPU kernels a tick late
    Sim,
    /// Vulkan, Metal or DX12 through wgpu (cargo feature `wgpu`)
    Wgpu,
    /// NVIDIA GPUs through the CUDA driver and NVRTC (cargo feature `cuda`)
    Cuda,
}

impl BackendKind {
    /// Every backend, in the order `info` lists them.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Cpu,
        BackendKind::Sim,
        BackendKind::Wgpu,
        BackendKind::Cuda,
    ];

    /// The name used on the command line and in messages.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Sim => "sim",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// The cargo feature that builds this backend in.
    pub fn feature(self) -> &'static str {
        self.name()
    }
}

/// A kind of wgpu adapter, as `--device-type` names it.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceTypeArg {
    /// A GPU of its own
    Discrete,
    /// A GPU sharing the CPU's memory
    Integrated,
    /// A device implemented in software on the CPU (such as lavapipe)
    Cpu,
    /// A virtualised GPU
    Virtual,
    /// Anything else
    Other,
}

/// The wgpu adapter the command line selects.
#[cfg(feature = "wgpu")]
pub fn wgpu_config(
    adapter: Option<usize>,
    device_type: Option<DeviceTypeArg>,
) -> gpuworld::WgpuConfig {
    use gpuworld::{AdapterSelection, wgpu::DeviceType};
    let adapter = match (adapter, device_type) {
        (Some(index), _) => AdapterSelection::Index(index),
        (None, Some(kind)) => AdapterSelection::Type(match kind {
            DeviceTypeArg::Discrete => DeviceType::DiscreteGpu,
            DeviceTypeArg::Integrated => DeviceType::IntegratedGpu,
            DeviceTypeArg::Cpu => DeviceType::Cpu,
            DeviceTypeArg::Virtual => DeviceType::VirtualGpu,
            DeviceTypeArg::Other => DeviceType::Other,
        }),
        (None, None) => AdapterSelection::Default,
    };
    gpuworld::WgpuConfig::default().with_adapter(adapter)
}

/// The sim device the CLI runs on.
pub fn sim_config() -> SimConfig {
    // The log grows by several entries per launch and nobody here reads it.
    SimConfig::default().with_record(false)
}

/// A device's name and memory, as `info` prints them.
pub fn describe_device(properties: &DeviceProperties) -> String {
    // Backends without a memory limit report u64::MAX rather than a real size.
    let memory = match properties.memory_bytes {
        u64::MAX => "unlimited".to_string(),
        bytes => crate::cli::summary::format_bytes(bytes),
    };
    format!("{}, memory {memory}", properties.name)
}
