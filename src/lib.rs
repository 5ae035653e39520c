//! gpuworld: a GPU compute runtime whose whole state is a `bevy_ecs` World, advanced one tick at
//! a time by an ordered schedule of systems.
//!
//! ```
//! use gpuworld::{Bindings, ComputeClient, CubeCount, Driver, library};
//!
//! let client = gpuworld::cpu_client(Driver::Manual)?;
//! let input = client.create_from_slice(bytemuck::cast_slice(&[1.0f32, 2.0, 3.0, 4.0]));
//! let output = client.empty(16);
//! let bindings = Bindings::new().buffer(&input).buffer(&output).scalar_f32(10.0);
//! client.launch(&library::SCALE, CubeCount::new_1d(1), bindings)?;
//! let values: Vec<f32> = client.read_one_as(&output)?;
//! assert_eq!(values, [10.0, 20.0, 30.0, 40.0]);
//! # Ok::<(), gpuworld::Error>(())
//! ```

#[cfg(feature = "bevy")]
pub mod bevy;
pub mod checkpoint;
mod client;
pub mod collective;
pub mod config;
mod devices;
pub mod distributed;
pub mod testing;
pub mod tune;

#[cfg(feature = "wgpu")]
pub use client::RenderLease;
pub use client::{
    Bindings, ComputeClient, Driver, FrameGraph, FrameMode, Graph, Leasable, Lease,
    ProfileDuration, ReadTicket, ReplyFuture, ResourceGuard, TensorDesc, TensorHandle,
};
#[cfg(feature = "cpu")]
pub use devices::cpu_clients;
pub use devices::{devices, sim_clients};
pub use gpuworld_sim::{SimBackend, SimCall, SimConfig, SimLink, SimModel};
pub use gpuworld_systems::backend::NativeResource;
/// The error of each domain ([`error::MemoryError`], ...) that [`Error`] composes.
pub use gpuworld_systems::error;
pub use gpuworld_systems::memory::{
    AllocationMode, CachePolicy, MemoryConfig, PoolConfig, PoolKind, PoolReport, TensorLayout,
};
pub use gpuworld_systems::open::{BackendSettings, DeviceId, DeviceInfo, OpenBackend};
pub use gpuworld_systems::published::InFlight;
pub use gpuworld_systems::trace::{KernelStat, KernelTimes, Trace, TraceClock};
pub use gpuworld_systems::{
    Backend, Binding, CpuSource, CubeCount, DeviceProperties, Error, ErrorKind, ExecutionMode,
    Handle, HandleId, HostBytes, HostRecords, Kernel, KernelDef, MemoryUsage, Param, Result,
    Runtime, RuntimeConfig, RuntimeId, SchedulingStrategy, Signature, StreamId, StreamState, func,
    kernel, kernels, library,
};

#[cfg(feature = "cpu")]
pub use gpuworld_cpu::{CpuBackend, CpuConfig, HostWords};
#[cfg(feature = "wgpu")]
pub use gpuworld_wgpu::{
    AdapterSelection, AdapterSummary, HostTraffic, KernelTiming, LimitShortfall, SharedDeviceError,
    WgpuBackend, WgpuConfig, WgslSource, list_adapters as wgpu_adapters,
    required_limits as wgpu_required_limits, wgpu, with_device_lifecycle as wgpu_device_lifecycle,
};

#[cfg(feature = "cuda")]
pub use gpuworld_cuda::{
    CompileStats, CudaBackend, CudaConfig, CudaSource, availability as cuda_availability, cudarc,
};

/// The text backend `B` compiles for `kernel`: the declarations generated from its signature,
/// then its source (`kernel_source_text::<WgpuBackend>(&KERNEL)`), for reading a compile
/// error's context; `None` for backends that compile no text (cpu, sim) or without a source.
pub fn kernel_source_text<B: Backend>(kernel: &KernelDef) -> Option<String> {
    B::generated_text(kernel)
}

/// A client of a new runtime on the CPU backend: [`ComputeClient::open`] with the default
/// [`CpuConfig`], so the scheduler and memory settings of `gpuworld.toml` and `GPUWORLD_*` apply,
/// the cpu device's memory limit included (see [`config`]).
#[cfg(feature = "cpu")]
pub fn cpu_client(driver: Driver) -> Result<ComputeClient<CpuBackend>> {
    ComputeClient::open(CpuConfig::default(), driver)
}

/// Tasks a wgpu stream queues before they are recorded, when nothing forces them earlier.
#[cfg(feature = "wgpu")]
pub const WGPU_MAX_TASKS: usize = gpuworld_wgpu::MAX_TASKS;

/// A client of a new runtime on the wgpu device `config` selects, ticked by a device thread:
/// [`ComputeClient::open`] with `Driver::DeviceThread`.
#[cfg(feature = "wgpu")]
pub fn wgpu_client(config: WgpuConfig) -> Result<ComputeClient<WgpuBackend>> {
    ComputeClient::open(config, Driver::DeviceThread)
}

/// Like [`wgpu_client`], advanced by `driver`: [`ComputeClient::open`].
#[cfg(feature = "wgpu")]
pub fn wgpu_client_with(config: WgpuConfig, driver: Driver) -> Result<ComputeClient<WgpuBackend>> {
    ComputeClient::open(config, driver)
}

/// A client of a new runtime on a wgpu device the caller already opened (a renderer's),
/// advanced by `driver`: gpuworld submits on `queue`, so its work and the caller's run in
/// submission order (docs/render.md). The scheduler and memory settings of `gpuworld.toml` and
/// `GPUWORLD_*` apply as in [`ComputeClient::open`]. `DeviceError::BackendUnavailable` naming
/// each limit the device lacks ([`WgpuBackend::on_device`] gives the typed
/// [`SharedDeviceError`]); `ConfigError::InvalidSetting` when the configuration cannot be read.
#[cfg(feature = "wgpu")]
pub fn wgpu_client_on_device(
    adapter: &wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
    config: WgpuConfig,
    driver: Driver,
) -> Result<ComputeClient<WgpuBackend>> {
    let settings = config::Settings::load()?;
    let backend = WgpuBackend::on_device(adapter, device, queue, config)?;
    let runtime = settings.runtime_config(
        &Backend::properties(&backend),
        gpuworld_systems::RuntimeConfig::for_backend::<WgpuBackend>(),
    );
    Ok(ComputeClient::new(backend, runtime, driver))
}

/// Tasks a cuda stream queues before they are submitted, when nothing forces them earlier.
#[cfg(feature = "cuda")]
pub const CUDA_MAX_TASKS: usize = gpuworld_cuda::MAX_TASKS;

/// A client of a new runtime on the CUDA device `config` names, ticked by a device thread:
/// [`ComputeClient::open`] with `Driver::DeviceThread`.
#[cfg(feature = "cuda")]
pub fn cuda_client(config: CudaConfig) -> Result<ComputeClient<CudaBackend>> {
    ComputeClient::open(config, Driver::DeviceThread)
}

/// Like [`cuda_client`], advanced by `driver`: [`ComputeClient::open`].
#[cfg(feature = "cuda")]
pub fn cuda_client_with(config: CudaConfig, driver: Driver) -> Result<ComputeClient<CudaBackend>> {
    ComputeClient::open(config, driver)
}

/// A client of a new runtime on the sim backend, ticked by hand: [`ComputeClient::open`] with
/// `Driver::Manual` (the sim reads no configuration file).
pub fn sim_client(config: SimConfig) -> Result<ComputeClient<SimBackend>> {
    ComputeClient::open(config, Driver::Manual)
}

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
