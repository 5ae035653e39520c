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
mod client;
pub mod collective;
pub mod config;
mod devices;
pub mod testing;
pub mod tune;

pub use client::{
    Bindings, ComputeClient, Driver, ProfileDuration, ReadTicket, ReplyFuture, ResourceGuard,
    TensorDesc, TensorHandle,
};
#[cfg(feature = "cpu")]
pub use devices::cpu_clients;
pub use devices::{DeviceClient, DeviceId, DeviceInfo, device_client, devices, sim_clients};
pub use gpuworld_systems::memory::{
    AllocationMode, MemoryConfig, PoolConfig, PoolKind, PoolReport, TensorLayout,
};
pub use gpuworld_systems::published::InFlight;
pub use gpuworld_systems::sim::{SimBackend, SimCall, SimConfig, SimLink, SimModel};
pub use gpuworld_systems::trace::{KernelStat, KernelTimes, Trace, TraceClock};
pub use gpuworld_systems::{
    Backend, Binding, CpuSource, CubeCount, DeviceProperties, Error, ExecutionMode, Handle,
    HandleId, HostBytes, HostRecords, Kernel, KernelDef, MemoryUsage, Param, Result, Runtime,
    RuntimeConfig, RuntimeId, SchedulingStrategy, Signature, StreamId, StreamState, kernel,
    library,
};
pub use tune::{Tunable, TunableSet, TuneKey, TuneMode, TuneResult, Tuner, TunerConfig};

#[cfg(feature = "cpu")]
pub use gpuworld_cpu::CpuBackend;
#[cfg(feature = "wgpu")]
pub use gpuworld_wgpu::{
    AdapterSelection, AdapterSummary, KernelTiming, WgpuBackend, WgpuConfig, WgslSource,
    list_adapters as wgpu_adapters, wgpu,
};

#[cfg(feature = "cuda")]
pub use gpuworld_cuda::{
    CompileStats, CudaBackend, CudaConfig, CudaSource, availability as cuda_availability, cudarc,
};

/// A client of a new runtime on the CPU backend.
///
/// The scheduler and memory settings of `gpuworld.toml` and `GPUWORLD_*` apply, the cpu
/// device's memory limit included (see [`config`]); `Error::Config`, naming the file or variable
/// and what is wrong with it, when the configuration cannot be read.
#[cfg(feature = "cpu")]
pub fn cpu_client(driver: Driver) -> Result<ComputeClient<CpuBackend>> {
    let settings = config::Settings::load()?;
    let backend = CpuBackend::with_capacity(settings.cpu_memory_limit.value.capacity());
    let runtime = settings.runtime_config(&backend.properties(), RuntimeConfig::default());
    Ok(ComputeClient::new(backend, runtime, driver))
}

/// `base` with the scheduler and memory settings of the configuration file and environment
/// ([`config::Settings`]) for `backend`'s device.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn configured<B: Backend>(backend: &B, base: RuntimeConfig) -> Result<RuntimeConfig> {
    Ok(config::Settings::load()?.runtime_config(&backend.properties(), base))
}

/// A client over `backend` with up to `max_tasks` tasks batched per stream and streams
/// interleaved, unless the configuration ([`config`]) says otherwise.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_client<B: Backend>(
    backend: B,
    max_tasks: usize,
    driver: Driver,
) -> Result<ComputeClient<B>> {
    let base = RuntimeConfig::default()
        .with_max_tasks(max_tasks)
        .with_strategy(SchedulingStrategy::Interleave);
    let runtime = configured(&backend, base)?;
    Ok(ComputeClient::new(backend, runtime, driver))
}

/// Tasks a wgpu stream queues before they are recorded, when nothing forces them earlier.
#[cfg(feature = "wgpu")]
pub const WGPU_MAX_TASKS: usize = 16;

/// A client of a new runtime on the wgpu device `config` selects, ticked by a device thread, with
/// up to [`WGPU_MAX_TASKS`] tasks batched per stream and streams interleaved, unless the
/// configuration ([`config`]) says otherwise; `Error::BackendUnavailable` when no adapter is
/// found, `Error::Config` when the configuration cannot be read.
#[cfg(feature = "wgpu")]
pub fn wgpu_client(config: WgpuConfig) -> Result<ComputeClient<WgpuBackend>> {
    wgpu_client_with(config, Driver::DeviceThread)
}

/// Like [`wgpu_client`], advanced by `driver` (`Driver::Manual` for a host loop, a Bevy app's
/// frame, that ticks it itself).
#[cfg(feature = "wgpu")]
pub fn wgpu_client_with(config: WgpuConfig, driver: Driver) -> Result<ComputeClient<WgpuBackend>> {
    let backend = WgpuBackend::new(config)?;
    gpu_client(backend, WGPU_MAX_TASKS, driver)
}

/// Tasks a cuda stream queues before they are submitted, when nothing forces them earlier.
#[cfg(feature = "cuda")]
pub const CUDA_MAX_TASKS: usize = 1;

/// A client of a new runtime on the CUDA device `config` names, ticked by a device thread, with
/// the configuration's scheduler and memory settings ([`config`]); `Error::BackendUnavailable`
/// when there is no CUDA driver or no such device, `Error::Config` when the configuration cannot
/// be read.
#[cfg(feature = "cuda")]
pub fn cuda_client(config: CudaConfig) -> Result<ComputeClient<CudaBackend>> {
    cuda_client_with(config, Driver::DeviceThread)
}

/// Like [`cuda_client`], advanced by `driver` (`Driver::Manual` for a host loop that ticks it
/// itself).
#[cfg(feature = "cuda")]
pub fn cuda_client_with(config: CudaConfig, driver: Driver) -> Result<ComputeClient<CudaBackend>> {
    let backend = CudaBackend::new(config)?;
    gpu_client(backend, CUDA_MAX_TASKS, driver)
}

/// A client of a new runtime on the sim backend, ticked by hand.
pub fn sim_client(config: SimConfig) -> ComputeClient<SimBackend> {
    ComputeClient::new(
        SimBackend::new(config),
        RuntimeConfig::default(),
        Driver::Manual,
    )
}

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
