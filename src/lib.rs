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
#[cfg(feature = "cpu")]
pub use client::cpu_client;
pub use client::{
    Bindings, ComputeClient, Driver, FrameGraph, FrameMode, Graph, Leasable, Lease,
    ProfileDuration, ReadTicket, ReplyFuture, ResourceGuard, TensorDesc, TensorHandle, sim_client,
};
#[cfg(feature = "cuda")]
pub use client::{cuda_client, cuda_client_with};
#[cfg(feature = "wgpu")]
pub use client::{wgpu_client, wgpu_client_on_device, wgpu_client_with};
#[cfg(feature = "cpu")]
pub use devices::cpu_clients;
pub use devices::{devices, sim_clients};
pub use gpuworld_sim::{SimBackend, SimCall, SimConfig, SimLink, SimModel};
pub use gpuworld_systems::backend::{Capabilities, NativeResource};
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

/// Tasks a wgpu stream queues before they are recorded, when nothing forces them earlier.
#[cfg(feature = "wgpu")]
pub const WGPU_MAX_TASKS: usize = gpuworld_wgpu::MAX_TASKS;

/// Tasks a cuda stream queues before they are submitted, when nothing forces them earlier.
#[cfg(feature = "cuda")]
pub const CUDA_MAX_TASKS: usize = gpuworld_cuda::MAX_TASKS;

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
